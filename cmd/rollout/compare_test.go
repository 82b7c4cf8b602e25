package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// rollout compare: two arms of one run, and two runs, paired by (task, repeat).
func TestCompareCommand(t *testing.T) {
	input := headLines(t, extractionData, 10)
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--model-url", "builtin:sim",
		"--server", "builtin:extraction", "--arms", "single,multi", "--num-repeats", "2", "--quiet")
	if r.code != 0 {
		t.Fatalf("run: exit %d: %s", r.code, r.stderr)
	}
	r = runCLI(t, context.Background(), nil, "compare", dir, "--arms", "single,multi", "--format", "json")
	if r.code != 0 {
		t.Fatalf("compare: exit %d: %s", r.code, r.stderr)
	}
	var c struct {
		Pairs    int     `json:"pairs"`
		MeanDiff float64 `json:"mean_diff"`
		CI95     struct{ Low, High float64 }
		Won      int `json:"tasks_won"`
		Lost     int `json:"tasks_lost"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &c); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	// The simulator plays every plan: multi scores 1, single 0 on these sequential tasks.
	if c.Pairs != 20 || c.MeanDiff != 1 || c.Won != 10 || c.Lost != 0 || c.CI95.Low != 1 {
		t.Errorf("comparison %+v", c)
	}

	// Two runs: the same tasks with and without wrong arguments; the run with errors loses.
	other := t.TempDir()
	r = runCLI(t, context.Background(), nil, "run", "--input", input, "--out", other, "--model-url", "builtin:sim",
		"--server", "builtin:extraction", "--num-repeats", "2", "--sim-wrong-argument", "1", "--quiet")
	if r.code != 0 {
		t.Fatalf("run: exit %d: %s", r.code, r.stderr)
	}
	r = runCLI(t, context.Background(), nil, "compare", dir, other, "--arm", "multi")
	if r.code != 0 || !strings.Contains(r.stdout, other+" − "+dir+": mean reward difference -") || !strings.Contains(r.stdout, "tasks won 0, lost 10") {
		t.Errorf("two runs: exit %d: %s\n%s", r.code, r.stderr, r.stdout)
	}
	r = runCLI(t, context.Background(), nil, "compare", dir, other, "--arm", "single")
	if r.code != exitUsage || !strings.Contains(r.stderr, `has no arm "single"`) {
		t.Errorf("--arm missing on one side: exit %d: %s", r.code, r.stderr)
	}
	r = runCLI(t, context.Background(), nil, "compare", dir, other)
	if r.code != exitUsage || !strings.Contains(r.stderr, "several arms") {
		t.Errorf("a side with two arms: exit %d: %s", r.code, r.stderr)
	}
	for _, args := range [][]string{{"compare"}, {"compare", dir}, {"compare", dir, "--arms", "single"}, {"compare", dir, "--arms", "single,chain"}, {"compare", dir, other, "--format", "xml"}} {
		if r := runCLI(t, context.Background(), nil, args...); r.code != exitUsage {
			t.Errorf("%v: exit %d: %s", args, r.code, r.stderr)
		}
	}
	r = runCLI(t, context.Background(), nil, "compare", dir, "--arms", "multi,single", "--format", "markdown")
	if r.code != 0 || !strings.Contains(r.stdout, "| metric | arm=multi | arm=single |") || !strings.Contains(r.stdout, "mean reward difference -1.0000") {
		t.Errorf("markdown: exit %d:\n%s", r.code, r.stdout)
	}
}
