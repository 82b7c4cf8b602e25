package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/rollout-dev/rollout/pkg/fleet"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/rundir"
	"github.com/rollout-dev/rollout/pkg/view"
)

// cmdReport prints the statistics of one or more runs' records: the statistics of docs/ARCHITECTURE.md, "Statistics".
func cmdReport(_ context.Context, args []string, e env) error {
	fs := newFlagSet("rollout report", e, func(w io.Writer) {
		fmt.Fprintf(w, "Usage: rollout report DIR|FILE... [--group-by FIELD] [--score-failures-as-zero] [--pass-k-common-tasks] [--threshold 1.0] [--format text|json|markdown] [--bootstrap-seed N]\n\n"+
			"Prints the statistics of runs: mean reward with its task-clustered standard error and a 95%% CI\n"+
			"bootstrapped over tasks, pass@k and pass^k (with the tasks each is over), tasks whose rollouts all\n"+
			"failed, failures, behaviour; for the whole, per arm and per group. A DIR is a\n"+
			"run's output directory (its rollouts.parquet, or its journal.jsonl while it has none); a FILE is\n"+
			"a .parquet file or a journal (.jsonl). The records of every argument are evaluated together.\n"+
			"A DIR whose summary.json has a per-endpoint table (a run through several endpoints) gets it\n"+
			"printed after the statistics (not with --format json).\n"+
			"The shard directories of one sharded run (rollout run --shard I/N) are one run: every shard must\n"+
			"be there and finished, of the same input and config (rollout merge --partial merges what is there).\n\n")
		fmt.Fprintf(w, "With --html FILE it writes instead one HTML file that opens offline: the overview and the\n"+
			"comparisons of rollout view, and the transcripts of every failed rollout and of the first few of\n"+
			"each arm (DIRs only).\n\n")
		fmt.Fprint(w, "Examples:\n  rollout report out/extraction --group-by category\n  rollout report out/a out/b --format json --bootstrap-seed 7\n  rollout report out/extraction --html report.html\n\n")
	})
	groupBy := fs.String("group-by", "", "also give the scores per value of this task `FIELD` (a task_fields key, e.g. category or difficulty); rows without it are group (none)")
	options := statsFlags(fs)
	htmlFile := fs.String("html", "", "write the overview, comparisons and sample transcripts to this HTML `FILE` instead")
	perArm := fs.Int("html-per-arm", 3, "with --html: the transcripts of the first `N` rollouts of each arm")
	maxFailed := fs.Int("html-failed", 200, "with --html: the transcripts of the failed rollouts, at most `N`")
	paths, err := parsePaths(fs, args, e)
	if err != nil {
		return err
	}
	if len(paths) == 0 {
		return badUsage("report: which run directory or file?")
	}
	o, format, err := options()
	if err != nil {
		return err
	}
	o.GroupBy = *groupBy
	if *htmlFile != "" {
		if *perArm < 0 || *maxFailed < 0 {
			return badUsage("report: --html-per-arm and --html-failed: want 0 or more")
		}
		statsSet := false
		fs.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "html", "html-per-arm", "html-failed", "format":
			default:
				statsSet = true
			}
		})
		if err := writeHTMLReport(paths, o, statsSet, *htmlFile, view.ReportOptions{PerArm: *perArm, MaxFailed: *maxFailed}); err != nil {
			return err
		}
		fmt.Fprintf(e.stderr, "rollout: wrote %s\n", *htmlFile)
		return nil
	}

	runs, err := runArgs(paths)
	if err != nil {
		return badUsage("report: %v", err)
	}
	ev := report.NewEvaluator(o)
	for _, r := range runs {
		if err := r.add(ev.Add, e); err != nil {
			return usageError{fmt.Errorf("report: %w", err)}
		}
	}
	res := ev.Evaluation()
	if res.Duplicates > 0 {
		fmt.Fprintf(e.stderr, "rollout: warning: %d records repeat the key (task, rollout, arm) of another from the same task file: the same run given twice, or runs to report apart\n", res.Duplicates)
	}
	if err := res.Write(e.stdout, format); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if format != "json" {
		if err := printEndpoints(e.stdout, paths, format); err != nil {
			return fmt.Errorf("report: %w", err)
		}
	}
	return nil
}

// printEndpoints prints the per-endpoint table of each run directory among paths whose
// summary.json has one (a run through a pool of model endpoints); markdown puts it in a code
// block. A directory without summary.json, or whose summary has no table, prints nothing.
func printEndpoints(w io.Writer, paths []string, format string) error {
	for _, p := range paths {
		data, err := os.ReadFile(filepath.Join(p, rundir.SummaryFile))
		if err != nil {
			continue // a file, or a run not finished: no summary
		}
		var sum report.Summary
		if err := json.Unmarshal(data, &sum); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(p, rundir.SummaryFile), err)
		}
		if len(sum.Endpoints) == 0 {
			continue
		}
		fence := ""
		if format == "markdown" {
			fence = "```\n"
		}
		fmt.Fprintf(w, "\nEndpoints of %s (summary.json: the counts of the process that finished the run):\n%s", p, fence)
		if err := fleet.WriteTable(w, sum.Endpoints, nil); err != nil {
			return err
		}
		if _, err := io.WriteString(w, fence); err != nil {
			return err
		}
	}
	return nil
}

