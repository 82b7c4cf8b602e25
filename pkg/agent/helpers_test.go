package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/toolclient"
)

// fastPolicy retries like the real thing, with tiny delays.
var fastPolicy = retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, MaxRetryAfter: 5 * time.Millisecond}

// events is an ordered log shared by the fake servers of a test, so that a
// test can check the interleaving of model calls and tool calls.
type events struct {
	mu  sync.Mutex
	log []string
}

func (e *events) add(s string) {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.log = append(e.log, s)
	e.mu.Unlock()
}

func (e *events) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.log...)
}

// ---- the scripted Chat Completions server ----

// step answers one model call.
type step func(w http.ResponseWriter, r *http.Request)

type call struct {
	id, name, args string
}

// answer is a 200 chat completion with content, tool calls and usage.
func answer(content string, prompt, completion int, calls ...call) step {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, completionJSON(content, prompt, completion, calls...))
	}
}

func completionJSON(content string, prompt, completion int, calls ...call) string {
	type fn struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
	type tc struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	msg := map[string]any{"role": "assistant", "content": content}
	finish := "stop"
	if len(calls) > 0 {
		var tcs []tc
		for _, c := range calls {
			tcs = append(tcs, tc{ID: c.id, Type: "function", Function: fn{c.name, c.args}})
		}
		msg["tool_calls"] = tcs
		finish = "tool_calls"
	}
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "test-model",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
	})
	return string(b)
}

// toolCalls answers with tool calls only.
func toolCalls(calls ...call) step { return answer("", 10, 5, calls...) }

// final answers with text only.
func final(text string) step { return answer(text, 10, 5) }

// status answers with an HTTP status, a body and optional headers (k, v, ...).
func status(code int, body string, header ...string) step {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		io.WriteString(w, body)
	}
}

// hang answers only when the client goes away (or after a safety limit).
func hang(w http.ResponseWriter, r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(20 * time.Second):
	}
}

// fakeModel is a Chat Completions endpoint that answers call i with
// script[i] (the last step repeats) and records every request.
type fakeModel struct {
	t      *testing.T
	srv    *httptest.Server
	ev     *events
	mu     sync.Mutex
	script []step
	bodies [][]byte
	paths  []string
}

func newFakeModel(t *testing.T, ev *events, script ...step) *fakeModel {
	m := &fakeModel{t: t, ev: ev, script: script}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *fakeModel) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	m.mu.Lock()
	i := len(m.bodies)
	m.bodies = append(m.bodies, body)
	m.paths = append(m.paths, r.Method+" "+r.URL.Path)
	var s step
	if len(m.script) > 0 {
		s = m.script[min(i, len(m.script)-1)]
	}
	m.mu.Unlock()
	m.ev.add("model")
	if s == nil {
		http.Error(w, "no script", http.StatusInternalServerError)
		return
	}
	s(w, r)
}

func (m *fakeModel) calls() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.bodies)
}

// rawBody is request i as a generic JSON object, to check key presence.
func (m *fakeModel) rawBody(i int) map[string]json.RawMessage {
	m.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(m.bodies[i], &obj); err != nil {
		m.t.Fatalf("request %d is not a JSON object: %v\n%s", i, err, m.bodies[i])
	}
	return obj
}

type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role       string  `json:"role"`
		Content    *string `json:"content"`
		ToolCallID string  `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Type     string `json:"type"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name       string          `json:"name"`
			Parameters json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	Temperature *float64 `json:"temperature"`
	Seed        *int64   `json:"seed"`
	MaxTokens   int      `json:"max_tokens"`
}

func (m *fakeModel) request(i int) chatRequest {
	m.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	var req chatRequest
	if err := json.Unmarshal(m.bodies[i], &req); err != nil {
		m.t.Fatalf("request %d: %v", i, err)
	}
	return req
}

// config is an agent config talking to the fake model through the real
// go-openai client and a retrying Doer.
func (m *fakeModel) config(doer *retry.Doer) *agent.Config {
	m.t.Helper()
	if doer == nil {
		doer = &retry.Doer{Client: &http.Client{}, Policy: fastPolicy}
	}
	c := &agent.Config{Model: agent.NewOpenAIModel(m.srv.URL+"/v1/", "", doer), ModelName: "test-model"}
	if err := c.Validate(); err != nil {
		m.t.Fatal(err)
	}
	return c
}

// ---- the fake resource server ----

type resCall struct {
	Path   string
	Body   string
	Cookie string // the sid cookie the request carried ("" when none)
}

// fakeResource is a stateful NeMo Gym resource server: a session cookie
// "sid" (set on every answer), a counter per session, and tools that fail.
type fakeResource struct {
	t     *testing.T
	srv   *httptest.Server
	ev    *events
	mu    sync.Mutex
	calls []resCall
	count map[string]int
	next  int
	// extra tools: name -> handler.
	extra map[string]http.HandlerFunc
}

