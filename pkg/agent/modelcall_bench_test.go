package agent_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/retry"
)

// BenchmarkModelCall is one model call over loopback HTTP as the runner makes it: the model
// client, the retrying doer reading the answer within its attempt, the shared transport; the
// httptest server's side counts too.
func BenchmarkModelCall(b *testing.B) {
	srv := httptest.NewServer(modelHandler())
	defer srv.Close()
	transport := benchTransport()
	defer transport.CloseIdleConnections()
	doer := &retry.Doer{Client: &http.Client{Transport: transport, CheckRedirect: retry.NoRedirect}, Policy: retry.DefaultPolicy, AttemptTimeout: 5 * time.Minute}
	m := agent.NewOpenAIModel(srv.URL+"/v1", "", doer)
	req := openai.ChatCompletionRequest{Model: "bench", Messages: []openai.ChatCompletionMessage{
		{Role: openai.ChatMessageRoleSystem, Content: "You are a weather assistant."},
		{Role: openai.ChatMessageRoleUser, Content: "What is the forecast for Paris on 2025-06-12?"},
	}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := m.CreateChatCompletion(ctx, req)
		if err != nil || len(resp.Choices) != 1 {
			b.Fatal(err)
		}
	}
}
