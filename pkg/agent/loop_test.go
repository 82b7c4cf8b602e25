package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/toolclient"
)

// One tool call, then an answer: the call reaches the resource server with
// the session cookie, and its answer reaches the model as a tool message.
func TestRunOneToolCallThenAnswer(t *testing.T) {
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil,
		toolCalls(call{"call_a", "increment", `{"by": 2}`}),
		final("The count is 2."))
	task := parseTask(t, counterRow(""))
	sess := res.session(t, task)

	tr := m.config(nil).Run(context.Background(), task, sess, 7)

	if tr.Termination != agent.Completed || tr.FailureClass != "" || tr.Error != "" {
		t.Fatalf("termination %q class %q error %q", tr.Termination, tr.FailureClass, tr.Error)
	}
	if len(tr.Rounds) != 2 || tr.FinalText != "The count is 2." {
		t.Fatalf("rounds %d final %q", len(tr.Rounds), tr.FinalText)
	}
	if m.calls() != 2 {
		t.Fatalf("model calls %d, want 2", m.calls())
	}
	m.mu.Lock()
	paths := append([]string(nil), m.paths...)
	m.mu.Unlock()
	for _, p := range paths {
		if p != "POST /v1/chat/completions" {
			t.Errorf("model request %q, want POST /v1/chat/completions", p)
		}
	}
	log := res.log()
	if len(log) != 2 || log[1].Path != "increment" || log[1].Body != `{"by": 2}` || log[1].Cookie != "s1" {
		t.Fatalf("resource server saw %+v", log)
	}

	// The second request: system, user, the assistant's call, its output.
	req := m.request(1)
	if len(req.Messages) != 4 {
		t.Fatalf("second request has %d messages, want 4", len(req.Messages))
	}
	roles := []string{}
	for _, msg := range req.Messages {
		roles = append(roles, msg.Role)
	}
	if !equalStrings(roles, []string{"system", "user", "assistant", "tool"}) {
		t.Fatalf("roles %v", roles)
	}
	asst, tool := req.Messages[2], req.Messages[3]
	if len(asst.ToolCalls) != 1 || asst.ToolCalls[0].ID != "call_a" || asst.ToolCalls[0].Type != "function" ||
		asst.ToolCalls[0].Function.Name != "increment" || asst.ToolCalls[0].Function.Arguments != `{"by": 2}` {
		t.Fatalf("assistant message %+v", asst)
	}
	if tool.ToolCallID != "call_a" || tool.Content == nil || *tool.Content != `{"count":2}` {
		t.Fatalf("tool message %+v", tool)
	}
	// Tools are offered in every round; a tool without parameters gets an
	// empty object schema.
	for i := 0; i < 2; i++ {
		r := m.request(i)
		if len(r.Tools) != 4 || r.Model != "test-model" {
			t.Fatalf("request %d offers %d tools, model %q", i, len(r.Tools), r.Model)
		}
		if r.Tools[1].Function.Name != "get_count" || string(r.Tools[1].Function.Parameters) != `{"type":"object","properties":{}}` {
			t.Fatalf("get_count offered as %+v", r.Tools[1])
		}
	}
	calls, failed, names := tr.ToolCalls()
	if calls != 1 || failed != 0 || !equalStrings(names, []string{"increment"}) {
		t.Fatalf("tool calls %d failed %d names %v", calls, failed, names)
	}
	tc := tr.Rounds[0].ToolCalls[0]
	if tc.Output != `{"count":2}` || tc.Status != 200 || tc.Failed || tc.Arguments != `{"by": 2}` {
		t.Fatalf("tool call %+v", tc)
	}
}

