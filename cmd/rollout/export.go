package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/rollout-dev/rollout/pkg/export"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// cmdExport writes training data from run directories (package export).
func cmdExport(ctx context.Context, args []string, e env) error {
	fs := newFlagSet("rollout export", e, commandHelp{
		usage: "rollout export DIR... --format rl|sft|preference|nemo-gym|verl -o FILE [flags]",
		about: `Writes training data from one or several run directories (shards of a run are read in turn):
Parquet or JSONL by FILE's extension (.parquet, .jsonl).

  rl          one row per rollout: task, group (a task's rollouts under one arm), repeat, arm,
              reward and components, advantage (r - mean) / (std + 1e-6) and r - mean over the
              group, messages, tools, and each model call's token arrays (run --capture-tokens)
  sft         chat fine-tuning rows {"messages", "tools"} as HF chat templates render them
              (TRL, NeMo RL, OpenRLHF), ending with the model's last answer; --layout text
              --chat-template T: the text T renders, the answers' spans, token ids and mask;
              --layout verl --chat-template T: verl's multi-turn SFT file, checked with T
  preference  per group a highest-reward (chosen) and a lowest-reward (rejected) rollout,
              {"prompt", "chosen", "rejected"} message lists as TRL's DPO trainer reads them
  nemo-gym    rollout records as NeMo Gym's ng_collect_rollouts writes them (NeMo RL reads them)
  verl        one row per task as verl's RL trainer reads its train files: prompt, data_source,
              reward_model, extra_info

See docs/export.md for each format's consumer and columns.

Failed rollouts (infrastructure failures) are left out unless --include-failed; bad_task
rows always. What was kept and dropped, and why, goes to stderr. The task file is the one
in each run's manifest.json, unless --input (which must have the same bytes). FILE may not
be or be inside what the export reads (a run's directory, its task file), nor a file of
another run; an existing FILE is replaced only with --overwrite. A run that does not have
every rollout it planned (interrupted, crashed, or still running) is exported as it is, with
a warning.

Example:
  rollout export out/extraction --format rl -o rl.parquet
  rollout export out/extraction --format sft --best-of-group --min-reward 1 -o sft.jsonl
  rollout export out/extraction --format sft --layout text --chat-template tokenizer_config.json -o text.parquet`,
	})
	opt := export.Options{}
	var minReward float64
	fs.StringVar(&opt.Format, "format", "", "`FORMAT`: "+strings.Join(export.Formats, ", "))
	fs.StringVar(&opt.Output, "o", "", "the output `FILE` (.parquet or .jsonl)")
	fs.StringVar(&opt.Input, "input", "", "the runs' task `FILE` (default: each run's manifest.json input)")
	fs.StringVar(&opt.Arm, "arm", "", "export only this `ARM`'s rollouts")
	fs.BoolVar(&opt.DropUniformGroups, "drop-uniform-groups", false, "rl: leave out groups whose rewards are all equal")
	fs.Float64Var(&minReward, "min-reward", 0, "sft: leave out rollouts with a reward below `R`")
	fs.BoolVar(&opt.BestOfGroup, "best-of-group", false, "sft: keep only the highest-reward rollout of each group")
	fs.Float64Var(&opt.MinMargin, "min-margin", 0, "preference: least reward difference `M` of a pair (equal rewards never pair)")
	fs.BoolVar(&opt.IncludeFailed, "include-failed", false, "keep failed rollouts (infrastructure failures), with reward 0")
	fs.StringVar(&opt.Layout, "layout", "", "`LAYOUT`: preference trl (prompt, chosen, rejected; default), nemo-rl (context, completions) or openai (DPO); sft openai (chat fine-tuning, .jsonl), text or verl (with --chat-template)")
	fs.StringVar(&opt.ChatTemplate, "chat-template", "", "sft --layout text and verl: the model's chat template `FILE` (.jinja, or its tokenizer_config.json)")
	fs.BoolVar(&opt.PoolArms, "pool-arms", false, "one group per task over all arms (default: one group per task and arm)")
	fs.BoolVar(&opt.Overwrite, "overwrite", false, "replace -o FILE if it exists")
	fs.Int64Var(&opt.MaxRowBytes, "max-row-bytes", export.DefaultMaxRowBytes, "leave out (and name) a rollout whose trajectory line is longer than `N` bytes")
	var dirs []string
	for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		dirs, args = append(dirs, args[0]), args[1:]
	}
	if err := parseFlags(fs, args, e); err != nil {
		return err
	}
	dirs = append(dirs, fs.Args()...)
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "min-reward" {
			opt.MinReward = &minReward
		}
	})
	switch {
	case len(dirs) == 0:
		return badUsage("export: which run directory? rollout export DIR --format rl -o rl.parquet")
	case opt.Format == "":
		return badUsage("export: --format is required (%s)", strings.Join(export.Formats, ", "))
	case opt.Output == "":
		return badUsage("export: -o FILE is required")
	}
	opt.Dirs = dirs
	opt.Warnings = e.stderr
	if opt.MaxRowBytes == 0 {
		return badUsage("export: --max-row-bytes 0: want a number of bytes from 1")
	}
	if err := opt.Check(); err != nil {
		return badUsage("export: %v", err)
	}
	// A run without every rollout it planned exports what it has, with a warning: its groups
	// (the rollouts of a task) may lack repeats, which moves rl's advantages.
	for _, dir := range dirs {
		n := 0
		if rundir.ScanJournalOf(dir, func(*record.Record) error { n++; return nil }) != nil {
			continue // export says what is wrong with it
		}
		if st, err := rundir.ReadState(dir, n); err == nil && st.Incomplete() {
			what := "the run did not finish (rollout run --resume finishes it)"
			if st.Live {
				what = "a run is writing it: rollouts still running are not in the export"
			}
			fmt.Fprintf(e.stderr, "rollout: warning: export: %s is %s; %s, and a task's group may lack some of its repeats\n", dir, st, what)
		}
	}
	rep, err := export.Run(ctx, opt)
	var ie *export.InputError
	if errors.As(err, &ie) {
		return badUsage("export: %v", err)
	}
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	rep.Print(e.stderr)
	return nil
}
