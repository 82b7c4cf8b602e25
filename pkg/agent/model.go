package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/retry"
)

// Model is a Chat Completions endpoint. *openai.Client implements it.
type Model interface {
	CreateChatCompletion(ctx context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error)
}

// DefaultMaxModelAnswerBytes caps what is read of one model answer: 32 MiB,
// far more than any chat completion (a 128k-token answer is well under 1 MiB).
// A longer answer ends the rollout with termination model_error and failure
// class model_error ("model answer larger than 32 MiB (HTTP 200)"), or
// model_unavailable / rate_limited when its status is a 5xx / 429.
const DefaultMaxModelAnswerBytes = 32 << 20

// ModelOption configures NewOpenAIModel.
type ModelOption func(*modelOptions)

type modelOptions struct {
	maxAnswer int64
}

// WithMaxAnswerBytes caps what is read of one model answer (n <= 0:
// DefaultMaxModelAnswerBytes).
func WithMaxAnswerBytes(n int64) ModelOption {
	return func(o *modelOptions) { o.maxAnswer = n }
}

// NewOpenAIModel returns a go-openai client for an OpenAI-compatible base
// URL (".../v1"), sending through doer (which retries and counts).
// apiKey may be empty for local servers.
//
// What is read of each answer is capped (WithMaxAnswerBytes; else the
// Doer's MaxBodyBytes when set; else DefaultMaxModelAnswerBytes). When doer
// is a *retry.Doer, the client uses a copy of it with MaxBodyBytes set to the
// cap, so that the answer is read within the attempt and a connection that
// breaks mid-answer is retried; the caller's Doer is left as it is.
func NewOpenAIModel(baseURL, apiKey string, doer openai.HTTPDoer, opts ...ModelOption) *openai.Client {
	var o modelOptions
	for _, f := range opts {
		f(&o)
	}
	limit := o.maxAnswer
	if d, ok := doer.(*retry.Doer); ok {
		if limit <= 0 {
			limit = d.MaxBodyBytes
		}
		if limit <= 0 {
			limit = DefaultMaxModelAnswerBytes
		}
		c := *d
		c.MaxBodyBytes = limit
		doer = &c
	}
	if limit <= 0 {
		limit = DefaultMaxModelAnswerBytes
	}
	cfg := openai.DefaultConfig(apiKey)
	cfg.BaseURL = strings.TrimRight(baseURL, "/")
	cfg.HTTPClient = &answerDoer{next: doer, max: limit}
	return openai.NewClientWithConfig(cfg)
}

// answerDoer caps every answer's body (whatever doer it wraps, so that
// go-openai never reads an unbounded body: it reads error bodies whole) and
// records its status and first bytes for the error message of the call.
type answerDoer struct {
	next openai.HTTPDoer
	max  int64
}

func (a *answerDoer) Do(req *http.Request) (*http.Response, error) {
	if id, ok := req.Context().Value(rolloutIDKey{}).(string); ok {
		req.Header.Set(RolloutIDHeader, id)
	}
	resp, err := a.next.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > a.max {
		resp.Body.Close()
		return nil, &retry.BodyTooLargeError{Limit: a.max, Status: resp.StatusCode}
	}
	t, _ := req.Context().Value(tapKey{}).(*answerTap)
	if t != nil {
		t.status = resp.StatusCode
	}
	resp.Body = &answerBody{ReadCloser: resp.Body, max: a.max, left: a.max, status: resp.StatusCode, tap: t}
	return resp, nil
}

// RolloutIDHeader is the header of every model request that names its rollout (see
// WithRolloutID). Servers ignore it; rollout's simulator numbers the retries of a request per
// rollout with it, so that which rollout an injected error hits does not depend on timing.
const RolloutIDHeader = "X-Rollout-Id"

type rolloutIDKey struct{}

// WithRolloutID returns a context whose model requests carry id in RolloutIDHeader. id must
// be a valid header value (no control characters).
func WithRolloutID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, rolloutIDKey{}, id)
}

// answerTap holds the status and the first bytes of a model call's answer.
type answerTap struct {
	status int
	prefix []byte
}

type tapKey struct{}

const tapBytes = 200

type answerBody struct {
	io.ReadCloser
	max, left int64
	status    int
	tap       *answerTap
}

func (b *answerBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// At the cap: one more byte means the answer is too large.
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		if n > 0 {
			e := &retry.BodyTooLargeError{Limit: b.max, Status: b.status}
			if b.tap != nil {
				e.Prefix = b.tap.prefix
			}
			return 0, e
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if t := b.tap; t != nil && len(t.prefix) < tapBytes {
		t.prefix = append(t.prefix, p[:min(n, tapBytes-len(t.prefix))]...)
	}
	return n, err
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
	var tooLarge *retry.BodyTooLargeError
	var spent *retry.BudgetSpentError
	switch {
	case errors.As(err, &tooLarge):
		// An answer too large to read is the model's error, unless its
		// status says the server is down or limiting.
		if !retry.Retryable(tooLarge.Status) {
			return ModelError, report.FailModelError
		}
		status = tooLarge.Status
	case errors.As(err, &spent):
		status, msg = spent.Status, string(spent.Body)
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

// modelErrorText is the message of a failed model call: specific about
// answers too large or not chat completions (with the start of the body).
func modelErrorText(err error, term Termination, tap *answerTap) string {
	var tooLarge *retry.BodyTooLargeError
	if errors.As(err, &tooLarge) {
		return "model " + tooLarge.Error()
	}
	if term == InvalidOutput && tap != nil {
		what := "the answer is not a chat completion"
		if tap.status != 0 {
			what = fmt.Sprintf("the answer (HTTP %d) is not a chat completion", tap.status)
		}
		body := strings.TrimSpace(strings.ToValidUTF8(string(tap.prefix), ""))
		if body == "" {
			return fmt.Sprintf("%s (%s): empty body", what, errText(err))
		}
		return fmt.Sprintf("%s (%s): %s", what, errText(err), report.Clip(body, tapBytes))
	}
	return errText(err)
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
	if errors.Is(err, io.EOF) {
		// A connection closed before the answer is a *url.Error; a bare EOF
		// is an empty 2xx body that go-openai could not decode.
		var ue *url.Error
		return errors.As(err, &ue)
	}
	msg := err.Error()
	for _, s := range []string{"json", "unmarshal", "invalid character", "unexpected end of JSON"} {
		if strings.Contains(msg, s) {
			return false
		}
	}
	return true
}
