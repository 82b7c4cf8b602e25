package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/record"
)

func TestParseContext(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "full", want: "full"},
		{in: "window:2", want: "window:2"},
		{in: " budget:4000 ", want: "budget:4000"},
		{in: "briefing", want: "briefing"},
		{in: "window", err: "want window:ROUNDS"},
		{in: "window:0", err: "a whole number >= 1"},
		{in: "window:x", err: "want window:ROUNDS"},
		{in: "budget:-5", err: "want budget:TOKENS"},
		{in: "briefing:3", err: "takes no argument"},
		{in: "summary", err: `unknown context "summary"`},
		{in: "", err: "unknown context"},
	} {
		s, err := agent.ParseContext(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseContext(%q): error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || s.String() != tc.want {
			t.Errorf("ParseContext(%q) = %q, %v; want %q", tc.in, s, err, tc.want)
		}
	}
	if (agent.ContextStrategy{}).String() != "full" {
		t.Fatal("the zero strategy is not full")
	}
}

// checkSent checks one request's messages: the task's messages first, as the row has them;
// every tool result right after the assistant message (or the results) of its call; every call
// of an assistant message answered. It returns the number of assistant messages.
func checkSent(t *testing.T, i int, req chatRequest, task []string) int {
	t.Helper()
	if len(req.Messages) < len(task) {
		t.Fatalf("request %d has %d messages, fewer than the task's %d", i, len(req.Messages), len(task))
	}
	for j, want := range task {
		if m := req.Messages[j]; m.Content == nil || *m.Content != want {
			t.Fatalf("request %d: message %d is not the task's %q", i, j, want)
		}
	}
	assistants := 0
	open := map[string]bool{}
	for j, m := range req.Messages[len(task):] {
		switch m.Role {
		case "assistant":
			if len(open) > 0 {
				t.Fatalf("request %d: message %d: an assistant message before the results of %v", i, j+len(task), open)
			}
			assistants++
			for _, tc := range m.ToolCalls {
				open[tc.ID] = true
			}
		case "tool":
			if !open[m.ToolCallID] {
				t.Fatalf("request %d: message %d: tool result %q without its call just before", i, j+len(task), m.ToolCallID)
			}
			delete(open, m.ToolCallID)
		}
	}
	if len(open) > 0 {
		t.Fatalf("request %d: calls without results: %v", i, open)
	}
	return assistants
}

var counterTask = []string{"You count.", "Count to two."}

func TestContextWindow(t *testing.T) {
	for _, n := range []int{1, 2, 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			res := newFakeResource(t, nil)
			m := newFakeModel(t, nil,
				toolCalls(call{"a0", "increment", `{}`}, call{"b0", "get_count", `{}`}),
				toolCalls(call{"a1", "increment", `{}`}),
				toolCalls(call{"a2", "get_count", `{}`}, call{"b2", "increment", `{"by":0}`}),
				toolCalls(call{"a3", "get_count", `{}`}),
				final("two"))
			task := parseTask(t, counterRow(""))
			cfg := m.config(nil)
			cfg.Context = agent.ContextStrategy{Kind: agent.ContextWindow, N: n}
			tr := cfg.Run(context.Background(), task, res.session(t, task), 1)
			if tr.Termination != agent.Completed || m.calls() != 5 {
				t.Fatalf("termination %q, %d model calls (%s)", tr.Termination, m.calls(), tr.Error)
			}
			for i := range 5 {
				req := m.request(i)
				got := checkSent(t, i, req, counterTask)
				if want := min(i, n); got != want {
					t.Errorf("request %d has %d rounds, want %d", i, got, want)
				}
				if i > 0 {
					// The last round is always the previous answer's.
					last := req.Messages[len(req.Messages)-1]
					if last.Role != "tool" || !strings.HasSuffix(last.ToolCallID, fmt.Sprint(i-1)) {
						t.Errorf("request %d ends with %s %q, not a result of round %d", i, last.Role, last.ToolCallID, i-1)
					}
				}
			}
			// The trajectory keeps the whole conversation; the trace says what was left out.
			if len(tr.Messages) != 2+2+3+3+2+1 {
				t.Fatalf("trajectory has %d messages", len(tr.Messages))
			}
			if tr.Context == nil || tr.Context.Strategy != fmt.Sprintf("window:%d", n) || len(tr.Context.Rounds) != 5 {
				t.Fatalf("context trace %+v", tr.Context)
			}
			for i, cr := range tr.Context.Rounds {
				req := m.request(i)
				raw := m.rawBody(i)["messages"]
				if cr.Messages != len(req.Messages) || cr.Bytes != len(raw) {
					t.Errorf("round %d: trace says %d messages %d bytes, the request had %d and %d", i, cr.Messages, cr.Bytes, len(req.Messages), len(raw))
				}
				whole := []int{2, 5, 7, 10, 12}[i] // the task's 2 and the rounds' messages so far
				if cr.RemovedMessages != whole-len(req.Messages) {
					t.Errorf("round %d: removed %d messages, want %d", i, cr.RemovedMessages, whole-len(req.Messages))
				}
				if (cr.RemovedBytes > 0) != (cr.RemovedMessages > 0) {
					t.Errorf("round %d: removed %d bytes for %d messages", i, cr.RemovedBytes, cr.RemovedMessages)
				}
				if cr.PromptTokens != 10 {
					t.Errorf("round %d: prompt tokens %d, the usage said 10", i, cr.PromptTokens)
				}
			}
		})
	}
}

