package agent

import (
	"fmt"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// BenchmarkContextView is what a strategy costs a round: the messages of the 11th request of a
// rollout (a system and a user message, then 10 rounds of two tool calls with 1.5 KB results),
// the sizes of the conversation's messages already measured by the earlier rounds.
func BenchmarkContextView(b *testing.B) {
	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: "You are a sales data analyst."},
		{Role: openai.ChatMessageRoleUser, Content: "What was the actual 2024-Q1 sales figure for Brackets in the West region?"},
	}
	for r := range 10 {
		calls := []openai.ToolCall{}
		for c := range 2 {
			calls = append(calls, openai.ToolCall{ID: fmt.Sprintf("call_%d_%d", r, c), Type: openai.ToolTypeFunction,
				Function: openai.FunctionCall{Name: "get_record", Arguments: `{"source":"west_actuals","id":"r-1042"}`}})
		}
		msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: calls})
		for c := range 2 {
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: calls[c].ID,
				Content: `{"rows":"` + strings.Repeat("x", 1500) + `"}`})
		}
	}
	for _, st := range []ContextStrategy{{Kind: ContextFull}, {Kind: ContextWindow, N: 2}, {Kind: ContextBudget, N: 2000}, {Kind: ContextBriefing}} {
		b.Run(st.String(), func(b *testing.B) {
			cv := &conversation{nTask: 2}
			cv.view(st, msgs, "Facts: West actuals r-1042 is 118.")
			b.ReportAllocs()
			var sent int
			for b.Loop() {
				out, _ := cv.view(st, msgs, "Facts: West actuals r-1042 is 118.")
				sent = len(out)
			}
			b.ReportMetric(float64(sent), "msgs/op")
		})
	}
}
