package agent_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/retry"
)

// runCounted runs the default row (no resource server needed: the model
// does not call tools) with an attempts counter in the context.
func runCounted(t *testing.T, cfg *agent.Config) (*agent.Trajectory, *retry.Counter) {
	t.Helper()
	var counter retry.Counter
	ctx := retry.WithCounter(context.Background(), &counter)
	task := parseTask(t, counterRow(""))
	return cfg.Run(ctx, task, nil, 1), &counter
}

const rateLimitBody = `{"error":{"message":"Rate limit reached","type":"rate_limit_error","code":"rate_limit_exceeded"}}`

func TestModel429ThenSuccess(t *testing.T) {
	m := newFakeModel(t, nil, status(429, rateLimitBody), final("ok"))
	tr, counter := runCounted(t, m.config(nil))
	if tr.Termination != agent.Completed || tr.FailureClass != "" {
		t.Fatalf("termination %q class %q (%s)", tr.Termination, tr.FailureClass, tr.Error)
	}
	if counter.Attempts() != 2 || m.calls() != 2 || counter.LastStatus() != 200 {
		t.Fatalf("attempts %d model calls %d last status %d, want 2, 2, 200", counter.Attempts(), m.calls(), counter.LastStatus())
	}
	m.mu.Lock()
	same := bytes.Equal(m.bodies[0], m.bodies[1])
	m.mu.Unlock()
	if !same {
		t.Fatal("the retried request has another body")
	}
}

func TestModel429Forever(t *testing.T) {
	m := newFakeModel(t, nil, status(429, rateLimitBody))
	tr, counter := runCounted(t, m.config(nil))
	if tr.Termination != agent.ModelError || tr.FailureClass != record.FailRateLimited {
		t.Fatalf("termination %q class %q", tr.Termination, tr.FailureClass)
	}
	if counter.Attempts() != fastPolicy.MaxAttempts || m.calls() != fastPolicy.MaxAttempts {
		t.Fatalf("attempts %d model calls %d, want %d", counter.Attempts(), m.calls(), fastPolicy.MaxAttempts)
	}
	if len(tr.Rounds) != 0 || !strings.Contains(tr.Error, "429") {
		t.Fatalf("rounds %d error %q", len(tr.Rounds), tr.Error)
	}
}

// An HTML error page (a proxy's 502) is model_unavailable, and the error
// text is short and valid UTF-8.
func TestModelHTML502(t *testing.T) {
	page := "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body><h1>Bad Gateway</h1>" +
		strings.Repeat("<p>Der Upstream-Server antwortete nicht — écrasé ✗</p>", 200) + "</body></html>"
	m := newFakeModel(t, nil, status(502, page, "Content-Type", "text/html"))
	tr, counter := runCounted(t, m.config(nil))
	if tr.Termination != agent.ModelError || tr.FailureClass != record.FailModelUnavailable {
		t.Fatalf("termination %q class %q", tr.Termination, tr.FailureClass)
	}
	if counter.Attempts() != fastPolicy.MaxAttempts {
		t.Fatalf("attempts %d, want %d (5xx is retried)", counter.Attempts(), fastPolicy.MaxAttempts)
	}
	if n := len(tr.Error); n > len("model call in round 0: ")+500+len("…") {
		t.Fatalf("error is %d bytes long: %q", n, tr.Error)
	}
	if !strings.HasSuffix(tr.Error, "…") || !strings.Contains(tr.Error, "502") {
		t.Fatalf("error %q", tr.Error)
	}
	if !utf8.ValidString(tr.Error) {
		t.Fatalf("error is not valid UTF-8: %q", tr.Error)
	}
}

func TestModelContextLength(t *testing.T) {
	for name, body := range map[string]string{
		"openai code": `{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9001 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}`,
		"vllm text":   `{"object":"error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens in the messages.","type":"BadRequestError","param":null,"code":400}`,
		"plain body":  `prompt is too long: the request exceeds the context window (too many tokens)`,
	} {
		t.Run(name, func(t *testing.T) {
			m := newFakeModel(t, nil, status(400, body))
			tr, counter := runCounted(t, m.config(nil))
			if tr.Termination != agent.ContextLength || tr.FailureClass != "" {
				t.Fatalf("termination %q class %q (%s)", tr.Termination, tr.FailureClass, tr.Error)
			}
			if counter.Attempts() != 1 {
				t.Fatalf("a 400 was retried: %d attempts", counter.Attempts())
			}
		})
	}
}

