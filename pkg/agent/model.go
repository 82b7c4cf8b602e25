package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/internal/jsonfast"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/wire"
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

// NewOpenAIModel returns a go-openai client (OpenAIModel) for an OpenAI-compatible base
// URL (".../v1"), sending through doer (which retries and counts).
// apiKey may be empty for local servers.
//
// What is read of each answer is capped (WithMaxAnswerBytes; else the
// Doer's MaxBodyBytes when set; else DefaultMaxModelAnswerBytes). When doer
// is a *retry.Doer, the client uses a copy of it with MaxBodyBytes set to the
// cap, so that the answer is read within the attempt and a connection that
// breaks mid-answer is retried; the caller's Doer is left as it is.
func NewOpenAIModel(baseURL, apiKey string, doer openai.HTTPDoer, opts ...ModelOption) *OpenAIModel {
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
	ad := &answerDoer{next: doer, max: limit}
	cfg.HTTPClient = ad
	m := &OpenAIModel{Client: openai.NewClientWithConfig(cfg), url: cfg.BaseURL + "/chat/completions", doer: ad}
	if apiKey != "" {
		m.auth = "Bearer " + apiKey
	}
	return m
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
		req.Header.Set(wire.RolloutIDHeader, id)
	}
	t, _ := req.Context().Value(tapKey{}).(*answerTap)
	if t != nil && (t.zeros || t.capture || len(t.patches) > 0) {
		if err := rewriteBody(req, func(body []byte) ([]byte, bool) {
			changed := false
			if t.zeros {
				body, changed = zeroSampling(body)
			}
			if t.capture {
				body = withTokens(body, t.prev)
				body, changed = askTokens(body, t.vllm), true // tokens.go
			}
			for _, p := range t.patches {
				if merged, err := MergePatch(body, p); err == nil { // request.go
					body, changed = merged, true
				}
			}
			if t.capture {
				t.request, t.url = body, req.URL // as sent
				t.do, t.rollout = a.next, req.Header.Get(wire.RolloutIDHeader)
			}
			return body, changed
		}); err != nil {
			return nil, err
		}
	}
	var resp *http.Response
	var err error
	if t != nil && t.capture && t.tc != nil && t.tc.llamaSeen.Load() {
		resp, err = t.tc.tokenIn(req, t, a.next) // llamatokens.go
	}
	if resp == nil && err == nil {
		resp, err = a.next.Do(req)
	}
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > a.max {
		resp.Body.Close()
		return nil, &retry.BodyTooLargeError{Limit: a.max, Status: resp.StatusCode}
	}
	if t != nil {
		t.status = resp.StatusCode
	}
	if rb, ok := resp.Body.(*retry.Body); ok && rb.Unread() && int64(len(rb.Bytes())) <= a.max {
		// Read whole by the retrying doer within its cap: its buffer is the answer, shared with
		// the tap instead of copied.
		if t != nil {
			t.saw(rb.Bytes(), true)
		}
	} else {
		resp.Body = &answerBody{ReadCloser: resp.Body, max: a.max, left: a.max, status: resp.StatusCode, tap: t}
	}
	if slot, ok := req.Context().Value(pooledAnswerKey{}).(*pooledAnswer); ok && resp.StatusCode >= http.StatusOK && resp.StatusCode < http.StatusBadRequest {
		decodeOnPool(resp, slot)
	}
	return resp, nil
}

type rolloutIDKey struct{}

// WithRolloutID returns a context whose model requests carry id in wire.RolloutIDHeader. id must
// be a valid header value (no control characters).
func WithRolloutID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, rolloutIDKey{}, id)
}

// answerTap holds the status and the first bytes of a model call's answer; zeros says that
// the request has a temperature or top_p of zeroTemperature, for zeroSampling to rewrite.
type answerTap struct {
	status int
	prefix []byte
	zeros  bool
	// capture asks the endpoint for the call's tokens (tokens.go), with vLLM's options when
	// vllm is set, and keeps the whole answer in body.
	capture, vllm bool
	body          []byte
	// prev is the previous call's tokens, sent back on an assistant message (sendTokens).
	prev *tokenPrefix
	// request and url are the request as sent, for llama-server's prompt ids (llamaPromptIDs),
	// asked through do, the doer the request went through, for rollout.
	request []byte
	url     *url.URL
	do      interface {
		Do(*http.Request) (*http.Response, error)
	}
	rollout string
	// tc is the run's token capture: once it has seen llama-server, the call is made by the
	// token-in path (llamatokens.go), and tokenNote says what its tokens lack.
	tc        *TokenCapture
	tokenNote string
	// keep keeps the whole answer in body too (for answerReasoning).
	keep bool
	// patches are the request options merged over the body, in order (request.go).
	patches []json.RawMessage
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
	if b.tap != nil {
		b.tap.saw(p[:n], false)
	}
	return n, err
}

