package interop_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// hfPython is a python3 that has jinja2 (what transformers renders chat templates with), or
// the test skips (fails under CI=true).
func hfPython(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		if exec.Command(py, "-c", "import jinja2.sandbox, jinja2.ext").Run() == nil {
			return py
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no python3 with jinja2 (Debian: apt-get install -y python3-jinja2)")
	}
	t.Skip("no python3 with jinja2 (Debian: apt-get install -y python3-jinja2): the HF render cannot run")
	return ""
}

// hfRender renders messages and tools with the chat template at template as transformers'
// apply_chat_template does (render_hf.py).
func hfRender(t *testing.T, py, template string, messages, tools any, generationPrompt bool) (string, error) {
	t.Helper()
	in, err := json.Marshal(map[string]any{"template": template, "messages": messages, "tools": tools, "add_generation_prompt": generationPrompt})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, "render_hf.py")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%v: %s", err, stderr.String())
	}
	return string(out), nil
}

// post posts body to the server's path and decodes the answer into v.
func (s *server) post(t *testing.T, path string, body []byte, v any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.base+path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || json.Unmarshal(data, v) != nil {
		t.Fatalf("POST %s: HTTP %d: %.500s", path, resp.StatusCode, data)
	}
}

// sftRow is a line of an sft export, its messages kept as they are written (the order of an
// object's keys is what tojson writes).
type sftRow struct {
	Messages []json.RawMessage `json:"messages"`
	Tools    string            `json:"tools"`
}

// field is member k of a message, decoded.
func field(t *testing.T, m json.RawMessage, k string) any {
	var obj map[string]any
	if err := json.Unmarshal(m, &obj); err != nil {
		t.Fatal(err)
	}
	return obj[k]
}

// stringArguments is msgs with each tool call's arguments as the JSON string OpenAI's shape
// has (what the sft export wrote before it wrote objects).
func stringArguments(t *testing.T, msgs []json.RawMessage) []map[string]any {
	var out []map[string]any
	b, _ := json.Marshal(msgs)
	json.Unmarshal(b, &out)
	for _, m := range out {
		calls, _ := m["tool_calls"].([]any)
		for _, c := range calls {
			f := c.(map[string]any)["function"].(map[string]any)
			a, err := json.Marshal(f["arguments"])
			if err != nil {
				t.Fatal(err)
			}
			f["arguments"] = string(a)
		}
	}
	return out
}

