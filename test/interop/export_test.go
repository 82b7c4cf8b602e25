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

	"github.com/rollout-dev/rollout/internal/hfrender"
	"github.com/rollout-dev/rollout/pkg/export"
)

// hfRender renders messages and tools with the chat template at template as transformers'
// apply_chat_template does (internal/hfrender).
func hfRender(t *testing.T, py, template string, messages, tools any, generationPrompt bool) (string, error) {
	t.Helper()
	out, err := hfrender.Run(py, hfrender.Request{Template: template, Messages: messages, Tools: tools, AddGenerationPrompt: generationPrompt})
	return string(out), err
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
// as transformers renders it (internal/hfrender: jinja2 as apply_chat_template sets it up), is the
// text the server rendered at sampling time: each recorded request, rendered by the server's
// own /apply-template, is a prefix of the row's render. With arguments as JSON strings (the
// OpenAI shape) the template double-encodes them and the renders differ: the check can fail.
// Both render without tools (llama-server writes the tools block from its own parse of the
// request's tools, vLLM from the request's JSON): the row's tools are compared with the
// request's as JSON instead.
//
// (Token capture against the server is TestCaptureTokensContiguousLlama's: with
// --capture-tokens the calls after a first one go to /completion as token ids.)
func TestExportRendersAsSampled(t *testing.T) {
	s := env(t)
	py := hfrender.Python(t)
	template := filepath.Join(os.Getenv(DirEnv), "models", "templates", "Qwen-Qwen2.5-7B-Instruct.jinja")
	srv := s.start(t, "toolcall.gguf", "-c", "4096", "--parallel", "2")
	proxy := recordingProxy(t, srv.base)
	tasks, _ := counterTasks(t, 2)
	out, _ := s.run(t, "--input", tasks, "--num-repeats", "2", "--concurrency", "2", "--max-rounds", "3",
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
		sampled := renderWithoutTools(t, srv, sent)
		if !strings.HasPrefix(hf, sampled) {
			t.Errorf("row %d: the HF render of the row is not what the server rendered at sampling time:\nserver: %q\nrow:    %q", i, sampled, hf)
		}
		old, err := hfRender(t, py, template, stringArguments(t, row.Messages), nil, false)
		if err != nil {
			t.Fatalf("row %d: render: %v", i, err)
		}
		if strings.HasPrefix(old, sampled) {
			t.Errorf("row %d: arguments as strings render as sampled too: the check cannot tell", i)
		}
		if i == 0 {
			t.Logf("row 0 renders as sampled (%d bytes); with string arguments it would read %q", len(sampled),
				old[strings.Index(old, `"arguments": `):][:40])
		}
	}

	checkTextLayout(t, s, srv, py, template, out, rows, calls)
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

// checkTextLayout checks the text layout (sft --layout text) of the run against its consumers:
// each row's text is transformers' render of the sft row (python3 jinja2, with the tools), its
// answer spans are TRL's and verl's masks (internal/hfrender.CheckMasks), and the conversation
// before each answer, rendered by rollout's Go engine with the generation prompt, is what the
// server rendered at sampling time (its /apply-template of the recorded request; both without
// tools, which llama-server writes from its own parse of the request's tools).
func checkTextLayout(t *testing.T, s suite, srv *server, py, template, run string, rows []sftRow, calls []proxyCall) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "text.jsonl")
	if msg, err := exec.Command(s.rollout, "export", run, "--format", "sft", "--layout", "text", "--chat-template", template, "-o", path).CombinedOutput(); err != nil {
		t.Fatalf("export --layout text: %v\n%s", err, msg)
	}
	texts := readJSONL[struct {
		Text  string `json:"text"`
		Spans []struct {
			Start int64 `json:"start"`
			End   int64 `json:"end"`
		} `json:"assistant_spans"`
	}](t, path)
	if len(texts) != len(rows) {
		t.Fatalf("%d text rows, %d sft rows", len(texts), len(rows))
	}
	ct, err := export.LoadChatTemplate(template)
	if err != nil {
		t.Fatal(err)
	}
	compared := 0
	for i, row := range rows {
		text := texts[i]
		hf, err := hfRender(t, py, template, row.Messages, json.RawMessage(row.Tools), false)
		if err != nil {
			t.Fatal(err)
		}
		if hf != text.Text {
			t.Errorf("text row %d is not transformers' render:\nGo: %q\nHF: %q", i, text.Text, hf)
		}
		spans := make([][2]int64, len(text.Spans))
		for k, sp := range text.Spans {
			spans[k] = [2]int64{sp.Start, sp.End}
		}
		verlRefused, problems, err := hfrender.CheckMasks(py, template, row.Messages, json.RawMessage(row.Tools), text.Text, spans)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("text row %d: %s", i, p)
		}
		if verlRefused {
			t.Logf("text row %d: verl's MultiTurnSFTDataset refuses it (its per-message render is not the whole)", i)
		}
		answer := 0
		for j, m := range row.Messages {
			if field(t, m, "role") != "assistant" {
				continue
			}
			// The request that sampled answer j: its messages are the row's first j.
			var sent map[string]json.RawMessage
			for k := range calls {
				var req struct {
					Messages []map[string]any `json:"messages"`
				}
				json.Unmarshal(calls[k].body, &req)
				last := req.Messages[len(req.Messages)-1]
				if len(req.Messages) == j && last["content"] == field(t, row.Messages[j-1], "content") && last["tool_call_id"] == field(t, row.Messages[j-1], "tool_call_id") {
					json.Unmarshal(calls[k].body, &sent)
				}
			}
			if sent == nil {
				t.Fatalf("row %d: no recorded request has the %d messages before answer %d", i, j, answer)
			}
			sampled := renderWithoutTools(t, srv, sent)
			ours, err := ct.Render(row.Messages[:j], nil, true)
			if err != nil {
				t.Fatal(err)
			}
			if ours != sampled {
				t.Errorf("row %d answer %d: the Go render of the conversation before it is not the server's:\nGo:     %q\nserver: %q", i, answer, ours, sampled)
			}
			sp := []rune(text.Text)[text.Spans[answer].Start:text.Spans[answer].End]
			if !strings.HasSuffix(string(sp), "<|im_end|>\n") || strings.Contains(string(sp), "<|im_start|>") {
				t.Errorf("row %d answer %d: span %q", i, answer, string(sp))
			}
			answer++
			compared++
		}
		if answer != len(text.Spans) {
			t.Errorf("row %d: %d answers, %d spans", i, answer, len(text.Spans))
		}
	}
	t.Logf("text layout: %d rows equal transformers' render, with TRL's and verl's masks; %d answers' prompts equal the server's", len(rows), compared)
}

