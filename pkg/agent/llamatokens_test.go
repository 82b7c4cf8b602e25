package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/fleet"
	"github.com/rollout-dev/rollout/pkg/retry"
)

// fakeLlama is a llama-server in miniature: a tokenizer of one id a byte but for "<S>" (900)
// and "<E>" (901, its eos_token), a chat template that renders tool calls with spaces (as
// Qwen2.5's does) while the model writes them compact, and a model that writes gens in turn.
type fakeLlama struct {
	t    *testing.T
	srv  *httptest.Server
	gens []string // the model's answers, "<E>" ending a turn
	// failure knobs
	noProps       bool // GET /props: 404
	noProbs       bool // /completion answers without completion_probabilities
	completion4xx bool // /completion: 400, the context is exceeded

	mu      sync.Mutex
	paths   []string
	prompts [][]int32 // the prompts /completion was sent
	n       int
}

func newFakeLlama(t *testing.T, gens ...string) *fakeLlama {
	f := &fakeLlama{t: t, gens: gens}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func toyTokenize(s string) []int32 {
	var ids []int32
	for len(s) > 0 {
		switch {
		case strings.HasPrefix(s, "<S>"):
			ids, s = append(ids, 900), s[3:]
		case strings.HasPrefix(s, "<E>"):
			ids, s = append(ids, 901), s[3:]
		default:
			ids, s = append(ids, int32(s[0])), s[1:]
		}
	}
	return ids
}

// render is the toy chat template.
func toyRender(body []byte) string {
	var req struct {
		Messages []struct {
			Role      string `json:"role"`
			Content   string `json:"content"`
			ToolCalls []struct {
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"messages"`
		AddGenerationPrompt *bool `json:"add_generation_prompt"`
	}
	json.Unmarshal(body, &req)
	var b strings.Builder
	for _, m := range req.Messages {
		b.WriteString("<S>" + m.Role + "\n" + strings.TrimSpace(m.Content))
		for _, tc := range m.ToolCalls {
			fmt.Fprintf(&b, "\n<tool_call>\n{\"name\": %q, \"arguments\": %s}\n</tool_call>", tc.Function.Name, tc.Function.Arguments)
		}
		b.WriteString("<E>\n")
	}
	if req.AddGenerationPrompt == nil || *req.AddGenerationPrompt {
		b.WriteString("<S>assistant\n")
	}
	return b.String()
}

func (f *fakeLlama) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paths = append(f.paths, r.Method+" "+r.URL.Path)
	w.Header().Set("Content-Type", "application/json")
	next := func() (string, []int32) {
		g := f.gens[min(f.n, len(f.gens)-1)]
		f.n++
		return strings.TrimSuffix(g, "<E>"), toyTokenize(g)
	}
	probs := func(ids []int32) []map[string]any {
		var out []map[string]any
		for _, id := range ids {
			out = append(out, map[string]any{"id": id, "token": "t", "logprob": -0.25, "top_logprobs": []any{}})
		}
		return out
	}
	switch r.URL.Path {
	case "/props":
		if f.noProps {
			http.Error(w, `{"error":{"code":404,"message":"File Not Found","type":"not_found_error"}}`, 404)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"chat_template": "... <tool_call> ...", "eos_token": "<E>"})
	case "/tokenize":
		var in struct {
			Content string `json:"content"`
		}
		json.Unmarshal(body, &in)
		json.NewEncoder(w).Encode(map[string]any{"tokens": toyTokenize(in.Content)})
	case "/apply-template":
		json.NewEncoder(w).Encode(map[string]any{"prompt": toyRender(body)})
	case "/v1/chat/completions":
		text, ids := next()
		msg := map[string]any{"role": "assistant", "content": text}
		finish := "stop"
		if name, args, ok := compactCall(text); ok {
			msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{"id": fmt.Sprint("c", f.n), "type": "function",
				"function": map[string]any{"name": name, "arguments": args}}}}
			finish = "tool_calls"
		}
		json.NewEncoder(w).Encode(map[string]any{"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish,
			"logprobs": map[string]any{"content": probs(ids)}}},
			"usage": map[string]any{"prompt_tokens": len(toyTokenize(toyRender(body))), "completion_tokens": len(ids), "total_tokens": 1}})
	case "/completion":
		var in struct {
			Prompt []int32 `json:"prompt"`
			NProbs int     `json:"n_probs"`
		}
		json.Unmarshal(body, &in)
		f.prompts = append(f.prompts, in.Prompt)
		if f.completion4xx {
			w.WriteHeader(400)
			io.WriteString(w, `{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}`)
			return
		}
		text, ids := next()
		ans := map[string]any{"content": text, "tokens": ids, "tokens_predicted": len(ids), "tokens_evaluated": len(in.Prompt),
			"stop_type": "eos", "truncated": false, "timings": map[string]any{"cache_n": 3}}
		if !f.noProbs && in.NProbs == 1 {
			ans["completion_probabilities"] = probs(ids)
		}
		json.NewEncoder(w).Encode(ans)
	default:
		http.NotFound(w, r)
	}
}

// compactCall reads the model's compact <tool_call>{"name":...,"arguments":...}</tool_call>.
func compactCall(text string) (name, args string, ok bool) {
	in, ok := strings.CutPrefix(text, "<tool_call>")
	if !ok {
		return "", "", false
	}
	in, _ = strings.CutSuffix(in, "</tool_call>")
	var c struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if json.Unmarshal([]byte(in), &c) != nil {
		return "", "", false
	}
	return c.Name, string(c.Arguments), true
}

func (f *fakeLlama) run(t *testing.T) (*agent.Trajectory, []string) {
	t.Helper()
	m := &fakeModel{t: t, srv: f.srv}
	c := m.config(nil)
	var mu sync.Mutex
	var warnings []string
	c.CaptureTokens = &agent.TokenCapture{OnNoTokens: func(reason string) { mu.Lock(); warnings = append(warnings, reason); mu.Unlock() }}
	task := parseTask(t, counterRow(""))
	return c.Run(context.Background(), task, newFakeResource(t, nil).session(t, task), 1), warnings
}

var llamaGens = []string{
	`<tool_call>{"name":"increment","arguments":{"by":1}}</tool_call><E>`,
	`<tool_call>{"name":"increment","arguments":{"by":1}}</tool_call><E>`,
	`two<E>`,
}

// After an answer with llama-server's per-token ids, the calls go to /completion as token
// ids: each prompt is the previous call's prompt and generated ids, then the template's
// rendering from the end of the previous answer on; the answer's Hermes tool call is made.
func TestLlamaTokenIn(t *testing.T) {
	f := newFakeLlama(t, llamaGens...)
	tr, warnings := f.run(t)
	if tr.Termination != agent.Completed || len(tr.Rounds) != 3 || len(warnings) > 0 {
		t.Fatalf("termination %q (%s), %d rounds, warnings %v", tr.Termination, tr.Error, len(tr.Rounds), warnings)
	}
	if tr.FinalText != "two" {
		t.Errorf("final text %q", tr.FinalText)
	}
	if n := len(tr.Rounds[1].ToolCalls); n != 1 {
		t.Fatalf("round 1: %d tool calls", n)
	}
	if len(f.prompts) != 2 {
		t.Fatalf("/completion was called %d times, want 2 (%v)", len(f.prompts), f.paths)
	}
	var seen []int32
	for i, rd := range tr.Rounds {
		if rd.TokenNote != "" || len(rd.GenerationTokenIDs) == 0 || len(rd.GenerationLogProbs) != len(rd.GenerationTokenIDs) {
			t.Errorf("round %d: note %q, %d ids, %d log-probs", i, rd.TokenNote, len(rd.GenerationTokenIDs), len(rd.GenerationLogProbs))
		}
		if i > 0 {
			if !slices.Equal(rd.PromptTokenIDs, f.prompts[i-1]) {
				t.Errorf("round %d: prompt ids are not what /completion was sent", i)
			}
			if len(rd.PromptTokenIDs) < len(seen) || !slices.Equal(rd.PromptTokenIDs[:len(seen)], seen) {
				t.Errorf("round %d: not contiguous:\n%v\n%v", i, rd.PromptTokenIDs, seen)
			}
			// What follows is the template's: the end of the answer's turn, the tool result.
			if tail := string(toText(rd.PromptTokenIDs[len(seen):])); !strings.HasPrefix(tail, "\n<S>tool\n") || !strings.HasSuffix(tail, "<S>assistant\n") {
				t.Errorf("round %d: the new ids read %q", i, tail)
			}
		}
		seen = append(slices.Clone(rd.PromptTokenIDs), rd.GenerationTokenIDs...)
	}
	// Without the splice, the template would have re-rendered the answer with spaces.
	if strings.Contains(string(toText(tr.Rounds[2].PromptTokenIDs)), `{"name": "increment"`) {
		t.Errorf("the prompt holds the template's rendering of an answer")
	}
	if n := slices.Index(f.paths, "GET /props"); n < 0 || slices.Index(f.paths[n+1:], "GET /props") >= 0 {
		t.Errorf("/props asked %d times: %v", strings.Count(strings.Join(f.paths, ","), "/props"), f.paths)
	}
}

func toText(ids []int32) []byte {
	var b []byte
	for _, id := range ids {
		switch id {
		case 900:
			b = append(b, "<S>"...)
		case 901:
			b = append(b, "<E>"...)
		default:
			b = append(b, byte(id))
		}
	}
	return b
}

// The token-in path's failures: a server without /props keeps the chat endpoint (each round
// says so); /completion without log-probs gives rounds without generation ids, a note and the
// warning, and the rollout goes on; a refused /completion fails the call as the chat call
// would.
func TestLlamaTokenInFailures(t *testing.T) {
	t.Run("no-props", func(t *testing.T) {
		f := newFakeLlama(t, llamaGens...)
		f.noProps = true
		tr, _ := f.run(t)
		if tr.Termination != agent.Completed || len(tr.Rounds) != 3 || len(f.prompts) != 0 {
			t.Fatalf("termination %q (%s), %d rounds, %d /completion calls", tr.Termination, tr.Error, len(tr.Rounds), len(f.prompts))
		}
		for _, rd := range tr.Rounds[1:] {
			if !strings.Contains(rd.TokenNote, "token-in path is off (/props: HTTP 404") {
				t.Errorf("round %d: note %q", rd.Index, rd.TokenNote)
			}
		}
	})
	t.Run("no-probs", func(t *testing.T) {
		f := newFakeLlama(t, llamaGens...)
		f.noProbs = true
		tr, warnings := f.run(t)
		if tr.Termination != agent.Completed || len(tr.Rounds) != 3 {
			t.Fatalf("termination %q (%s), %d rounds", tr.Termination, tr.Error, len(tr.Rounds))
		}
		rd := tr.Rounds[1]
		if rd.GenerationTokenIDs != nil || rd.GenerationLogProbs != nil || !strings.Contains(rd.TokenNote, "/completion gave 0 log-probabilities for 65 generated tokens") || len(warnings) == 0 {
			t.Errorf("round 1: %d ids, %d log-probs, note %q, warnings %v", len(rd.GenerationTokenIDs), len(rd.GenerationLogProbs), rd.TokenNote, warnings)
		}
	})
	t.Run("refused", func(t *testing.T) {
		f := newFakeLlama(t, llamaGens...)
		f.completion4xx = true
		tr, _ := f.run(t)
		if tr.Termination == agent.Completed || !strings.Contains(tr.Error, "exceeds the available context size") {
			t.Fatalf("termination %q (%s)", tr.Termination, tr.Error)
		}
	})
}

// With a pool of two llama-servers (several --model-url), the token-in calls go where the
// rollout's chat call went: /props, /apply-template, /tokenize and /completion at the
// endpoint's root (its base URL without /v1), and the other server sees none. Each round names
// the endpoint; the pool counts the chat call and the /completion calls as the endpoint's model
// calls, with their tokens, and not the helper calls.
func TestLlamaTokenInPool(t *testing.T) {
	a, b := newFakeLlama(t, llamaGens...), newFakeLlama(t, llamaGens...)
	pool, err := fleet.New([]fleet.Endpoint{{Name: "a", URL: a.srv.URL + "/v1"}, {Name: "b", URL: b.srv.URL + "/v1"}}, fleet.Options{})
	if err != nil {
		t.Fatal(err)
	}
	doer := &retry.Doer{Client: &http.Client{Transport: pool}, Policy: fastPolicy}
	c := &agent.Config{Model: pool.Model(agent.NewOpenAIModel(fleet.BaseURL, "", doer)), ModelName: "test-model",
		CaptureTokens: &agent.TokenCapture{OnNoTokens: func(reason string) { t.Errorf("warning: %s", reason) }}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	task := parseTask(t, counterRow(""))
	tr := c.Run(agent.WithRolloutID(context.Background(), "7/0/"), task, newFakeResource(t, nil).session(t, task), 1)
	if tr.Termination != agent.Completed || len(tr.Rounds) != 3 {
		t.Fatalf("termination %q (%s), %d rounds", tr.Termination, tr.Error, len(tr.Rounds))
	}
	used, other := a, b
	if tr.Rounds[0].Endpoint == "b" {
		used, other = b, a
	}
	for i, rd := range tr.Rounds {
		if rd.Endpoint != tr.Rounds[0].Endpoint || rd.Endpoint == "" {
			t.Errorf("round %d at endpoint %q, round 0 at %q", i, rd.Endpoint, tr.Rounds[0].Endpoint)
		}
		if rd.TokenNote != "" || len(rd.GenerationTokenIDs) == 0 {
			t.Errorf("round %d: note %q, %d generated ids", i, rd.TokenNote, len(rd.GenerationTokenIDs))
		}
		if i > 0 && !slices.Equal(rd.PromptTokenIDs[:len(tr.Rounds[i-1].PromptTokenIDs)], tr.Rounds[i-1].PromptTokenIDs) {
			t.Errorf("round %d: not contiguous", i)
		}
	}
	if len(used.prompts) != 2 || len(other.paths) != 0 {
		t.Errorf("the rollout's server: %d /completion calls (%v); the other: %v", len(used.prompts), used.paths, other.paths)
	}
	for _, p := range used.paths {
		if strings.Contains(p, "/v1/") && !strings.HasSuffix(p, "/v1/chat/completions") {
			t.Errorf("%s: a root path under /v1", p)
		}
	}
	for _, s := range pool.Stats() {
		want := int64(0)
		if s.Name == tr.Rounds[0].Endpoint {
			want = 3 // one chat call, two /completion calls
		}
		if s.Calls != want || want > 0 && (s.PromptTokens == 0 || s.CompletionTokens == 0) {
			t.Errorf("endpoint %s: %d calls, %d prompt and %d completion tokens; want %d calls with their tokens", s.Name, s.Calls, s.PromptTokens, s.CompletionTokens, want)
		}
	}
}
