package agent

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/report"
)

// Model is a Chat Completions endpoint. *openai.Client implements it.
type Model interface {
	CreateChatCompletion(ctx context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error)
}

// NewOpenAIModel returns a go-openai client for an OpenAI-compatible base
// URL (".../v1"), sending through doer (which retries and counts).
// apiKey may be empty for local servers.
func NewOpenAIModel(baseURL, apiKey string, doer openai.HTTPDoer) *openai.Client {
	cfg := openai.DefaultConfig(apiKey)
	cfg.BaseURL = strings.TrimRight(baseURL, "/")
	cfg.HTTPClient = doer
	return openai.NewClientWithConfig(cfg)
}

// zeroTemperature is what temperature 0 is sent as: go-openai drops a zero
// float32 (omitempty), and the server would then use its default (often 1).
// This is the value go-openai's documentation recommends.
const zeroTemperature = math.SmallestNonzeroFloat32

func temperature(t *float64) float32 {
	if t == nil {
		return 0 // omitted: the server's default
	}
	if *t == 0 {
		return zeroTemperature
	}
	return float32(*t)
}

// modelFailure classifies a failed model call into a termination and a
// failure class (empty when the rollout goes on to verify, as on a
// context-length error).
func modelFailure(ctx context.Context, err error) (Termination, string) {
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return Cancelled, report.FailCancelled
		}
		return Timeout, report.FailTimeout
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Timeout, report.FailTimeout
	}
	status, msg, code := 0, "", ""
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	switch {
	case errors.As(err, &apiErr):
		status, msg = apiErr.HTTPStatusCode, apiErr.Message
		if s, ok := apiErr.Code.(string); ok {
			code = s
		}
	case errors.As(err, &reqErr):
		status = reqErr.HTTPStatusCode
		msg = string(reqErr.Body)
	}
	switch {
	case status == http.StatusTooManyRequests:
		return ModelError, report.FailRateLimited
	case status >= 500:
		return ModelError, report.FailModelUnavailable
	case status == http.StatusBadRequest && isContextLength(code, msg):
		return ContextLength, ""
	case status >= 400:
		return ModelError, report.FailModelError
	case status == 0 && isTransport(err):
		return ModelError, report.FailModelUnavailable
	}
	// A 2xx whose body is not a chat completion.
	return InvalidOutput, report.FailModelError
}

func isContextLength(code, msg string) bool {
	if code == "context_length_exceeded" {
		return true
	}
	m := strings.ToLower(msg)
	return strings.Contains(m, "context length") || strings.Contains(m, "context_length") ||
		strings.Contains(m, "maximum context") || strings.Contains(m, "too many tokens") ||
		strings.Contains(m, "exceeds the context")
}

// isTransport reports whether err is a failure to talk to the server at
// all (refused, reset, DNS, TLS) rather than a bad answer.
func isTransport(err error) bool {
	var syntaxErr interface{ Offset() int64 }
	if errors.As(err, &syntaxErr) {
		return false
	}
	msg := err.Error()
	for _, s := range []string{"json", "unmarshal", "invalid character", "unexpected end of JSON"} {
		if strings.Contains(msg, s) {
			return false
		}
	}
	return true
}