// renderWithoutTools is the server's rendering (/apply-template) of the request sent, less its
// tools (llama-server writes the tools block from its own parse of them).
func renderWithoutTools(t *testing.T, srv *server, sent map[string]json.RawMessage) string {
	t.Helper()
	delete(sent, "tools")
	delete(sent, "tool_choice")
	noTools, _ := json.Marshal(sent)
	var sampled struct {
		Prompt string `json:"prompt"`
	}
	srv.post(t, "/apply-template", noTools, &sampled)
	return sampled.Prompt
}

// checkTextTokens exports the --capture-tokens run in run as the text layout: every row has the
// token ids llama-server saw and wrote, and they and their mask are an rl row's input_ids and
// loss_mask (1 exactly on the generated ids).
func checkTextTokens(t *testing.T, s suite, run, template string) {
	t.Helper()
	dir := t.TempDir()
	text, rl := filepath.Join(dir, "text.jsonl"), filepath.Join(dir, "rl.jsonl")
	got, err := exec.Command(s.rollout, "export", run, "--format", "sft", "--layout", "text", "--chat-template", template, "-o", text).CombinedOutput()
	if err != nil {
		t.Fatalf("export --layout text: %v\n%s", err, got)
	}
	if msg, err := exec.Command(s.rollout, "export", run, "--format", "rl", "-o", rl).CombinedOutput(); err != nil {
		t.Fatalf("export rl: %v\n%s", err, msg)
	}
	type ids struct {
		InputIDs []int32 `json:"input_ids"`
		LossMask []int32 `json:"loss_mask"`
		Masks    []int32 `json:"assistant_masks"`
	}
	seqs := map[string]bool{}
	for _, r := range readJSONL[ids](t, rl) {
		seqs[fmt.Sprint(r.InputIDs, r.LossMask)] = true
	}
	rows := readJSONL[ids](t, text)
	if len(rows) == 0 || strings.Contains(string(got), export.DropNoTokens) {
		t.Fatalf("%d text rows:\n%s", len(rows), got)
	}
	for i, r := range rows {
		if len(r.InputIDs) == 0 || !seqs[fmt.Sprint(r.InputIDs, r.Masks)] {
			t.Errorf("text row %d: %d ids, not an rl row's ids and mask", i, len(r.InputIDs))
		}
	}
	t.Logf("text layout: %d rows, each with llama-server's token ids and the mask on the generated ones", len(rows))
}
