package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/record/recordtest"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// shardJob is a job with mistakes and faults of the simulator (wrong arguments, skipped
// steps, premature answers, 429s and 500s, retried), two arms and two repeats, on 14 tasks:
// its results vary by rollout, and are a function of the seeds only.
func shardJob(input, out string, extra ...string) []string {
	return append([]string{"run", "--input", input, "--out", out, "--model-url", "builtin:sim", "--server", "builtin:extraction",
		"--arms", "single,multi", "--num-repeats", "2", "--quiet", "--concurrency", "8", "--seed", "3", "--sim-seed", "5",
		"--sim-wrong-argument", "0.2", "--sim-skip-step", "0.2", "--sim-premature-answer", "0.1",
		"--sim-http-429", "0.1", "--sim-http-500", "0.1", "--sim-retry-after", "1ms", "--fail-on-error", "1"}, extra...)
}

// timing is a run's measured time, which no two runs share: started_at, latency_ms and the
// mean latencies.
var timing = []string{"started_at", "latency_ms", "mean_latency_ms"}

// withoutTiming is a JSON document with the members named in timing removed at every depth.
func withoutTiming(t *testing.T, b []byte) string {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	var strip func(any)
	strip = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, k := range timing {
				delete(x, k)
			}
			for _, c := range x {
				strip(c)
			}
		case []any:
			for _, c := range x {
				strip(c)
			}
		}
	}
	strip(v)
	out, _ := json.MarshalIndent(v, "", " ")
	return string(out)
}

