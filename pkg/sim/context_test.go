package sim

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/retry"
)

// A task whose last round uses a value read two rounds before: a(), then b(), then
// c(x = a's v). A window of one round no longer holds it when c is called.
const distanceRow = `{"id": 4, "responses_create_params": {"input": "Do the distance task.",
 "tools": [
  {"type": "function", "name": "a", "parameters": {"type": "object", "properties": {}}},
  {"type": "function", "name": "b", "parameters": {"type": "object", "properties": {}}},
  {"type": "function", "name": "c", "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}]},
 "reference_plan": {"rounds": [
   [{"name": "a", "arguments": {}}],
   [{"name": "b", "arguments": {}}],
   [{"name": "c", "arguments": {"x": {"$ref": "0/v"}}}]],
  "final": "done"}}`

// distanceTools answers the distance task's tools and keeps c's arguments.
type distanceTools struct {
	mu    sync.Mutex
	cArgs []string
}

func (d *distanceTools) call(name, args string) string {
	switch name {
	case "a":
		return `{"v": "value-from-a"}`
	case "c":
		d.mu.Lock()
		d.cArgs = append(d.cArgs, args)
		d.mu.Unlock()
	}
	return `{"ok": true}`
}

// simAgent is the agent's loop against the simulator, with strategy st.
func simAgent(t *testing.T, srv string, st agent.ContextStrategy) *agent.Config {
	t.Helper()
	doer := &retry.Doer{Client: &http.Client{}, Policy: retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}}
	cfg := &agent.Config{Model: agent.NewOpenAIModel(srv+"/v1", "", doer), ModelName: "sim", Context: st}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// What each strategy keeps of a value read two rounds back: full and briefing keep it; a