// Parallel tool calls of one round run in order, all before the next model
// call, and the next request carries every result in order.
func TestRunParallelToolCallsInOrder(t *testing.T) {
	ev := &events{}
	res := newFakeResource(t, ev)
	m := newFakeModel(t, ev,
		toolCalls(
			call{"c1", "increment", `{}`},
			call{"c2", "get_count", ``},
			call{"c3", "increment", `{"by":5}`},
			call{"c4", "get_count", `{}`}),
		final("6"))
	task := parseTask(t, counterRow(""))
	sess := res.session(t, task)

	tr := m.config(nil).Run(context.Background(), task, sess, 1)
	if tr.Termination != agent.Completed || len(tr.Rounds) != 2 {
		t.Fatalf("termination %q rounds %d (%s)", tr.Termination, len(tr.Rounds), tr.Error)
	}
	want := []string{"tool:seed_session", "model", "tool:increment", "tool:get_count", "tool:increment", "tool:get_count", "model"}
	if got := ev.all(); !equalStrings(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	// An empty arguments string is sent as {}.
	if log := res.log(); log[2].Body != `{}` {
		t.Fatalf("get_count without arguments sent %q", log[2].Body)
	}
	req := m.request(1)
	msgs := req.Messages[len(req.Messages)-5:]
	if len(msgs[0].ToolCalls) != 4 {
		t.Fatalf("assistant message has %d tool calls, want 4", len(msgs[0].ToolCalls))
	}
	wantOut := []struct{ id, out string }{{"c1", `{"count":1}`}, {"c2", `{"count":1}`}, {"c3", `{"count":6}`}, {"c4", `{"count":6}`}}
	for i, w := range wantOut {
		got := msgs[i+1]
		if got.Role != "tool" || got.ToolCallID != w.id || got.Content == nil || *got.Content != w.out {
			t.Errorf("tool message %d: %+v, want %s %s", i, got, w.id, w.out)
		}
		if msgs[0].ToolCalls[i].ID != w.id {
			t.Errorf("tool call %d has id %q, want %q", i, msgs[0].ToolCalls[i].ID, w.id)
		}
	}
}

// Several sequential rounds: the history grows by one assistant message and
// its tool messages per round, and the server state carries over.
func TestRunSequentialRounds(t *testing.T) {
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil,
		toolCalls(call{"r0", "increment", `{}`}),
		toolCalls(call{"r1", "increment", `{}`}),
		toolCalls(call{"r2", "get_count", `{}`}),
		final("two"))
	task := parseTask(t, counterRow(""))
	sess := res.session(t, task)

	tr := m.config(nil).Run(context.Background(), task, sess, 1)
	if tr.Termination != agent.Completed || len(tr.Rounds) != 4 || m.calls() != 4 {
		t.Fatalf("termination %q rounds %d model calls %d", tr.Termination, len(tr.Rounds), m.calls())
	}
	for i := 0; i < 4; i++ {
		if n := len(m.request(i).Messages); n != 2+2*i {
			t.Errorf("request %d has %d messages, want %d", i, n, 2+2*i)
		}
		if tr.Rounds[i].Index != i {
			t.Errorf("round %d has index %d", i, tr.Rounds[i].Index)
		}
	}
	if out := tr.Rounds[2].ToolCalls[0].Output; out != `{"count":2}` {
		t.Fatalf("get_count after two increments: %s", out)
	}
	if !equalStrings(res.toolPaths(), []string{"increment", "increment", "get_count"}) {
		t.Fatalf("tool paths %v", res.toolPaths())
	}
	// The trajectory's messages are the last request plus the answer.
	if len(tr.Messages) != 2+2*3+1 {
		t.Fatalf("trajectory has %d messages", len(tr.Messages))
	}
}

func TestRunNoToolCall(t *testing.T) {
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil, final("No tools needed."))
	task := parseTask(t, counterRow(""))
	sess := res.session(t, task)

	tr := m.config(nil).Run(context.Background(), task, sess, 1)
	if tr.Termination != agent.Completed || len(tr.Rounds) != 1 || m.calls() != 1 || tr.FinalText != "No tools needed." {
		t.Fatalf("termination %q rounds %d model calls %d final %q", tr.Termination, len(tr.Rounds), m.calls(), tr.FinalText)
	}
	if len(res.toolPaths()) != 0 {
		t.Fatalf("tools called: %v", res.toolPaths())
	}
	if calls, _, _ := tr.ToolCalls(); calls != 0 {
		t.Fatalf("%d tool calls", calls)
	}
}

