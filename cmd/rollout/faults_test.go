package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// Two identical runs with injected HTTP 500s, two arms whose first requests are identical,
// and 64 rollouts in flight: the same records, row by row. The simulator counts a request's
// retries per rollout, so which rollout a fault hits does not depend on which arm's request
// arrives first.
func TestFaultsReproducibleAcrossArms(t *testing.T) {
	input := headLines(t, extractionData, 40)
	run := func() map[record.Key]record.Record {
		dir := t.TempDir()
		r := runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--model-url", "builtin:sim",
			"--server", "builtin:extraction", "--arms", "single,multi", "--num-repeats", "3", "--concurrency", "64",
			"--sim-http-500", "0.35", "--retries", "1", "--retry-budget", "2", "--quiet", "--fail-on-error", "0.9") // the faults are the point
		if r.code != 0 {
			t.Fatalf("run: exit %d: %s", r.code, r.stderr)
		}
		out := map[record.Key]record.Record{}
		for _, rec := range readRecords(t, dir) {
			out[rec.Key()] = rec
		}
		return out
	}
	a, b := run(), run()
	if len(a) != 240 || len(b) != 240 {
		t.Fatalf("%d and %d records, want 240", len(a), len(b))
	}
	// What the faults decide: the reward, the failure, the attempts, the rounds and calls.
	outcome := func(r record.Record) string {
		return fmt.Sprintf("reward %v has %v failure %q attempts %d rounds %d calls %d termination %q",
			r.Reward, r.HasReward, r.FailureClass, r.Attempts, r.Rounds, r.ToolCalls, r.Termination)
	}
	failed, differ := 0, 0
	for k, ra := range a {
		rb, ok := b[k]
		if !ok {
			t.Fatalf("%+v: in the first run only", k)
		}
		if ra.FailureClass != "" {
			failed++
		}
		if outcome(ra) != outcome(rb) {
			differ++
			t.Errorf("%+v: %s, then %s", k, outcome(ra), outcome(rb))
		}
	}
	// The faults must have bitten, or the test shows nothing.
	if failed == 0 || failed == len(a) {
		t.Errorf("%d of %d rollouts failed: want some", failed, len(a))
	}
	t.Logf("%d of %d rollouts failed in each run; %d differ", failed, len(a), differ)
}

// model_error (here: the endpoint answers 400 to every call) is left out of the scores like
// the other failures, and --resume --retry-failed runs it again; bad_task is not run again.
func TestRetryFailedRunsModelErrors(t *testing.T) {
	var broken atomic.Bool
	broken.Store(true)
	m := newFakeModel(t, func(w http.ResponseWriter, _ map[string]any, _ int64) {
		if broken.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error": {"message": "model 'm' is not served here", "type": "invalid_request_error"}}`)
			return
		}
		writeChat(w, "done")
	})
	input := weatherRows(t, 3, "")
	rows, err := os.ReadFile(input)
	if err != nil {
		t.Fatal(err)
	}
	// A row without responses_create_params: bad_task.
	if err := os.WriteFile(input, append(rows, "{\"id\": \"bad\"}\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	base := []string{"run", "--input", input, "--out", dir, "--model-url", m.URL + "/v1", "--model", "m",
		"--server", "builtin:example_single_tool_call", "--quiet"}
	if r := runCLI(t, context.Background(), nil, base...); r.code != exitFailures { // every rollout failed
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	classes := func() []string {
		var out []string
		for _, rec := range readRecords(t, dir) {
			out = append(out, string(rec.FailureClass))
		}
		return out
	}
	if got := classes(); !slices.Equal(got, []string{record.FailModelError, record.FailModelError, record.FailModelError, record.FailBadTask}) {
		t.Fatalf("classes %v", got)
	}
	var sum report.Summary
	readJSON(t, filepath.Join(dir, rundir.SummaryFile), &sum)
	if sum.Scored != 0 || sum.Failed != 4 {
		t.Errorf("summary: scored %d failed %d; want 0 and 4", sum.Scored, sum.Failed)
	}
	broken.Store(false)
	if r := runCLI(t, context.Background(), nil, append(base, "--resume", "--retry-failed", "--fail-on-error", "1")...); r.code != 0 { // the bad task stays
		t.Fatalf("resume: exit %d: %s", r.code, r.stderr)
	}
	if got := classes(); !slices.Equal(got, []string{"", "", "", record.FailBadTask}) {
		t.Errorf("after --retry-failed: classes %v, want the model errors run again and the bad task kept", got)
	}
}

// A rollout whose verify fails ends with termination verify_error in its record and in its
// trajectories.jsonl line alike.
func TestTrajectoryEndsLikeTheRecord(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/verify" {
			w.WriteHeader(http.StatusUnprocessableEntity)
			io.WriteString(w, `{"detail": "cannot verify"}`)
			return
		}
		io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", weatherRows(t, 3, ""), "--out", dir, "--model-url", "builtin:sim",
		"--server", srv.URL, "--quiet")
	if r.code != exitFailures { // every rollout failed
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	terms := map[int64]string{}
	for _, rec := range readRecords(t, dir) {
		if rec.FailureClass != record.FailVerify || rec.Termination != "verify_error" {
			t.Errorf("task %d: class %q termination %q", rec.TaskIndex, rec.FailureClass, rec.Termination)
		}
		terms[rec.TaskIndex] = rec.Termination
	}
	b, err := os.ReadFile(filepath.Join(dir, "trajectories.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, line := range lines {
		var l struct {
			TaskIndex  int64 `json:"task_index"`
			Trajectory struct {
				Termination  string `json:"termination"`
				FailureClass string `json:"failure_class"`
			} `json:"trajectory"`
		}
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		if l.Trajectory.Termination != terms[l.TaskIndex] || l.Trajectory.FailureClass != record.FailVerify {
			t.Errorf("task %d: trajectory ends %q (%q), record %q", l.TaskIndex, l.Trajectory.Termination, l.Trajectory.FailureClass, terms[l.TaskIndex])
		}
	}
	if len(lines) != 3 {
		t.Errorf("%d trajectory lines", len(lines))
	}
}