// A job run as 4 shards (shard 2 with its index from $JOB_COMPLETION_INDEX) and merged gives
// what the same job run as one process gives: every record's every column but the measured times, summary.json and
// evaluation.json value for value. rollout report and rollout compare read the shards as the
// run.
func TestShardsMergeToTheSingleProcessRun(t *testing.T) {
	root := t.TempDir()
	input := filepath.Join(root, "tasks.jsonl")
	data, err := os.ReadFile("../../data/extraction.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	rows := strings.SplitAfter(string(data), "\n")[:14]
	if err := os.WriteFile(input, []byte(strings.Join(rows, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	single := filepath.Join(root, "single")
	if r := runCLI(t, ctx, nil, shardJob(input, single, "--jsonl-out", filepath.Join(root, "single.ng.jsonl"))...); r.code != 0 {
		t.Fatalf("single process: exit %d: %s", r.code, r.stderr)
	}
	var dirs []string
	for i := range 4 {
		dir := filepath.Join(root, "shards", fmt.Sprintf("shard-%d", i))
		// Shard 2 takes its index from the environment, as in a Kubernetes Indexed Job.
		shard, env := fmt.Sprintf("%d/4", i), map[string]string(nil)
		if i == 2 {
			shard, env = "auto/4", map[string]string{"JOB_COMPLETION_INDEX": "2"}
		}
		ng := filepath.Join(root, fmt.Sprintf("shard-%d.ng.jsonl", i))
		if r := runCLI(t, ctx, env, shardJob(input, dir, "--shard", shard, "--resume=auto", "--jsonl-out", ng)...); r.code != 0 {
			t.Fatalf("shard %s: exit %d: %s", shard, r.code, r.stderr)
		}
		dirs = append(dirs, dir)
	}
	// The same command again (a Job's retry of a pod that did finish): --resume=auto resumes the
	// shard, which has nothing left to run.
	again := runCLI(t, ctx, nil, shardJob(input, dirs[0], "--shard", "0/4", "--resume=auto", "--jsonl-out", filepath.Join(root, "shard-0.ng.jsonl"))...)
	if again.code != 0 || !strings.Contains(again.stderr, "rollout: resuming "+dirs[0]+": 16 rollouts already have a record") {
		t.Errorf("shard 0 again: exit %d: %s", again.code, again.stderr)
	}
	// A shard of an empty range ends cleanly: 14 tasks have none of index 15 mod 16.
	empty := filepath.Join(root, "empty")
	r := runCLI(t, ctx, nil, shardJob(input, empty, "--shard", "15/16")...)
	if r.code != 0 || !strings.Contains(r.stdout, "rollouts         0") {
		t.Fatalf("empty shard: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if mf, err := rundir.ReadManifest(empty); err != nil || mf.Complete == nil || mf.Shard.String() != "15/16" {
		t.Fatalf("empty shard's manifest: %+v, %v", mf, err)
	}

	merged := filepath.Join(root, "merged")
	r = runCLI(t, ctx, nil, "merge", "--out", merged, "--jsonl-out", filepath.Join(root, "merged.ng.jsonl"), filepath.Join(root, "shards", "shard-*"))
	if r.code != 0 {
		t.Fatalf("merge: exit %d: %s", r.code, r.stderr)
	}
	// The NeMo Gym lines: one per rollout with a verify answer, the single process's keys.
	if a, b := nemoGymKeys(t, filepath.Join(root, "merged.ng.jsonl")), nemoGymKeys(t, filepath.Join(root, "single.ng.jsonl")); !slices.Equal(a, b) || len(a) == 0 {
		t.Errorf("merged NeMo Gym lines %v, single process's %v", a, b)
	}
	if below := sameResults(t, merged, single, 14*2*2, nil); below == 0 {
		t.Error("every rollout succeeded: the job does not exercise the simulator's mistakes")
	}
	// report and compare take the shards as the run, and say what the merged run says.
	rs := runCLI(t, ctx, nil, "report", "--format", "json", filepath.Join(root, "shards", "shard-*"))
	rm := runCLI(t, ctx, nil, "report", "--format", "json", merged)
	if rs.code != 0 || rm.code != 0 || rs.stdout != rm.stdout {
		t.Errorf("report of the shards (exit %d, %s) differs from the merged run's (exit %d):\n%s\n%s", rs.code, rs.stderr, rm.code, rs.stdout, rm.stdout)
	}
	cs := runCLI(t, ctx, nil, append([]string{"compare", "--arms", "single,multi", "--format", "json"}, dirs...)...)
	cm := runCLI(t, ctx, nil, "compare", "--arms", "single,multi", "--format", "json", merged)
	if cs.code != 0 || cm.code != 0 || !bytes.Equal([]byte(cs.stdout), []byte(cm.stdout)) {
		t.Errorf("compare of the shards (exit %d, %s) differs from the merged run's (exit %d, %s)", cs.code, cs.stderr, cm.code, cm.stderr)
	}
	// Shards missing: report refuses them, naming the missing one.
	rp := runCLI(t, ctx, nil, "report", dirs[0], dirs[1], dirs[3])
	if rp.code != 2 || !strings.Contains(rp.stderr, "1 of 4 shards missing: 2/4") {
		t.Errorf("report of 3 shards of 4: exit %d: %s", rp.code, rp.stderr)
	}
	// A resume of a shard with another shard is refused.
	rr := runCLI(t, ctx, nil, shardJob(input, dirs[1], "--shard", "2/4", "--resume")...)
	if rr.code != 2 || !strings.Contains(rr.stderr, "--shard was 1/4, now 2/4") {
		t.Errorf("resume of shard 1/4 as 2/4: exit %d: %s", rr.code, rr.stderr)
	}
}

// nemoGymKeys are the sorted (task, repeat, arm) keys of a NeMo Gym file's lines.
func nemoGymKeys(t *testing.T, path string) []string {
	t.Helper()
	var keys []string
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, path)), "\n") {
		var k struct {
			Task    int64  `json:"_ng_task_index"`
			Rollout int64  `json:"_ng_rollout_index"`
			Arm     string `json:"_ng_arm"`
		}
		if err := json.Unmarshal([]byte(line), &k); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		keys = append(keys, fmt.Sprintf("%d/%d/%s", k.Task, k.Rollout, k.Arm))
	}
	slices.Sort(keys)
	return keys
}

// sameResults fails unless the merged run's records, summary.json and evaluation.json are the
// single process's but for the measured times (timing) and what operational clears of each
// record; want is the number of records. It returns how many failed or scored below 1.
func sameResults(t *testing.T, merged, single string, want int, operational func(*record.Record)) (below int) {
	t.Helper()
	got, exp := readRecords(t, merged), readRecords(t, single)
	if len(got) != want || len(exp) != want {
		t.Fatalf("%d merged records, %d single-process ones; want %d", len(got), len(exp), want)
	}
	byArm := func(a, b record.Record) int { return strings.Compare(a.Arm, b.Arm) }
	slices.SortStableFunc(got, byArm) // readRecords sorts by task and repeat
	slices.SortStableFunc(exp, byArm)
	for i := range got {
		g, w := got[i], exp[i]
		g.StartedAt, g.LatencyMs, w.LatencyMs = w.StartedAt, 0, 0
		if operational != nil {
			operational(&g)
			operational(&w)
		}
		if d := recordtest.Diff(g, w); d != "" {
			t.Errorf("record (task %d, repeat %d, arm %s): %s", w.TaskIndex, w.RolloutIndex, w.Arm, d)
		}
		if w.FailureClass != "" || w.Reward < 1 {
			below++
		}
	}
	for _, name := range []string{rundir.SummaryFile, rundir.EvaluationFile} {
		a, _ := os.ReadFile(filepath.Join(merged, name))
		b, _ := os.ReadFile(filepath.Join(single, name))
		if ga, gb := withoutTiming(t, a), withoutTiming(t, b); ga != gb {
			t.Errorf("%s differs:\n%s\nsingle process:\n%s", name, ga, gb)
		}
	}
	return below
}