// Arguments that are not JSON (or not an object) never reach the server;
// the model is told, and the call counts as failed.
func TestRunInvalidArguments(t *testing.T) {
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil,
		toolCalls(call{"c1", "increment", `{"by": 1`}, call{"c2", "increment", `[1]`}),
		final("sorry"))
	task := parseTask(t, counterRow(""))
	sess := res.session(t, task)

	tr := m.config(nil).Run(context.Background(), task, sess, 1)
	if tr.Termination != agent.Completed || len(tr.Rounds) != 2 {
		t.Fatalf("termination %q rounds %d (%s)", tr.Termination, len(tr.Rounds), tr.Error)
	}
	if p := res.toolPaths(); len(p) != 0 {
		t.Fatalf("invalid arguments reached the server: %v", p)
	}
	calls, failed, _ := tr.ToolCalls()
	if calls != 2 || failed != 2 {
		t.Fatalf("calls %d failed %d", calls, failed)
	}
	req := m.request(1)
	n := len(req.Messages)
	for i, want := range []string{"not valid JSON", "must be a JSON object"} {
		msg := req.Messages[n-2+i]
		if msg.Role != "tool" || msg.Content == nil || !strings.Contains(*msg.Content, want) || !strings.HasPrefix(*msg.Content, "Error:") {
			t.Errorf("tool message %d: %+v, want an error containing %q", i, msg, want)
		}
	}
}

// A tool the row does not offer is refused and the model is told.
func TestRunUnknownTool(t *testing.T) {
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil,
		toolCalls(call{"c1", "delete_everything", `{}`}),
		final("ok"))
	task := parseTask(t, counterRow(""))
	sess := res.session(t, task)

	tr := m.config(nil).Run(context.Background(), task, sess, 1)
	if tr.Termination != agent.Completed {
		t.Fatalf("termination %q", tr.Termination)
	}
	if p := res.toolPaths(); len(p) != 0 {
		t.Fatalf("unknown tool reached the server: %v", p)
	}
	tc := tr.Rounds[0].ToolCalls[0]
	if !tc.Failed || !strings.Contains(tc.Output, "unknown tool") || !strings.Contains(tc.Output, "delete_everything") {
		t.Fatalf("tool call %+v", tc)
	}
	req := m.request(1)
	if last := req.Messages[len(req.Messages)-1]; last.ToolCallID != "c1" || last.Content == nil || *last.Content != tc.Output {
		t.Fatalf("model was told %+v", last)
	}
}

// Tool names that would leave base/name are refused even when the row
// offers them, and nothing is sent.
func TestRunRefusesPathAndURLToolNames(t *testing.T) {
	res := newFakeResource(t, nil)
	names := []string{"../verify", "http://evil", "verify", "seed_session", "end_session", "a/b", "a?b=1", "%2e%2e"}
	var tools, calls []string
	var script []call
	for i, n := range names {
		b, _ := json.Marshal(n)
		tools = append(tools, `{"type":"function","name":`+string(b)+`,"parameters":{"type":"object","properties":{}}}`)
		script = append(script, call{"c" + string(rune('0'+i)), n, `{}`})
		calls = append(calls, n)
	}
	row := `{"responses_create_params":{"input":"hi","tools":[` + strings.Join(tools, ",") + `]}}`
	m := newFakeModel(t, nil, toolCalls(script...), final("done"))
	task := parseTask(t, row)
	sess := res.session(t, task)

	cfg := m.config(nil)
	cfg.MaxFailedRounds = 5
	tr := cfg.Run(context.Background(), task, sess, 1)
	if tr.Termination != agent.Completed {
		t.Fatalf("termination %q (%s)", tr.Termination, tr.Error)
	}
	if p := res.toolPaths(); len(p) != 0 {
		t.Fatalf("refused names reached the server: %v", p)
	}
	if log := res.log(); len(log) != 1 {
		t.Fatalf("the server saw %+v, want only seed_session", log)
	}
	for i, tc := range tr.Rounds[0].ToolCalls {
		if !tc.Failed || !strings.Contains(tc.Output, "refused") || tc.Name != calls[i] {
			t.Errorf("%q: %+v", calls[i], tc)
		}
	}
}

