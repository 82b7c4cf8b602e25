package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/rollout-dev/rollout/pkg/wire"
)

// recordingModel is a loopback Chat Completions endpoint that keeps every request body it
// receives, by the arm of the rollout that sent it (the X-Rollout-Id header's first part),
// and answers as weatherModel does; reasoning, when set, is put in each answer's message
// under that member name.
type recordingModel struct {
	*httptest.Server
	mu     sync.Mutex
	bodies map[string][]map[string]any // arm → bodies, in arrival order
	fail   func(body map[string]any) bool
}

func newRecordingModel(t *testing.T, reasoningKey string) *recordingModel {
	m := &recordingModel{bodies: map[string][]map[string]any{}}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			io.WriteString(w, `{"object": "list", "data": []}`)
			return
		}
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Errorf("request body is not a JSON object: %v: %s", err, raw)
		}
		arm, _, _ := strings.Cut(r.Header.Get(wire.RolloutIDHeader), "/")
		m.mu.Lock()
		m.bodies[arm] = append(m.bodies[arm], body)
		fail := m.fail != nil && m.fail(body)
		m.mu.Unlock()
		if fail {
			http.Error(w, `{"error": {"message": "down", "type": "server_error"}}`, http.StatusBadRequest)
			return
		}
		msgs := body["messages"].([]any)
		var msg map[string]any
		finish := "tool_calls"
		if msgs[len(msgs)-1].(map[string]any)["role"] == "tool" {
			msg, finish = map[string]any{"role": "assistant", "content": "sunny"}, "stop"
		} else {
			msg = map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{"id": "c1", "type": "function",
				"function": map[string]any{"name": "get_weather", "arguments": `{"city":"SF"}`}}}}
		}
		if reasoningKey != "" {
			msg[reasoningKey] = "thinking in round " + finish
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"id": "x", "object": "chat.completion", "model": "m",
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
			"usage":   map[string]int{"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}})
	}))
	t.Cleanup(m.Close)
	return m
}

func (m *recordingModel) arm(name string) []map[string]any {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.bodies[name]
}

