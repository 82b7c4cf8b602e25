package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/view"
)

const workflowData = "../../data/workflow.jsonl"

// simRun runs the first n tasks of a task file against the simulator and returns the run's
// directory.
func simRun(t *testing.T, data string, n int, args ...string) string {
	t.Helper()
	dir := t.TempDir()
	server := "builtin:extraction"
	if strings.Contains(data, "workflow") {
		server = "builtin:workflow"
	}
	r := runCLI(t, context.Background(), nil, append([]string{"run", "--input", headLines(t, data, n), "--out", dir,
		"--model-url", "builtin:sim", "--server", server, "--quiet"}, args...)...)
	if r.code != 0 {
		t.Fatalf("run: exit %d: %s", r.code, r.stderr)
	}
	return dir
}

// pairedDiff is the mean over (task id, repeat) pairs of b's reward minus a's, from the records.
func pairedDiff(t *testing.T, a, b string, arm string) (float64, int) {
	t.Helper()
	type key struct {
		id     string
		repeat int64
	}
	ra := map[key]float64{}
	for _, r := range readRecords(t, a) {
		if r.Arm == arm && r.HasReward && r.FailureClass == "" {
			ra[key{r.TaskID, r.RolloutIndex}] = r.Reward
		}
	}
	sum, n := 0.0, 0
	for _, r := range readRecords(t, b) {
		if v, ok := ra[key{r.TaskID, r.RolloutIndex}]; ok && r.Arm == arm && r.HasReward && r.FailureClass == "" {
			sum += r.Reward - v
			n++
		}
	}
	return sum / float64(n), n
}

// report A B is a leaderboard: a row per run and arm, each compared with the baseline run by
// pairs; runs of other tasks are said to share none (exit 2), as are unknown group fields.
func TestReportLeaderboard(t *testing.T) {
	a := simRun(t, extractionData, 8, "--arms", "single,multi", "--num-repeats", "2", "--sim-wrong-argument", "0.3", "--sim-seed", "1")
	b := simRun(t, extractionData, 8, "--arms", "multi", "--num-repeats", "2", "--sim-wrong-argument", "0.3", "--sim-seed", "2")
	w := simRun(t, workflowData, 2, "--arms", "multi")

	r := runCLI(t, context.Background(), nil, "report", a, b, "--format", "json")
	if r.code != 0 {
		t.Fatalf("report A B: exit %d: %s", r.code, r.stderr)
	}
	var lb report.Leaderboard
	if err := json.Unmarshal([]byte(r.stdout), &lb); err != nil {
		t.Fatal(err)
	}
	if len(lb.Rows) != 3 || lb.Baseline != a {
		t.Fatalf("rows %+v, baseline %s: want 3 rows (a multi, a single, b multi) against %s", lb.Rows, lb.Baseline, a)
	}
	want, pairs := pairedDiff(t, a, b, "multi")
	got := lb.Rows[2]
	if got.Run != b || got.Arm != "multi" || got.Scores.Rollouts != 16 || got.VsBaseline == nil || got.VsBaseline.Pairs != pairs || pairs != 16 ||
		math.Abs(got.VsBaseline.MeanDiff-want) > 1e-12 || got.VsBaseline.Against != a+" multi" {
		t.Errorf("b's row %+v %+v: want 16 pairs, difference %v against %s multi", got, got.VsBaseline, want, a)
	}
	if !lb.Rows[0].IsBaseline || lb.Rows[0].VsBaseline != nil || lb.Rows[0].Scores.Rollouts != 16 {
		t.Errorf("a's row %+v: want the baseline", lb.Rows[0])
	}
	// The other baseline: the sign flips.
	r = runCLI(t, context.Background(), nil, "report", a, b, "--format", "json", "--baseline", "2")
	var lb2 report.Leaderboard
	if err := json.Unmarshal([]byte(r.stdout), &lb2); err != nil || r.code != 0 || lb2.Baseline != b {
		t.Fatalf("--baseline 2: exit %d, %v: %s", r.code, err, r.stderr)
	}
	if v := lb2.Rows[0].VsBaseline; v == nil || math.Abs(v.MeanDiff+want) > 1e-12 {
		t.Errorf("--baseline 2: a multi against b: %+v, want %v", v, -want)
	}
	text := runCLI(t, context.Background(), nil, "report", a, b)
	if text.code != 0 || !strings.Contains(text.stdout, "vs baseline") || strings.Count(text.stdout, "baseline  ") < 2 {
		t.Errorf("text: exit %d\n%s", text.code, text.stdout)
	}
	// --pool: the records of both runs as one set (arm multi pooled over the runs).
	pooled := runCLI(t, context.Background(), nil, "report", a, b, "--format", "json", "--pool")
	var ev report.Evaluation
	if err := json.Unmarshal([]byte(pooled.stdout), &ev); err != nil || pooled.code != 0 || ev.Overall.Rollouts != 48 {
		t.Errorf("--pool: exit %d, %v, %+v", pooled.code, err, ev.Overall)
	}

	for _, c := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"runs of other tasks", []string{"report", a, w}, exitUsage, []string{"no paired difference against the baseline " + a, w + " multi: no task in common with the baseline"}},
		{"compare of other tasks", []string{"compare", a, w, "--arm", "multi"}, exitUsage, []string{"share no task (8 tasks only in " + a + ", 2 only in " + w}},
		{"unknown group field", []string{"report", a, "--group-by", "model"}, exitUsage, []string{`--group-by "model": no record has this task field; the task fields are: category, difficulty`}},
		{"unknown group field, several runs", []string{"report", a, b, "--group-by", "modle"}, exitUsage, []string{`--group-by "modle"`, "category, difficulty"}},
		{"unknown group field, view", []string{"view", a, "--group-by", "model"}, exitUsage, []string{`--group-by "model"`}},
		{"unknown baseline", []string{"report", a, b, "--baseline", "3"}, exitUsage, []string{`--baseline "3" is none of the runs: 1 ` + a + ", 2 " + b}},
		{"unknown baseline, view", []string{"view", a, b, "--baseline", "nope"}, exitUsage, []string{`rollout: view: --baseline "nope" is none of the runs: 1 ` + a + ", 2 " + b}},
		{"baseline of one run", []string{"report", a, "--baseline", a}, exitUsage, []string{"--baseline goes with several runs"}},
	} {
		r := runCLI(t, context.Background(), nil, c.args...)
		for _, want := range c.want {
			if r.code != c.code || !strings.Contains(r.stderr, want) {
				t.Errorf("%s: exit %d, stderr %q; want %d and %q", c.name, r.code, r.stderr, c.code, want)
			}
		}
	}
	// A known field is still grouped by, across runs.
	g := runCLI(t, context.Background(), nil, "report", a, b, "--group-by", "difficulty")
	if g.code != 0 || !strings.Contains(g.stdout, "multi difficulty=") {
		t.Errorf("--group-by difficulty over two runs: exit %d\n%s%s", g.code, g.stdout, g.stderr)
	}
}

