package rundir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rollout-dev/rollout/internal/jsonfast"
	"github.com/rollout-dev/rollout/internal/lines"
	"github.com/rollout-dev/rollout/pkg/record"
)

// A Run is one run read from its directories: the directory of a whole run, or the
// directories of the shards of a sharded run (rollout run --shard I/N), checked by OpenRun
// to be the parts of one run. Scan reads its records; Merge writes them as one run's
// directory. `rollout report`, `rollout compare` and `rollout merge` open their arguments
// with OpenRun.
type Run struct {
	// Dirs are the directories, in shard order.
	Dirs []string
	// Manifest is the run's identity: the input's and the config's hashes the directories
	// share (the first directory's manifest, without its shard and completion).
	Manifest *Manifest
	// Shards is the number of shards of a sharded run (N of --shard I/N); 0 for a whole run.
	Shards int
	// Index is each directory's shard index (Dirs[i] holds shard Index[i]).
	Index []int
	// Missing are the shards no directory holds, and Incomplete the directories whose run did
	// not end with every rollout recorded: both empty unless OpenOptions.Partial.
	Missing    []int
	Incomplete []string
	// Short lists the shards marked complete that lack records or trajectories, found by a
	// scan (Scan, Merge) of a Partial run; without Partial they are refused.
	Short []ShortShard

	expect   *Expect
	partial  bool
	complete []int // per directory: the records its manifest says it completed with (-1: not complete)
}

// Expect is what a run's records must be, from its config and input: every record of an arm
// of Arms, a repeat below Repeats and a task below Tasks, and a directory marked complete has
// one record of each (task of its shard, repeat, arm).
type Expect struct {
	Arms    []string // the arms' names (none: any)
	Repeats int      // --num-repeats (0: any)
	Tasks   int64    // the tasks of the input the run runs (after --limit); -1 when unknown
}

// ShortShard is a shard marked complete that lacks records or their trajectories, as a
// partial merge records it in its manifest.
type ShortShard struct {
	Dir          string `json:"dir"`
	Shard        int    `json:"shard"`
	Rollouts     int    `json:"rollouts"`     // the rollouts the shard has (its tasks × repeats × arms)
	Records      int    `json:"records"`      // the records found
	Trajectories int    `json:"trajectories"` // the records found with a trajectory
	// Missing names the first rollouts without a record ("task 5 repeat 1 arm multi"), when
	// the input is known.
	Missing []string `json:"missing,omitempty"`
}

// OpenOptions say what OpenRun accepts.
type OpenOptions struct {
	// Partial accepts a sharded run with shards missing or not complete (listed in
	// Run.Missing and Run.Incomplete), or marked complete but short of records (listed in
	// Run.Short by a scan), rather than refusing it.
	Partial bool
	// Expect, when set, says what the records of the run of a manifest must be; each record
	// and each directory's count are checked against it by Scan and Merge.
	Expect func(m *Manifest) (*Expect, error)
}

// A RunError is a set of directories that are not one run, with every reason found.
type RunError struct {
	Problems []string
}

func (e *RunError) Error() string {
	if len(e.Problems) == 1 {
		return e.Problems[0]
	}
	return fmt.Sprintf("%d problems:\n  %s", len(e.Problems), strings.Join(e.Problems, "\n  "))
}

// ExpandDirs expands the glob patterns among args (a shell that did not, or a quoted
// pattern) into the directories they match, sorted; an argument without a pattern stays as
// it is. A pattern that matches no directory is an error.
func ExpandDirs(args []string) ([]string, error) {
	var out []string
	for _, a := range args {
		if !strings.ContainsAny(a, "*?[") {
			out = append(out, a)
			continue
		}
		m, err := filepath.Glob(a)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a, err)
		}
		m = slices.DeleteFunc(m, func(p string) bool {
			st, err := os.Stat(p)
			return err != nil || !st.IsDir()
		})
		if len(m) == 0 {
			return nil, fmt.Errorf("%s: matches no directory", a)
		}
		slices.Sort(m)
		out = append(out, m...)
	}
	return out, nil
}

// IsShard reports whether dir holds one shard of a sharded run (its manifest says so).
func IsShard(dir string) bool {
	mf, err := ReadManifest(dir)
	return err == nil && mf.Shard != nil
}

