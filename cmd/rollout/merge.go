package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// mergeArgs are rollout merge's arguments.
type mergeArgs struct {
	out, jsonlOut      string
	partial, overwrite bool
	paths              []string // the shard directories, globs expanded
}

// parseMerge reads rollout merge's arguments, checking them.
func parseMerge(args []string, e env) (a mergeArgs, err error) {
	fs := newFlagSet("rollout merge", e, commandHelp{
		usage: "rollout merge --out DIR SHARD_DIR... [--partial] [--overwrite] [--jsonl-out FILE]",
		about: `Merges the shards of one run (rollout run --shard I/N, each in its own directory) into DIR as one run:
journal.jsonl, trajectories.jsonl, rollouts.parquet, summary.json and evaluation.json, the files
one process running the whole job writes, with the same figures. A SHARD_DIR may be a glob
(quoted: 'out/run/shard-*'). It refuses shards of another input or config (their hashes
differ), a shard given twice, and names every missing shard, every shard that did not finish
and every (task, repeat, arm) recorded twice; with --partial it merges the shards that are
there, finished or not, and says what is missing.`,
		examples: []string{"rollout merge --out out/run out/run-shards/shard-*", "rollout merge --out out/run 'out/run-shards/shard-*' --partial"},
	})
	fs.StringVar(&a.out, "out", "", "the merged run's `DIR`")
	fs.BoolVar(&a.partial, "partial", false, "merge the shards that are there, finished or not; say which are missing")
	fs.BoolVar(&a.overwrite, "overwrite", false, "replace a run already in --out")
	fs.StringVar(&a.jsonlOut, "jsonl-out", "", "also write the shards' NeMo Gym lines (runs with --jsonl-out) to `FILE`")
	if a.paths, err = parsePaths(fs, args, e); err != nil {
		return a, err
	}
	if a.out == "" {
		return a, badUsage("merge: --out DIR is required")
	}
	if len(a.paths) == 0 {
		return a, badUsage("merge: which shard directories? (rollout merge --out DIR SHARD_DIR...)")
	}
	return a, nil
}

// cmdMerge merges the shards of a sharded run (rollout run --shard I/N) into one run's
// directory.
func cmdMerge(_ context.Context, args []string, e env) error {
	a, err := parseMerge(args, e)
	if err != nil {
		return err
	}
	paths, err := rundir.ExpandDirs(a.paths)
	if err != nil {
		return badUsage("merge: %v", err)
	}
	r, err := rundir.OpenRun(paths, rundir.OpenOptions{Partial: a.partial, Expect: expectOf})
	if err != nil {
		return badUsage("merge: %v", err)
	}
	if r.Shards == 0 {
		return badUsage("merge: %s is a whole run, not shards (rollout run --shard I/N): nothing to merge", paths[0])
	}
	// A merge copies the shards' lines through fixed buffers, then ends as a run does
	// (rundir.Finish): under the same soft memory limit.
	restore := limitFinishMemory()
	fin, err := rundir.Merge(a.out, r, rundir.MergeOptions{NemoGym: a.jsonlOut, Overwrite: a.overwrite})
	restore()
	var (
		re *rundir.RunError
		oe *rundir.OverlapError
		pe *rundir.PrepareError
		le *record.LineError
	)
	switch {
	case errors.As(err, &pe) && pe.Problem == rundir.HoldsRun:
		return badUsage("merge: --out %v: pass --overwrite to replace it, or choose another directory", err)
	case errors.As(err, &pe) && pe.Problem == rundir.NemoGymExists:
		return badUsage("merge: --jsonl-out %v: pass --overwrite to replace it, or choose another file", err)
	case errors.As(err, &re), errors.As(err, &oe), errors.As(err, &le):
		return badUsage("merge: %v", err)
	}
	if err != nil {
		return fmt.Errorf("merge: %w", err)
	}
	if err := report.PrintSummary(e.stdout, fin.Summary); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "rollout: merged %d of %d shards (%d rollouts) into %s\n", len(r.Dirs), r.Shards, fin.Summary.Rollouts, a.out)
	for _, s := range r.Short {
		fmt.Fprintf(e.stderr, "rollout: warning: --partial: %s: shard %d/%d is marked complete, but has %d of its %d rollouts (%d with a trajectory); %s says which are missing\n",
			s.Dir, s.Shard, r.Shards, s.Records, s.Rollouts, s.Trajectories, rundir.ManifestPath(a.out))
	}
	if len(r.Missing) > 0 || len(r.Incomplete) > 0 || len(r.Short) > 0 {
		var missing []string
		for _, i := range r.Missing {
			missing = append(missing, fmt.Sprintf("%d/%d", i, r.Shards))
		}
		fmt.Fprintf(e.stderr, "rollout: warning: --partial: shards missing: %s; not finished: %s. %s is not the whole run.\n",
			dashList(missing), dashList(r.Incomplete), a.out)
	}
	return nil
}

