package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
)

type result struct {
	code           int
	stdout, stderr string
}

func runCLI(t *testing.T, ctx context.Context, environ map[string]string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(ctx, args, env{stdin: strings.NewReader(""), stdout: &out, stderr: &errb, getenv: func(k string) string { return environ[k] }})
	return result{code, out.String(), errb.String()}
}

const examples = "../../data/nemo_gym_examples.jsonl"
const exampleRollouts = "../../data/nemo_gym_examples.rollouts.jsonl"

var builtinServers = []string{
	"--server", "example_multi_step=builtin:example_multi_step",
	"--server", "example_session_state_mgmt=builtin:example_session_state_mgmt",
	"--server", "example_single_tool_call=builtin:example_single_tool_call",
}

func readRecords(t *testing.T, dir string) []record.Record {
	t.Helper()
	recs, err := record.ReadParquet(filepath.Join(dir, "rollouts.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(recs, func(i, j int) bool {
		if recs[i].TaskIndex != recs[j].TaskIndex {
			return recs[i].TaskIndex < recs[j].TaskIndex
		}
		return recs[i].RolloutIndex < recs[j].RolloutIndex
	})
	return recs
}

// The NeMo Gym example rows, replayed with the model calls NeMo Gym
// recorded, against the built-in re-implementations of NeMo Gym's servers,
// give the rewards NeMo Gym recorded: every row checked in the Parquet.
func TestRunNemoGymExamplesEndToEnd(t *testing.T) {
	dir := t.TempDir()
	jsonl := filepath.Join(dir, "ng.jsonl")
	args := append([]string{"run", "--input", examples, "--out", dir, "--model-url", "replay:" + exampleRollouts,
		"--num-repeats", "2", "--concurrency", "4", "--jsonl-out", jsonl}, builtinServers...)
	r := runCLI(t, context.Background(), nil, args...)
	if r.code != 0 {
		t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	recs := readRecords(t, dir)
	if len(recs) != 30 {
		t.Fatalf("%d records, want 30", len(recs))
	}
	var recorded []float64
	for _, line := range strings.Split(strings.TrimSpace(readFile(t, exampleRollouts)), "\n") {
		var rec struct{ Reward float64 }
		json.Unmarshal([]byte(line), &rec)
		recorded = append(recorded, rec.Reward)
	}
	agents := []string{"example_multi_step", "example_session_state_mgmt", "example_single_tool_call"}
	for i, rec := range recs {
		task, k := i/2, i%2
		if rec.TaskIndex != int64(task) || rec.RolloutIndex != int64(k) {
			t.Fatalf("record %d has key (%d, %d)", i, rec.TaskIndex, rec.RolloutIndex)
		}
		if rec.FailureClass != "" || !rec.HasReward || rec.Reward != recorded[task] {
			t.Errorf("task %d: reward %v (has %v, failure %q: %s), NeMo Gym recorded %v", task, rec.Reward, rec.HasReward, rec.FailureClass, rec.Error, recorded[task])
		}
		if rec.Agent != agents[task/5] || rec.Arm != "multi" || rec.Model != "replay" || rec.Termination != "completed" {
			t.Errorf("task %d: agent %q arm %q model %q termination %q", task, rec.Agent, rec.Arm, rec.Model, rec.Termination)
		}
		if rec.Rounds < 1 || rec.PromptTokens == 0 || rec.StartedAt.IsZero() || rec.Attempts < rec.Rounds+2 {
			t.Errorf("task %d: rounds %d prompt tokens %d attempts %d", task, rec.Rounds, rec.PromptTokens, rec.Attempts)
		}
		if rec.SourceLine != int64(task+1) || !strings.HasSuffix(rec.SourceFile, "nemo_gym_examples.jsonl") {
			t.Errorf("task %d: source %s:%d", task, rec.SourceFile, rec.SourceLine)
		}
		switch task / 5 {
		case 0: // example_multi_step: components from NeMo Gym's verify
			want := map[string]float64{"accuracy": 1, "set_overlap": 1, "original_term_minefield_hit": 0, "order_instruction_following_failure": 0}
			for name, v := range want {
				if got, ok := rec.RewardComponents[name]; !ok || got != v {
					t.Errorf("task %d: component %s = %v (present %v), want %v", task, name, got, ok, v)
				}
			}
			if _, echoed := rec.RewardComponents["minefield_label_value"]; echoed {
				t.Errorf("task %d: a field of the row was taken for a reward component", task)
			}
			if rec.ToolCalls < 2 || rec.ToolNames[len(rec.ToolNames)-1] != "extract_synonym_values" {
				t.Errorf("task %d: tool calls %d names %v", task, rec.ToolCalls, rec.ToolNames)
			}
		case 1: // the stateful counter scores 1 only if the cookie was carried
			if rec.ToolCalls != 3 {
				t.Errorf("task %d: %d tool calls, want 3", task, rec.ToolCalls)
			}
		}
	}
	var sum report.Summary
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, "summary.json"))), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Rollouts != 30 || sum.Scored != 30 || sum.MeanReward != 1 || sum.Terminations["completed"] != 30 {
		t.Errorf("summary = %+v", sum)
	}
	if !strings.Contains(r.stdout, "rollouts") || !strings.Contains(r.stdout, "1.0000") {
		t.Errorf("stdout summary:\n%s", r.stdout)
	}
	// Trajectories: one line per rollout, with the full message history.
	lines := strings.Split(strings.TrimSpace(readFile(t, filepath.Join(dir, "trajectories.jsonl"))), "\n")
	if len(lines) != 30 {
		t.Errorf("%d trajectory lines", len(lines))
	}
	// NeMo Gym-style records: the verify answer plus the indexes.
	ng := strings.Split(strings.TrimSpace(readFile(t, jsonl)), "\n")
	if len(ng) != 30 {
		t.Fatalf("%d NeMo Gym records", len(ng))
	}
	for _, line := range ng {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"reward", "response", "responses_create_params", "_ng_task_index", "_ng_rollout_index"} {
			if _, ok := rec[k]; !ok {
				t.Errorf("NeMo Gym record without %s", k)
			}
		}
	}
}