// window of one round loses it (c gets null); a briefing that drops its facts loses it too.
func TestContextStrategiesAndTheSimulatorsMemory(t *testing.T) {
	tasks, rows := mustTasks(t, distanceRow)
	for _, tc := range []struct {
		name string
		st   agent.ContextStrategy
		opt  Options
		want string
	}{
		{"full", agent.ContextStrategy{Kind: agent.ContextFull}, Options{}, `{"x":"value-from-a"}`},
		{"window:2", agent.ContextStrategy{Kind: agent.ContextWindow, N: 2}, Options{}, `{"x":"value-from-a"}`},
		{"window:1", agent.ContextStrategy{Kind: agent.ContextWindow, N: 1}, Options{}, `{"x":null}`},
		{"briefing", agent.ContextStrategy{Kind: agent.ContextBriefing}, Options{}, `{"x":"value-from-a"}`},
		{"briefing, facts dropped", agent.ContextStrategy{Kind: agent.ContextBriefing}, Options{BriefingDrop: 1}, `{"x":null}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, srv := newSim(t, tasks, tc.opt)
			tools := &distanceTools{}
			tr := simAgent(t, srv.URL, tc.st).Run(context.Background(), rows[0], toolsFunc(tools.call), 1)
			if tr.Termination != agent.Completed || len(tr.Rounds) != 4 {
				t.Fatalf("termination %q, %d rounds (%s)", tr.Termination, len(tr.Rounds), tr.Error)
			}
			if len(tools.cArgs) != 1 || tools.cArgs[0] != tc.want {
				t.Fatalf("c was called with %q, want %s", tools.cArgs, tc.want)
			}
			st := s.Stats()
			if tc.st.Kind == agent.ContextBriefing {
				if st.Briefings != 3 || len(tr.Context.Briefings) != 3 {
					t.Fatalf("%d briefings (%d in the trajectory), want one after each of the 3 rounds of calls", st.Briefings, len(tr.Context.Briefings))
				}
				b := tr.Context.Briefings[1].Text
				if tc.opt.BriefingDrop == 0 && (!strings.Contains(b, "- call_0_") || !strings.Contains(b, `a: {"v": "value-from-a"}`) || !strings.Contains(b, "Remaining: 1 more rounds")) {
					t.Fatalf("second briefing:\n%s", b)
				}
				if tc.opt.BriefingDrop == 1 && (strings.Contains(b, "- call_") || st.BriefingDropped == 0) {
					t.Fatalf("briefing with every fact dropped (%d dropped):\n%s", st.BriefingDropped, b)
				}
			} else if st.Briefings != 0 {
				t.Fatalf("%d briefings without the briefing strategy", st.Briefings)
			}
		})
	}
}

// The wrong-argument chance grows with the distance of the value used: at slope 1, a value
// read one round before the last is always perturbed; through a briefing (written just
// before the round) never.
func TestDistanceErrorSlope(t *testing.T) {
	tasks, rows := mustTasks(t, distanceRow)
	for _, tc := range []struct {
		st        agent.ContextStrategy
		perturbed bool
	}{
		{agent.ContextStrategy{Kind: agent.ContextFull}, true},
		{agent.ContextStrategy{Kind: agent.ContextBriefing}, false},
	} {
		s, srv := newSim(t, tasks, Options{DistanceErrorSlope: 1})
		tools := &distanceTools{}
		tr := simAgent(t, srv.URL, tc.st).Run(context.Background(), rows[0], toolsFunc(tools.call), 1)
		if tr.Termination != agent.Completed || len(tools.cArgs) != 1 {
			t.Fatalf("%s: termination %q, c calls %q", tc.st, tr.Termination, tools.cArgs)
		}
		got := tools.cArgs[0] != `{"x":"value-from-a"}`
		if got != tc.perturbed || (s.Stats().Injected.WrongArgument > 0) != tc.perturbed {
			t.Errorf("%s: c got %s (%d wrong arguments), want perturbed %v", tc.st, tools.cArgs[0], s.Stats().Injected.WrongArgument, tc.perturbed)
		}
	}
}

// The wrong-argument chance grows with the prompt: at 1 per 1000 tokens, a request of 1000
// tokens is always wrong; a short one never.
func TestContextErrorSlope(t *testing.T) {
	tasks, rows := mustTasks(t, knobRow)
	s, srv := newSim(t, tasks, Options{ContextErrorSlope: 1})
	req := baseRequest(rows[0], 1)
	if _, _, raw, cr := post(t, srv.URL, req); cr.calls()[0].Function.Arguments != `{"x":1,"s":"abc"}` {
		t.Fatalf("a short prompt was perturbed: %s", raw)
	}
	req.Messages = append([]openai.ChatCompletionMessage{{Role: "system", Content: strings.Repeat("long instructions ", 250)}}, req.Messages...)
	if _, _, raw, cr := post(t, srv.URL, req); cr.calls()[0].Function.Arguments == `{"x":1,"s":"abc"}` {
		t.Fatalf("a prompt of 1000 tokens was not perturbed: %s", raw)
	}
	if n := s.Stats().Injected.WrongArgument; n != 1 {
		t.Fatalf("%d wrong arguments, want 1", n)
	}
}

// Over --sim-context-limit the simulator answers as vLLM does (400, its top-level error
// object and wording, the completion's max_tokens counted); the agent ends the rollout as
// context_length, scored, without retrying the request.
func TestContextLimit(t *testing.T) {
	tasks, rows := mustTasks(t, recordsRow)
	s, srv := newSim(t, tasks, Options{ContextLimit: 60})
	req := baseRequest(rows[0], 1)
	if status, _, raw, _ := post(t, srv.URL, req); status != http.StatusOK {
		t.Fatalf("a short request: %d %s", status, raw)
	}
	req.MaxTokens = 100
	status, _, raw, _ := post(t, srv.URL, req)
	want := `{"code":400,"message":"This model's maximum context length is 60 tokens. However, you requested 108 tokens (8 in the messages, 100 in the completion). Please reduce the length of the messages or completion.","object":"error","param":null,"type":"BadRequestError"}` + "\n"
	if status != http.StatusBadRequest || string(raw) != want {
		t.Fatalf("status %d body %s\nwant %s", status, raw, want)
	}

	tr := simAgent(t, srv.URL, agent.ContextStrategy{}).Run(context.Background(), rows[0], toolsFunc(recordsTool), 1)
	if tr.Termination != agent.ContextLength || tr.FailureClass != "" || !strings.Contains(tr.Error, "maximum context length is 60 tokens") {
		t.Fatalf("termination %q class %q: %s", tr.Termination, tr.FailureClass, tr.Error)
	}
	st := s.Stats()
	if st.ContextOverflow != 2 || st.Requests != 3+len64(tr.Rounds) {
		t.Fatalf("overflows %d requests %d rounds %d: the overflow was retried", st.ContextOverflow, st.Requests, len(tr.Rounds))
	}
	// A window keeps the requests under the limit, on the same task.
	tr = simAgent(t, srv.URL, agent.ContextStrategy{Kind: agent.ContextWindow, N: 1}).Run(context.Background(), rows[0], toolsFunc(recordsTool), 1)
	if tr.Termination != agent.Completed {
		t.Fatalf("window:1: %q %s", tr.Termination, tr.Error)
	}
	if err := (Options{ContextLimit: -1}).Validate(); err == nil {
		t.Fatal("a negative context limit was accepted")
	}
}

func len64[T any](s []T) int64 { return int64(len(s)) }

// A chain whose every round uses the round before's results, round 0 with two calls.
const chainRow = `{"id": 5, "responses_create_params": {"input": "Do the chain task.",
 "tools": [
  {"type": "function", "name": "step", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}, "s": {"type": "string"}}}}]},
 "reference_plan": {"rounds": [
   [{"name": "step", "arguments": {"x": 1, "s": "a"}}, {"name": "step", "arguments": {"x": 2, "s": "b"}}],
   [{"name": "step", "arguments": {"x": {"$ref": "0/x"}, "s": {"$ref": "1/s"}}}],
   [{"name": "step", "arguments": {"x": {"$ref": "2/x"}, "s": {"$ref": "2/s"}}}],
   [{"name": "step", "arguments": {"x": {"$ref": "3/x"}, "s": {"$ref": "3/s"}}}],
   [{"name": "step", "arguments": {"x": {"$ref": "4/x"}, "s": {"$ref": "4/s"}}}]],
  "final": "done"}}`

// The simulator keys its draws on the plan's round also when a strategy shows it fewer rounds:
// with every value still in view, window:1 and briefing get the very arguments, wrong ones
// included, that the whole conversation gets.
func TestDrawsFollowThePlanRound(t *testing.T) {
	tasks, rows := mustTasks(t, chainRow)
	echo := func(args *[]string) toolsFunc {
		return func(_, a string) string {
			*args = append(*args, a)
			var v map[string]any
			if json.Unmarshal([]byte(a), &v) != nil {
				return "Error: not JSON"
			}
			b, _ := json.Marshal(map[string]any{"x": v["x"], "s": v["s"]})
			return string(b)
		}
	}
	s, srv := newSim(t, tasks, Options{WrongArgument: 0.5})
	for seed := range 8 {
		var want []string
		simAgent(t, srv.URL, agent.ContextStrategy{Kind: agent.ContextFull}).Run(context.Background(), rows[0], echo(&want), int64(seed))
		if len(want) != 6 {
			t.Fatalf("seed %d: %d calls with the whole conversation: %v", seed, len(want), want)
		}
		for _, st := range []agent.ContextStrategy{{Kind: agent.ContextWindow, N: 1}, {Kind: agent.ContextBriefing}} {
			var got []string
			simAgent(t, srv.URL, st).Run(context.Background(), rows[0], echo(&got), int64(seed))
			if !slices.Equal(got, want) {
				t.Errorf("seed %d, %s: arguments\n%v\nwant (the whole conversation's)\n%v", seed, st, got, want)
			}
		}
	}
	if s.Stats().Injected.WrongArgument == 0 {
		t.Fatal("no wrong argument was drawn: the test shows nothing")
	}
}