// expectOf is what the records of the run of manifest m must be: its config's arms and
// repeats, and its input's tasks (after --limit) when the input is there with the bytes the
// manifest hashed.
func expectOf(m *rundir.Manifest) (*rundir.Expect, error) {
	var cfg runConfig
	if err := json.Unmarshal(m.Config, &cfg); err != nil {
		return nil, fmt.Errorf("%s: config: %v", rundir.ManifestFile, err)
	}
	x := &rundir.Expect{Repeats: cfg.Repeats, Tasks: -1}
	for _, a := range cfg.Arms {
		name, _, _ := strings.Cut(a, "=")
		x.Arms = append(x.Arms, name)
	}
	if sum, known := m.InputNow(); !known || sum != m.InputSHA256 {
		return x, nil // stdin, or the input moved or changed: the counts come from the manifests
	}
	if n, err := dataset.Count(m.Input); err == nil && n >= 0 {
		x.Tasks = int64(n)
		if cfg.Limit > 0 && x.Tasks > int64(cfg.Limit) {
			x.Tasks = int64(cfg.Limit)
		}
	}
	return x, nil
}

func dashList(s []string) string {
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ", ")
}

// runArg is one run named on the command line of report or compare: a file, a run's
// directory, or the shard directories of one sharded run.
type runArg struct {
	name   string
	path   string      // a file or a whole run's directory
	shards *rundir.Run // the shards of one run
}

// runArgs groups the paths of report and compare (globs expanded) into runs: the shard
// directories with the same input and config are one run, checked by rundir.OpenRun (every
// shard there and finished); every other path is a run of its own.
func runArgs(paths []string) ([]runArg, error) {
	paths, err := rundir.ExpandDirs(paths)
	if err != nil {
		return nil, err
	}
	var runs []runArg
	groups := map[string]int{} // input and config hashes → index in runs
	var dirs [][]string
	for _, p := range paths {
		if !rundir.IsShard(p) {
			runs = append(runs, runArg{name: p, path: p})
			dirs = append(dirs, nil)
			continue
		}
		mf, err := rundir.ReadManifest(p)
		if err != nil {
			return nil, err
		}
		id := mf.InputSHA256 + " " + mf.ConfigSHA256
		i, ok := groups[id]
		if !ok {
			i = len(runs)
			groups[id] = i
			runs = append(runs, runArg{name: p})
			dirs = append(dirs, nil)
		}
		dirs[i] = append(dirs[i], p)
	}
	for i, ds := range dirs {
		if ds == nil {
			continue
		}
		r, err := rundir.OpenRun(ds, rundir.OpenOptions{Expect: expectOf})
		if err != nil {
			return nil, fmt.Errorf("the shards %s: %w", strings.Join(ds, ", "), err)
		}
		runs[i].shards = r
		runs[i].name = fmt.Sprintf("%s (%d shards)", commonPrefix(ds), len(ds))
	}
	return runs, nil
}

// add adds the run's records.
func (r runArg) add(add func(*record.Record), e env) error {
	if r.shards != nil {
		return r.shards.Scan(func(rec *record.Record) error {
			c := *rec // the scan's record is only valid during the call
			add(&c)
			return nil
		})
	}
	return addRecords(add, r.path, e)
}

// commonPrefix is the longest common prefix of paths: the shards' parent and name stem.
func commonPrefix(paths []string) string {
	p := paths[0]
	for _, q := range paths[1:] {
		for !strings.HasPrefix(q, p) {
			p = p[:len(p)-1]
		}
	}
	return p + "*"
}
