package rundir_test

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/record/recordtest"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// shardRun writes a run's directory at dir, as rollout run does: Prepare (with shard when
// not nil), a Sink taking recs with a trajectory each, and Finish (complete or not).
func shardRun(t *testing.T, dir, input string, config any, shard *rundir.Shard, recs []record.Record, complete bool) {
	t.Helper()
	d, err := rundir.Prepare(dir, rundir.PrepareOptions{Input: input, Config: config, Shard: shard})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Unlock()
	sink, err := d.OpenSink(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		r := recs[i]
		traj := fmt.Sprintf(`{"task_index":%d,"rollout_index":%d,"arm":%q,"rounds":[]}`, r.TaskIndex, r.RolloutIndex, r.Arm)
		if err := sink.Write(&record.Result{Record: r, Trajectory: []byte(traj)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := rundir.Finish(dir, rundir.FinishOptions{Complete: complete}); err != nil {
		t.Fatal(err)
	}
}

type fixture struct {
	root, input string
	recs        []record.Record
	config      map[string]int
}

func newFixture(t *testing.T) fixture {
	root := t.TempDir()
	input := filepath.Join(root, "tasks.jsonl")
	if err := os.WriteFile(input, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	recs := recordtest.Fixture(90) // 30 tasks, 3 rollouts each
	for i := range recs {
		recs[i].LatencyMs = float64(i)*0.1 + 1.0/3 // sums that depend on their order in floating point
		recs[i].StartedAt = recs[i].StartedAt.UTC()
	}
	return fixture{root: root, input: input, recs: recs, config: map[string]int{"num_repeats": 3}}
}

// shards writes the records as n shards (each in the order of a shuffle of them), complete,
// and returns their directories.
func (f fixture) shards(t *testing.T, n int, name string) []string {
	recs := slices.Clone(f.recs)
	rand.New(rand.NewPCG(uint64(n), 9)).Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
	var dirs []string
	for i := range n {
		var part []record.Record
		for _, r := range recs {
			if int(r.TaskIndex)%n == i {
				part = append(part, r)
			}
		}
		dir := filepath.Join(f.root, name, fmt.Sprintf("shard-%d", i))
		shardRun(t, dir, f.input, f.config, &rundir.Shard{Index: i, Count: n}, part, true)
		dirs = append(dirs, dir)
	}
	return dirs
}

func sortedParquet(t *testing.T, path string) []record.Record {
	t.Helper()
	recs, err := record.ReadParquet(path)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(recs, func(a, b record.Record) int {
		return cmp.Or(cmp.Compare(a.TaskIndex, b.TaskIndex), cmp.Compare(a.RolloutIndex, b.RolloutIndex), strings.Compare(a.Arm, b.Arm))
	})
	return recs
}

func sortedLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	slices.Sort(l)
	return l
}

// The merge of a run's shards is the run: the same Parquet rows, summary.json and
// evaluation.json to the byte, and the same trajectories, as the whole run written by one
// process in another order.
func TestMergeIsTheWholeRun(t *testing.T) {
	f := newFixture(t)
	whole := filepath.Join(f.root, "whole")
	shardRun(t, whole, f.input, f.config, nil, f.recs, true)
	for _, n := range []int{1, 3, 4, 40} {
		dirs := f.shards(t, n, fmt.Sprintf("n%d", n))
		r, err := rundir.OpenRun(dirs, rundir.OpenOptions{})
		if err != nil {
			t.Fatalf("%d shards: %v", n, err)
		}
		out := filepath.Join(f.root, fmt.Sprintf("merged%d", n))
		fin, err := rundir.Merge(out, r, rundir.MergeOptions{})
		if err != nil {
			t.Fatalf("%d shards: %v", n, err)
		}
		if fin.Summary.Rollouts != 90 {
			t.Errorf("%d shards: %d rollouts merged", n, fin.Summary.Rollouts)
		}
		got, want := sortedParquet(t, filepath.Join(out, rundir.ParquetFile)), sortedParquet(t, filepath.Join(whole, rundir.ParquetFile))
		if len(got) != len(want) {
			t.Fatalf("%d shards: %d rows, want %d", n, len(got), len(want))
		}
		for i := range got {
			if d := recordtest.Diff(got[i], want[i]); d != "" {
				t.Errorf("%d shards: row %d: %s", n, i, d)
			}
		}
		for _, name := range []string{rundir.SummaryFile, rundir.EvaluationFile} {
			a, _ := os.ReadFile(filepath.Join(out, name))
			b, _ := os.ReadFile(filepath.Join(whole, name))
			if !bytes.Equal(a, b) || len(a) == 0 {
				t.Errorf("%d shards: %s differs:\n%s\nwant\n%s", n, name, a, b)
			}
		}
		if !slices.Equal(sortedLines(t, filepath.Join(out, rundir.TrajectoriesFile)), sortedLines(t, filepath.Join(whole, rundir.TrajectoriesFile))) {
			t.Errorf("%d shards: trajectories differ", n)
		}
		// Every line longer than the merge's head (lowered to 16 bytes): its key read as it
		// streams, its bytes copied from the file, never held; the same files.
		restore := rundir.SetSideLineHead(16)
		heads := filepath.Join(f.root, fmt.Sprintf("heads%d", n))
		_, err = rundir.Merge(heads, r, rundir.MergeOptions{})
		restore()
		if err != nil {
			t.Fatalf("%d shards, head 16: %v", n, err)
		}
		for _, name := range []string{rundir.TrajectoriesFile, rundir.NemoGymFile, rundir.JournalFile} {
			a, _ := os.ReadFile(filepath.Join(out, name))
			b, _ := os.ReadFile(filepath.Join(heads, name))
			if !bytes.Equal(a, b) || name == rundir.TrajectoriesFile && len(a) == 0 {
				t.Errorf("%d shards, head 16: %s differs (%d bytes, want %d)", n, name, len(b), len(a))
			}
		}
		mf, err := rundir.ReadManifest(out)
		if err != nil {
			t.Fatal(err)
		}
		if mf.Complete == nil || mf.Complete.Rollouts != 90 || mf.Shard != nil || len(mf.MergedFrom) != n {
			t.Errorf("%d shards: merged manifest %+v", n, mf)
		}
		// A merged run is a whole run: it opens as one.
		if _, err := rundir.OpenRun([]string{out}, rundir.OpenOptions{}); err != nil {
			t.Errorf("the merged run: %v", err)
		}
	}
}

// Every inconsistent set of shards is refused, naming each problem.
func TestOpenRunRefusals(t *testing.T) {
	f := newFixture(t)
	good := f.shards(t, 4, "good")
	part := func(dir string, shard *rundir.Shard, complete bool, config any) string {
		var recs []record.Record
		for _, r := range f.recs {
			if shard == nil || int(r.TaskIndex)%shard.Count == shard.Index {
				recs = append(recs, r)
			}
		}
		shardRun(t, dir, f.input, config, shard, recs, complete)
		return dir
	}
	otherInput := filepath.Join(f.root, "other.jsonl")
	os.WriteFile(otherInput, []byte("{}\n{}\n"), 0o644)
	inputDiffers := filepath.Join(f.root, "input-differs")
	shardRun(t, inputDiffers, otherInput, f.config, &rundir.Shard{Index: 3, Count: 4}, nil, true)
	configDiffers := part(filepath.Join(f.root, "config-differs"), &rundir.Shard{Index: 3, Count: 4}, true, map[string]int{"num_repeats": 4})
	unfinished := part(filepath.Join(f.root, "unfinished"), &rundir.Shard{Index: 2, Count: 4}, false, f.config)
	twice := part(filepath.Join(f.root, "twice"), &rundir.Shard{Index: 1, Count: 4}, true, f.config)
	count := part(filepath.Join(f.root, "count"), &rundir.Shard{Index: 1, Count: 3}, true, f.config)
	whole := part(filepath.Join(f.root, "whole"), nil, true, f.config)
	empty := filepath.Join(f.root, "empty")
	os.MkdirAll(empty, 0o755)

	for _, tc := range []struct {
		name string
		dirs []string
		want []string
	}{
		{"input", []string{good[0], good[1], good[2], inputDiffers},
			[]string{"the input differs: " + good[0] + ", " + good[1] + ", " + good[2] + " have " + f.input + " (sha256 ", inputDiffers + " has " + otherInput}},
		{"config", []string{good[0], good[1], good[2], configDiffers},
			[]string{"the config differs", configDiffers + " against " + good[0] + ": num_repeats was 3, now 4"}},
		{"missing", []string{good[0], good[2]}, []string{"2 of 4 shards missing: 1/4, 3/4"}},
		{"unfinished", []string{good[0], good[1], unfinished, good[3]}, []string{unfinished + ": shard 2/4 did not finish"}},
		{"twice", []string{good[0], good[1], twice, good[2], good[3]}, []string{"shard 1/4 given 2 times: " + good[1] + ", " + twice}},
		{"count", []string{good[0], count}, []string{"the shard count differs", count + " has --shard I/3"}},
		{"whole", []string{good[0], whole}, []string{whole + ": a whole run, not a shard"}},
		{"no manifest", []string{good[0], empty}, []string{empty + ": no manifest.json"}},
		{"several at once", []string{good[0], unfinished, configDiffers},
			[]string{"the config differs", "1 of 4 shards missing: 1/4", unfinished + ": shard 2/4 did not finish"}},
	} {
		_, err := rundir.OpenRun(tc.dirs, rundir.OpenOptions{})
		var re *rundir.RunError
		if !errors.As(err, &re) {
			t.Errorf("%s: %v, want a *RunError", tc.name, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\nwant it to say %q", tc.name, err, w)
			}
		}
	}

	// --partial: missing and unfinished shards are merged as they are, and said.
	r, err := rundir.OpenRun([]string{good[0], unfinished, good[3]}, rundir.OpenOptions{Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Missing, []int{1}) || !slices.Equal(r.Incomplete, []string{unfinished}) {
		t.Errorf("partial: missing %v, incomplete %v", r.Missing, r.Incomplete)
	}
	out := filepath.Join(f.root, "partial")
	fin, err := rundir.Merge(out, r, rundir.MergeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, rec := range f.recs {
		if rec.TaskIndex%4 != 1 {
			want++
		}
	}
	if fin.Summary.Rollouts != want {
		t.Errorf("partial merge: %d rollouts, want %d", fin.Summary.Rollouts, want)
	}
	mf, _ := rundir.ReadManifest(out)
	if mf.Complete != nil || !slices.Equal(mf.Missing, []int{1}) {
		t.Errorf("partial merge's manifest: complete %v, missing %v", mf.Complete, mf.Missing)
	}
	// Partial still refuses what cannot be one run.
	if _, err := rundir.OpenRun([]string{good[0], configDiffers}, rundir.OpenOptions{Partial: true}); err == nil {
		t.Error("partial: shards of another config accepted")
	}
	// A merge refuses to write into a shard or over a run.
	if _, err := rundir.Merge(good[0], r, rundir.MergeOptions{}); err == nil || !strings.Contains(err.Error(), "is the shard directory") {
		t.Errorf("merge into a shard: %v", err)
	}
	if _, err := rundir.Merge(out, r, rundir.MergeOptions{}); err == nil || !strings.Contains(err.Error(), "already holds a run") {
		t.Errorf("merge over a run: %v", err)
	}
	if _, err := rundir.Merge(out, r, rundir.MergeOptions{Overwrite: true}); err != nil {
		t.Errorf("merge --overwrite: %v", err)
	}
}

// Records that are not where they belong are named, and nothing is merged: a record of
// (task, repeat, arm) twice in a shard, a record of another shard's task.
func TestMergeRefusesDuplicatesAndStrayRecords(t *testing.T) {
	f := newFixture(t)
	dirs := f.shards(t, 3, "s")
	journal := func(i int) string { return filepath.Join(dirs[i], rundir.JournalFile) }
	b0, _ := os.ReadFile(journal(0))
	b1, _ := os.ReadFile(journal(1))
	first0 := string(b0[:bytes.IndexByte(b0, '\n')+1])
	first1 := string(b1[:bytes.IndexByte(b1, '\n')+1])
	// shard 0 gets one of its records again, and one of shard 1's.
	os.WriteFile(journal(0), []byte(string(b0)+first0+first1), 0o644)
	lines0 := strings.Count(string(b0), "\n")
	r, err := rundir.OpenRun(dirs, rundir.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var k0, k1 struct {
		Task    int64  `json:"task_index"`
		Rollout int64  `json:"rollout_index"`
		Arm     string `json:"arm"`
	}
	jsonUnmarshal(t, first0, &k0)
	jsonUnmarshal(t, first1, &k1)
	wantDup := fmt.Sprintf("%s:%d: a second record of (task %d, repeat %d, arm %s)", journal(0), lines0+1, k0.Task, k0.Rollout, k0.Arm)
	wantStray := fmt.Sprintf("%s:%d: task %d belongs to shard 1/3, not to this directory's 0/3", journal(0), lines0+2, k1.Task)
	n := 0
	err = r.Scan(func(*record.Record) error { n++; return nil })
	for _, w := range []string{wantDup, wantStray} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("scan: %v\nwant it to say %q", err, w)
		}
	}
	if n != 90 {
		t.Errorf("scan gave %d records, want the 90 in place", n)
	}
	out := filepath.Join(f.root, "merged")
	if _, err = rundir.Merge(out, r, rundir.MergeOptions{}); err == nil || !strings.Contains(err.Error(), wantDup) || !strings.Contains(err.Error(), wantStray) {
		t.Errorf("merge: %v", err)
	}
	for _, name := range []string{rundir.ParquetFile, rundir.JournalFile, rundir.TrajectoriesFile, rundir.ManifestFile} {
		if _, err := os.Stat(filepath.Join(out, name)); err == nil {
			t.Errorf("a refused merge left %s", name)
		}
	}
}

func jsonUnmarshal(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatal(err)
	}
}
