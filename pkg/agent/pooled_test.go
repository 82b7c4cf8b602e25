package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/agent"
)

// The answers NewOpenAIModel decodes on its pool are what go-openai decodes itself from the
// same bytes, headers included, and an answer go-openai cannot decode fails with its error.
func TestOpenAIModelPooledDecodeIsGoOpenAIs(t *testing.T) {
	answers := map[string]string{
		"/tools/v1/chat/completions":     `{"id":"c1","object":"chat.completion","created":7,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"","tool_calls":[{"id":"t1","type":"function","function":{"name":"increment","arguments":"{\"n\":2}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":11,"completion_tokens":3,"total_tokens":14}}`,
		"/trailing/v1/chat/completions":  `{"id":"c2","choices":[{"message":{"role":"assistant","content":"ok ✓"},"finish_reason":"stop"}]} trailing bytes`,
		"/malformed/v1/chat/completions": `{"id":"c3","choices":[{"message":`,
		"/wrongtype/v1/chat/completions": `{"id":"c4","choices":{"message":"x"}}`,
		"/empty/v1/chat/completions":     ``,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", "req-1")
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, answers[r.URL.Path])
	}))
	defer srv.Close()
	req := openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "count"}}}
	for path := range answers {
		base := srv.URL + strings.TrimSuffix(path, "/chat/completions")
		cfg := openai.DefaultConfig("")
		cfg.BaseURL = base
		want, wantErr := openai.NewClientWithConfig(cfg).CreateChatCompletion(context.Background(), req)
		got, gotErr := agent.NewOpenAIModel(base, "", http.DefaultClient).CreateChatCompletion(context.Background(), req)
		if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
			t.Errorf("%s: error %v, go-openai's %v", path, gotErr, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: answer\n%+v\ngo-openai's\n%+v", path, got, want)
		}
		if wantErr == nil && got.Header().Get("X-Request-Id") != "req-1" {
			t.Errorf("%s: header %v", path, got.Header())
		}
	}
}

// Many calls at once share the pool's few goroutines and each gets its own answer.
func TestOpenAIModelPooledDecodeConcurrent(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body strings.Builder
		buf := make([]byte, 4096)
		n, _ := r.Body.Read(buf)
		body.Write(buf[:n])
		i := strings.Index(body.String(), `"content":"`)
		content := strings.SplitN(body.String()[i+len(`"content":"`):], `"`, 2)[0]
		fmt.Fprintf(w, `{"id":"c","choices":[{"message":{"role":"assistant","content":%q}}]}`, content)
	}))
	defer srv.Close()
	m := agent.NewOpenAIModel(srv.URL+"/v1", "", srv.Client())
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			want := fmt.Sprintf("message %d", i)
			resp, err := m.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "m",
				Messages: []openai.ChatCompletionMessage{{Role: "user", Content: want}}})
			if err != nil || len(resp.Choices) != 1 || resp.Choices[0].Message.Content != want {
				t.Errorf("call %d: %v %+v", i, err, resp)
			}
		})
	}
	wg.Wait()
}
