package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// benchRequest is a third-round request of a counter task: a system prompt, the user's task,
// two rounds of one tool call and its result, two tools.
func benchRequest(tb testing.TB) []byte {
	seed := 7
	params := json.RawMessage(`{"type":"object","properties":{"count":{"type":"integer","description":"How much to add."}},"required":["count"],"additionalProperties":false}`)
	req := openai.ChatCompletionRequest{
		Model: "rollout-sim", Seed: &seed,
		Messages: []openai.ChatCompletionMessage{
			{Role: "system", Content: "You are a careful assistant that keeps a counter with tools."},
			{Role: "user", Content: "The counter starts at 0. Increment it by 1, one call per round, 2 times; then say its value."},
		},
		Tools: []openai.Tool{
			{Type: "function", Function: &openai.FunctionDefinition{Name: "increment_counter", Description: "Add count to the session's counter; returns the new value.", Parameters: params}},
			{Type: "function", Function: &openai.FunctionDefinition{Name: "get_counter_value", Description: "The counter's value.", Parameters: json.RawMessage(`{"type":"object","properties":{}}`)}},
		},
	}
	for i := range 2 {
		id := fmt.Sprintf("call_%d_0123abcd", i)
		req.Messages = append(req.Messages,
			openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: id, Type: "function", Function: openai.FunctionCall{Name: "increment_counter", Arguments: `{"count":1}`}}}},
			openai.ChatCompletionMessage{Role: "tool", ToolCallID: id, Content: fmt.Sprintf(`{"success": true, "count": %d}`, i+1)})
	}
	b, err := json.Marshal(req)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func BenchmarkParseRequest(b *testing.B) {
	body := benchRequest(b)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := parseRequest(body); err != nil {
			b.Fatal(err.msg)
		}
	}
}

// BenchmarkComplete is one chat completion through the handler, without the network.
func BenchmarkComplete(b *testing.B) {
	body := benchRequest(b)
	s, err := New(nil, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		w := httptest.NewRecorder()
		s.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(body)))
		if w.Code != 200 {
			b.Fatal(w.Code, w.Body.String())
		}
	}
}