// addRecords adds the records of one argument: a run directory, a .parquet file or a journal.
// Errors name the file.
func addRecords(add func(*record.Record), path string, e env) error {
	st, err := os.Stat(path)
	if err != nil {
		return err // *PathError: names the path
	}
	if st.IsDir() {
		pq := filepath.Join(path, rundir.ParquetFile)
		if _, err := os.Stat(pq); err == nil {
			return addParquet(add, pq)
		}
		j := filepath.Join(path, rundir.JournalFile)
		if _, err := os.Stat(j); err == nil {
			fmt.Fprintf(e.stderr, "rollout: %s has no %s (a run not finished?): reading %s\n", path, rundir.ParquetFile, j)
			return addJournal(add, j)
		}
		return fmt.Errorf("%s: no %s or %s: not a run's output directory", path, rundir.ParquetFile, rundir.JournalFile)
	}
	switch {
	case strings.HasSuffix(path, ".parquet"):
		return addParquet(add, path)
	case strings.HasSuffix(path, ".jsonl"):
		return addJournal(add, path)
	}
	return fmt.Errorf("%s: not a .parquet file, a journal (.jsonl) or a run directory", path)
}

func addParquet(add func(*record.Record), path string) error {
	recs, err := record.ReadParquet(path)
	if err != nil {
		if !strings.Contains(err.Error(), path) {
			err = fmt.Errorf("%s: %w", path, err)
		}
		return err
	}
	for i := range recs {
		add(&recs[i])
	}
	return nil
}

func addJournal(add func(*record.Record), path string) error {
	return rundir.ScanJournal(path, func(rec *record.Record) error {
		add(rec)
		return nil
	})
}

// statsFlags registers the flags rollout report and rollout compare share (how rewards are
// scored and the interval bootstrapped, and the output format); options reads them once fs is
// parsed, checking them.
func statsFlags(fs *flag.FlagSet) (options func() (report.StatsOptions, string, error)) {
	zero := fs.Bool("score-failures-as-zero", false, "score the rollouts that failed (model_unavailable, rate_limited, timeout, …) as reward 0 instead of leaving them out (and as failed tries for pass@k)")
	threshold := fs.Float64("threshold", 1.0, "a rollout succeeds, for pass@k and pass^k, when its reward is at least this")
	format := fs.String("format", "text", "output: text, json or markdown")
	seed := fs.Uint64("bootstrap-seed", 0, "seed `N` of the bootstrap: the same records and seed give the same interval (--seed before)")
	bootstrap := fs.Int("bootstrap", report.DefaultBootstrap, "resamples of the 95% confidence interval, tasks resampled as clusters (0: no interval)")
	common := fs.Bool("pass-k-common-tasks", false, "average pass@k and pass^k of every k over the same tasks: those with at least the largest k scored rollouts (by default each k is over the tasks with at least k)")
	return func() (report.StatsOptions, string, error) {
		switch *format {
		case "text", "json", "markdown", "md":
		default:
			return report.StatsOptions{}, "", badUsage("%s: --format %q: want text, json or markdown", fs.Name(), *format)
		}
		if math.IsNaN(*threshold) || math.IsInf(*threshold, 0) {
			return report.StatsOptions{}, "", badUsage("%s: --threshold %v: want a finite reward", fs.Name(), *threshold)
		}
		if *bootstrap < 0 {
			return report.StatsOptions{}, "", badUsage("%s: --bootstrap %d: want 0 or more", fs.Name(), *bootstrap)
		}
		o := report.StatsOptions{Threshold: *threshold, ThresholdSet: true, ScoreFailuresAsZero: *zero, Bootstrap: *bootstrap,
			Seed: *seed, PassKCommonTasks: *common}
		if *bootstrap == 0 {
			o.Bootstrap = -1
		}
		return o, *format, nil
	}
}

// parsePaths parses args whose paths and flags may come in any order; it returns the paths.
func parsePaths(fs *flag.FlagSet, args []string, e env) ([]string, error) {
	// --seed was the bootstrap's seed; in rollout run it is the model's. The old name still works.
	if fs.Lookup("bootstrap-seed") != nil {
		args = renameFlags(args, map[string]string{"seed": "bootstrap-seed"})
	}
	var paths []string
	for {
		for len(args) > 0 && !strings.HasPrefix(args[0], "-") {
			paths, args = append(paths, args[0]), args[1:]
		}
		if len(args) == 0 {
			return paths, nil
		}
		if err := parseFlags(fs, args, e); err != nil {
			return nil, err
		}
		args = fs.Args()
	}
}
