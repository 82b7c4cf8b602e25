package main

import (
	"context"
	"fmt"
	"testing"

	"github.com/rollout-dev/rollout/pkg/report"
)

// Two identical runs with injected HTTP 500s, two arms whose first requests are identical,
// and 64 rollouts in flight: the same records, row by row. The simulator counts a request's
// retries per rollout, so which rollout a fault hits does not depend on which arm's request
// arrives first.
func TestFaultsReproducibleAcrossArms(t *testing.T) {
	input := headLines(t, extractionData, 40)
	run := func() map[report.Key]report.Record {
		dir := t.TempDir()
		r := runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--model-url", "builtin:sim",
			"--server", "builtin:extraction", "--arms", "single,multi", "--num-repeats", "3", "--concurrency", "64",
			"--sim-http-500", "0.35", "--retries", "1", "--retry-budget", "2", "--quiet")
		if r.code != 0 {
			t.Fatalf("run: exit %d: %s", r.code, r.stderr)
		}
		out := map[report.Key]report.Record{}
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
	outcome := func(r report.Record) string {
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