// A 4xx/5xx answer is the tool output, as sent, and the call is failed; tool
// calls are never retried (they may change state).
func TestRunToolHTTPErrorBodyIsOutput(t *testing.T) {
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil,
		toolCalls(call{"c1", "fail", `{}`}, call{"c2", "reject", `{}`}),
		final("gave up"))
	task := parseTask(t, counterRow(""))
	sess := res.session(t, task)

	tr := m.config(nil).Run(context.Background(), task, sess, 1)
	if tr.Termination != agent.Completed {
		t.Fatalf("termination %q", tr.Termination)
	}
	tcs := tr.Rounds[0].ToolCalls
	if tcs[0].Output != `{"detail":"boom: database locked"}` || tcs[0].Status != 500 || !tcs[0].Failed || tcs[0].Unreachable {
		t.Errorf("500: %+v", tcs[0])
	}
	if tcs[1].Output != `{"detail":"field required: city"}` || tcs[1].Status != 422 || !tcs[1].Failed {
		t.Errorf("422: %+v", tcs[1])
	}
	if p := res.toolPaths(); !equalStrings(p, []string{"fail", "reject"}) {
		t.Fatalf("tool paths %v: a tool call was retried or lost", p)
	}
	req := m.request(1)
	n := len(req.Messages)
	if *req.Messages[n-2].Content != tcs[0].Output || *req.Messages[n-1].Content != tcs[1].Output {
		t.Fatalf("model was not shown the error bodies")
	}
}

func TestRunMaxRounds(t *testing.T) {
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil, toolCalls(call{"c", "increment", `{}`}))
	task := parseTask(t, counterRow(""))
	sess := res.session(t, task)
	cfg := m.config(nil)
	cfg.MaxRounds = 3

	tr := cfg.Run(context.Background(), task, sess, 1)
	if tr.Termination != agent.MaxRounds || tr.FailureClass != "" {
		t.Fatalf("termination %q class %q", tr.Termination, tr.FailureClass)
	}
	if m.calls() != 3 || len(tr.Rounds) != 3 || len(res.toolPaths()) != 3 {
		t.Fatalf("model calls %d rounds %d tool calls %d, want 3 each", m.calls(), len(tr.Rounds), len(res.toolPaths()))
	}
	// The default is bounded.
	c := &agent.Config{Model: cfg.Model, ModelName: "m"}
	if err := c.Validate(); err != nil || c.MaxRounds != agent.DefaultMaxRounds || c.MaxRounds <= 0 {
		t.Fatalf("default max rounds %d (%v)", c.MaxRounds, err)
	}
}

// MaxFailedRounds consecutive rounds in which every call failed end the
// rollout as tool_error; the server answered, so there is no failure class.
func TestRunConsecutiveFailedRounds(t *testing.T) {
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil, toolCalls(call{"c1", "fail", `{}`}, call{"c2", "nope", `{}`}))
	task := parseTask(t, counterRow(""))
	sess := res.session(t, task)
	cfg := m.config(nil)
	cfg.MaxFailedRounds = 3

	tr := cfg.Run(context.Background(), task, sess, 1)
	if tr.Termination != agent.ToolError || tr.FailureClass != "" {
		t.Fatalf("termination %q class %q", tr.Termination, tr.FailureClass)
	}
	if m.calls() != 3 || len(tr.Rounds) != 3 {
		t.Fatalf("model calls %d rounds %d, want 3", m.calls(), len(tr.Rounds))
	}
	if !strings.Contains(tr.Error, "3 consecutive rounds") {
		t.Fatalf("error %q", tr.Error)
	}
}

