package interop_test

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The tiny agent (testdata/tiny-agent/README.md): a 7M-parameter Qwen2-architecture model
// trained from scratch on rollout's own SFT export of generated extraction tasks, none of whose
// questions is in data/extraction.jsonl. It is a learned model, not a wired one: it copies ids
// from tool results and gets some wrong, runs out of tokens, follows the server's tool-call
// grammar. Its scores are not pinned here; what any run of it must show is.

// tinyAgentGz is the model as the repository holds it.
const tinyAgentGz = "testdata/tiny-agent/tiny-agent-qwen2-q8.gguf.gz"

var (
	tinyOnce sync.Once
	tinyPath string
	tinyErr  error
)

// tinyAgent returns the path of the unpacked model, unpacking it on first use into the
// llama-server cache: $ROLLOUT_INTEROP_DIR/tiny-agent/HASH.gguf, HASH the first 16 hex digits
// of the SHA-256 of the .gz, so that a new model file is a new cache entry.
func tinyAgent(t *testing.T) string {
	t.Helper()
	tinyOnce.Do(func() { tinyPath, tinyErr = unpackTinyAgent(os.Getenv(DirEnv)) })
	if tinyErr != nil {
		t.Fatalf("tiny agent: %v", tinyErr)
	}
	return tinyPath
}

func unpackTinyAgent(dir string) (string, error) {
	gz, err := os.ReadFile(tinyAgentGz)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(gz)
	cache := filepath.Join(dir, "tiny-agent")
	path := filepath.Join(cache, hex.EncodeToString(sum[:8])+".gguf")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return "", fmt.Errorf("%s: %w", tinyAgentGz, err)
	}
	tmp, err := os.CreateTemp(cache, ".unpack-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, zr); err != nil {
		tmp.Close()
		return "", fmt.Errorf("%s: %w", tinyAgentGz, err)
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return path, os.Rename(tmp.Name(), path) // whole or absent: a concurrent unpack writes the same bytes
}

// tinyArgs are llama-server's flags for the tiny agent with slots slots of 8192 tokens each.
// Flash attention is off, so that a greedy answer does not depend on the batch it ran in (see
// TestSameSeedSameRecords). One thread: llama.cpp's threads wait for each other spinning, and
// on a loaded machine two of them ran a rollout several times slower than one.
func tinyArgs(slots int) []string {
	return []string{"-c", fmt.Sprint(8192 * slots), "--parallel", fmt.Sprint(slots), "--alias", "tiny-agent", "-fa", "off", "--threads", "1"}
}

// startTiny serves the tiny agent (tinyArgs).
func (s suite) startTiny(t *testing.T, slots int) *server {
	t.Helper()
	return s.start(t, tinyAgent(t), tinyArgs(slots)...)
}