// OpenRun checks that dirs are one run and returns it: one directory of a whole run, or the
// directories of the shards of one run. Shards must have the same input (its SHA-256) and the
// same config hash, the same shard count, and each index once; unless o.Partial, every shard
// must be there and complete (its run ended without an interrupt). Every problem found is
// named in the *RunError returned: each directory without a manifest, each differing hash,
// each index given twice, every missing shard, every shard not complete. The records are not
// read: Scan reads them and checks them.
func OpenRun(dirs []string, o OpenOptions) (*Run, error) {
	if len(dirs) == 0 {
		return nil, &RunError{Problems: []string{"no run directory given"}}
	}
	var problems []string
	mfs := make([]*Manifest, len(dirs))
	for i, d := range dirs {
		mf, err := ReadManifest(d)
		switch {
		case errors.Is(err, os.ErrNotExist):
			problems = append(problems, fmt.Sprintf("%s: no %s: not a run's directory (or a run from before manifests)", d, ManifestFile))
		case err != nil:
			problems = append(problems, err.Error())
		}
		mfs[i] = mf
	}
	if len(problems) > 0 {
		return nil, &RunError{Problems: problems}
	}
	first := mfs[0]
	if len(dirs) == 1 && first.Shard == nil {
		return &Run{Dirs: dirs, Manifest: identity(first), Index: []int{0}}, nil
	}
	problems = append(problems, differing(dirs, mfs, "input", func(m *Manifest) string { return m.InputSHA256 },
		func(m *Manifest) string { return fmt.Sprintf("%s (sha256 %.12s)", m.Input, m.InputSHA256) })...)
	if p := differing(dirs, mfs, "config", func(m *Manifest) string { return m.ConfigSHA256 },
		func(m *Manifest) string { return fmt.Sprintf("config sha256 %.12s", m.ConfigSHA256) }); len(p) > 0 {
		problems = append(problems, p...)
		for i, m := range mfs {
			if m.ConfigSHA256 != first.ConfigSHA256 {
				problems = append(problems, fmt.Sprintf("%s against %s: %s", dirs[i], dirs[0], strings.Join(diffJSON("", first.Config, m.Config), "; ")))
			}
		}
	}
	var whole []string
	for i, m := range mfs {
		if m.Shard == nil {
			whole = append(whole, dirs[i])
		}
	}
	if len(whole) > 0 {
		problems = append(problems, fmt.Sprintf("%s: a whole run, not a shard (rollout run --shard I/N): several directories are one run only as the shards of one", strings.Join(whole, ", ")))
		return nil, &RunError{Problems: problems}
	}
	if p := differing(dirs, mfs, "shard count", func(m *Manifest) string { return fmt.Sprint(m.Shard.Count) },
		func(m *Manifest) string { return fmt.Sprintf("--shard I/%d", m.Shard.Count) }); len(p) > 0 {
		return nil, &RunError{Problems: append(problems, p...)}
	}
	n := first.Shard.Count
	byIndex := make([][]string, n)
	r := &Run{Manifest: identity(first), Shards: n, partial: o.Partial}
	if o.Expect != nil {
		x, err := o.Expect(first)
		if err != nil {
			return nil, &RunError{Problems: append(problems, fmt.Sprintf("%s: %v", dirs[0], err))}
		}
		r.expect = x
	}
	completed := map[string]int{}
	for i, m := range mfs {
		if m.Shard.Index < 0 || m.Shard.Index >= n {
			problems = append(problems, fmt.Sprintf("%s: shard %s is out of range", dirs[i], m.Shard))
			continue
		}
		byIndex[m.Shard.Index] = append(byIndex[m.Shard.Index], dirs[i])
		if m.Complete == nil {
			r.Incomplete = append(r.Incomplete, dirs[i])
		} else {
			completed[dirs[i]] = m.Complete.Rollouts
		}
	}
	for i, ds := range byIndex {
		switch {
		case len(ds) == 0:
			r.Missing = append(r.Missing, i)
		case len(ds) > 1:
			problems = append(problems, fmt.Sprintf("shard %d/%d given %d times: %s", i, n, len(ds), strings.Join(ds, ", ")))
		default:
			c, ok := completed[ds[0]]
			if !ok {
				c = -1
			}
			r.Dirs, r.Index, r.complete = append(r.Dirs, ds[0]), append(r.Index, i), append(r.complete, c)
		}
	}
	if !o.Partial {
		if len(r.Missing) > 0 {
			problems = append(problems, fmt.Sprintf("%d of %d shards missing: %s (run them with --shard I/%d, or merge what is there with --partial)",
				len(r.Missing), n, shardList(r.Missing, n), n))
		}
		for _, d := range r.Incomplete {
			problems = append(problems, fmt.Sprintf("%s: shard %s did not finish (interrupted, stopped early or still running): finish it with rollout run --resume=auto --out %s, or merge what is there with --partial",
				d, mfs[slices.Index(dirs, d)].Shard, d))
		}
	}
	if len(problems) > 0 {
		return nil, &RunError{Problems: problems}
	}
	return r, nil
}