// rollout view of several runs: the overview has the runs side by side against the baseline;
// runs of other tasks are offered no comparison, and asked for one it says there is none.
func TestViewRunsSideBySide(t *testing.T) {
	a := simRun(t, extractionData, 4, "--arms", "multi")
	b := simRun(t, extractionData, 4, "--arms", "multi", "--sim-wrong-argument", "0.5")
	w := simRun(t, workflowData, 2, "--arms", "multi")
	d, err := view.Load([]string{a, b, w}, view.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := view.NewHandler(d)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string) string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		b, _ := io.ReadAll(rec.Result().Body)
		return string(b)
	}
	ov := get("/")
	want, _ := pairedDiff(t, a, b, "multi")
	for _, s := range []string{`id="board"`, "0 " + a, "1 " + b, "2 " + w, "none: no task in common with the baseline", "/compare?a=0%3Amulti&amp;b=1%3Amulti"} {
		if !strings.Contains(ov, s) {
			t.Errorf("overview lacks %q", s)
		}
	}
	if d := fmt.Sprintf("%+.4f", want); !strings.Contains(ov, ">"+d+"</a>") {
		t.Errorf("overview lacks the difference %s", d)
	}
	if strings.Contains(ov, "b=2") {
		t.Errorf("the overview offers a comparison with the run of other tasks")
	}
	cmp := get("/compare?a=0:multi&b=2:multi")
	if !strings.Contains(cmp, `id="no-pairs"`) || !strings.Contains(cmp, "share no task") || strings.Contains(cmp, `id="diff"`) {
		t.Errorf("compare of runs of other tasks: no 'share no task', or a difference shown:\n%s", cmp)
	}
}
