package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/wire"
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

// Through an *OpenAIModel, callInto takes the pointer path (chatInto): the same answer as
// CreateChatCompletion by value, and the same error on a 429, a 500 and a body that is not a
// chat completion.
func TestCallIntoOpenAIModelIsCreateChatCompletion(t *testing.T) {
	answers := map[string]struct {
		status int
		body   string
	}{
		"ok":    {200, `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"","tool_calls":[{"id":"t1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`},
		"429":   {429, `{"error":{"message":"slow down","type":"rate_limit"}}`},
		"500":   {500, `upstream broke`},
		"notjs": {200, `<html>`},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := answers[r.Header.Get(wire.RolloutIDHeader)]
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	defer srv.Close()
	m := NewOpenAIModel(srv.URL+"/v1", "", http.DefaultClient)
	c := &Config{Model: m}
	for name := range answers {
		ctx := WithRolloutID(context.Background(), name)
		req := openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}}}
		want, wantErr := m.CreateChatCompletion(ctx, req)
		var got openai.ChatCompletionResponse
		_, _, err := c.callInto(ctx, &req, nil, &got)
		if fmt.Sprint(err) != fmt.Sprint(wantErr) || (err == nil) != (wantErr == nil) {
			t.Errorf("%s: error %v, want %v", name, err, wantErr)
		}
		if name == "ok" && (err != nil || got.ID != "c1" || len(got.Choices) != 1 || got.Choices[0].Message.ToolCalls[0].Function.Arguments != `{"a":1}`) {
			t.Errorf("%s: answer %+v, %v", name, got, err)
		}
		if !reflect.DeepEqual(got.Choices, want.Choices) || got.ID != want.ID || got.Usage != want.Usage {
			t.Errorf("%s: answer %+v, want %+v", name, got, want)
		}
	}
}
