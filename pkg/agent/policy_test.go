package agent_test

import (
	"context"
	"testing"

	"github.com/rollout-dev/rollout/pkg/agent"
)

// Single-step: one round of tool calls with the tools offered, then one
// more model call without tools, whose answer is final; the earlier tool results are in it.
func TestSinglePolicy(t *testing.T) {
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil,
		toolCalls(call{"a", "increment", `{}`}, call{"b", "increment", `{}`}),
		final("2"))
	task := parseTask(t, counterRow(""))
	c := m.config(nil)
	c.Policy = agent.PolicySingle
	tr := c.Run(context.Background(), task, res.session(t, task), 1)
	if tr.Termination != agent.Completed || len(tr.Rounds) != 2 || tr.FinalText != "2" {
		t.Fatalf("termination %q rounds %d final %q", tr.Termination, len(tr.Rounds), tr.FinalText)
	}
	if first := m.request(0); len(first.Tools) == 0 {
		t.Error("the first call offered no tools")
	}
	second := m.request(1)
	if len(second.Tools) != 0 {
		t.Errorf("the final call offered %d tools, want none", len(second.Tools))
	}
	if raw := m.rawBody(1); raw["tool_choice"] != nil || raw["parallel_tool_calls"] != nil {
		t.Errorf("the final call sent tool_choice %s / parallel_tool_calls %s without tools", raw["tool_choice"], raw["parallel_tool_calls"])
	}
	var results int
	for _, msg := range second.Messages {
		if msg.Role == "tool" {
			results++
		}
	}
	if results != 2 {
		t.Errorf("the final call carried %d tool results, want 2", results)
	}
}

// A model that asks for tools again after they were taken away gets none: the calls are not
// made, and the rollout ends at the policy's bound (max_rounds) with what it said.
func TestSinglePolicyNoSecondRound(t *testing.T) {
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil,
		toolCalls(call{"a", "increment", `{}`}),
		answer("one more", 10, 5, call{"b", "increment", `{}`}))
	task := parseTask(t, counterRow(""))
	c := m.config(nil)
	c.Policy = agent.PolicySingle
	tr := c.Run(context.Background(), task, res.session(t, task), 1)
	if tr.Termination != agent.MaxRounds || len(tr.Rounds) != 2 || tr.FinalText != "one more" {
		t.Fatalf("termination %q rounds %d final %q", tr.Termination, len(tr.Rounds), tr.FinalText)
	}
	if paths := res.toolPaths(); len(paths) != 1 {
		t.Errorf("tool calls made: %v, want the first round's only", paths)
	}
	if last := tr.Messages[len(tr.Messages)-1]; len(last.ToolCalls) != 0 {
		t.Errorf("unanswered tool calls kept in the history: %v", last.ToolCalls)
	}
	// An answer without tool calls in round 0 ends single-step at once, like multi-step.
	m2 := newFakeModel(t, nil, final("no tools needed"))
	c2 := m2.config(nil)
	c2.Policy = agent.PolicySingle
	if tr := c2.Run(context.Background(), task, res.session(t, task), 1); tr.Termination != agent.Completed || len(tr.Rounds) != 1 {
		t.Errorf("direct answer: termination %q rounds %d", tr.Termination, len(tr.Rounds))
	}
	bad := m2.config(nil)
	bad.Policy = "several"
	if err := bad.Validate(); err == nil {
		t.Error("an unknown policy validated")
	}
}

// Seed 004: context is kept across rounds: each model call receives every earlier tool result,
// in order, each answering its call id.
func TestRunContextKeptAcrossRounds(t *testing.T) {
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil,
		toolCalls(call{"r0", "increment", `{}`}),
		toolCalls(call{"r1a", "increment", `{}`}, call{"r1b", "get_count", `{}`}),
		toolCalls(call{"r2", "get_count", `{}`}),
		final("two"))
	task := parseTask(t, counterRow(""))
	tr := m.config(nil).Run(context.Background(), task, res.session(t, task), 1)
	if tr.Termination != agent.Completed {
		t.Fatalf("termination %q", tr.Termination)
	}
	last := m.request(3)
	type result struct{ id, content string }
	var got []result
	var calls []string
	for _, msg := range last.Messages {
		for _, tc := range msg.ToolCalls {
			calls = append(calls, tc.ID)
		}
		if msg.Role == "tool" {
			c := ""
			if msg.Content != nil {
				c = *msg.Content
			}
			got = append(got, result{msg.ToolCallID, c})
		}
	}
	want := []result{{"r0", `{"count":1}`}, {"r1a", `{"count":2}`}, {"r1b", `{"count":2}`}, {"r2", `{"count":2}`}}
	if len(got) != len(want) {
		t.Fatalf("the last call carried %d tool results %v, want %v", len(got), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("tool result %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if !equalStrings(calls, []string{"r0", "r1a", "r1b", "r2"}) {
		t.Errorf("assistant tool calls in the history: %v", calls)
	}
}