// identity is m without what belongs to one directory: its shard, completion and resumes.
func identity(m *Manifest) *Manifest {
	c := *m
	c.Shard, c.Complete, c.Resumes, c.MergedFrom, c.Missing, c.Short, c.JSONLOut, c.Dir = nil, nil, nil, nil, nil, nil, "", ""
	return &c
}

// differing names the directories whose key differs from the first directory's, as "the
// input differs: a, b have X; c has Y".
func differing(dirs []string, mfs []*Manifest, what string, key, show func(*Manifest) string) []string {
	var values []string
	groups := map[string][]string{}
	shown := map[string]string{}
	for i, m := range mfs {
		k := key(m)
		if _, ok := groups[k]; !ok {
			values = append(values, k)
			shown[k] = show(m)
		}
		groups[k] = append(groups[k], dirs[i])
	}
	if len(values) < 2 {
		return nil
	}
	parts := make([]string, len(values))
	for i, v := range values {
		verb := "has"
		if len(groups[v]) > 1 {
			verb = "have"
		}
		parts[i] = fmt.Sprintf("%s %s %s", strings.Join(groups[v], ", "), verb, shown[v])
	}
	return []string{fmt.Sprintf("the %s differs: %s", what, strings.Join(parts, "; "))}
}

// shardList is "1/4, 3/4".
func shardList(idx []int, n int) string {
	s := make([]string, len(idx))
	for i, x := range idx {
		s[i] = fmt.Sprintf("%d/%d", x, n)
	}
	return strings.Join(s, ", ")
}

// maxNamed bounds the duplicate and misplaced records a RunError names one by one.
const maxNamed = 20

// Scan calls fn for every record of the run, directory after directory, each directory's in
// its journal's order (the record is only valid during the call). It checks that each
// record belongs to its directory's shard and that no (task, repeat, arm) comes twice: those
// it names (the first 20) in a *RunError after the scan, without calling fn for them.
func (r *Run) Scan(fn func(rec *record.Record) error) error {
	var problems []string
	extra := 0
	problem := func(p string) {
		if len(problems) < maxNamed {
			problems = append(problems, p)
		} else {
			extra++
		}
	}
	r.Short = nil
	for i := range r.Dirs {
		done, err := r.scanDir(i, func(_ []byte, rec *record.Record) error { return fn(rec) }, problem)
		if err != nil {
			return err
		}
		r.checkCount(i, done, -1, problem)
	}
	return runProblems(problems, extra)
}

// shardTasks is the number of the tasks [0, tasks) of shard index of count (count 0: all).
func shardTasks(tasks int64, index, count int) int64 {
	if count == 0 {
		return tasks
	}
	if int64(index) >= tasks {
		return 0
	}
	return (tasks - int64(index) + int64(count) - 1) / int64(count)
}

// checkCount checks that directory i, when its manifest marks it complete, has a record of
// each of its rollouts (done are its records' keys) and, when trajectories is not -1, that
// many of them with a trajectory: a short one is a problem, or with Partial a ShortShard.
func (r *Run) checkCount(i int, done *record.Done, trajectories int, problem func(string)) {
	if r.complete == nil || r.complete[i] < 0 {
		return // not marked complete: refused, or listed as Incomplete, by OpenRun
	}
	want := r.complete[i]
	x := r.expect
	if x != nil && x.Tasks >= 0 && len(x.Arms) > 0 && x.Repeats > 0 {
		want = int(shardTasks(x.Tasks, r.Index[i], r.Shards)) * len(x.Arms) * x.Repeats
	}
	if trajectories < 0 {
		trajectories = done.Len()
	}
	if done.Len() == want && trajectories == done.Len() {
		return
	}
	dir := r.Dirs[i]
	what := fmt.Sprintf("%s: shard %d/%d is marked complete, but its journal has %d of its %d rollouts", dir, r.Index[i], r.Shards, done.Len(), want)
	if done.Len() == want {
		what = fmt.Sprintf("%s: %d records, but %s has the trajectories of %d of them", dir, done.Len(), TrajectoriesFile, trajectories)
	}
	var missing []string
	if x != nil && x.Tasks >= 0 && done.Len() < want {
		for t := int64(r.Index[i]); t < x.Tasks && len(missing) < maxNamed; t += int64(max(r.Shards, 1)) {
			for k := 0; k < x.Repeats && len(missing) < maxNamed; k++ {
				for _, arm := range x.Arms {
					if !done.Has(record.Key{Task: t, Rollout: int64(k), Arm: arm}) && len(missing) < maxNamed {
						missing = append(missing, fmt.Sprintf("task %d repeat %d arm %s", t, k, arm))
					}
				}
			}
		}
		what += " (missing: " + strings.Join(missing, ", ")
		if want-done.Len() > len(missing) {
			what += fmt.Sprintf(" and %d more", want-done.Len()-len(missing))
		}
		what += ")"
	}
	if !r.partial {
		problem(what)
		return
	}
	r.Short = append(r.Short, ShortShard{Dir: dir, Shard: r.Index[i], Rollouts: want, Records: done.Len(), Trajectories: trajectories, Missing: missing})
}

