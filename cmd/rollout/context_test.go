package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
)

// --context with a list makes an arm of each strategy, on the same tasks and seeds; each record
// names its strategy; the manifest keeps the arms' settings, so that --resume alone finds the
// run as it was.
func TestRunContextArms(t *testing.T) {
	input := headLines(t, extractionData, 6)
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--model-url", "builtin:sim",
		"--server", "builtin:extraction", "--context", "full,window:1,budget:300,briefing", "--quiet")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	recs := readRecords(t, dir)
	if len(recs) != 6*4 {
		t.Fatalf("%d records, want 24", len(recs))
	}
	seeds := map[int64]map[string]int64{}
	for _, rec := range recs {
		if rec.Context != rec.Arm {
			t.Errorf("arm %s: context column %q", rec.Arm, rec.Context)
		}
		if seeds[rec.TaskIndex] == nil {
			seeds[rec.TaskIndex] = map[string]int64{}
		}
		seeds[rec.TaskIndex][rec.Arm] = rec.Seed
		if rec.ContextTokensMax <= 0 || len(rec.ContextTokens) != int(rec.Rounds) || slices.Max(rec.ContextTokens) != rec.ContextTokensMax {
			t.Errorf("arm %s task %d: context tokens %v, max %d, %d rounds", rec.Arm, rec.TaskIndex, rec.ContextTokens, rec.ContextTokensMax, rec.Rounds)
		}
		switch rec.Arm {
		case "full":
			if rec.ContextRemovedMessages != 0 || rec.BriefingCalls != 0 {
				t.Errorf("full removed %d messages, %d briefings", rec.ContextRemovedMessages, rec.BriefingCalls)
			}
		case "window:1", "budget:300":
			if rec.ContextRemovedMessages == 0 || rec.ContextRemovedBytes == 0 {
				t.Errorf("%s task %d removed nothing", rec.Arm, rec.TaskIndex)
			}
		case "briefing":
			if rec.Termination == "completed" && rec.BriefingCalls != rec.Rounds-1 {
				t.Errorf("briefing: %d briefing calls for %d rounds", rec.BriefingCalls, rec.Rounds)
			}
		default:
			t.Errorf("arm %q", rec.Arm)
		}
	}
	for task, by := range seeds {
		if len(by) != 4 || by["full"] != by["window:1"] || by["full"] != by["briefing"] || by["full"] != by["budget:300"] {
			t.Errorf("task %d: seeds by arm %v", task, by)
		}
	}
	// rollout show names the strategy and prints the briefings.
	r = runCLI(t, context.Background(), nil, "show", dir, "--task", "0", "--arm", "briefing")
	if r.code != 0 || !strings.Contains(r.stdout, "\ncontext briefing · prompt tokens by round [") || !strings.Contains(r.stdout, "[briefing after round 0, ") ||
		!strings.Contains(r.stdout, "  Briefing of the simulator.\n  Facts:\n  - call_0_") {
		t.Errorf("show: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	m := readFile(t, filepath.Join(dir, "manifest.json"))
	if !strings.Contains(m, "window:1=multi,context=window:1") || !strings.Contains(m, "briefing=multi,context=briefing") {
		t.Errorf("the manifest does not hold the arms' contexts:\n%s", m)
	}
	r = runCLI(t, context.Background(), nil, "run", "--resume", "--out", dir, "--quiet")
	if r.code != 0 || len(readRecords(t, dir)) != 24 {
		t.Fatalf("resume: exit %d: %s", r.code, r.stderr)
	}
	// The run's own command line again, with --resume: the same arms.
	r = runCLI(t, context.Background(), nil, "run", "--resume", "--out", dir, "--quiet", "--context", "full, window:1,budget:300,briefing")
	if r.code != 0 || len(readRecords(t, dir)) != 24 {
		t.Fatalf("resume with the same --context: exit %d: %s", r.code, r.stderr)
	}
	r = runCLI(t, context.Background(), nil, "run", "--resume", "--out", dir, "--quiet", "--context", "full,window:2")
	if want := "--context full,window:2: the arms already have their own contexts (full,window:1,budget:300,briefing)"; r.code != exitUsage || !strings.Contains(r.stderr, want) {
		t.Fatalf("resume with another --context: exit %d, stderr %q; want %q", r.code, r.stderr, want)
	}
}

// The briefing prompt is the file's; --degrade and a single --context are the run's, kept in
// the manifest; the config's arms take context and degrade; bad values are usage errors
// naming the flag or FILE:LINE.
func TestRunContextFlags(t *testing.T) {
	var mu sync.Mutex
	var briefings []string
	m := newFakeModel(t, func(w http.ResponseWriter, req map[string]any, _ int64) {
		msgs := req["messages"].([]any)
		last := msgs[len(msgs)-1].(map[string]any)
		if _, tools := req["tools"]; !tools {
			mu.Lock()
			briefings = append(briefings, last["content"].(string))
			mu.Unlock()
			writeChat(w, "Facts: SF is sunny.")
			return
		}
		weatherModel(w, req, 0)
	})
	prompt := filepath.Join(t.TempDir(), "brief.txt")
	os.WriteFile(prompt, []byte("Sum it up, with the values."), 0o644)
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", weatherRows(t, 2, ""), "--out", dir, "--model-url", m.URL+"/v1", "--model", "m",
		"--server", "builtin:example_single_tool_call", "--context", "briefing", "--briefing-prompt", prompt, "--degrade", "--quiet", "--fail-on-error", "1")
	if r.code != 0 && r.code != 4 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if len(briefings) != 2 || briefings[0] != "Sum it up, with the values." {
		t.Fatalf("briefing requests ended with %q", briefings)
	}
	for _, rec := range readRecords(t, dir) {
		if rec.Context != "briefing" || rec.BriefingCalls != 1 || rec.Arm != "multi" {
			t.Errorf("record: arm %s context %q briefings %d (%s)", rec.Arm, rec.Context, rec.BriefingCalls, rec.Error)
		}
	}
	man := readFile(t, filepath.Join(dir, "manifest.json"))
	for _, want := range []string{`"context":"briefing"`, `"degrade":true`, `"briefing_prompt":"` + prompt + `"`, `"briefing_prompt_sha256":"`} {
		if !strings.Contains(strings.ReplaceAll(man, `": `, `":`), want) {
			t.Errorf("manifest lacks %s:\n%s", want, man)
		}
	}

	input := headLines(t, extractionData, 2)
	base := []string{"run", "--input", input, "--out", t.TempDir(), "--model-url", "builtin:sim", "--server", "builtin:extraction", "--quiet"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--context", "window:0"}, `--context: context "window:0": want window:ROUNDS`},
		{[]string{"--context", "full,summary"}, `--context: unknown context "summary"`},
		{[]string{"--briefing-prompt", "/nonexistent/brief.txt"}, "--briefing-prompt: open /nonexistent/brief.txt"},
		{[]string{"--context", "briefing", "--tool-mode", "json"}, "context briefing and degrade apply to the single and multi policies in native tool mode"},
	} {
		r := runCLI(t, context.Background(), nil, append(base, tc.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, exitUsage, tc.want)
		}
	}
	for _, tc := range []struct{ yaml, want string }{
		{"arms:\n  - {name: w, policy: multi, context: window:0}\n", `run.yaml:2: arms: context: context "window:0"`},
		{"arms:\n  - {name: d, policy: multi, degrade: maybe}\n", `run.yaml:2: arms: degrade:`},
		{"arms:\n  - {name: d, policy: multi, contxt: full}\n", `run.yaml:2: arms: unknown key "contxt" (name, policy, max-rounds, tool-mode, context, degrade)`},
	} {
		bad := filepath.Join(t.TempDir(), "run.yaml")
		os.WriteFile(bad, []byte(tc.yaml), 0o644)
		r := runCLI(t, context.Background(), nil, append(base, "--config", bad)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tc.yaml, r.code, r.stderr, exitUsage, tc.want)
		}
	}
	good := filepath.Join(t.TempDir(), "run.yaml")
	os.WriteFile(good, []byte("arms:\n  - {name: full, policy: multi, context: full}\n  - {name: w2-degrade, policy: multi, context: \"window:2\", degrade: true}\n"), 0o644)
	out := t.TempDir()
	r = runCLI(t, context.Background(), nil, "run", "--input", input, "--out", out, "--model-url", "builtin:sim", "--server", "builtin:extraction", "--quiet", "--config", good)
	if r.code != 0 {
		t.Fatalf("config arms: exit %d: %s", r.code, r.stderr)
	}
	for _, rec := range readRecords(t, out) {
		if want := map[string]string{"full": "full", "w2-degrade": "window:2"}[rec.Arm]; rec.Context != want {
			t.Errorf("arm %s: context %q, want %q", rec.Arm, rec.Context, want)
		}
	}
	if man := readFile(t, filepath.Join(out, "manifest.json")); !strings.Contains(man, "w2-degrade=multi,context=window:2,degrade=true") {
		t.Errorf("manifest:\n%s", man)
	}
}