func newFakeResource(t *testing.T, ev *events) *fakeResource {
	f := &fakeResource{t: t, ev: ev, count: map[string]int{}, extra: map[string]http.HandlerFunc{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeResource) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	name := strings.TrimPrefix(r.URL.Path, "/")
	cookie := ""
	if c, err := r.Cookie("sid"); err == nil {
		cookie = c.Value
	}
	f.mu.Lock()
	f.calls = append(f.calls, resCall{Path: name, Body: string(body), Cookie: cookie})
	sid := cookie
	if sid == "" {
		f.next++
		sid = "s" + strconv.Itoa(f.next)
	}
	h := f.extra[name]
	f.mu.Unlock()
	f.ev.add("tool:" + name)
	http.SetCookie(w, &http.Cookie{Name: "sid", Value: sid, Path: "/", HttpOnly: true})
	if h != nil {
		h(w, r)
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	switch name {
	case "seed_session":
		io.WriteString(w, "{}")
	case "increment":
		var args struct {
			By *int `json:"by"`
		}
		if err := json.Unmarshal(body, &args); err != nil {
			http.Error(w, `{"error":"bad arguments"}`, http.StatusUnprocessableEntity)
			return
		}
		by := 1
		if args.By != nil {
			by = *args.By
		}
		f.mu.Lock()
		f.count[sid] += by
		n := f.count[sid]
		f.mu.Unlock()
		fmt.Fprintf(w, `{"count":%d}`, n)
	case "get_count":
		f.mu.Lock()
		n := f.count[sid]
		f.mu.Unlock()
		fmt.Fprintf(w, `{"count":%d}`, n)
	case "fail":
		w.WriteHeader(http.StatusInternalServerError)
		io.WriteString(w, `{"detail":"boom: database locked"}`)
	case "reject":
		w.WriteHeader(http.StatusUnprocessableEntity)
		io.WriteString(w, `{"detail":"field required: city"}`)
	case "verify":
		var req struct {
			ExpectedCount int `json:"expected_count"`
		}
		json.Unmarshal(body, &req)
		f.mu.Lock()
		n := f.count[sid]
		f.mu.Unlock()
		reward := 0.0
		if n == req.ExpectedCount {
			reward = 1
		}
		fmt.Fprintf(w, `{"reward":%g,"count":%d,"expected_count":%d}`, reward, n, req.ExpectedCount)
	default:
		http.NotFound(w, r)
	}
}

// handle adds or replaces a tool (or endpoint).
func (f *fakeResource) handle(name string, h http.HandlerFunc) {
	f.mu.Lock()
	f.extra[name] = h
	f.mu.Unlock()
}

func (f *fakeResource) log() []resCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]resCall(nil), f.calls...)
}

// paths are the tool paths called, seed_session and verify excluded.
func (f *fakeResource) toolPaths() []string {
	var out []string
	for _, c := range f.log() {
		if c.Path != "seed_session" && c.Path != "verify" {
			out = append(out, c.Path)
		}
	}
	return out
}

func (f *fakeResource) server(t *testing.T) *toolclient.Server {
	t.Helper()
	s, err := toolclient.New("fake", f.srv.URL, http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	s.Retry = fastPolicy
	s.CallTimeout = 10 * time.Second
	return s
}

// session opens and seeds a session with the row.
func (f *fakeResource) session(t *testing.T, task *dataset.Task) *toolclient.Session {
	t.Helper()
	sess := f.server(t).NewSession()
	if err := sess.Seed(context.Background(), task.Raw); err != nil {
		t.Fatal(err)
	}
	return sess
}

// ---- rows ----

// counterTools are the tools of the default row.
const counterTools = `[{"type":"function","name":"increment","description":"Add by (default 1) to the session's counter.","parameters":{"type":"object","properties":{"by":{"type":"integer"}}},"strict":false},{"type":"function","name":"get_count","description":"The counter.","parameters":null},{"type":"function","name":"fail","parameters":{"type":"object","properties":{}}},{"type":"function","name":"reject","parameters":{"type":"object","properties":{}}}]`

// counterRow is a row with the counter tools and extra top-level fields.
func counterRow(extra string) string {
	if extra != "" {
		extra = "," + extra
	}
	return `{"id":"t1","responses_create_params":{"input":[{"role":"system","content":"You count."},{"role":"user","content":"Count to two."}],"tools":` + counterTools + extra + `},"expected_count":2}`
}

// parseTask reads one row with the dataset reader and fails on errors.
func parseTask(t testing.TB, row string) *dataset.Task {
	t.Helper()
	r, err := dataset.NewReader(strings.NewReader(row+"\n"), "mem")
	if err != nil {
		t.Fatal(err)
	}
	task, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	if task.Err != nil {
		t.Fatalf("row: %v", task.Err)
	}
	return task
}

func fieldRaw(key, value string) dataset.Field {
	return dataset.Field{Key: key, Value: json.RawMessage(value)}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