// heldOut writes the first n rows of data/extraction.jsonl, tasks the tiny agent never saw.
func heldOut(t *testing.T, n int) string {
	t.Helper()
	data, err := os.ReadFile("../../data/extraction.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitN(string(data), "\n", n+1)
	if len(lines) <= n {
		t.Fatalf("data/extraction.jsonl has fewer than %d rows", n)
	}
	return writeTasks(t, lines[:n]...)
}

// key names a record of a run with arms.
func (r *journalRecord) key() string {
	return fmt.Sprintf("%s task %d rollout %d", r.Arm, r.TaskIndex, r.RolloutIndex)
}

// tinyRecords checks that out holds n complete, typed records of the tiny agent, one per key,
// every one scored and none failed, and that the model's tool calls are native calls of the
// task's tools with JSON-object arguments; it returns the records by key and the transcripts
// (roles, texts, tool names and arguments: the servers' call ids are random) by key.
func tinyRecords(t *testing.T, out string, n int) (map[string]journalRecord, map[string]string) {
	t.Helper()
	tools := map[string]bool{"list_sources": true, "find_record_ids": true, "get_record": true, "read_value": true, "submit_answer": true}
	terminations := map[string]bool{"completed": true, "length": true, "max_rounds": true, "context_length": true}
	recs := map[string]journalRecord{}
	for _, r := range readJSONL[journalRecord](t, filepath.Join(out, "journal.jsonl")) {
		if _, dup := recs[r.key()]; dup {
			t.Fatalf("%s: two records", r.key())
		}
		if !r.HasReward || r.FailureClass != "" || !terminations[r.Termination] || r.Reward < 0 || r.Reward > 1 ||
			r.Model == "" || r.TaskID == "" || r.Rounds < 1 || r.PromptTokens <= 0 || r.CompletionTokens <= 0 || r.ToolCalls < len(r.ToolNames) {
			t.Fatalf("%s: incomplete or failed record %+v", r.key(), r)
		}
		for _, name := range r.ToolNames {
			if !tools[name] {
				t.Fatalf("%s: a call of %q, not one of the task's tools", r.key(), name)
			}
		}
		recs[r.key()] = r
	}
	if len(recs) != n {
		t.Fatalf("%d records, want %d", len(recs), n)
	}
	if sum := summary(t, out); sum["rollouts"] != float64(n) || sum["scored"] != float64(n) || sum["failed"] != float64(0) {
		t.Fatalf("summary.json %v, want %d rollouts scored", sum, n)
	}
	transcripts := map[string]string{}
	native := 0
	for _, r := range records(t, out) {
		key := fmt.Sprintf("%s task %d rollout %d", r.Arm, r.TaskIndex, r.RolloutIndex)
		var b strings.Builder
		for _, m := range r.Trajectory.Messages {
			fmt.Fprintf(&b, "%s: %q", m.Role, m.Content)
			for _, tc := range m.ToolCalls {
				var args map[string]any
				if err := json.Unmarshal([]byte(tc.Function.Arguments), &args); err != nil || !tools[tc.Function.Name] {
					t.Fatalf("%s: tool call %s(%s): not a native call of a task tool with an arguments object", key, tc.Function.Name, tc.Function.Arguments)
				}
				fmt.Fprintf(&b, " %s(%s)", tc.Function.Name, tc.Function.Arguments)
				native++
			}
			b.WriteByte('\n')
		}
		for i, rd := range r.Trajectory.Rounds {
			if rd.FinishReason == "tool_calls" && len(rd.ToolCalls) == 0 {
				t.Fatalf("%s round %d: finish reason tool_calls without calls", key, i)
			}
		}
		transcripts[key] = b.String()
	}
	if len(transcripts) != n || native == 0 {
		t.Fatalf("%d transcripts with %d native tool calls, want %d transcripts with calls", len(transcripts), native, n)
	}
	return recs, transcripts
}

// compareJSON runs `rollout compare RUN --arms A,B --format FORMAT` and returns its output.
func (s suite) compare(t *testing.T, out, arms, format string) string {
	t.Helper()
	res, err := exec.Command(s.rollout, "compare", out, "--arms", arms, "--format", format).Output()
	if err != nil {
		t.Fatalf("rollout compare: %v", err)
	}
	return string(res)
}

// The tiny agent on the 24 held-out rows, greedy, arms single and multi: 48 complete, typed
// records with native tool calls; a second run (of the first 8 tasks) gives the same
// transcripts, rewards and token counts; and multi-step beats single-step by a difference whose 95% CI excludes 0 (a task
// needs several calls, each on the last one's result).
func TestTinyAgentSingleVsMulti(t *testing.T) {
	s := env(t)
	srv := s.startTiny(t, 4)
	args := []string{"--arms", "single,multi", "--temperature", "0", "--max-tokens", "256",
		"--concurrency", "4", "--seed", "1", "--model-url", srv.url(), "--model", "tiny-agent", "--server", "builtin:extraction"}
	out1, _ := s.run(t, append([]string{"--input", heldOut(t, 24)}, args...)...)
	recs1, text1 := tinyRecords(t, out1, 48)
	// The second greedy run: the first 8 tasks again (CI time), each rollout as the first run had it.
	out2, _ := s.run(t, append([]string{"--input", heldOut(t, 8)}, args...)...)
	recs2, text2 := tinyRecords(t, out2, 16)
	for k, b := range recs2 {
		a := recs1[k]
		if a.Reward != b.Reward || a.Termination != b.Termination || a.PromptTokens != b.PromptTokens ||
			a.CompletionTokens != b.CompletionTokens || text1[k] != text2[k] {
			t.Errorf("%s differs between two greedy runs: reward %v/%v, %s/%s, tokens %d+%d/%d+%d\n%s\n--\n%s", k, a.Reward, b.Reward,
				a.Termination, b.Termination, a.PromptTokens, a.CompletionTokens, b.PromptTokens, b.CompletionTokens, text1[k], text2[k])
		}
	}
	var cmp struct {
		MeanDiff float64                     `json:"mean_diff"`
		CI       struct{ Low, High float64 } `json:"ci95"`
		Pairs    int                         `json:"pairs"`
	}
	if err := json.Unmarshal([]byte(s.compare(t, out1, "single,multi", "json")), &cmp); err != nil {
		t.Fatal(err)
	}
	if cmp.Pairs != 24 || cmp.MeanDiff <= 0 || cmp.CI.Low <= 0 {
		t.Fatalf("multi - single: %+v, want 24 pairs and a positive difference whose CI excludes 0", cmp)
	}
	t.Logf("the tiny agent, greedy, 24 held-out extraction tasks:\n%s", s.compare(t, out1, "single,multi", "markdown"))
}

// Sampled (--temperature 1 --num-repeats 4, arm multi, 6 held-out rows): the repeats of a task
// differ, and pass@k rises with k (some task is solved by some repeats and not others): a real
// model's variance, which the simulator only imitates with its seeded knobs.
func TestTinyAgentSampled(t *testing.T) {
	s := env(t)
	srv := s.startTiny(t, 4)
	const tasks = 6
	out, _ := s.run(t, "--input", heldOut(t, tasks), "--arms", "multi", "--temperature", "1", "--num-repeats", "4", "--max-tokens", "256",
		"--concurrency", "4", "--seed", "1", "--model-url", srv.url(), "--model", "tiny-agent", "--server", "builtin:extraction")
	_, text := tinyRecords(t, out, 4*tasks)
	varied := 0
	for task := range tasks {
		distinct := map[string]bool{}
		for k := range 4 {
			distinct[text[fmt.Sprintf("multi task %d rollout %d", task, k)]] = true
		}
		if len(distinct) > 1 {
			varied++
		}
	}
	// A confident model samples the same transcript four times on an easy task (3 of 6 tasks did
	// on 26 November 2026); some task's repeats must differ.
	if varied == 0 {
		t.Fatalf("the repeats are the same in every one of %d tasks: the sampling does not reach the model", tasks)
	}
	var ev struct {
		ByArm []struct {
			PassAtK []struct {
				K       int     `json:"k"`
				PassAt  float64 `json:"pass_at_k"`
				PassHat float64 `json:"pass_hat_k"`
			} `json:"pass_at_k"`
		} `json:"by_arm"`
	}
	data, err := os.ReadFile(filepath.Join(out, "evaluation.json"))
	if err != nil || json.Unmarshal(data, &ev) != nil || len(ev.ByArm) != 1 || len(ev.ByArm[0].PassAtK) != 3 {
		t.Fatalf("evaluation.json: %v %s", err, data)
	}
	p := ev.ByArm[0].PassAtK
	if !(p[0].PassAt <= p[1].PassAt && p[1].PassAt <= p[2].PassAt && p[0].PassAt < p[2].PassAt) ||
		!(p[0].PassHat >= p[1].PassHat && p[1].PassHat >= p[2].PassHat) {
		t.Fatalf("pass@k %+v: want pass@k rising with k (pass^k falling)", p)
	}
	t.Logf("the tiny agent sampled, %d tasks x 4: pass@1 %.4f pass@2 %.4f pass@4 %.4f; pass^2 %.4f pass^4 %.4f; repeats differ in %d of %d tasks",
		tasks, p[0].PassAt, p[1].PassAt, p[2].PassAt, p[1].PassHat, p[2].PassHat, varied, tasks)
}
