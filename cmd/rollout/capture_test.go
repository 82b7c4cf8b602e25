package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record/recordtest"
)

// trajectoryRounds reads every round of every trajectory in dir's trajectories.jsonl.
type capturedRound struct {
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Prompt    []int32   `json:"prompt_token_ids"`
	Gen       []int32   `json:"generation_token_ids"`
	LogProbs  []float64 `json:"generation_log_probs"`
	TokenNote string    `json:"token_note"`
}

func trajectoryRounds(t *testing.T, dir string) []capturedRound {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "trajectories.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []capturedRound
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var line struct {
			Trajectory struct {
				Rounds []capturedRound `json:"rounds"`
			} `json:"trajectory"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		out = append(out, line.Trajectory.Rounds...)
	}
	return out
}

// capturedRun runs the first tasks extraction tasks, repeats times under arms single and
// multi, against the simulator with --capture-tokens; it returns the run directory and stderr.
func capturedRun(t *testing.T, tasks, repeats int) (string, string) {
	t.Helper()
	input := headLines(t, extractionData, tasks)
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--model-url", "builtin:sim",
		"--sim-profile", "realistic", "--sim-seed", "1", "--server", "builtin:extraction", "--arms", "single,multi",
		"--num-repeats", strconv.Itoa(repeats), "--capture-tokens", "--quiet")
	if r.code != 0 {
		t.Fatalf("run: exit %d\nstderr: %s", r.code, r.stderr)
	}
	return dir, r.stderr
}

// A simulated run with --capture-tokens: every model call of every rollout has token arrays
// whose lengths are the usage counts of the call, and no warning is given.
func TestRunCaptureTokensSim(t *testing.T) {
	dir, stderr := capturedRun(t, 6, 2)
	if strings.Contains(stderr, "capture-tokens") {
		t.Errorf("warning against the simulator: %s", stderr)
	}
	rounds := trajectoryRounds(t, dir)
	if len(rounds) < 24 {
		t.Fatalf("%d rounds in 24 rollouts", len(rounds))
	}
	for i, rd := range rounds {
		if len(rd.Prompt) != rd.Usage.PromptTokens || len(rd.Gen) != rd.Usage.CompletionTokens || len(rd.LogProbs) != len(rd.Gen) || rd.TokenNote != "" {
			t.Errorf("round %d: %d prompt ids (usage %d), %d generation ids (usage %d), %d log-probs, note %q",
				i, len(rd.Prompt), rd.Usage.PromptTokens, len(rd.Gen), rd.Usage.CompletionTokens, len(rd.LogProbs), rd.TokenNote)
		}
	}
}

// An endpoint that ignores the options: the run succeeds, one warning names why, and each
// call is recorded without tokens, with the reason.
func TestRunCaptureTokensIgnored(t *testing.T) {
	m := newFakeModel(t, weatherModel)
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", weatherRows(t, 3, ""), "--out", dir,
		"--model-url", m.URL+"/v1", "--model", "m", "--server", "builtin:example_single_tool_call", "--capture-tokens", "--quiet")
	if r.code != 0 {
		t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	if n := strings.Count(r.stderr, "warning: --capture-tokens"); n != 1 {
		t.Errorf("%d warnings, want 1:\n%s", n, r.stderr)
	}
	rounds := trajectoryRounds(t, dir)
	if len(rounds) != 6 {
		t.Fatalf("%d rounds, want 6", len(rounds))
	}
	for i, rd := range rounds {
		if rd.Prompt != nil || rd.Gen != nil || !strings.Contains(rd.TokenNote, "no token ids") {
			t.Errorf("round %d: %+v", i, rd)
		}
	}
	for _, rec := range readRecords(t, dir) {
		if !rec.HasReward || rec.Reward != 1 {
			t.Errorf("task %d: %+v", rec.TaskIndex, rec)
		}
	}
}

// rollout run --resume --out DIR alone keeps --capture-tokens: the rollouts it runs capture too.
func TestResumeKeepsCaptureTokens(t *testing.T) {
	input := headLines(t, extractionData, 6)
	dir := t.TempDir()
	args := []string{"run", "--input", input, "--out", dir, "--model-url", "builtin:sim", "--server", "builtin:extraction", "--capture-tokens", "--quiet"}
	if r := runCLI(t, context.Background(), nil, append(args, "--limit", "3")...); r.code != 0 {
		t.Fatalf("first part: exit %d: %s", r.code, r.stderr)
	}
	// The first part ran 3 tasks; the resume (without --limit: it is in the manifest, so
	// the rest is run by giving --limit 6 and --force) runs the other 3.
	r := runCLI(t, context.Background(), nil, "run", "--resume", "--out", dir, "--limit", "6", "--force", "--quiet")
	if r.code != 0 {
		t.Fatalf("resume: exit %d: %s", r.code, r.stderr)
	}
	if recs := readRecords(t, dir); len(recs) != 6 {
		t.Fatalf("%d records, want 6", len(recs))
	}
	for i, rd := range trajectoryRounds(t, dir) {
		if len(rd.Gen) == 0 || len(rd.Gen) != rd.Usage.CompletionTokens {
			t.Errorf("round %d: %d generation ids, usage %d", i, len(rd.Gen), rd.Usage.CompletionTokens)
		}
	}
}

// contiguityBreaks checks, for every rollout in dir's trajectories.jsonl, what NeMo RL's
// nemo_gym postprocessing asserts of each model call after the first ("Non-contiguous
// messages found!"): its prompt ids begin with the previous call's prompt ids and generated
// ids. It returns the breaks found and the number of calls checked.
func contiguityBreaks(t *testing.T, dir string) (breaks []string, checked int) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "trajectories.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var line struct {
			TaskIndex    int64  `json:"task_index"`
			RolloutIndex int64  `json:"rollout_index"`
			Arm          string `json:"arm"`
			Trajectory   *struct {
				Rounds []capturedRound `json:"rounds"`
			} `json:"trajectory"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatal(err)
		}
		if line.Trajectory == nil {
			continue
		}
		var seen []int32
		for i, rd := range line.Trajectory.Rounds {
			if len(rd.Gen) == 0 {
				continue // NeMo RL skips an item without generation ids
			}
			if i > 0 {
				checked++
			}
			if len(rd.Prompt) < len(seen) || !slices.Equal(rd.Prompt[:len(seen)], seen) {
				breaks = append(breaks, fmt.Sprintf("task %d rollout %d arm %s call %d: prompt ids do not begin with the previous call's prompt and generated ids",
					line.TaskIndex, line.RolloutIndex, line.Arm, i))
			}
			seen = append(slices.Clone(rd.Prompt), rd.Gen...)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return breaks, checked
}

// Token contiguity against the simulator: every call's token ids go back on its answer in the
// next request (as NeMo Gym sends them), the simulator builds the next prompt from them (as
// NeMo RL's servers do), and so every call after the first has prompt ids that begin with the
// previous call's prompt ids and generated ids, in every arm (multi-round rollouts included).
func TestCaptureTokensContiguous(t *testing.T) {
	dir, _ := capturedRun(t, 6, 2)
	breaks, checked := contiguityBreaks(t, dir)
	if checked < 12 {
		t.Fatalf("only %d calls after a first one: the run has too few multi-call rollouts to check", checked)
	}
	if len(breaks) > 0 {
		t.Fatalf("%d of %d calls break contiguity:\n%s", len(breaks), checked, strings.Join(breaks, "\n"))
	}
}

// The nemo-gym export of a simulated run with --capture-tokens passes NeMo RL's nemo_gym
// postprocessing, line by line, and export gives no contiguity warning.
func TestExportCapturedPassesNemoRL(t *testing.T) {
	dir, _ := capturedRun(t, 6, 2)
	out := filepath.Join(t.TempDir(), "ng.jsonl")
	r := runCLI(t, context.Background(), nil, "export", dir, "--format", "nemo-gym", "-o", out)
	if r.code != 0 || strings.Contains(r.stderr, "contiguous") {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	items := 0
	for i, line := range strings.Split(strings.TrimSpace(readFile(t, out)), "\n") {
		n, err := recordtest.NemoRLPostprocess([]byte(line))
		if err != nil {
			t.Fatalf("%s:%d: %v", out, i+1, err)
		}
		items += n
	}
	if items < 36 {
		t.Fatalf("%d trainable items in 24 rollouts", items)
	}
}

// The rl export of a simulated --capture-tokens run has, on every row, the rollout as one
// token sequence with its loss mask: the last call's prompt and generated ids, the mask 1
// exactly on each call's generated ids, in order.
func TestExportCapturedSequence(t *testing.T) {
	dir, _ := capturedRun(t, 4, 2)
	out := filepath.Join(t.TempDir(), "rl.jsonl")
	if r := runCLI(t, context.Background(), nil, "export", dir, "--format", "rl", "-o", out); r.code != 0 {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	rows := 0
	for i, line := range strings.Split(strings.TrimSpace(readFile(t, out)), "\n") {
		var row struct {
			Calls []struct {
				Prompt []int32 `json:"prompt_token_ids"`
				Gen    []int32 `json:"generation_token_ids"`
			} `json:"calls"`
			InputIDs []int32 `json:"input_ids"`
			LossMask []int32 `json:"loss_mask"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatal(err)
		}
		if len(row.Calls) == 0 {
			t.Fatalf("line %d: no calls", i+1)
		}
		last := row.Calls[len(row.Calls)-1]
		if want := append(slices.Clone(last.Prompt), last.Gen...); !slices.Equal(row.InputIDs, want) || len(row.LossMask) != len(want) {
			t.Fatalf("line %d: input_ids %d ids, mask %d, want %d", i+1, len(row.InputIDs), len(row.LossMask), len(want))
		}
		var masked, generated []int32
		for j, m := range row.LossMask {
			if m == 1 {
				masked = append(masked, row.InputIDs[j])
			}
		}
		for _, c := range row.Calls {
			generated = append(generated, c.Gen...)
		}
		if !slices.Equal(masked, generated) {
			t.Fatalf("line %d: the masked ids are not the generated ones", i+1)
		}
		rows++
	}
	if rows != 16 {
		t.Fatalf("%d rows, want 16", rows)
	}
}