// The sft export of a run against llama-server, rendered with the real Qwen2.5 chat template
// as transformers renders it (render_hf.py: jinja2 as apply_chat_template sets it up), is the
// text the server rendered at sampling time: each recorded request, rendered by the server's
// own /apply-template, is a prefix of the row's render. With arguments as JSON strings (the
// OpenAI shape) the template double-encodes them and the renders differ: the check can fail.
// Both render without tools (llama-server writes the tools block from its own parse of the
// request's tools, vLLM from the request's JSON): the row's tools are compared with the
// request's as JSON instead.
//
// The same run with --capture-tokens: every round has the generated token ids (llama-server's
// per-token "id"), as many log-probs, and prompt ids (the server's /tokenize of its
// /apply-template rendering of the request) as many as the server counted. Whether a call's
// prompt ids extend the previous call's prompt and generated ids is measured against the
// server's own /tokenize of each recorded request; where they do not (llama-server's chat
// endpoint re-renders the history and takes no ids back), export must warn.
func TestExportRendersAsSampled(t *testing.T) {
	s := env(t)
	py := hfPython(t)
	template := filepath.Join(os.Getenv(DirEnv), "models", "templates", "Qwen-Qwen2.5-7B-Instruct.jinja")
	srv := s.start(t, "toolcall.gguf", "-c", "4096", "--parallel", "2")
	proxy := recordingProxy(t, srv.base)
	tasks, _ := counterTasks(t, 2)
	out, _ := s.run(t, "--input", tasks, "--num-repeats", "2", "--concurrency", "2", "--max-rounds", "3", "--capture-tokens",
		"--model-url", proxy.url, "--model", "toolcall", "--server", counterServer, "--seed", "5")

	sft := filepath.Join(t.TempDir(), "sft.jsonl")
	cmd := exec.Command(s.rollout, "export", out, "--format", "sft", "-o", sft)
	exportOut, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("export: %v\n%s", err, exportOut)
	}
	rows := readJSONL[sftRow](t, sft)
	if len(rows) != 4 {
		t.Fatalf("%d sft rows, want 4", len(rows))
	}
	proxy.mu.Lock()
	calls := slices.Clone(proxy.calls)
	proxy.mu.Unlock()

	for i, row := range rows {
		var tools []any
		if err := json.Unmarshal([]byte(row.Tools), &tools); err != nil {
			t.Fatalf("row %d: tools: %v", i, err)
		}
		hf, err := hfRender(t, py, template, row.Messages, nil, false)
		if err != nil {
			t.Fatalf("row %d: render: %v", i, err)
		}
		// The row's last request: the one whose messages are the row's but its last answer.
		lastID := field(t, row.Messages[len(row.Messages)-2], "tool_call_id")
		var found *proxyCall
		var sent map[string]json.RawMessage
		for k := range calls {
			var req struct {
				Messages []map[string]any `json:"messages"`
			}
			json.Unmarshal(calls[k].body, &req)
			if len(req.Messages) == len(row.Messages)-1 && req.Messages[len(req.Messages)-1]["tool_call_id"] == lastID {
				found = &calls[k]
				json.Unmarshal(calls[k].body, &sent)
			}
		}
		if found == nil {
			t.Fatalf("row %d: no recorded request ends with tool call %v", i, lastID)
		}
		var sentTools []any
		json.Unmarshal(sent["tools"], &sentTools)
		if a, b := fmt.Sprint(sentTools), fmt.Sprint(tools); a != b || len(tools) == 0 {
			t.Errorf("row %d: tools %s, the request sent %s", i, row.Tools, sent["tools"])
		}
		delete(sent, "tools")
		delete(sent, "tool_choice")
		noTools, _ := json.Marshal(sent)
		var sampled struct {
			Prompt string `json:"prompt"`
		}
		srv.post(t, "/apply-template", noTools, &sampled)
		if !strings.HasPrefix(hf, sampled.Prompt) {
			t.Errorf("row %d: the HF render of the row is not what the server rendered at sampling time:\nserver: %q\nrow:    %q", i, sampled.Prompt, hf)
		}
		old, err := hfRender(t, py, template, stringArguments(t, row.Messages), nil, false)
		if err != nil {
			t.Fatalf("row %d: render: %v", i, err)
		}
		if strings.HasPrefix(old, sampled.Prompt) {
			t.Errorf("row %d: arguments as strings render as sampled too: the check cannot tell", i)
		}
		if i == 0 {
			t.Logf("row 0 renders as sampled (%d bytes); with string arguments it would read %q", len(sampled.Prompt),
				old[strings.Index(old, `"arguments": `):][:40])
		}
	}

	// Tokens: llama-server's per-token ids, and /tokenize of its renderings.
	type answer struct {
		Choices []struct {
			Logprobs *struct {
				Content []struct {
					ID      int32   `json:"id"`
					Logprob float64 `json:"logprob"`
				} `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	for _, r := range readJSONL[struct {
		TaskIndex    int `json:"task_index"`
		RolloutIndex int `json:"rollout_index"`
		Trajectory   struct {
			Rounds []struct {
				Prompt []int32   `json:"prompt_token_ids"`
				Gen    []int32   `json:"generation_token_ids"`
				LP     []float64 `json:"generation_log_probs"`
				Note   string    `json:"token_note"`
				Usage  struct {
					PromptTokens int `json:"prompt_tokens"`
				} `json:"usage"`
			} `json:"rounds"`
		} `json:"trajectory"`
	}](t, filepath.Join(out, "trajectories.jsonl")) {
		for k, rd := range r.Trajectory.Rounds {
			if len(rd.Gen) == 0 || len(rd.LP) != len(rd.Gen) || len(rd.Prompt) != rd.Usage.PromptTokens || rd.Note != "" {
				t.Errorf("task %d rollout %d round %d: %d prompt ids (usage %d), %d generation ids, %d log-probs, note %q",
					r.TaskIndex, r.RolloutIndex, k, len(rd.Prompt), rd.Usage.PromptTokens, len(rd.Gen), len(rd.LP), rd.Note)
			}
		}
	}
	// Each request's rendering, tokenized by the server, against the previous request's and
	// the ids the server generated for it (the calls of one rollout follow each other by the
	// tool call ids they carry).
	breaks, checked := 0, 0
	for k := range calls {
		var req struct {
			Messages []map[string]any `json:"messages"`
		}
		json.Unmarshal(calls[k].body, &req)
		if len(req.Messages) < 3 {
			continue
		}
		// The previous call: the one whose request is this one's messages but the last answer
		// and its tool results.
		var prev *proxyCall
		for j := range calls {
			var p struct {
				Messages []map[string]any `json:"messages"`
			}
			json.Unmarshal(calls[j].body, &p)
			n := len(p.Messages)
			if n < len(req.Messages) && n >= 1 && j != k {
				a, _ := json.Marshal(p.Messages)
				b, _ := json.Marshal(req.Messages[:n])
				if bytes.Equal(stripTokens(a), stripTokens(b)) && len(req.Messages) == n+2 {
					prev = &calls[j]
				}
			}
		}
		if prev == nil {
			continue
		}
		var ans answer
		json.Unmarshal(prev.answer, &ans)
		if len(ans.Choices) == 0 || ans.Choices[0].Logprobs == nil {
			t.Fatalf("the server's answer has no log-probs: %.300s", prev.answer)
		}
		var gen []int32
		for _, c := range ans.Choices[0].Logprobs.Content {
			gen = append(gen, c.ID)
		}
		before, now := tokenizeRequest(t, srv, prev.body), tokenizeRequest(t, srv, calls[k].body)
		checked++
		want := append(slices.Clone(before), gen...)
		if len(now) < len(want) || !slices.Equal(now[:len(want)], want) {
			breaks++
			if breaks == 1 {
				t.Logf("first break: previous prompt %d ids + %d generated; this prompt %d ids; first difference at %d",
					len(before), len(gen), len(now), firstDiff(now, want))
			}
		}
	}
	t.Logf("token contiguity against llama-server's /tokenize: %d of %d calls after a first one extend the previous call's prompt and generated ids", checked-breaks, checked)
	if checked == 0 {
		t.Fatal("no call after a first one was checked")
	}
	// llama-server's chat endpoint takes no token ids back and returns no prompt ids: where its
	// re-rendering breaks contiguity, the export must say so rather than hand NeMo RL data it
	// refuses.
	if breaks > 0 && !strings.Contains(string(exportOut), "prompt_token_ids do not begin with") {
		t.Errorf("%d of %d calls are not contiguous and export gave no warning:\n%s", breaks, checked, exportOut)
	}
}

// stripTokens removes the token members rollout adds to an assistant message, so that a
// request's messages compare with the next request's.
func stripTokens(b []byte) []byte {
	var msgs []map[string]any
	json.Unmarshal(b, &msgs)
	for _, m := range msgs {
		delete(m, "prompt_token_ids")
		delete(m, "generation_token_ids")
		delete(m, "generation_log_probs")
	}
	out, _ := json.Marshal(msgs)
	return out
}

// tokenizeRequest is the server's rendering of a chat request (/apply-template), tokenized by
// the server (/tokenize, special tokens parsed, as the chat endpoint does).
func tokenizeRequest(t *testing.T, srv *server, body []byte) []int32 {
	t.Helper()
	var tpl struct {
		Prompt string `json:"prompt"`
	}
	srv.post(t, "/apply-template", body, &tpl)
	in, _ := json.Marshal(map[string]any{"content": tpl.Prompt, "add_special": true, "parse_special": true})
	var tok struct {
		Tokens []int32 `json:"tokens"`
	}
	srv.post(t, "/tokenize", in, &tok)
	return tok.Tokens
}

func firstDiff(a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