// saw records the next bytes p of the answer: its first tapBytes, and all of it when the tap
// keeps the body. kept says that p is never written again (the retrying doer's buffer): the
// first bytes are then kept as they are instead of copied.
func (t *answerTap) saw(p []byte, kept bool) {
	if k := min(len(p), tapBytes-len(t.prefix)); k > 0 {
		if kept && t.prefix == nil {
			t.prefix = p[:k:k]
		} else {
			t.prefix = append(t.prefix, p[:k]...)
		}
	}
	if t.capture || t.keep {
		if kept && t.body == nil && len(p) > 0 {
			t.body = p[:len(p):len(p)]
		} else {
			t.body = append(t.body, p...)
		}
	}
}

// zeroTemperature is what a temperature or top_p of 0 is set to in the
// request struct: go-openai drops a zero float32 (omitempty), and the server
// would then use its default (often 1). On the wire it is a literal 0:
// zeroSampling rewrites it, because a server that takes 1e-45 as a positive
// temperature divides the logits by it (llama.cpp's sampler then picks the
// least likely kept token instead of the most likely one).
const zeroTemperature = math.SmallestNonzeroFloat32

// zeroTemperatureJSON is zeroTemperature as encoding/json writes a float32.
const zeroTemperatureJSON = "1e-45"

// rewriteBody replaces the JSON request body with what edit makes of it, in place of the body
// and of GetBody (for retries); when edit reports no change the body is left as it is.
// answerDoer calls it for the model calls that Config flags in their answerTap (the others'
// bodies are not read): zeroSampling writes a temperature or top_p of zeroTemperature as a
// literal 0, askTokens asks for the call's tokens, MergePatch merges the request options.
func rewriteBody(req *http.Request, edit func(body []byte) ([]byte, bool)) error {
	if req.Body == nil || req.GetBody == nil || req.ContentLength <= 0 {
		return nil
	}
	rc, err := req.GetBody()
	if err != nil {
		return err
	}
	body, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		return err
	}
	out, changed := edit(body)
	if !changed {
		return nil
	}
	req.Body.Close()
	req.ContentLength = int64(len(out))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(out)), nil }
	req.Body, _ = req.GetBody()
	return nil
}

// zeroSampling is body with every top-level "temperature" or "top_p" member
// whose value is zeroTemperatureJSON written as 0; changed is false (and body
// returned as it is) when there is none, or when body is not a JSON object.
func zeroSampling(body []byte) (out []byte, changed bool) {
	if !bytes.Contains(body, []byte(zeroTemperatureJSON)) {
		return body, false
	}
	s := jsonfast.New(body)
	s.SkipSpace()
	empty, ok := s.Begin('{')
	if !ok || empty {
		return body, false
	}
	var spans [][2]int // the values to write as 0
	for {
		start, end, _, ok := s.Key()
		if !ok {
			return body, false
		}
		key := string(body[start:end])
		v := s.Pos()
		if !s.Value(1) {
			return body, false
		}
		if (key == `"temperature"` || key == `"top_p"`) && string(body[v:s.Pos()]) == zeroTemperatureJSON {
			spans = append(spans, [2]int{v, s.Pos()})
		}
		more, ok := s.More('}')
		if !ok {
			return body, false
		}
		if !more {
			break
		}
	}
	if len(spans) == 0 {
		return body, false
	}
	out = make([]byte, 0, len(body))
	last := 0
	for _, sp := range spans {
		out = append(out, body[last:sp[0]]...)
		out = append(out, '0')
		last = sp[1]
	}
	return append(out, body[last:]...), true
}

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
func modelFailure(ctx context.Context, err error) (Termination, record.FailureClass) {
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return Cancelled, record.FailCancelled
		}
		return Timeout, record.FailTimeout
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Timeout, record.FailTimeout
	}
	var usage *wire.UsageError
	if errors.As(err, &usage) {
		return InvalidOutput, record.FailModelError
	}
	var tooLarge *retry.BodyTooLargeError
	if errors.As(err, &tooLarge) {
		// An answer too large to read is the model's error, unless its
		// status says the server is down or limiting.
		if !retry.Retryable(tooLarge.Status) {
			return ModelError, record.FailModelError
		}
	}
	e, ok := endpointErrorOf(err)
	status := e.Status
	if !ok && tooLarge != nil {
		status = tooLarge.Status
	}
	switch {
	case status == http.StatusTooManyRequests:
		return ModelError, record.FailRateLimited
	case status >= 500 && e.outputUnparsable():
		// The server could not parse what the model wrote: the same request
		// gets the same answer again, so it is the model's result, not an outage.
		return ModelError, record.FailModelError
	case status >= 500:
		return ModelError, record.FailModelUnavailable
	case status >= 400 && e.contextLength():
		return ContextLength, ""
	case status >= 400:
		return ModelError, record.FailModelError
	case status == 0 && isTransport(err):
		return ModelError, record.FailModelUnavailable
	}
	// A 2xx whose body is not a chat completion.
	return InvalidOutput, record.FailModelError
}

