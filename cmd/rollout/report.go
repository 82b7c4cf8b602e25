package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/rollout-dev/rollout/pkg/fleet"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/rundir"
	"github.com/rollout-dev/rollout/pkg/view"
)

// cmdReport prints the statistics of one or more runs' records: the statistics of docs/ARCHITECTURE.md, "Statistics".
func cmdReport(_ context.Context, args []string, e env) error {
	fs := newFlagSet("rollout report", e, commandHelp{
		usage: "rollout report DIR|FILE... [--group-by FIELD] [--score-failures-as-zero] [--pass-k-common-tasks] [--threshold 1.0] [--format text|json|markdown] [--ci auto|bootstrap]",
		about: `Prints the statistics of runs: mean reward with its task-clustered standard error and a 95% CI
over tasks (docs/statistics.md), pass@k and pass^k (with the tasks each is over), tasks whose rollouts all
failed, failures, behaviour; for the whole, per arm and per group. A DIR is a
run's output directory (its rollouts.parquet, or its journal.jsonl while it has none); a FILE is
a .parquet file or a journal (.jsonl). Several runs are a leaderboard: one row per run and arm
with its mean, CI, pass@k, tokens and latency, and the paired difference of its mean reward
against the same arm of the --baseline run (exit 2 when a row shares no task with it); --pool
evaluates the records of every argument together instead.
A DIR whose summary.json has a per-endpoint table (a run through several endpoints) gets it
printed after the statistics (not with --format json).
The shard directories of one sharded run (rollout run --shard I/N) are one run: every shard must
be there and finished, of the same input and config (rollout merge --partial merges what is there).

With --html FILE it writes instead one HTML file that opens offline: the overview and the
comparisons of rollout view, and the transcripts of every failed rollout and of the first few of
each arm (DIRs only).`,
		examples: []string{"rollout report out/extraction --group-by category", "rollout report out/a out/b --format json --ci bootstrap --bootstrap-seed 7",
			"rollout report out/extraction --html report.html"},
	})
	groupBy := fs.String("group-by", "", "also give the scores per value of this task `FIELD` (a task_fields key, e.g. category or difficulty); rows without it are group (none); a field no record has is refused")
	baseline := fs.String("baseline", "", "with several runs: the `RUN` the others are compared with (its path as given, or its number from 1; default the first)")
	pool := fs.Bool("pool", false, "with several runs: evaluate their records together as one set (arms of the same name pooled) instead of a row per run and arm")
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
	if len(runs) > 1 && !*pool {
		return reportLeaderboard(runs, *baseline, o, format, e)
	}
	if *baseline != "" {
		return badUsage("report: --baseline goes with several runs (and without --pool)")
	}
	ev := report.NewEvaluator(o)
	var states []string
	for _, r := range runs {
		n := 0
		if err := r.add(func(rec *record.Record) { n++; ev.Add(rec) }, e); err != nil {
			return usageError{fmt.Errorf("report: %w", err)}
		}
		if st, _ := runState(r, n); st != "" {
			states = append(states, fmt.Sprintf("%s: %s", r.name, st))
		}
	}
	if err := ev.UnknownGroupBy(); err != nil {
		return usageError{fmt.Errorf("report: %w", err)}
	}
	res := ev.Evaluation()
	// A run without every rollout it planned says so first: its numbers are of part of it.
	for _, st := range states {
		if format == "json" {
			fmt.Fprintf(e.stderr, "rollout: warning: %s\n", st)
		} else {
			fmt.Fprintf(e.stdout, "%s\n", st)
		}
	}
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

// reportLeaderboard prints the runs side by side: a row per run and arm, each compared with
// the baseline run. It fails (exit 2) when a row shares no task with its baseline arm: the
// difference would be over nothing.
func reportLeaderboard(runs []runArg, baseline string, o report.StatsOptions, format string, e env) error {
	base, err := pickBaseline(runs, baseline)
	if err != nil {
		return err
	}
	lr := make([]report.LeaderRun, len(runs))
	for i, r := range runs {
		var recs []record.Record
		if err := r.add(func(rec *record.Record) { recs = append(recs, *rec) }, e); err != nil {
			return usageError{fmt.Errorf("report: %w", err)}
		}
		_, status := runState(r, len(recs))
		lr[i] = report.LeaderRun{Name: r.name, Records: recordSeq(recs), Status: status}
	}
	lb, err := report.NewLeaderboard(lr, base, o)
	if err != nil {
		return usageError{fmt.Errorf("report: %w", err)}
	}
	if err := lb.Write(e.stdout, format); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if none := lb.NoCommonTasks(); len(none) > 0 {
		return usageError{fmt.Errorf("report: no paired difference against the baseline %s for %s", lb.Baseline, strings.Join(none, "; "))}
	}
	return nil
}

// pickBaseline finds the run --baseline names: a path as given or a number from 1.
func pickBaseline(runs []runArg, baseline string) (int, error) {
	if baseline == "" {
		return 0, nil
	}
	names := make([]string, len(runs))
	for i, r := range runs {
		if r.name == baseline || r.path == baseline && r.path != "" {
			return i, nil
		}
		names[i] = fmt.Sprintf("%d %s", i+1, r.name)
	}
	if n, err := strconv.Atoi(baseline); err == nil && n >= 1 && n <= len(runs) {
		return n - 1, nil
	}
	return 0, badUsage("report: --baseline %q is none of the runs: %s", baseline, strings.Join(names, ", "))
}

// recordSeq yields the records of a slice.
func recordSeq(recs []record.Record) iter.Seq[*record.Record] {
	return func(yield func(*record.Record) bool) {
		for i := range recs {
			if !yield(&recs[i]) {
				return
			}
		}
	}
}

// printEndpoints prints the per-endpoint table of each run directory among paths whose
// summary.json has one (a run through a pool of model endpoints); markdown puts it in a code
// block. A directory without summary.json, or whose summary has no table, prints nothing.
func printEndpoints(w io.Writer, paths []string, format string) error {
	for _, p := range paths {
		sum, err := rundir.ReadSummary(p)
		if pathErr := (*os.PathError)(nil); errors.As(err, &pathErr) {
			continue // a file, or a run not finished: no summary
		}
		if err != nil {
			return err
		}
		if len(sum.Endpoints) == 0 {
			continue
		}
		fence := ""
		if format == "markdown" {
			fence = "```\n"
		}
		fmt.Fprintf(w, "\nEndpoints of %s (summary.json: the counts of the process that finished the run):\n%s", p, fence)
		var eps []fleet.EndpointStats
		if err := json.Unmarshal(sum.Endpoints, &eps); err != nil {
			return fmt.Errorf("%s: the endpoints of summary.json: %w", p, err)
		}
		if err := fleet.WriteTable(w, eps, nil); err != nil {
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
		recs, err := rundir.OpenRecords(path)
		if err != nil {
			return err
		}
		if note := recs.Note(); note != "" {
			fmt.Fprintf(e.stderr, "rollout: %s\n", note)
		}
		return recs.Scan(func(rec *record.Record) error {
			add(rec)
			return nil
		})
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
	ci := fs.String("ci", report.CIAuto, "95% CI method: auto (Wilson where every reward is in [0, 1], t otherwise, task-clustered; near 95% coverage from 3 tasks) or bootstrap (percentile, tasks resampled; under 95% below 20 tasks)")
	seed := fs.Uint64("bootstrap-seed", 0, "seed `N` of --ci bootstrap: the same records and seed give the same interval (--seed before)")
	bootstrap := fs.Int("bootstrap", report.DefaultBootstrap, "resamples of --ci bootstrap (0: no interval, whatever the method)")
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
		if *ci != report.CIAuto && *ci != report.CIBootstrap {
			return report.StatsOptions{}, "", badUsage("%s: --ci %q: want auto or bootstrap", fs.Name(), *ci)
		}
		if *bootstrap < 0 {
			return report.StatsOptions{}, "", badUsage("%s: --bootstrap %d: want 0 or more", fs.Name(), *bootstrap)
		}
		o := report.StatsOptions{Threshold: *threshold, ThresholdSet: true, ScoreFailuresAsZero: *zero, CI: *ci, Bootstrap: *bootstrap,
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

// runState is "" for a run directory whose run has every rollout it planned (or a file, or
// shards, which must be finished to be read), else what it is: "incomplete: 171 of 480
// rollouts (the run did not finish; rollout run --resume finishes it)", "running: …".
// The short form is without the parenthesis.
func runState(r runArg, done int) (long, short string) {
	if r.path == "" {
		return "", ""
	}
	if st, err := os.Stat(r.path); err != nil || !st.IsDir() {
		return "", ""
	}
	st, err := rundir.ReadState(r.path, done)
	if err != nil || !st.Incomplete() {
		return "", ""
	}
	if st.Live {
		return st.String() + " (a run is writing it)", st.String()
	}
	return st.String() + " (the run did not finish: rollout run --resume finishes it)", st.String()
}
