package agent_test

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/record"
)

// sameJSON checks that MarshalJSON, AppendJSON and json.Marshal all give encoding/json's
// encoding by reflection, byte for byte (or its failure).
func sameJSON(t *testing.T, tr *agent.Trajectory) {
	t.Helper()
	want, werr := agent.PlainJSON(tr)
	got, err := tr.MarshalJSON()
	if (err != nil) != (werr != nil) {
		t.Fatalf("MarshalJSON error %v, encoding/json's %v", err, werr)
	}
	if werr != nil {
		if _, err := json.Marshal(tr); err == nil {
			t.Fatalf("json.Marshal accepts what encoding/json refuses (%v)", werr)
		}
		return
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("MarshalJSON differs from encoding/json:\n got %s\nwant %s", got, want)
	}
	if via, err := json.Marshal(tr); err != nil || !bytes.Equal(via, want) {
		t.Fatalf("json.Marshal differs (%v):\n got %s\nwant %s", err, via, want)
	}
	if app, err := tr.AppendJSON([]byte("x")); err != nil || string(app) != "x"+string(want) {
		t.Fatalf("AppendJSON: %v %s", err, app)
	}
}

// nasty has every kind of character encoding/json escapes or replaces, at every position
// around the 8-byte blocks the encoder scans.
var nasty = func() []string {
	var all strings.Builder
	for c := 0; c < 0x80; c++ {
		all.WriteByte(byte(c))
	}
	out := []string{"", all.String(), "\xff", "a\xc3", "\xe2\x80\xa8\xe2\x80\xa9", "é€😀", "\ufffd", "<script>&amp;</script>",
		"line\nbreak\t\"quoted\" \\ back", "\x7f\x00\x1f"}
	for _, special := range []string{"\"", "\\", "<", ">", "&", "\n", "\x01", "é", "\xff", "\u2028"} {
		for n := 0; n < 18; n++ {
			out = append(out, strings.Repeat("a", n)+special+strings.Repeat("b", 17-n))
		}
	}
	return out
}()

func TestTrajectoryJSONIsEncodingJSONs(t *testing.T) {
	for _, row := range []string{benchRow, nemoRow(t), counterRow("")} {
		_, tr := conversation(t, row, 2)
		recordRound(tr, 2, benchAnswer(2))
		tr.Termination = agent.Completed
		sameJSON(t, tr)
	}
	sameJSON(t, &agent.Trajectory{})
	sameJSON(t, &agent.Trajectory{Messages: []openai.ChatCompletionMessage{}, Rounds: []agent.Round{}})
	for _, s := range nasty {
		idx := 3
		tr := &agent.Trajectory{
			Messages: []openai.ChatCompletionMessage{
				{Role: s, Content: s, Refusal: s, Name: s, ReasoningContent: s, ToolCallID: s},
				{Role: "assistant", ToolCalls: []openai.ToolCall{
					{Index: &idx, ID: s, Type: openai.ToolType(s), Function: openai.FunctionCall{Name: s, Arguments: s}},
					{}, {Function: openai.FunctionCall{Arguments: s}}, {ID: "x", Function: openai.FunctionCall{Name: s}},
				}},
			},
			Rounds: []agent.Round{{Index: -1, FinishReason: s, Content: s, Reasoning: s, Usage: agent.Usage{CachedTokens: 1, ReasoningTokens: -2},
				ToolCalls: []agent.ToolCall{{CallID: s, Name: s, Arguments: s, Output: s, Status: 500, Failed: true, Unreachable: true, TimedOut: true, LatencyMs: 1e-9}, {}}, Endpoint: s},
				{Endpoint: s}},
			Usage: agent.Usage{PromptTokens: math.MaxInt, CompletionTokens: math.MinInt}, Termination: agent.Termination(s),
			FailureClass: record.FailureClass(s), Error: s, FinalText: s, InvalidAnswers: 2,
		}
		sameJSON(t, tr)
	}
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1.5, 0.001, 1e-6, 9.99e-7, 1e-7, 1e20, 1e21, -1e21, 123456789.125, math.MaxFloat64, math.SmallestNonzeroFloat64} {
		sameJSON(t, &agent.Trajectory{Rounds: []agent.Round{{ModelLatencyMs: f, ToolCalls: []agent.ToolCall{{LatencyMs: -f}}}}})
	}
	// What the fast encoder hands to encoding/json: the same bytes or the same refusal.
	for _, tr := range []*agent.Trajectory{
		{Rounds: []agent.Round{{ModelLatencyMs: math.NaN()}}},
		{Rounds: []agent.Round{{ToolCalls: []agent.ToolCall{{LatencyMs: math.Inf(1)}}}}},
		{Messages: []openai.ChatCompletionMessage{{Role: "user", MultiContent: []openai.ChatMessagePart{{Type: "text", Text: "<a>"}}}}},
		{Messages: []openai.ChatCompletionMessage{{Role: "user", MultiContent: []openai.ChatMessagePart{}}}},
		{Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "x", MultiContent: []openai.ChatMessagePart{}}}},
		{Messages: []openai.ChatCompletionMessage{{Role: "assistant", FunctionCall: &openai.FunctionCall{Name: "f"}}}},
		{Steps: []agent.StepTrace{{Name: "s", Failures: []agent.StepFailure{{Attempt: 1, Reason: agent.MaxRounds,
			Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "<x>"}}}}}}, InvalidAnswers: 1},
	} {
		sameJSON(t, tr)
	}
}

// FuzzTrajectoryJSON: any strings and numbers in a trajectory encode as encoding/json does.
func FuzzTrajectoryJSON(f *testing.F) {
	for _, s := range nasty[:12] {
		f.Add(s, "call_1", 1.5, 200)
	}
	f.Fuzz(func(t *testing.T, s, id string, latency float64, status int) {
		_, tr := conversation(t, benchRow, 1)
		tr.Messages = append(tr.Messages, openai.ChatCompletionMessage{Role: "tool", ToolCallID: id, Content: s},
			openai.ChatCompletionMessage{Role: "assistant", Content: s, ToolCalls: []openai.ToolCall{{ID: id, Type: "function",
				Function: openai.FunctionCall{Name: s, Arguments: s}}}})
		tr.Rounds = append(tr.Rounds, agent.Round{Index: status, ModelLatencyMs: latency, FinishReason: s,
			ToolCalls: []agent.ToolCall{{CallID: id, Name: s, Status: status, LatencyMs: -latency}}, Endpoint: id})
		tr.Termination, tr.Error = agent.Termination(id), s
		sameJSON(t, tr)
	})
}