// A resource server that is down: every call unreachable → tool_error with
// failure class resource_server.
func TestRunResourceServerDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	srv, err := toolclient.New("down", "http://"+addr, http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	m := newFakeModel(t, nil, toolCalls(call{"c1", "increment", `{}`}))
	task := parseTask(t, counterRow(""))

	tr := m.config(nil).Run(context.Background(), task, srv.NewSession(), 1)
	if tr.Termination != agent.ToolError || tr.FailureClass != record.FailResourceServer {
		t.Fatalf("termination %q class %q error %q", tr.Termination, tr.FailureClass, tr.Error)
	}
	if m.calls() != agent.DefaultMaxFailedRounds {
		t.Fatalf("model calls %d, want %d", m.calls(), agent.DefaultMaxFailedRounds)
	}
	tc := tr.Rounds[0].ToolCalls[0]
	if !tc.Failed || !tc.Unreachable || !strings.Contains(tr.Error, "unreachable") {
		t.Fatalf("tool call %+v error %q", tc, tr.Error)
	}
}

// A round where some calls succeed resets the failed-round count.
func TestRunPartialFailuresContinue(t *testing.T) {
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil,
		toolCalls(call{"a", "fail", `{}`}),                               // all failed (1)
		toolCalls(call{"b", "fail", `{}`}, call{"c", "increment", `{}`}), // partial: reset
		toolCalls(call{"d", "reject", `{}`}),                             // all failed (1)
		toolCalls(call{"e", "increment", `{}`}, call{"f", "fail", `{}`}), // partial: reset
		final("2"))
	task := parseTask(t, counterRow(""))
	sess := res.session(t, task)

	tr := m.config(nil).Run(context.Background(), task, sess, 1) // MaxFailedRounds 2
	if tr.Termination != agent.Completed || len(tr.Rounds) != 5 {
		t.Fatalf("termination %q rounds %d (%s)", tr.Termination, len(tr.Rounds), tr.Error)
	}
	calls, failed, names := tr.ToolCalls()
	if calls != 6 || failed != 4 || !equalStrings(names, []string{"fail", "increment", "reject"}) {
		t.Fatalf("calls %d failed %d names %v", calls, failed, names)
	}
}