// endpointError is a model call's error answer as the endpoint worded it.
type endpointError struct {
	Status  int
	Type    string // "invalid_request_error", "BadRequestError", "exceed_context_size_error", ...
	Code    string // "context_length_exceeded", or a number's text ("400")
	Message string
}

// endpointErrorOf reads the endpoint's error answer out of a failed call: go-openai's
// *APIError (the nested {"error": {...}} of OpenAI and llama.cpp), or the body of a
// *RequestError or *retry.BudgetSpentError, in any shape parseErrorBody reads. ok is false
// when the call got no error answer (a transport failure, a 2xx that did not decode).
func endpointErrorOf(err error) (e endpointError, ok bool) {
	var apiErr *openai.APIError
	var reqErr *openai.RequestError
	var spent *retry.BudgetSpentError
	switch {
	case errors.As(err, &spent):
		if spent.Status == 0 {
			return e, false
		}
		e = parseErrorBody(spent.Body)
		e.Status = spent.Status
	case errors.As(err, &reqErr):
		// Before *APIError: a body go-openai could not read as {"error": {...}} is a
		// *RequestError that may wrap an empty *APIError.
		e = parseErrorBody(reqErr.Body)
		e.Status = reqErr.HTTPStatusCode
	case errors.As(err, &apiErr):
		e = endpointError{Status: apiErr.HTTPStatusCode, Type: apiErr.Type, Message: apiErr.Message, Code: codeText(apiErr.Code)}
	default:
		return e, false
	}
	return e, e.Status != 0
}

// parseErrorBody reads the error body shapes of real servers: {"error": {"message", "type",
// "code"}} (OpenAI, llama.cpp), {"object": "error", "message", "type", "code"} at the top
// level (vLLM, SGLang), {"error": "text"}, {"detail": "text" or [...]} (FastAPI servers) and
// {"message": "text"}. Anything else is kept as the body's text (clipped) in Message.
func parseErrorBody(body []byte) endpointError {
	var top struct {
		Error   json.RawMessage `json:"error"`
		Message json.RawMessage `json:"message"`
		Type    string          `json:"type"`
		Code    any             `json:"code"`
		Detail  json.RawMessage `json:"detail"`
	}
	text := strings.TrimSpace(strings.ToValidUTF8(string(body), ""))
	if json.Unmarshal(body, &top) != nil {
		return endpointError{Message: record.Clip(text, 500)}
	}
	var nested struct {
		Message json.RawMessage `json:"message"`
		Type    string          `json:"type"`
		Code    any             `json:"code"`
	}
	switch {
	case len(top.Error) > 0 && top.Error[0] == '{' && json.Unmarshal(top.Error, &nested) == nil:
		return endpointError{Message: messageText(nested.Message), Type: nested.Type, Code: codeText(nested.Code)}
	case len(top.Error) > 0 && top.Error[0] == '"':
		return endpointError{Message: messageText(top.Error), Type: top.Type, Code: codeText(top.Code)}
	case len(top.Message) > 0:
		return endpointError{Message: messageText(top.Message), Type: top.Type, Code: codeText(top.Code)}
	case len(top.Detail) > 0:
		return endpointError{Message: messageText(top.Detail)}
	}
	return endpointError{Message: record.Clip(text, 500)}
}

