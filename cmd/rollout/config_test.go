package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A YAML run config sets the flags by name and the arms with their own settings; the command
// line overrides it; a bad key is an error naming FILE:LINE.
func TestRunConfigFile(t *testing.T) {
	input := headLines(t, extractionData, 6)
	dir := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "run.yaml")
	os.WriteFile(cfg, []byte(`# a kept run
input: `+input+`
out: `+dir+`
model-url: builtin:sim
server: [builtin:extraction]
num_repeats: 3  # NeMo Gym's spelling
quiet: true
arms:
  - single
  - {name: multi-2, policy: multi, max_rounds: 2}
  - multi
  - {name: multi-json, policy: multi, tool-mode: json}
`), 0o644)
	r := runCLI(t, context.Background(), nil, "run", "--config", cfg, "--num-repeats", "2")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	// The simulator does not speak JSON mode: said before the run, once.
	if want := "rollout: warning: tool-mode json (arm multi-json): the simulator answers with native tool calls only, so those rollouts end as invalid_output\n"; !strings.HasPrefix(r.stderr, want) || strings.Count(r.stderr, "warning:") != 1 {
		t.Errorf("stderr does not start with the JSON-mode warning:\n%s", r.stderr)
	}
	recs := readRecords(t, dir)
	if len(recs) != 6*2*4 {
		t.Fatalf("%d records, want 48 (6 tasks × 2 repeats, the command line's, × 4 arms)", len(recs))
	}
	by := map[string]int{}
	for _, rec := range recs {
		by[rec.Arm]++
		if rec.Arm == "multi-2" && (rec.Rounds > 2 || rec.Termination != "max_rounds") {
			t.Errorf("multi-2 rollout: %d rounds, termination %s; want the arm's bound of 2", rec.Rounds, rec.Termination)
		}
		if rec.Arm == "multi-json" && rec.Termination != "invalid_output" {
			t.Errorf("multi-json rollout: termination %s; the simulator does not answer in JSON mode", rec.Termination)
		}
		if rec.Arm == "multi" && rec.Reward != 1 {
			t.Errorf("multi rollout (%d, %d): reward %v", rec.TaskIndex, rec.RolloutIndex, rec.Reward)
		}
	}
	if by["single"] != 12 || by["multi-2"] != 12 || by["multi"] != 12 || by["multi-json"] != 12 {
		t.Errorf("records by arm: %v", by)
	}
	m := readFile(t, filepath.Join(dir, "manifest.json"))
	if !strings.Contains(m, "multi-2=multi,max-rounds=2") {
		t.Errorf("the manifest does not hold the arms' settings:\n%s", m)
	}

	for _, tc := range []struct{ yaml, want string }{
		{"input: x\nconcurrencyy: 3\n", `run.yaml:2: unknown key "concurrencyy"`},
		{"input: x\nnum_repeat: 3\n", `run.yaml:2: unknown key "num_repeat"`},
		{"num_repeats: 2\nnum-repeats: 3\n", `run.yaml:2: num-repeats given twice`},
		{"arms:\n  - single\n  - {policy: multi, max-round: 3}\n", `run.yaml:3: arms: unknown key "max-round"`},
		{"arms:\n  - chain\n", `run.yaml:2: arms: unknown arm "chain"`},
		{"concurrency: many\n", `run.yaml:1: concurrency:`},
		{"model: [a, b]\n", `run.yaml:1: model takes one value`},
		{"input: a\ninput: b\n", `run.yaml:2: input given twice`},
		{"- a\n", `run.yaml:1: want a mapping`},
		{"input: [a\n", `run.yaml: `},
	} {
		bad := filepath.Join(t.TempDir(), "run.yaml")
		os.WriteFile(bad, []byte(tc.yaml), 0o644)
		r := runCLI(t, context.Background(), nil, "run", "--config", bad)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d and %q", tc.yaml, r.code, r.stderr, exitUsage, tc.want)
		}
	}
	if r := runCLI(t, context.Background(), nil, "run", "--config", filepath.Join(t.TempDir(), "none.yaml")); r.code != exitUsage || !strings.Contains(r.stderr, "none.yaml") {
		t.Errorf("missing config: exit %d: %s", r.code, r.stderr)
	}
}
