package agent

import (
	"context"
	"errors"
	"net/http"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// stubModel answers with resp and err, and keeps the messages of the request it was sent.
type stubModel struct {
	resp openai.ChatCompletionResponse
	err  error
	sent []openai.ChatCompletionMessage
}

func (m *stubModel) CreateChatCompletion(_ context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error) {
	m.sent = req.Messages
	return m.resp, m.err
}

// callInto sends the messages as sendable makes them (an empty content filled in, the
// reasoning not echoed), leaves the caller's request as it was, and gives the answer and the
// error that call gives.
func TestCallIntoSendsSendableAndLeavesTheRequest(t *testing.T) {
	msgs := []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleUser, Content: "count"},
		{Role: openai.ChatMessageRoleAssistant, Content: "", ReasoningContent: "thinking"},
		{Role: openai.ChatMessageRoleUser, Content: "again"},
	}
	answer := openai.ChatCompletionResponse{ID: "a1", Choices: []openai.ChatCompletionChoice{{Message: openai.ChatCompletionMessage{Role: "assistant", Content: "2"}}}}
	m := &stubModel{resp: answer}
	c := &Config{Model: m}
	req := openai.ChatCompletionRequest{Model: "m", Messages: msgs}
	var resp openai.ChatCompletionResponse
	if _, _, err := c.callInto(context.Background(), &req, nil, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.ID != "a1" || len(resp.Choices) != 1 || resp.Choices[0].Message.Content != "2" {
		t.Fatalf("answer %+v", resp)
	}
	if len(m.sent) != 3 || m.sent[1].Content != emptyContent || m.sent[1].ReasoningContent != "" {
		t.Fatalf("sent %+v, want the empty content filled in and no reasoning", m.sent)
	}
	if &req.Messages[0] != &msgs[0] || req.Messages[1].Content != "" || req.Messages[1].ReasoningContent != "thinking" {
		t.Fatalf("the request's messages changed: %+v", req.Messages)
	}

	// A failed call: the same error and termination through call and callInto.
	apiErr := &openai.APIError{HTTPStatusCode: http.StatusTooManyRequests, Message: "slow down"}
	m.err = apiErr
	resp = openai.ChatCompletionResponse{}
	_, _, err := c.callInto(context.Background(), &req, nil, &resp)
	_, _, _, err2 := c.call(context.Background(), req, nil)
	if !errors.Is(err, apiErr) || !errors.Is(err2, apiErr) {
		t.Fatalf("errors %v and %v, want the model's", err, err2)
	}
	term, class := modelFailure(context.Background(), err)
	if term2, class2 := modelFailure(context.Background(), err2); term != term2 || class != class2 || class != "rate_limited" {
		t.Fatalf("callInto: %s %s; call: %s %s", term, class, term2, class2)
	}
	if req.Messages[1].ReasoningContent != "thinking" {
		t.Fatal("the request's messages changed on a failed call")
	}
}