// Other 4xx are model errors, not retried.
func TestModelOther4xx(t *testing.T) {
	for _, code := range []int{400, 401, 404, 422} {
		m := newFakeModel(t, nil, status(code, `{"error":{"message":"nope","type":"invalid_request_error"}}`))
		tr, counter := runCounted(t, m.config(nil))
		if tr.Termination != agent.ModelError || tr.FailureClass != record.FailModelError || counter.Attempts() != 1 {
			t.Errorf("%d: termination %q class %q attempts %d", code, tr.Termination, tr.FailureClass, counter.Attempts())
		}
	}
}

// A 200 that is not a chat completion is invalid output.
func TestModelMalformed200(t *testing.T) {
	for name, body := range map[string]string{
		"not json":   `{"choices": [nope]}`,
		"html":       `<html>hello</html>`,
		"wrong type": `[1, 2, 3]`,
		"no choices": `{"id":"x","object":"chat.completion","choices":[]}`,
	} {
		t.Run(name, func(t *testing.T) {
			m := newFakeModel(t, nil, status(200, body, "Content-Type", "application/json"))
			tr, counter := runCounted(t, m.config(nil))
			if tr.Termination != agent.InvalidOutput || tr.FailureClass != record.FailModelError {
				t.Fatalf("termination %q class %q (%s)", tr.Termination, tr.FailureClass, tr.Error)
			}
			if counter.Attempts() != 1 || tr.Error == "" {
				t.Fatalf("attempts %d error %q", counter.Attempts(), tr.Error)
			}
		})
	}
}

func TestModelHangsTimesOut(t *testing.T) {
	m := newFakeModel(t, nil, hang)
	cfg := m.config(nil)
	cfg.ModelTimeout = 50 * time.Millisecond
	tr, counter := runCounted(t, cfg)
	if tr.Termination != agent.Timeout || tr.FailureClass != record.FailTimeout {
		t.Fatalf("termination %q class %q (%s)", tr.Termination, tr.FailureClass, tr.Error)
	}
	if counter.Attempts() != 1 {
		t.Fatalf("a timed-out call was retried: %d attempts", counter.Attempts())
	}
}

// The rollout's own context: a deadline is timeout, a cancel is cancelled.
func TestModelRolloutContext(t *testing.T) {
	m := newFakeModel(t, nil, hang)
	cfg := m.config(nil)
	task := parseTask(t, counterRow(""))

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	tr := cfg.Run(ctx, task, nil, 1)
	cancel()
	if tr.Termination != agent.Timeout || tr.FailureClass != record.FailTimeout {
		t.Fatalf("deadline: termination %q class %q", tr.Termination, tr.FailureClass)
	}

	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		for m.calls() < 2 {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	tr = cfg.Run(ctx, task, nil, 1)
	if tr.Termination != agent.Cancelled || tr.FailureClass != record.FailCancelled {
		t.Fatalf("cancel: termination %q class %q", tr.Termination, tr.FailureClass)
	}
}

// A model endpoint nobody listens on is model_unavailable, after retries.
func TestModelUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cfg := &agent.Config{Model: agent.NewOpenAIModel("http://"+addr+"/v1", "", &retry.Doer{Client: &http.Client{}, Policy: fastPolicy}), ModelName: "m"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	tr, counter := runCounted(t, cfg)
	if tr.Termination != agent.ModelError || tr.FailureClass != record.FailModelUnavailable {
		t.Fatalf("termination %q class %q (%s)", tr.Termination, tr.FailureClass, tr.Error)
	}
	if counter.Attempts() != fastPolicy.MaxAttempts {
		t.Fatalf("attempts %d", counter.Attempts())
	}
}

// Retry-After is honoured (seconds), through the real client.
func TestModelRetryAfterHonoured(t *testing.T) {
	m := newFakeModel(t, nil, status(429, rateLimitBody, "Retry-After", "2"), status(503, `busy`), final("ok"))
	var mu sync.Mutex
	var waits []time.Duration
	doer := &retry.Doer{Client: &http.Client{}, Policy: retry.Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond},
		Sleep: func(ctx context.Context, d time.Duration) error {
			mu.Lock()
			waits = append(waits, d)
			mu.Unlock()
			return nil
		}}
	tr, counter := runCounted(t, m.config(doer))
	if tr.Termination != agent.Completed || counter.Attempts() != 3 {
		t.Fatalf("termination %q attempts %d", tr.Termination, counter.Attempts())
	}
	if len(waits) != 2 || waits[0] != 2*time.Second || waits[1] < 0 || waits[1] > 2*time.Millisecond {
		t.Fatalf("waits %v, want [2s, backoff <= 2ms]", waits)
	}
}