func TestRunSumsUsage(t *testing.T) {
	res := newFakeResource(t, nil)
	withDetails := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"done","reasoning_content":"thinking"},"finish_reason":"stop"}],` +
			`"usage":{"prompt_tokens":300,"completion_tokens":30,"total_tokens":330,"prompt_tokens_details":{"cached_tokens":64},"completion_tokens_details":{"reasoning_tokens":12}}}`))
	}
	m := newFakeModel(t, nil,
		answer("", 100, 10, call{"a", "increment", `{}`}),
		answer("", 200, 20, call{"b", "increment", `{}`}),
		withDetails)
	task := parseTask(t, counterRow(""))
	sess := res.session(t, task)

	tr := m.config(nil).Run(context.Background(), task, sess, 1)
	want := agent.Usage{PromptTokens: 600, CompletionTokens: 60, CachedTokens: 64, ReasoningTokens: 12}
	if tr.Usage != want {
		t.Fatalf("usage %+v, want %+v", tr.Usage, want)
	}
	if tr.Rounds[1].Usage.PromptTokens != 200 || tr.Rounds[2].Reasoning != "thinking" {
		t.Fatalf("rounds %+v", tr.Rounds)
	}
	// The trajectory keeps the reasoning with its answer (sendable leaves it out of what is
	// sent back: TestReasoningKept in cmd/rollout).
	var kept []string
	for _, msg := range tr.Messages {
		if msg.ReasoningContent != "" {
			kept = append(kept, msg.Role+": "+msg.ReasoningContent)
		}
	}
	if len(kept) != 1 || kept[0] != "assistant: thinking" {
		t.Fatalf("reasoning in the trajectory's messages: %q, want the last answer's", kept)
	}
}

// Sampling parameters on the wire: temperature 0 and top_p 0 are sent as a
// literal 0 (not omitted, not a tiny positive number, which llama.cpp takes
// as a positive temperature), an absent temperature is not sent, the seed
// always is.
func TestRunSamplingParameters(t *testing.T) {
	cases := []struct {
		name     string
		params   string
		override *float64
		check    func(t *testing.T, body map[string]json.RawMessage)
	}{
		{"temperature 0", `"temperature":0,"top_p":0,"max_output_tokens":64,"parallel_tool_calls":false`, nil, func(t *testing.T, body map[string]json.RawMessage) {
			raw, ok := body["temperature"]
			if !ok {
				t.Fatal("no temperature key: temperature 0 was omitted")
			}
			if string(raw) != "0" {
				t.Fatalf("temperature %s, want a literal 0", raw)
			}
			if string(body["top_p"]) != "0" {
				t.Fatalf("top_p %s, want a literal 0", body["top_p"])
			}
			if string(body["max_tokens"]) != "64" {
				t.Fatalf("max_tokens %s", body["max_tokens"])
			}
			if string(body["parallel_tool_calls"]) != "false" {
				t.Fatalf("parallel_tool_calls %s", body["parallel_tool_calls"])
			}
		}},
		{"no temperature", "", nil, func(t *testing.T, body map[string]json.RawMessage) {
			for _, k := range []string{"temperature", "top_p", "max_tokens", "parallel_tool_calls", "tool_choice"} {
				if v, ok := body[k]; ok {
					t.Errorf("%s sent as %s, want no key", k, v)
				}
			}
		}},
		{"temperature 0.7", `"temperature":0.7,"tool_choice":{"type":"function","name":"increment"}`, nil, func(t *testing.T, body map[string]json.RawMessage) {
			var f float64
			json.Unmarshal(body["temperature"], &f)
			if f < 0.6999 || f > 0.7001 {
				t.Fatalf("temperature %s", body["temperature"])
			}
			if string(body["tool_choice"]) != `{"type":"function","function":{"name":"increment"}}` {
				t.Fatalf("tool_choice %s", body["tool_choice"])
			}
		}},
		{"override to 0", `"temperature":1`, new(float64), func(t *testing.T, body map[string]json.RawMessage) {
			if string(body["temperature"]) != "0" {
				t.Fatalf("temperature %s, want the override as a literal 0", body["temperature"])
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := newFakeResource(t, nil)
			m := newFakeModel(t, nil, final("ok"))
			row := counterRow(c.params)
			task := parseTask(t, row)
			cfg := m.config(nil)
			cfg.Temperature = c.override
			tr := cfg.Run(context.Background(), task, res.session(t, task), 424242)
			if tr.Termination != agent.Completed {
				t.Fatalf("termination %q (%s)", tr.Termination, tr.Error)
			}
			body := m.rawBody(0)
			if string(body["seed"]) != "424242" {
				t.Fatalf("seed %s, want 424242", body["seed"])
			}
			c.check(t, body)
		})
	}
}

// A row's tool_choice is not sent without tools: Chat Completions servers
// reject tool_choice when no tools are offered.
func TestRunToolChoiceWithoutTools(t *testing.T) {
	m := newFakeModel(t, nil, final("hi"))
	task := parseTask(t, `{"responses_create_params":{"input":"hi","tool_choice":"auto","tools":[]}}`)
	tr := m.config(nil).Run(context.Background(), task, nil, 1)
	if tr.Termination != agent.Completed {
		t.Fatalf("termination %q", tr.Termination)
	}
	body := m.rawBody(0)
	for _, k := range []string{"tool_choice", "tools", "parallel_tool_calls"} {
		if v, ok := body[k]; ok {
			t.Errorf("%s sent as %s without tools", k, v)
		}
	}
}

// A tool call without an id gets a generated one that links the call to
// its output.
func TestRunGeneratesMissingCallIDs(t *testing.T) {
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil, toolCalls(call{"", "increment", `{}`}, call{"", "get_count", `{}`}), final("ok"))
	task := parseTask(t, counterRow(""))
	tr := m.config(nil).Run(context.Background(), task, res.session(t, task), 1)
	req := m.request(1)
	n := len(req.Messages)
	asst := req.Messages[n-3]
	ids := map[string]bool{}
	for i, tc := range asst.ToolCalls {
		if tc.ID == "" || req.Messages[n-2+i].ToolCallID != tc.ID || tr.Rounds[0].ToolCalls[i].CallID != tc.ID {
			t.Fatalf("call %d: id %q, tool message id %q", i, tc.ID, req.Messages[n-2+i].ToolCallID)
		}
		ids[tc.ID] = true
	}
	if len(ids) != 2 {
		t.Fatalf("ids not unique: %v", ids)
	}
}

func TestConfigValidate(t *testing.T) {
	m := agent.NewOpenAIModel("http://127.0.0.1:1/v1", "", &http.Client{})
	bad := func(f float64) *float64 { return &f }
	for _, c := range []agent.Config{
		{ModelName: "m"},
		{Model: m},
		{Model: m, ModelName: "m", MaxRounds: -1},
		{Model: m, ModelName: "m", MaxFailedRounds: -2},
		{Model: m, ModelName: "m", Temperature: bad(2.5)},
		{Model: m, ModelName: "m", Temperature: bad(-0.1)},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	c := agent.Config{Model: m, ModelName: "m"}
	if err := c.Validate(); err != nil || c.MaxRounds != agent.DefaultMaxRounds || c.MaxFailedRounds != agent.DefaultMaxFailedRounds {
		t.Fatalf("defaults: %+v %v", c, err)
	}
}

// An answer with more tool calls than MaxToolCalls ends the rollout as invalid_output, and
// none of its calls reaches the server; at the bound the calls are made. The error names the
// count and the bound; the history keeps no unanswered call.
func TestRunMaxToolCalls(t *testing.T) {
	many := func(n int) []call {
		cs := make([]call, n)
		for i := range cs {
			cs[i] = call{fmt.Sprintf("c%d", i), "increment", `{"by":1}`}
		}
		return cs
	}
	tests := []struct {
		name      string
		bound     int // 0: the default
		calls     int
		wantTerm  agent.Termination
		wantSent  int
		wantError string
	}{
		{"at the bound", 3, 3, agent.Completed, 3, ""},
		{"one over", 3, 4, agent.InvalidOutput, 0, "has 4 tool calls, over --max-tool-calls 3"},
		{"ten thousand, default bound", 0, 10_000, agent.InvalidOutput, 0, fmt.Sprintf("has 10000 tool calls, over --max-tool-calls %d", agent.DefaultMaxToolCalls)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := newFakeResource(t, nil)
			m := newFakeModel(t, nil, toolCalls(many(tt.calls)...), final("done"))
			task := parseTask(t, counterRow(""))
			sess := res.session(t, task)
			c := m.config(nil)
			c.MaxToolCalls = tt.bound
			tr := c.Run(context.Background(), task, sess, 1)
			if tr.Termination != tt.wantTerm || tr.FailureClass != "" || !strings.Contains(tr.Error, tt.wantError) {
				t.Fatalf("termination %q class %q error %q", tr.Termination, tr.FailureClass, tr.Error)
			}
			if got := len(res.toolPaths()); got != tt.wantSent {
				t.Errorf("%d tool calls reached the server, want %d", got, tt.wantSent)
			}
			if tt.wantTerm == agent.InvalidOutput {
				if calls, _, _ := tr.ToolCalls(); calls != 0 {
					t.Errorf("the trajectory records %d calls", calls)
				}
				for _, msg := range tr.Messages {
					if len(msg.ToolCalls) > 0 {
						t.Errorf("the history keeps %d unanswered calls", len(msg.ToolCalls))
					}
				}
			}
		})
	}
	c := &agent.Config{Model: agent.NewOpenAIModel("http://127.0.0.1:1/v1", "", http.DefaultClient), ModelName: "m", MaxToolCalls: -1}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "max tool calls") {
		t.Errorf("MaxToolCalls -1: %v", err)
	}
}