// messageText is a message field as text: a JSON string's value, anything else (an array of
// validation errors, say) as its compact JSON.
func messageText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var b bytes.Buffer
	if json.Compact(&b, raw) == nil {
		return b.String()
	}
	return string(raw)
}

// codeText is an error code as text: a string as it is, a number in decimal, null as "".
func codeText(code any) string {
	switch c := code.(type) {
	case nil:
		return ""
	case string:
		return c
	case float64:
		return strconv.FormatFloat(c, 'f', -1, 64)
	default:
		return fmt.Sprint(c)
	}
}

// String is the error as stored in a record: "HTTP 400 exceed_context_size_error: request
// (1124 tokens) exceeds ..."; the code is added when it says more than the status or the type.
func (e endpointError) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d", e.Status)
	if e.Type != "" {
		b.WriteString(" " + e.Type)
	}
	if e.Code != "" && e.Code != strconv.Itoa(e.Status) && e.Code != e.Type {
		b.WriteString(" (code " + e.Code + ")")
	}
	if m := strings.TrimSpace(e.Message); m != "" {
		b.WriteString(": " + m)
	}
	return record.Clip(b.String(), 500)
}

// contextLength reports whether the error says the request does not fit the model's context:
// by its type or code first (OpenAI's code context_length_exceeded, llama.cpp's type
// exceed_context_size_error), then by the wording of vLLM ("This model's maximum context length
// is ...", "... longer than the maximum model length of ..."), SGLang ("The input (N tokens) is
// longer than the model's context length", "Requested token count exceeds the model's maximum
// context length"), llama.cpp ("exceeds the available context size") and servers derived from
// it ("exceed n_ctx_per_seq").
func (e endpointError) contextLength() bool {
	switch e.Code {
	case "context_length_exceeded", "context_window_exceeded":
		return true
	}
	switch e.Type {
	case "exceed_context_size_error", "context_length_exceeded":
		return true
	}
	m := strings.ToLower(e.Message)
	for _, s := range []string{"context length", "context_length", "context size", "context window",
		"maximum model length", "n_ctx", "too many tokens"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// outputUnparsable reports whether a 5xx says the server could not parse the model's own
// output (llama.cpp: "Failed to parse tool call arguments as JSON", "The model produced output
// that does not match the expected ... format", a json.exception on invalid UTF-8 it produced).
func (e endpointError) outputUnparsable() bool {
	m := strings.ToLower(e.Message)
	for _, s := range []string{"failed to parse", "does not match the expected", "json.exception", "invalid utf-8"} {
		if strings.Contains(m, s) {
			return true
		}
	}
	return false
}

// modelErrorText is the message of a failed model call: specific about
// answers too large or not chat completions (with the start of the body).
func modelErrorText(err error, term Termination, tap *answerTap) string {
	text := failureText(err, term, tap)
	var re redactedError
	if errors.As(err, &re) {
		return re.redact(text) // the endpoint's parts and the answer's first bytes may echo the key
	}
	return text
}

func failureText(err error, term Termination, tap *answerTap) string {
	var tooLarge *retry.BodyTooLargeError
	if errors.As(err, &tooLarge) {
		return "model " + tooLarge.Error()
	}
	var usage *wire.UsageError
	if errors.As(err, &usage) {
		return usage.Error()
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
		return fmt.Sprintf("%s (%s): %s", what, errText(err), record.Clip(body, tapBytes))
	}
	if e, ok := endpointErrorOf(err); ok {
		var spent *retry.BudgetSpentError
		if errors.As(err, &spent) {
			return fmt.Sprintf("retry budget of this rollout spent (%d retries); last attempt: %s", spent.Budget, e)
		}
		return e.String()
	}
	return errText(err)
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

// OpenAIModel is a go-openai client whose answers are decoded on a small pool of goroutines
// (answerDecoders) instead of the calling one. encoding/json's reflective decoder of a chat
// completion grows a goroutine's stack to 32 KiB, and a goroutine keeps a grown stack while it
// waits: a rollout's goroutine, which waits for every model and tool call, would hold 32 KiB
// for its whole life. The pool's few goroutines hold it instead.
//
// CreateChatCompletion sends the requests the runner makes itself, as go-openai sends them: the
// same bytes (appendChatRequest writes them without reflection), the same headers, the answer
// and the errors go-openai makes of what comes back. A request it does not take on goes
// through go-openai's own CreateChatCompletion.
type OpenAIModel struct {
	*openai.Client
	url  string // the base URL and /chat/completions, as go-openai joins them
	auth string // the Authorization header ("Bearer KEY"), empty without a key
	doer *answerDoer
}

// pooledAnswer is where answerDoer leaves an answer it decoded on the pool.
type pooledAnswer struct {
	resp openai.ChatCompletionResponse
	ok   bool
}

type pooledAnswerKey struct{}

// CreateChatCompletion is the client's, with the answer decoded on the pool.
func (m *OpenAIModel) CreateChatCompletion(ctx context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error) {
	var resp openai.ChatCompletionResponse
	err := m.chatInto(ctx, &req, &resp)
	return resp, err
}

// chatInto is CreateChatCompletion with the request and the answer passed by pointer, for the
// agent loop (callInto): a rollout's goroutine waits in it, and a request passed by value is
// copied into every frame on the way. What needs the request by value (go-openai's own
// client, its validator) is called from functions of their own, whose frames are gone by
// the time the request is sent.
func (m *OpenAIModel) chatInto(ctx context.Context, req *openai.ChatCompletionRequest, resp *openai.ChatCompletionResponse) (err error) {
	if body, ok := m.requestBody(req); ok {
		return m.send(ctx, body, resp)
	}
	return m.viaClient(ctx, req, resp)
}

// requestBody is req's body when CreateChatCompletion sends req itself (ok false: go-openai
// sends it). Not inlined: the encoder's locals are not in the frames the call waits in.
//
//go:noinline
func (m *OpenAIModel) requestBody(req *openai.ChatCompletionRequest) ([]byte, bool) {
	if m.doer == nil || !sendsItself(req) {
		return nil, false
	}
	return appendChatRequest(make([]byte, 0, requestSizeHint(req)), req)
}

// viaClient sends req through go-openai's CreateChatCompletion, the answer decoded on the pool.
//
//go:noinline
func (m *OpenAIModel) viaClient(ctx context.Context, req *openai.ChatCompletionRequest, resp *openai.ChatCompletionResponse) error {
	slot := new(pooledAnswer)
	r, err := m.Client.CreateChatCompletion(context.WithValue(ctx, pooledAnswerKey{}, slot), *req)
	if err != nil || !slot.ok {
		*resp = r
		return err
	}
	slot.resp.SetHeader(r.Header())
	*resp = slot.resp
	return nil
}

// sendsItself reports whether CreateChatCompletion sends req itself: not a stream, and not a
// request that go-openai refuses before sending it (a reasoning model's limits, the legacy
// completion models, whose names all have one of these words in them). Not inlined: the
// validator takes the request by value.
//
//go:noinline
func sendsItself(req *openai.ChatCompletionRequest) bool {
	if req.Stream || openai.NewReasoningValidator().Validate(*req) != nil {
		return false
	}
	for _, w := range []string{"davinci", "curie", "babbage", "ada", "cushman"} {
		if strings.Contains(req.Model, w) {
			return false
		}
	}
	return true
}

// requestSizeHint is about the size of req's encoding, so that it is written into one buffer.
func requestSizeHint(req *openai.ChatCompletionRequest) int {
	n := 256 + len(req.Model) + messagesSize(req.Messages)
	for i := range req.Tools {
		if f := req.Tools[i].Function; f != nil {
			n += 64 + len(f.Name) + len(f.Description)
			if p, ok := f.Parameters.(json.RawMessage); ok {
				n += len(p)
			}
		}
	}
	return n + n/16 // escapes
}

// send posts body as go-openai's CreateChatCompletion posts a request (its headers, through
// the same doer) and makes of the answer what it makes: the decoded answer with the answer's
// header, an *openai.APIError or *openai.RequestError for a failure status, the doer's or the
// decoder's error as it is. The answer is read whole and decoded by decodeAnswer, or where
// that is not sure to read it as encoding/json does, by encoding/json on the decoders' pool.
func (m *OpenAIModel) send(ctx context.Context, body []byte, resp *openai.ChatCompletionResponse) error {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, m.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	if m.auth != "" {
		hreq.Header.Set("Authorization", m.auth)
	}
	hreq.Header.Set("Accept", "application/json")
	hreq.Header.Set("Content-Type", "application/json")
	res, err := m.doer.Do(hreq)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode < http.StatusOK || res.StatusCode >= http.StatusBadRequest {
		resp.SetHeader(res.Header)
		return errorAnswer(res)
	}
	resp.SetHeader(res.Header)
	var data []byte
	if rb, ok := res.Body.(*retry.Body); ok && rb.Unread() {
		// The retrying doer read the answer whole within its attempt: its buffer is the answer
		// (answerDoer checked it against the cap), read once.
		data = rb.Bytes()
	} else {
		bp := answerBuffers.Get().(*[]byte)
		buf, err := readAll(res.Body, (*bp)[:0], res.ContentLength)
		defer func() {
			if cap(buf) <= maxPooledAnswer {
				*bp = buf[:0]
				answerBuffers.Put(bp)
			}
		}()
		if err != nil {
			// What json.Decoder makes of the bytes read and then the error, as go-openai reads the body.
			return json.NewDecoder(io.MultiReader(bytes.NewReader(buf), errReader{err})).Decode(resp)
		}
		data = buf
	}
	if decodeAnswer(data, resp) {
		return nil
	}
	onDecoder(func() { err = json.NewDecoder(bytes.NewReader(data)).Decode(resp) })
	return err
}

// answerBuffers holds the buffers answers not read by a retrying doer are read into
// (decodeAnswer copies what it keeps), up to maxPooledAnswer bytes each.
const maxPooledAnswer = 64 << 10

var answerBuffers = sync.Pool{New: func() any { return new([]byte) }}

// readAll appends what r reads to buf up to EOF, growing it to size first when size (the
// answer's Content-Length) is known.
func readAll(r io.Reader, buf []byte, size int64) ([]byte, error) {
	if size > 0 && size < 64<<20 && int64(cap(buf)-len(buf)) <= size {
		buf = append(buf, make([]byte, size+1)...)[:len(buf)]
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// errorAnswer is go-openai's error for an answer with a failure status: an *openai.APIError
// when the body is {"error": {...}}, else an *openai.RequestError with the body.
func errorAnswer(res *http.Response) error {
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("error, reading response body: %w", err)
	}
	var errRes openai.ErrorResponse
	err = json.Unmarshal(body, &errRes)
	if err != nil || errRes.Error == nil {
		reqErr := &openai.RequestError{HTTPStatus: res.Status, HTTPStatusCode: res.StatusCode, Err: err, Body: body}
		if errRes.Error != nil {
			reqErr.Err = errRes.Error
		}
		return reqErr
	}
	errRes.Error.HTTPStatus = res.Status
	errRes.Error.HTTPStatusCode = res.StatusCode
	return errRes.Error
}

// answerDecoders runs answer decoding on GOMAXPROCS*4 goroutines started on first use.
var answerDecoders struct {
	once sync.Once
	jobs chan func()
}

func onDecoder(f func()) {
	answerDecoders.once.Do(func() {
		n := runtime.GOMAXPROCS(0) * 4
		answerDecoders.jobs = make(chan func(), n)
		for range n {
			go func() {
				for job := range answerDecoders.jobs {
					job()
				}
			}()
		}
	})
	done := make(chan struct{})
	answerDecoders.jobs <- func() { f(); close(done) }
	<-done
}

// decodeOnPool reads a successful answer's body whole and decodes it on the pool into the
// request's pooledAnswer; go-openai is then handed "{}" to decode. A body that cannot be read or
// decoded is handed to go-openai as it was read, so that its error is go-openai's as before.
func decodeOnPool(resp *http.Response, slot *pooledAnswer) {
	body := resp.Body
	data, err := io.ReadAll(body)
	if err != nil {
		resp.Body = replayBody{io.MultiReader(bytes.NewReader(data), errReader{err}), body}
		return
	}
	var derr error
	onDecoder(func() { derr = json.NewDecoder(bytes.NewReader(data)).Decode(&slot.resp) })
	if derr != nil {
		slot.resp = openai.ChatCompletionResponse{}
		resp.Body = replayBody{bytes.NewReader(data), body}
		return
	}
	slot.ok = true
	resp.Body = replayBody{strings.NewReader("{}"), body}
}

// replayBody reads from r and closes the answer's own body.
type replayBody struct {
	r io.Reader
	c io.Closer
}

func (b replayBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b replayBody) Close() error               { return b.c.Close() }

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