func runProblems(problems []string, extra int) error {
	if extra > 0 {
		problems = append(problems, fmt.Sprintf("and %d more", extra))
	}
	if len(problems) > 0 {
		return &RunError{Problems: problems}
	}
	return nil
}

// scanDir calls fn with each journal line of directory i and its record, but for the
// records of another shard and the repeated keys, which it tells problem about. It returns
// the keys of the records given to fn.
func (r *Run) scanDir(i int, fn func(line []byte, rec *record.Record) error, problem func(string)) (*record.Done, error) {
	dir, path := r.Dirs[i], join(r.Dirs[i], JournalFile)
	done := record.NewDone(r.Index[i], r.Shards)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return done, nil // a shard that ran no rollout yet
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	workers := lines.Workers()
	decoders := make([]record.Decoder, workers)
	type decoded struct {
		rec record.Record
		err error
	}
	_, err = lines.Scan(f, workers, func(w int, line []byte, res *decoded) {
		*res = decoded{}
		res.err = decoders[w].DecodeRecord(line, &res.rec)
	}, func(line []byte, n int, res *decoded) error {
		if res.err != nil {
			return &record.LineError{Path: path, Line: n, Err: res.err}
		}
		rec := &res.rec
		if x := r.expect; x != nil {
			why := ""
			switch {
			case len(x.Arms) > 0 && !slices.Contains(x.Arms, rec.Arm):
				why = fmt.Sprintf("arm %s is not one of the run's arms (%s)", rec.Arm, strings.Join(x.Arms, ", "))
			case rec.RolloutIndex < 0 || x.Repeats > 0 && rec.RolloutIndex >= int64(x.Repeats):
				why = fmt.Sprintf("repeat %d is past --num-repeats %d", rec.RolloutIndex, x.Repeats)
			case rec.TaskIndex < 0:
				why = fmt.Sprintf("task %d is not a task index", rec.TaskIndex)
			case x.Tasks >= 0 && rec.TaskIndex >= x.Tasks:
				why = fmt.Sprintf("task %d is past the input's %d tasks", rec.TaskIndex, x.Tasks)
			}
			if why != "" {
				problem(fmt.Sprintf("%s:%d: %s", path, n, why))
				return nil
			}
		}
		if r.Shards > 0 && int(rec.TaskIndex)%r.Shards != r.Index[i] {
			problem(fmt.Sprintf("%s:%d: task %d belongs to shard %d/%d, not to this directory's %d/%d", path, n, rec.TaskIndex,
				int(rec.TaskIndex)%r.Shards, r.Shards, r.Index[i], r.Shards))
			return nil
		}
		if key := rec.Key(); !done.Add(key) {
			problem(fmt.Sprintf("%s:%d: a second record of (task %d, repeat %d, arm %s) in %s", path, n, key.Task, key.Rollout, key.Arm, dir))
			return nil
		}
		return fn(line, rec)
	})
	if err != nil && !strings.Contains(err.Error(), path) {
		err = fmt.Errorf("%s: %w", path, err)
	}
	return done, err
}

// lineKey is the rollout key of a side file's line: its members task, rollout and arm, all
// three present (ok false otherwise, or for a line that is not a JSON object).
func lineKey(intern *record.Decoder, line []byte, task, rollout, arm string) (record.Key, bool) {
	t, k, a, has, ok := jsonfast.LineKeys(line, task, rollout, arm)
	if ok {
		return record.Key{Task: t, Rollout: k, Arm: intern.Intern(a)}, has == 7
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(line, &m) != nil {
		return record.Key{}, false
	}
	return keyOfMembers(m, task, rollout, arm)
}

// keyOfMembers is the key in a line's members task, rollout and arm; ok false when one is
// missing or not of its type.
func keyOfMembers(m map[string]json.RawMessage, task, rollout, arm string) (record.Key, bool) {
	var tp, kp *int64
	var ap *string
	if json.Unmarshal(m[task], &tp) != nil || json.Unmarshal(m[rollout], &kp) != nil || json.Unmarshal(m[arm], &ap) != nil ||
		tp == nil || kp == nil || ap == nil {
		return record.Key{}, false
	}
	return record.Key{Task: *tp, Rollout: *kp, Arm: *ap}, true
}