// With and without --degrade as two arms on the same tasks and seeds: every rollout that ends
// tool_error without it ends degraded with it, after one more model call (a round without
// tool calls), and is verified; the other rollouts are the same in both arms.
func TestRunDegradeArms(t *testing.T) {
	input := headLines(t, extractionData, 30)
	cfg := filepath.Join(t.TempDir(), "run.yaml")
	os.WriteFile(cfg, []byte("arms:\n  - {name: full, policy: multi}\n  - {name: degrade, policy: multi, degrade: true}\n"), 0o644)
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--model-url", "builtin:sim", "--sim-seed", "3",
		"--sim-malformed-tool-call", "0.5", "--server", "builtin:extraction", "--config", cfg, "--quiet")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	by := map[int64]map[string]record.Record{}
	for _, rec := range readRecords(t, dir) {
		if by[rec.TaskIndex] == nil {
			by[rec.TaskIndex] = map[string]record.Record{}
		}
		by[rec.TaskIndex][rec.Arm] = rec
	}
	degraded := 0
	for task, arms := range by {
		full, deg := arms["full"], arms["degrade"]
		if full.Context != "" || deg.Context != "full" {
			t.Errorf("task %d: context columns %q and %q", task, full.Context, deg.Context)
		}
		if full.Termination != "tool_error" {
			if deg.Termination != full.Termination || deg.Rounds != full.Rounds || deg.Reward != full.Reward {
				t.Errorf("task %d: without a tool_error the arms differ: %s %d rounds %v, %s %d rounds %v", task,
					full.Termination, full.Rounds, full.Reward, deg.Termination, deg.Rounds, deg.Reward)
			}
			continue
		}
		degraded++
		if deg.Termination != "degraded" || deg.Rounds != full.Rounds+1 || deg.ToolCalls != full.ToolCalls || !deg.HasReward || deg.FailureClass != "" {
			t.Errorf("task %d: tool_error after %d rounds; with --degrade %s after %d rounds, %d tool calls (%d), reward %v %v",
				task, full.Rounds, deg.Termination, deg.Rounds, deg.ToolCalls, full.ToolCalls, deg.HasReward, deg.Reward)
		}
	}
	if degraded == 0 {
		t.Fatal("no rollout ended tool_error: the test shows nothing")
	}
}