// Records whose calls NeMo Gym's logic scores below 1: the values given
// in reverse order, and a dropped call, replayed against the built-in
// example_multi_step, give NeMo Gym's rewards and components.
func TestRunMutatedRolloutsScoreLikeNemoGym(t *testing.T) {
	dir := t.TempDir()
	lines := strings.Split(strings.TrimSpace(readFile(t, exampleRollouts)), "\n")[:5]
	var mutated []string
	for _, line := range lines {
		var rec map[string]any
		json.Unmarshal([]byte(line), &rec)
		out := rec["response"].(map[string]any)["output"].([]any)
		for _, it := range out {
			m := it.(map[string]any)
			if m["name"] == "extract_synonym_values" {
				var args struct {
					Values []int `json:"synonym_values"`
				}
				json.Unmarshal([]byte(m["arguments"].(string)), &args)
				for i, j := 0, len(args.Values)-1; i < j; i, j = i+1, j-1 {
					args.Values[i], args.Values[j] = args.Values[j], args.Values[i]
				}
				b, _ := json.Marshal(map[string]any{"synonym_values": args.Values})
				m["arguments"] = string(b)
			}
		}
		b, _ := json.Marshal(rec)
		mutated = append(mutated, string(b))
	}
	replayFile := filepath.Join(dir, "reversed.jsonl")
	os.WriteFile(replayFile, []byte(strings.Join(mutated, "\n")+"\n"), 0o644)
	out := filepath.Join(dir, "out")
	r := runCLI(t, context.Background(), nil, append([]string{"run", "--input", examples, "--limit", "5", "--out", out,
		"--model-url", "replay:" + replayFile}, builtinServers...)...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, rec := range readRecords(t, out) {
		// Every example has two values, so reversing them keeps the set and
		// breaks the order.
		if rec.Reward != 0 || rec.RewardComponents["accuracy"] != 0 || rec.RewardComponents["set_overlap"] != 1 ||
			rec.RewardComponents["order_instruction_following_failure"] != 1 {
			t.Errorf("task %d: reward %v components %v", rec.TaskIndex, rec.Reward, rec.RewardComponents)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fakeModel is an OpenAI-compatible endpoint on loopback whose answer to
// each call is chosen by a function of the request.
type fakeModel struct {
	*httptest.Server
	calls    atomic.Int64
	inFlight atomic.Int64
	maxIn    atomic.Int64
}

func newFakeModel(t *testing.T, answer func(w http.ResponseWriter, req map[string]any, n int64)) *fakeModel {
	m := &fakeModel{}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models") {
			// The preflight's model list: empty, so that any --model passes.
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"object": "list", "data": []}`)
			return
		}
		n := m.calls.Add(1)
		in := m.inFlight.Add(1)
		defer m.inFlight.Add(-1)
		for {
			old := m.maxIn.Load()
			if in <= old || m.maxIn.CompareAndSwap(old, in) {
				break
			}
		}
		var req map[string]any
		json.NewDecoder(r.Body).Decode(&req)
		answer(w, req, n)
	}))
	t.Cleanup(m.Close)
	return m
}

func writeChat(w http.ResponseWriter, content string, toolCalls ...map[string]any) {
	msg := map[string]any{"role": "assistant", "content": content}
	finish := "stop"
	if len(toolCalls) > 0 {
		msg["tool_calls"] = toolCalls
		finish = "tool_calls"
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"id": "x", "object": "chat.completion", "model": "m",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]int{"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}})
}

func weatherRows(t *testing.T, n int, extra string) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `{"id": "w%d", "responses_create_params": {"input": [{"role": "user", "content": "weather %d?"}], "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]%s}}`+"\n", i, i, extra)
	}
	path := filepath.Join(t.TempDir(), "rows.jsonl")
	os.WriteFile(path, []byte(b.String()), 0o644)
	return path
}

// weatherModel calls get_weather once, then answers.
func weatherModel(w http.ResponseWriter, req map[string]any, _ int64) {
	msgs := req["messages"].([]any)
	if msgs[len(msgs)-1].(map[string]any)["role"] == "tool" {
		writeChat(w, "sunny")
		return
	}
	writeChat(w, "", map[string]any{"id": "c1", "type": "function", "function": map[string]any{"name": "get_weather", "arguments": `{"city":"SF"}`}})
}

// Failures are data: a 429 forever, an HTML 502, a model that hangs, a
// malformed row and a verify that rejects the row each end in one record
// with its failure class, and the run exits 4 (every rollout failed).
func TestRunFailuresAreRecords(t *testing.T) {
	cases := []struct {
		name, class, termination string
		model                    func(w http.ResponseWriter, req map[string]any, n int64)
		extra                    string
	}{
		{"429", "rate_limited", "model_error", func(w http.ResponseWriter, _ map[string]any, _ int64) {
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error":{"message":"slow down","type":"rate_limit"}}`, 429)
		}, ""},
		{"html 502", "model_unavailable", "model_error", func(w http.ResponseWriter, _ map[string]any, _ int64) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(502)
			fmt.Fprint(w, "<html><body><h1>502 Bad Gateway</h1>"+strings.Repeat("nginx ", 500)+"</body></html>")
		}, ""},
		{"hang", "timeout", "timeout", func(w http.ResponseWriter, _ map[string]any, _ int64) {
			time.Sleep(2 * time.Second)
		}, ""},
		// NeMo Gym's responses_create_params takes stream only as false: the built-in
		// server's strict verify rejects the row. (Unknown members are chat request options,
		// left out of what /verify gets: TestRequestOptionsPerArm.)
		{"strict verify", "verify", "verify_error", weatherModel, `, "stream": true`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeModel(t, tc.model)
			dir := t.TempDir()
			r := runCLI(t, context.Background(), nil, "run", "--input", weatherRows(t, 3, tc.extra), "--out", dir,
				"--model-url", m.URL+"/v1", "--model", "m", "--server", "builtin:example_single_tool_call",
				"--retries", "2", "--model-timeout", "200ms", "--quiet")
			want := exitFailures // every rollout failed
			if record.FailureClass(tc.class).Transient() {
				want = exitTransient // …and every failure is transient
			}
			if r.code != want {
				t.Fatalf("exit %d, want %d: %s", r.code, want, r.stderr)
			}
			recs := readRecords(t, dir)
			if len(recs) != 3 {
				t.Fatalf("%d records", len(recs))
			}
			for _, rec := range recs {
				if string(rec.FailureClass) != tc.class || rec.Termination != tc.termination || rec.HasReward || rec.Error == "" {
					t.Errorf("record %d: class %q termination %q has reward %v error %q", rec.TaskIndex, rec.FailureClass, rec.Termination, rec.HasReward, rec.Error)
				}
				if len(rec.Error) > 600 {
					t.Errorf("error message of %d bytes", len(rec.Error))
				}
			}
			if tc.name == "429" && recs[0].Attempts != 4 { // seed + 3 model attempts
				t.Errorf("attempts = %d, want 4", recs[0].Attempts)
			}
			if !strings.Contains(r.stdout, tc.class) {
				t.Errorf("summary does not count %s:\n%s", tc.class, r.stdout)
			}
		})
	}
}

// A malformed row becomes a bad_task record naming file:line: field, and
// the rows after it run; --strict refuses the file before any rollout.
func TestRunBadRows(t *testing.T) {
	m := newFakeModel(t, weatherModel)
	path := filepath.Join(t.TempDir(), "rows.jsonl")
	os.WriteFile(path, []byte(`{"responses_create_params": {"input": "weather?", "tools": [{"type": "function", "name": "get_weather"}]}}
{"responses_create_params": {"input": [{"role": "robot", "content": "x"}]}}
{"responses_create_params": {"input": "weather?", "tools": [{"type": "function", "name": "get_weather"}]}}
`), 0o644)
	dir := t.TempDir()
	base := []string{"--input", path, "--model-url", m.URL + "/v1", "--model", "m", "--server", "builtin:example_single_tool_call", "--quiet"}
	// One bad row of three is past the default --fail-on-error (5%); one failure is allowed by a count of 1.
	r := runCLI(t, context.Background(), nil, append([]string{"run", "--out", dir, "--fail-on-error", "1"}, base...)...)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	recs := readRecords(t, dir)
	if len(recs) != 3 || recs[0].Reward != 1 || recs[2].Reward != 1 {
		t.Fatalf("records: %+v", recs)
	}
	want := path + `:2: responses_create_params.input[0].role: is "robot"`
	if recs[1].FailureClass != "bad_task" || !strings.HasPrefix(recs[1].Error, want) {
		t.Errorf("bad row: class %q error %q", recs[1].FailureClass, recs[1].Error)
	}

	strictDir := t.TempDir()
	r = runCLI(t, context.Background(), nil, append([]string{"run", "--strict", "--out", strictDir}, base...)...)
	if r.code != exitUsage || !strings.Contains(r.stderr, want) {
		t.Errorf("--strict: exit %d, stderr %s", r.code, r.stderr)
	}
	if m.calls.Load() != 4 { // 2 good rows × 2 calls, none by the strict run
		t.Errorf("model calls = %d, want 4", m.calls.Load())
	}
	if _, err := os.Stat(filepath.Join(strictDir, "rollouts.parquet")); err == nil {
		t.Error("--strict wrote results")
	}
}

// Bad flags, unreadable input and an unusable output directory exit 2 with
// a one-line message.
func TestRunUsageErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, []byte("x"), 0o644)
	rows := weatherRows(t, 1, "")
	ok := []string{"--model-url", "http://127.0.0.1:1/v1", "--model", "m", "--server", "http://127.0.0.1:1"}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no input", append([]string{"run"}, ok...), "--input FILE is required"},
		{"missing input", append([]string{"run", "--input", "/nonexistent.jsonl", "--out", t.TempDir()}, ok...), "/nonexistent.jsonl"},
		{"out is a file", append([]string{"run", "--input", rows, "--out", file}, ok...), "--out " + file},
		{"bad flag", []string{"run", "--concurency", "3"}, "rollout: run: unknown flag --concurency (did you mean --concurrency?); rollout run --help lists the flags\n"},
		{"bad concurrency", append([]string{"run", "--input", rows, "--concurrency", "-1"}, ok...), "concurrency must be at least 1"},
		{"no model", []string{"run", "--input", rows, "--model-url", "http://x/v1", "--server", "http://x"}, "--model NAME is required"},
		{"bad server", []string{"run", "--input", rows, "--model-url", "http://x/v1", "--model", "m", "--server", "ftp://x"}, "want an http:// or https:// URL"},
		{"unknown builtin", []string{"run", "--input", rows, "--model-url", "http://x/v1", "--model", "m", "--server", "builtin:nope"}, "nope"},
		{"unknown command", []string{"fly"}, `unknown command "fly"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, context.Background(), nil, tc.args...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d; stderr %s", r.code, exitUsage, r.stderr)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr %q does not contain %q", r.stderr, tc.want)
			}
		})
	}
	// An earlier run's results are never overwritten by accident.
	m := newFakeModel(t, weatherModel)
	dir := t.TempDir()
	args := []string{"run", "--input", rows, "--out", dir, "--model-url", m.URL + "/v1", "--model", "m", "--server", "builtin:example_single_tool_call", "--quiet"}
	if r := runCLI(t, context.Background(), nil, args...); r.code != 0 {
		t.Fatalf("first run: %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, context.Background(), nil, args...); r.code != exitUsage || !strings.Contains(r.stderr, "already holds a run") {
		t.Errorf("second run: exit %d %s", r.code, r.stderr)
	}
	if r := runCLI(t, context.Background(), nil, append(args, "--overwrite")...); r.code != 0 {
		t.Errorf("--overwrite: exit %d %s", r.code, r.stderr)
	}
}

// Concurrency is a sliding window: the model sees exactly --concurrency
// calls in flight, never more.
func TestRunConcurrencyWindow(t *testing.T) {
	var m *fakeModel
	m = newFakeModel(t, func(w http.ResponseWriter, req map[string]any, n int64) {
		// Until 8 calls have been in flight at once, each call waits for the others (for at
		// most 5 s, so that a runner that allows fewer shows as a smaller maximum rather than
		// a hang): the maximum then does not depend on how loaded the machine is.
		for deadline := time.Now().Add(5 * time.Second); m.maxIn.Load() < 8 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(5 * time.Millisecond)
		writeChat(w, "done")
	})
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", weatherRows(t, 40, ""), "--out", dir, "--model-url", m.URL+"/v1",
		"--model", "m", "--server", "builtin:example_single_tool_call", "--concurrency", "8", "--quiet")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if got := m.maxIn.Load(); got != 8 {
		t.Errorf("max model calls in flight = %d, want 8", got)
	}
	if n := len(readRecords(t, dir)); n != 40 {
		t.Errorf("%d records", n)
	}
}

// Ctrl-C: no new rollout starts; running ones are drained, cancelled after
// the drain timeout, and written; the exit code says interrupted.
func TestRunInterruptDrainsAndWrites(t *testing.T) {
	release := make(chan struct{})
	m := newFakeModel(t, func(w http.ResponseWriter, req map[string]any, n int64) {
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		writeChat(w, "done")
	})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for m.calls.Load() < 4 {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
		time.Sleep(50 * time.Millisecond)
		close(release) // the running rollouts finish within the drain bound
	}()
	dir := t.TempDir()
	r := runCLI(t, ctx, nil, "run", "--input", weatherRows(t, 100, ""), "--out", dir, "--model-url", m.URL+"/v1",
		"--model", "m", "--server", "builtin:example_single_tool_call", "--concurrency", "4", "--drain-timeout", "10s", "--quiet")
	if r.code != exitInterrupted {
		t.Fatalf("exit %d, want %d; %s", r.code, exitInterrupted, r.stderr)
	}
	recs := readRecords(t, dir)
	if len(recs) < 4 || len(recs) > 8 {
		t.Fatalf("%d records after interrupt, want the 4 running (a few more may have started)", len(recs))
	}
	for _, rec := range recs {
		if rec.FailureClass != "" || rec.Reward != 1 {
			t.Errorf("drained rollout %d: class %q reward %v", rec.TaskIndex, rec.FailureClass, rec.Reward)
		}
	}

	// With a short drain bound, rollouts still running are cancelled and
	// recorded as such.
	ctx, cancel = context.WithCancel(context.Background())
	m2 := newFakeModel(t, func(w http.ResponseWriter, req map[string]any, n int64) { time.Sleep(3 * time.Second) })
	go func() {
		for m2.calls.Load() < 2 {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	dir = t.TempDir()
	r = runCLI(t, ctx, nil, "run", "--input", weatherRows(t, 10, ""), "--out", dir, "--model-url", m2.URL+"/v1",
		"--model", "m", "--server", "builtin:example_single_tool_call", "--concurrency", "2", "--drain-timeout", "50ms", "--retries", "0", "--quiet")
	if r.code != exitInterrupted {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	recs = readRecords(t, dir)
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	for _, rec := range recs {
		if rec.FailureClass != "cancelled" || rec.Termination != "cancelled" {
			t.Errorf("cancelled rollout: class %q termination %q", rec.FailureClass, rec.Termination)
		}
	}
}