// jsonOf is v as compact JSON with sorted keys, to compare request members.
func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The request options reach the endpoint, per arm and in every request: the row's own
// (members of responses_create_params that are not Responses fields, extra_body's members,
// reasoning.effort), then --request and the named flags over them, then each arm's request
// from --config over those; null removes a member. The rows carrying these options are
// verified by the built-in NeMo Gym server (which refuses unknown members with 422), the
// manifest records the options, and a resume sends them again.
func TestRequestOptionsPerArm(t *testing.T) {
	m := newRecordingModel(t, "")
	rowOpts := `, "top_k": 7, "chat_template_kwargs": {"enable_thinking": true, "x": 1}, "reasoning": {"effort": "high"}, "extra_body": {"min_p": 0.05, "repetition_penalty": 1.1}`
	input := weatherRows(t, 3, rowOpts)
	cfg := filepath.Join(t.TempDir(), "run.yaml")
	os.WriteFile(cfg, []byte(`arms:
  - {name: think-off, policy: multi, request: {chat_template_kwargs: {enable_thinking: false}}}
  - {name: plain, policy: multi, request: '{"top_k": null, "seed": null}'}
`), 0o644)
	dir := t.TempDir()
	// The third task fails in the first run (the endpoint refuses its first call), so that the
	// resume below runs it again.
	m.fail = func(body map[string]any) bool {
		return strings.Contains(jsonOf(t, body["messages"]), "weather 2?")
	}
	args := []string{"run", "--config", cfg, "--input", input, "--out", dir, "--model-url", m.URL + "/v1", "--model", "m",
		"--server", "builtin:example_single_tool_call", "--request", `{"top_k": 20, "logit_bias": {"11": -100}}`,
		"--top-p", "0.9", "--stop", "END", "--stop", "</answer>", "--presence-penalty", "0.5", "--quiet", "--early-stop", "0", "--fail-on-error", "10"}
	r := runCLI(t, context.Background(), nil, args...)
	if r.code != 0 {
		t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	recs := readRecords(t, dir)
	if len(recs) != 6 {
		t.Fatalf("%d records, want 6", len(recs))
	}
	for _, rec := range recs {
		want := rec.TaskIndex != 2
		if rec.HasReward != want || (want && rec.Reward != 1) {
			t.Errorf("arm %s task %d: reward %v (has %v), failure %s %q", rec.Arm, rec.TaskIndex, rec.Reward, rec.HasReward, rec.FailureClass, rec.Error)
		}
	}
	m.mu.Lock()
	m.fail = nil
	m.mu.Unlock()
	r = runCLI(t, context.Background(), nil, "run", "--resume", "--retry-failed", "--out", dir, "--quiet")
	if r.code != 0 {
		t.Fatalf("resume: exit %d\nstderr: %s", r.code, r.stderr)
	}
	for _, rec := range readRecords(t, dir) {
		if !rec.HasReward || rec.Reward != 1 {
			t.Errorf("after the resume: arm %s task %d: reward %v, failure %s %q", rec.Arm, rec.TaskIndex, rec.Reward, rec.FailureClass, rec.Error)
		}
	}

	common := map[string]string{
		"top_p": "0.9", "stop": `["END","\u003c/answer\u003e"]`, "presence_penalty": "0.5", "logit_bias": `{"11":-100}`,
		"reasoning_effort": `"high"`, "min_p": "0.05", "repetition_penalty": "1.1",
	}
	perArm := map[string]map[string]string{
		"think-off": {"top_k": "20", "chat_template_kwargs": `{"enable_thinking":false,"x":1}`},
		"plain":     {"top_k": "", "seed": "", "chat_template_kwargs": `{"enable_thinking":true,"x":1}`},
	}
	for arm, want := range perArm {
		bodies := m.arm(arm)
		// 3 tasks × 2 calls, the failed task's refused call, and its 2 calls on resume.
		if len(bodies) != 7 {
			t.Errorf("arm %s: %d requests, want 7", arm, len(bodies))
		}
		for i, b := range bodies {
			for k, v := range common {
				if got, ok := b[k]; !ok || jsonOf(t, got) != v {
					t.Errorf("arm %s request %d: %s = %s, want %s", arm, i, k, jsonOf(t, got), v)
				}
			}
			for k, v := range want {
				got, ok := b[k]
				if v == "" && ok {
					t.Errorf("arm %s request %d: %s = %s, want it removed", arm, i, k, jsonOf(t, got))
				}
				if v != "" && (!ok || jsonOf(t, got) != v) {
					t.Errorf("arm %s request %d: %s = %s, want %s", arm, i, k, jsonOf(t, got), v)
				}
			}
			for _, k := range []string{"reasoning", "extra_body", "input"} {
				if _, ok := b[k]; ok {
					t.Errorf("arm %s request %d: Responses member %q sent to Chat Completions", arm, i, k)
				}
			}
		}
	}
	var mf struct {
		Config struct {
			Request json.RawMessage `json:"request"`
			Arms    []string        `json:"arms"`
		} `json:"config"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &mf); err != nil {
		t.Fatal(err)
	}
	var got, want any
	json.Unmarshal(mf.Config.Request, &got)
	json.Unmarshal([]byte(`{"logit_bias":{"11":-100},"presence_penalty":0.5,"stop":["END","</answer>"],"top_k":20,"top_p":0.9}`), &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("manifest request %s, want %v", mf.Config.Request, want)
	}
	if want := []string{`think-off=multi,request={"chat_template_kwargs":{"enable_thinking":false}}`, `plain=multi,request={"seed":null,"top_k":null}`}; !reflect.DeepEqual(mf.Config.Arms, want) {
		t.Errorf("manifest arms %q, want %q", mf.Config.Arms, want)
	}
}

// The vLLM options named in run --help: --chat-template-kwargs merged with --enable-thinking
// into one chat_template_kwargs, --repetition-penalty and --logit-bias, on every call a
// recording endpoint receives.
func TestNamedVLLMRequestFlags(t *testing.T) {
	m := newRecordingModel(t, "")
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", weatherRows(t, 2, ""), "--out", dir, "--model-url", m.URL+"/v1", "--model", "m",
		"--server", "builtin:example_single_tool_call", "--quiet", "--enable-thinking", "false",
		"--chat-template-kwargs", `{"reasoning_budget": 512}`, "--repetition-penalty", "1.05", "--logit-bias", `{"1234": -100, "7": 2.5}`)
	if r.code != 0 {
		t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	bodies := m.arm("multi")
	if len(bodies) != 4 {
		t.Fatalf("%d requests, want 4", len(bodies))
	}
	want := map[string]string{"chat_template_kwargs": `{"enable_thinking":false,"reasoning_budget":512}`, "repetition_penalty": "1.05",
		"logit_bias": `{"1234":-100,"7":2.5}`}
	for i, b := range bodies {
		for k, v := range want {
			if got := jsonOf(t, b[k]); got != v {
				t.Errorf("request %d: %s = %s, want %s", i, k, got, v)
			}
		}
	}
}

// Bad request options are usage errors naming the flag or the config line.
func TestRequestOptionsRefused(t *testing.T) {
	input := weatherRows(t, 1, "")
	cfg := filepath.Join(t.TempDir(), "run.yaml")
	os.WriteFile(cfg, []byte("arms:\n  - {name: a, policy: multi, request: [1, 2]}\n"), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--request", `{"top_k": 2`}, "--request: not JSON"},
		{[]string{"--request", `[1]`}, "--request: is an array, want a JSON object"},
		{[]string{"--extra-body", `{"messages": []}`}, `--extra-body: "messages" cannot be set`},
		{[]string{"--request", `{"model": "x"}`}, `"model" cannot be set`},
		{[]string{"--top-p", "1.5"}, "--top-p: want a number in [0, 1], got 1.5"},
		{[]string{"--top-k", "many"}, "--top-k: want a whole number"},
		{[]string{"--enable-thinking", "perhaps"}, "--enable-thinking: want true or false"},
		{[]string{"--chat-template-kwargs", `[1]`}, "--chat-template-kwargs: want a JSON object"},
		{[]string{"--repetition-penalty", "0"}, "--repetition-penalty: want a number over 0"},
		{[]string{"--logit-bias", `{"the": 5}`}, `--logit-bias: "the" is not a token id`},
		{[]string{"--logit-bias", `{"12": 101}`}, "--logit-bias: token 12: bias 101, want [-100, 100]"},
		{[]string{"--config", cfg}, "run.yaml:2: arms: request: want a mapping"},
	}
	for _, c := range cases {
		args := append([]string{"run", "--input", input, "--out", t.TempDir(), "--model-url", "builtin:sim", "--server", "builtin:example_single_tool_call"}, c.args...)
		r := runCLI(t, context.Background(), nil, args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

// Reasoning is kept in the trajectory, whichever member the endpoint writes it in (vLLM's
// "reasoning", llama.cpp's and older vLLM's "reasoning_content"), is not sent back to the
// model, and reaches /verify and the NeMo Gym file as a Responses reasoning item.
func TestReasoningKept(t *testing.T) {
	for _, key := range []string{"reasoning", "reasoning_content"} {
		t.Run(key, func(t *testing.T) {
			m := newRecordingModel(t, key)
			dir := t.TempDir()
			jsonl := filepath.Join(t.TempDir(), "ng.jsonl")
			r := runCLI(t, context.Background(), nil, "run", "--input", weatherRows(t, 2, ""), "--out", dir, "--model-url", m.URL+"/v1",
				"--model", "m", "--server", "builtin:example_single_tool_call", "--jsonl-out", jsonl, "--quiet")
			if r.code != 0 {
				t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
			}
			for i, b := range m.arm("multi") {
				if strings.Contains(jsonOf(t, b["messages"]), "thinking in round") {
					t.Errorf("request %d sends the reasoning back: %s", i, jsonOf(t, b["messages"]))
				}
			}
			f, err := os.Open(filepath.Join(dir, "trajectories.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			n := 0
			for sc := bufio.NewScanner(f); sc.Scan(); n++ {
				var line struct {
					Trajectory struct {
						Messages []struct {
							Role      string `json:"role"`
							Reasoning string `json:"reasoning_content"`
						} `json:"messages"`
					} `json:"trajectory"`
				}
				if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, msg := range line.Trajectory.Messages {
					if msg.Role == "assistant" {
						got = append(got, msg.Reasoning)
					}
				}
				if want := []string{"thinking in round tool_calls", "thinking in round stop"}; !reflect.DeepEqual(got, want) {
					t.Errorf("trajectory %d: assistant reasoning %q, want %q", n, got, want)
				}
			}
			if n != 2 {
				t.Errorf("%d trajectories, want 2", n)
			}
			data, err := os.ReadFile(jsonl)
			if err != nil {
				t.Fatal(err)
			}
			if c := strings.Count(string(data), `"type":"reasoning"`); c != 4 {
				t.Errorf("%d reasoning items in the NeMo Gym file, want 4 (2 per rollout)", c)
			}
			// rollout export rebuilds the same items from trajectories.jsonl.
			exported := filepath.Join(t.TempDir(), "export.jsonl")
			if r := runCLI(t, context.Background(), nil, "export", dir, "--format", "nemo-gym", "-o", exported); r.code != 0 {
				t.Fatalf("export: exit %d: %s", r.code, r.stderr)
			}
			data, err = os.ReadFile(exported)
			if err != nil {
				t.Fatal(err)
			}
			if c := strings.Count(string(data), `"type":"reasoning"`); c != 4 || !strings.Contains(string(data), "thinking in round stop") {
				t.Errorf("%d reasoning items in the export, want 4 with their text", c)
			}
		})
	}
}