// bigOutput is a tool whose result is size bytes.
func bigOutput(size int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"rows":"`+strings.Repeat("x", size-11)+`"}`)
	}
}

// The budget holds on the bytes of the messages array each request really carried: tool
// results shortened first (with a marker of how much was cut), then whole rounds dropped,
// never the task nor the last round.
func TestContextBudget(t *testing.T) {
	res := newFakeResource(t, nil)
	res.handle("big", bigOutput(1500))
	const budget = 600 // tokens: 2400 bytes
	rounds := 6
	script := []step{}
	for i := range rounds {
		script = append(script, toolCalls(call{fmt.Sprintf("c%d", i), "big", `{}`}, call{fmt.Sprintf("d%d", i), "get_count", `{}`}))
	}
	m := newFakeModel(t, nil, append(script, final("done"))...)
	task := parseTask(t, strings.Replace(counterRow(""), `"parameters":null}`, `"parameters":null},{"type":"function","name":"big","parameters":{"type":"object","properties":{}}}`, 1))
	cfg := m.config(nil)
	cfg.Context = agent.ContextStrategy{Kind: agent.ContextBudget, N: budget}
	tr := cfg.Run(context.Background(), task, res.session(t, task), 1)
	if tr.Termination != agent.Completed || m.calls() != rounds+1 {
		t.Fatalf("termination %q, %d model calls (%s)", tr.Termination, m.calls(), tr.Error)
	}
	sawCut, sawDrop := false, false
	for i := range m.calls() {
		req := m.request(i)
		got := checkSent(t, i, req, counterTask)
		raw := m.rawBody(i)["messages"]
		if len(raw) > budget*agent.BytesPerToken {
			t.Errorf("request %d: %d bytes of messages, over the budget of %d", i, len(raw), budget*agent.BytesPerToken)
		}
		if cr := tr.Context.Rounds[i]; cr.Bytes != len(raw) || cr.Messages != len(req.Messages) {
			t.Errorf("request %d: the trace says %d bytes %d messages, the request had %d and %d", i, cr.Bytes, cr.Messages, len(raw), len(req.Messages))
		}
		if i > 0 && got == 0 {
			t.Errorf("request %d: the last round was dropped", i)
		}
		if got < i {
			sawDrop = true
		}
		for _, msg := range req.Messages {
			if msg.Role == "tool" && msg.Content != nil && strings.Contains(*msg.Content, "bytes cut to fit the context budget") {
				sawCut = true
				if !strings.Contains(*msg.Content, fmt.Sprintf("[... %d bytes cut", 1500-80)) {
					t.Errorf("request %d: marker %q does not say the 1420 bytes cut", i, *msg.Content)
				}
			}
		}
		// The last round's results are never shortened.
		if last := req.Messages[len(req.Messages)-2]; i > 0 && (last.Content == nil || len(*last.Content) != 1500) {
			t.Errorf("request %d: the last round's big result was cut", i)
		}
	}
	if !sawCut || !sawDrop {
		t.Fatalf("the budget never cut (%v) or dropped (%v)", sawCut, sawDrop)
	}
	last := tr.Context.Rounds[len(tr.Context.Rounds)-1]
	if last.Shortened == 0 || last.RemovedMessages == 0 || last.RemovedBytes == 0 {
		t.Fatalf("trace of the last round %+v", last)
	}

	// A budget smaller than the task and the last round: those are sent all the same.
	m2 := newFakeModel(t, nil, toolCalls(call{"c0", "big", `{}`}), toolCalls(call{"c1", "big", `{}`}), final("done"))
	cfg2 := m2.config(nil)
	cfg2.Context = agent.ContextStrategy{Kind: agent.ContextBudget, N: 10}
	tr2 := cfg2.Run(context.Background(), task, res.session(t, task), 1)
	if tr2.Termination != agent.Completed {
		t.Fatalf("tiny budget: %q %s", tr2.Termination, tr2.Error)
	}
	if got := checkSent(t, 2, m2.request(2), counterTask); got != 1 {
		t.Fatalf("tiny budget: last request has %d rounds, want the last one", got)
	}
}

// Briefing: one extra model call per round that is followed by another, without tools,
// ending with the briefing prompt; the next round sees the task, the briefing and the last
// round; the calls' usage counts.
func TestContextBriefing(t *testing.T) {
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil,
		answer("", 100, 5, call{"a0", "increment", `{}`}),
		answer("Facts: count is 1. Remaining: one more increment.", 200, 20),
		answer("", 300, 5, call{"a1", "increment", `{}`}),
		answer("Facts: count is 2. Remaining: answer.", 400, 20),
		answer("two", 500, 2))
	task := parseTask(t, counterRow(""))
	cfg := m.config(nil)
	cfg.Context = agent.ContextStrategy{Kind: agent.ContextBriefing}
	cfg.BriefingPrompt = "Brief me."
	tr := cfg.Run(context.Background(), task, res.session(t, task), 1)
	if tr.Termination != agent.Completed || len(tr.Rounds) != 3 || m.calls() != 5 {
		t.Fatalf("termination %q rounds %d model calls %d, want 3 rounds and 2 briefings (%s)", tr.Termination, len(tr.Rounds), m.calls(), tr.Error)
	}
	for _, i := range []int{1, 3} {
		req := m.request(i)
		if len(req.Tools) != 0 || m.rawBody(i)["tool_choice"] != nil {
			t.Errorf("briefing call %d offers tools", i)
		}
		last := req.Messages[len(req.Messages)-1]
		if last.Role != "user" || *last.Content != "Brief me." {
			t.Errorf("briefing call %d ends with %s %q", i, last.Role, *last.Content)
		}
		checkSent(t, i, req, counterTask)
	}
	// Round 1: the task, briefing 1, round 0. The briefing after it: the same and the prompt.
	r2 := m.request(2)
	if len(r2.Messages) != 5 || r2.Messages[2].Role != "user" || !strings.HasSuffix(*r2.Messages[2].Content, "Facts: count is 1. Remaining: one more increment.") {
		t.Fatalf("round 1 was sent %d messages: %+v", len(r2.Messages), r2.Messages)
	}
	r4 := m.request(4)
	if got := checkSent(t, 4, r4, counterTask); got != 1 || !strings.HasSuffix(*r4.Messages[2].Content, "Facts: count is 2. Remaining: answer.") || r4.Messages[3].ToolCalls[0].ID != "a1" {
		t.Fatalf("round 2 was sent %+v", r4.Messages)
	}
	for j, i := range []int{0, 2, 4} {
		if cr, raw := tr.Context.Rounds[j], m.rawBody(i)["messages"]; cr.Bytes != len(raw) || cr.PromptTokens != 100*(i+1) {
			t.Errorf("round %d: the trace says %d bytes, %d prompt tokens; the request had %d bytes, the usage said %d", j, cr.Bytes, cr.PromptTokens, len(raw), 100*(i+1))
		}
	}
	if tr.Usage.PromptTokens != 1500 || tr.Usage.CompletionTokens != 52 {
		t.Fatalf("usage %+v, want every call's (1500 prompt, 52 completion)", tr.Usage)
	}
	if b := tr.Context.Briefings; len(b) != 2 || b[0].Round != 0 || b[1].Usage.PromptTokens != 400 || !strings.HasPrefix(b[1].Text, "Facts: count is 2") {
		t.Fatalf("briefings %+v", b)
	}
	if !strings.Contains(agent.DefaultBriefingPrompt, "briefing") {
		t.Fatalf("default prompt %q", agent.DefaultBriefingPrompt)
	}

	// A briefing call that overflows the context ends the rollout as context_length, scored.
	m2 := newFakeModel(t, nil, answer("", 100, 5, call{"a0", "increment", `{}`}), status(400, vllmOverflow))
	cfg2 := m2.config(nil)
	cfg2.Context = agent.ContextStrategy{Kind: agent.ContextBriefing}
	tr2 := cfg2.Run(context.Background(), task, res.session(t, task), 1)
	if tr2.Termination != agent.ContextLength || tr2.FailureClass != "" || m2.calls() != 2 || !strings.Contains(tr2.Error, "briefing call after round 0") {
		t.Fatalf("termination %q class %q, %d model calls (the 400 is not retried): %s", tr2.Termination, tr2.FailureClass, m2.calls(), tr2.Error)
	}
}

// vllmOverflow is vLLM's answer (HTTP 400) to a request over the model's context, as vLLM
// sends it (vllm-project/vllm issues #20409 and #19464).
const vllmOverflow = `{"object": "error", "message": "This model's maximum context length is 131072 tokens. However, you requested 156632 tokens (152536 in the messages, 4096 in the completion). Please reduce the length of the messages or completion.", "type": "BadRequestError", "param": null, "code": 400}`

func TestDegrade(t *testing.T) {
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil,
		toolCalls(call{"a0", "increment", `{}`}),
		toolCalls(call{"f1", "fail", `{}`}),
		toolCalls(call{"f2", "fail", `{}`}, call{"f3", "reject", `{}`}),
		answer("the count is 1", 10, 3, call{"late", "increment", `{}`}))
	task := parseTask(t, counterRow(""))
	cfg := m.config(nil)
	cfg.Degrade = true
	tr := cfg.Run(context.Background(), task, res.session(t, task), 1)
	if tr.Termination != agent.Degraded || tr.FailureClass != "" || tr.FinalText != "the count is 1" {
		t.Fatalf("termination %q class %q final %q (%s)", tr.Termination, tr.FailureClass, tr.FinalText, tr.Error)
	}
	if m.calls() != 4 || len(tr.Rounds) != 4 {
		t.Fatalf("%d model calls, %d rounds; want 4", m.calls(), len(tr.Rounds))
	}
	last := m.request(3)
	if len(last.Tools) != 0 {
		t.Fatal("the degraded call offers tools")
	}
	if p := last.Messages[len(last.Messages)-1]; p.Role != "user" || !strings.Contains(*p.Content, "last 2 rounds all failed") {
		t.Fatalf("the degraded call ends with %s %q", p.Role, *p.Content)
	}
	checkSent(t, 3, last, counterTask)
	if got := res.toolPaths(); !equalStrings(got, []string{"increment", "fail", "fail", "reject"}) {
		t.Fatalf("tool calls %v: the degraded answer's call was made", got)
	}
	if end := tr.Messages[len(tr.Messages)-1]; end.Role != "assistant" || len(end.ToolCalls) != 0 || end.Content != "the count is 1" {
		t.Fatalf("trajectory ends with %+v", end)
	}

	// Without --degrade the same rollout is a tool_error.
	m2 := newFakeModel(t, nil, toolCalls(call{"f1", "fail", `{}`}))
	cfg2 := m2.config(nil)
	if tr := cfg2.Run(context.Background(), task, res.session(t, task), 1); tr.Termination != agent.ToolError || m2.calls() != 2 {
		t.Fatalf("without degrade: %q after %d calls", tr.Termination, m2.calls())
	}

	// A resource server that is down is infrastructure: not degraded.
	m3 := newFakeModel(t, nil, toolCalls(call{"a", "increment", `{}`}))
	cfg3 := m3.config(nil)
	cfg3.Degrade = true
	srv := res.server(t)
	sess := srv.NewSession()
	if err := sess.Seed(context.Background(), task.Raw); err != nil {
		t.Fatal(err)
	}
	res.handle("increment", func(w http.ResponseWriter, r *http.Request) {
		// Close the connection without an answer: unreachable.
		hj, _ := w.(http.Hijacker)
		c, _, _ := hj.Hijack()
		c.Close()
	})
	if tr := cfg3.Run(context.Background(), task, sess, 1); tr.Termination != agent.ToolError || tr.FailureClass != record.FailResourceServer || m3.calls() != 2 {
		t.Fatalf("server down with degrade: %q %q after %d calls (%s)", tr.Termination, tr.FailureClass, m3.calls(), tr.Error)
	}
}

// The trace is in the trajectory's JSON.
func TestContextTraceJSON(t *testing.T) {
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil, toolCalls(call{"a0", "increment", `{}`}), toolCalls(call{"a1", "increment", `{}`}), final("two"))
	task := parseTask(t, counterRow(""))
	cfg := m.config(nil)
	cfg.Context = agent.ContextStrategy{Kind: agent.ContextWindow, N: 1}
	tr := cfg.Run(context.Background(), task, res.session(t, task), 1)
	b, err := tr.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Context agent.ContextTrace `json:"context"`
	}
	if err := json.Unmarshal(b, &back); err != nil || back.Context.Strategy != "window:1" || len(back.Context.Rounds) != 3 || back.Context.Rounds[2].RemovedMessages != 2 {
		t.Fatalf("%v: %s", err, b)
	}
}
