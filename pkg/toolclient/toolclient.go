package toolclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/retry"
)

// DefaultMaxBodyBytes caps what is read of one resource-server answer.
const DefaultMaxBodyBytes = 16 << 20

// DefaultMaxToolResultBytes caps what is read of one tool call's answer (rollout run
// --max-tool-result): 1 MiB, some 250k tokens, more than any model's context takes in one
// message. A longer answer is cut there, and the cut recorded with the answer's size.
const DefaultMaxToolResultBytes = 1 << 20

// Server is a resource server at a base URL (NeMo Gym protocol). It is
// shared by all rollouts; each rollout opens its own Session.
type Server struct {
	Name string
	base *url.URL
	// Transport is shared by all sessions, so that connections are reused.
	Transport http.RoundTripper
	// Retry is the policy of seed_session and verify. Tool calls are not
	// retried: they may change session state (increment_counter).
	Retry retry.Policy
	// CallTimeout bounds one HTTP call (0: none): a tool call, or each attempt
	// of seed_session and verify, so that an attempt that hangs is retried
	// like one that fails.
	CallTimeout time.Duration
	// MaxBodyBytes caps one answer; 0: DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// MaxToolResultBytes caps one tool call's answer; 0: DefaultMaxToolResultBytes (never
	// more than MaxBodyBytes).
	MaxToolResultBytes int64
	// EndSession says the server takes POST /end_session (rollout's built-in servers do; it is
	// not part of NeMo Gym's protocol), so a rollout drops its session state when it is done
	// instead of leaving it to the server's TTL. A server that says so itself
	// (EndSessionHeader on a seed_session or verify answer, as `rollout serve` does) gets
	// it without this.
	EndSession bool
	// endAdvertised: an answer of the server carried EndSessionHeader.
	endAdvertised atomic.Bool

	// urls caches the URL of each endpoint (tool name) called, at most maxCachedURLs.
	urls     sync.Map // string -> string
	urlCount atomic.Int32
}

// EndSessionHeader on a seed_session or verify answer says the server takes POST /end_session:
// rollout's own servers send it (pkg/servers/gym's constant of the same name; the servers do
// not link this client, nor this client the servers, and cmd/rollout's
// TestServeSessionsEndedByURL holds the two to each other over HTTP).
const EndSessionHeader = "X-Rollout-End-Session"

// maxCachedURLs bounds Server.urls: names come from the model.
const maxCachedURLs = 1024

// New checks base and returns a resource-server client.
func New(name, base string, transport http.RoundTripper) (*Server, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("server %q: %w", base, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server %q: want an http:// or https:// URL", base)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("server %q: a base URL has no query or fragment", base)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	return &Server{Name: name, base: u, Transport: transport, Retry: retry.DefaultPolicy}, nil
}

// Base is the server's base URL.
func (s *Server) Base() string { return s.base.String() }

// Session is one rollout's conversation with a resource server: its own
// cookies, never shared, carried through seed_session, every tool call
// and verify.
type Session struct {
	srv     *Server
	client  http.Client
	doer    retry.Doer
	cookies cookieTransport
}

// NewSession opens a session without cookies.
func (s *Server) NewSession() *Session {
	sess := &Session{srv: s, cookies: cookieTransport{next: s.Transport, cookies: newCookieStore(s.base.Host)}}
	sess.client = http.Client{Transport: &sess.cookies, CheckRedirect: retry.NoRedirect}
	sess.doer = retry.Doer{Client: &sess.client, Policy: s.Retry}
	return sess
}

func (s *Server) maxBody() int64 {
	if s.MaxBodyBytes <= 0 {
		return DefaultMaxBodyBytes
	}
	return s.MaxBodyBytes
}

func (s *Server) maxToolResult() int64 {
	n := s.MaxToolResultBytes
	if n <= 0 {
		n = DefaultMaxToolResultBytes
	}
	return min(n, s.maxBody())
}

// CookieHeader is the Cookie header the session's next request to base/path would carry
// ("" for none).
func (s *Session) CookieHeader(path string) string {
	u, err := url.Parse(s.srv.url(path))
	if err != nil {
		return ""
	}
	h := s.cookies.cookies.header(u.Scheme == "https", u.Path, time.Now)
	if h == nil {
		return ""
	}
	return h[0]
}

// Answer is a resource server's reply to one POST.
type Answer struct {
	Status    int
	Body      []byte
	Truncated bool // the body was longer than MaxBodyBytes
	// Size is the length the answer announced (Content-Length; -1: not announced).
	Size int64
}

// Post sends body to base/path. retried says whether 429, 5xx, connection
// errors, answers that break mid-body and attempts that run out of
// CallTimeout are retried under the server's policy (and the rollout's
// retry budget); a call that is not retried has CallTimeout as one
// deadline. An error that CallTimeout caused says so.
func (s *Session) Post(ctx context.Context, path string, body []byte, retried bool) (*Answer, error) {
	return s.post(ctx, path, body, retried, s.srv.maxBody())
}

// post is Post with the answer capped at limit bytes.
func (s *Session) post(ctx context.Context, path string, body []byte, retried bool, limit int64) (*Answer, error) {
	callCtx := ctx
	if s.srv.CallTimeout > 0 && !retried {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithTimeout(ctx, s.srv.CallTimeout)
		defer cancel()
	}
	callErr := func(err error) error {
		if s.srv.CallTimeout > 0 && ctx.Err() == nil && errors.Is(callCtx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("no answer within the call timeout of %v: %w", s.srv.CallTimeout, err)
		}
		return err
	}
	req, err := http.NewRequestWithContext(callCtx, http.MethodPost, s.srv.url(path), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header["Content-Type"] = jsonContentType
	var resp *http.Response
	if retried {
		// Answers are read within their attempt, so that one that breaks
		// mid-body is retried.
		d := s.doer
		d.AttemptTimeout, d.MaxBodyBytes = s.srv.CallTimeout, limit
		resp, err = d.Do(req)
		var tooLarge *retry.BodyTooLargeError
		if errors.As(err, &tooLarge) {
			return &Answer{Status: tooLarge.Status, Body: tooLarge.Prefix, Truncated: true, Size: -1}, nil
		}
	} else {
		retry.CountAttempt(ctx)
		resp, err = s.client.Do(req)
	}
	if err != nil {
		return nil, callErr(err)
	}
	defer resp.Body.Close()
	if retried && !s.srv.endAdvertised.Load() && resp.Header[EndSessionHeader] != nil {
		s.srv.endAdvertised.Store(true) // a seed_session or verify answer of rollout's own servers
	}
	b, err := retry.ReadBody(resp.Body, resp.ContentLength, limit+1) // the doer's buffer when it read the answer
	a := &Answer{Status: resp.StatusCode, Body: b, Size: resp.ContentLength}
	if int64(len(b)) > limit {
		a.Body, a.Truncated = b[:limit], true
	}
	if err != nil {
		return a, callErr(fmt.Errorf("reading the answer of %s (HTTP %d): %w", path, resp.StatusCode, err))
	}
	return a, nil
}

// url is the URL of an endpoint: base/path.
func (s *Server) url(path string) string {
	if u, ok := s.urls.Load(path); ok {
		return u.(string)
	}
	u := *s.base
	u.Path += "/" + path
	us := u.String()
	if s.urlCount.Load() < maxCachedURLs {
		if _, loaded := s.urls.LoadOrStore(path, us); !loaded {
			s.urlCount.Add(1)
		}
	}
	return us
}

// jsonContentType is the Content-Type header of every POST (shared: never changed).
var jsonContentType = []string{"application/json"}

// Seed posts the whole task row to /seed_session.
func (s *Session) Seed(ctx context.Context, row []byte) error {
	a, err := s.Post(ctx, "seed_session", row, true)
	if err != nil {
		return fmt.Errorf("seed_session: %w", err)
	}
	if a.Status/100 != 2 {
		return fmt.Errorf("seed_session: HTTP %d: %s", a.Status, snippet(a.Body))
	}
	return nil
}

// Result is the outcome of one tool call.
type Result struct {
	// Output is shown to the model: the server's answer as text, also on
	// 4xx/5xx, or an error message when the call could not be made.
	Output string
	Status int
	// Failed: the call did not succeed (HTTP error, refused, unreachable).
	Failed bool
	// Unreachable: no HTTP answer at all (refused, reset, timed out).
	Unreachable bool
	// TimedOut: the call ran out of CallTimeout (or the rollout's deadline).
	TimedOut bool
	// OriginalBytes, when Output was cut (at --max-tool-result, or at the rollout's budget of
	// tool results), is the answer's length before the cut: its Content-Length, or -1 when
	// it announced none (the cut is then all that is known: longer).
	OriginalBytes int64
}

// CallTool posts the arguments to base/name. Names that could leave the
// base URL are refused; arguments that are not a JSON object never reach
// the server: the model gets an error message instead. An answer longer
// than MaxBodyBytes is cut, marked "[truncated at N bytes: ...]" for the
// model, and the call counts as failed: the model saw an incomplete answer.
func (s *Session) CallTool(ctx context.Context, name, arguments string) Result {
	if err := checkToolName(name); err != nil {
		return Result{Output: "Error: " + err.Error(), Failed: true}
	}
	args, err := Arguments(name, arguments)
	if err != nil {
		return Result{Output: "Error: " + err.Error(), Failed: true}
	}
	a, err := s.post(ctx, name, args, false, s.srv.maxToolResult())
	if err != nil {
		res := Result{Output: fmt.Sprintf("Error: tool %s failed: %v", name, err), Failed: true, Unreachable: a == nil,
			TimedOut: errors.Is(err, context.DeadlineExceeded)}
		if a != nil {
			res.Status = a.Status
		}
		return res
	}
	res := Result{Output: string(a.Body), Status: a.Status, Failed: a.Status/100 != 2}
	if a.Truncated {
		res.OriginalBytes = max(a.Size, -1)
		if a.Size > int64(len(a.Body)) {
			res.Output += fmt.Sprintf("\n[truncated at %d bytes: the answer of %s was %d bytes]", len(a.Body), name, a.Size)
		} else {
			res.OriginalBytes = -1
			res.Output += fmt.Sprintf("\n[truncated at %d bytes: the answer of %s was longer]", len(a.Body), name)
		}
		res.Failed = true
	}
	return res
}

// Arguments is the body a tool call sends: the model's arguments when
// they are one JSON object (valid UTF-8, surrounding white space trimmed),
// "{}" when they are empty; otherwise an error to show the model.
func Arguments(name, arguments string) ([]byte, error) {
	args := strings.TrimSpace(arguments)
	if args == "" {
		return []byte("{}"), nil // a call without arguments
	}
	if !utf8.ValidString(args) {
		return nil, fmt.Errorf("the arguments of %s are not valid JSON (invalid UTF-8): %s", name, snippet([]byte(arguments)))
	}
	if !json.Valid([]byte(args)) {
		return nil, fmt.Errorf("the arguments of %s are not valid JSON: %s", name, snippet([]byte(arguments)))
	}
	if args[0] != '{' {
		return nil, fmt.Errorf("the arguments of %s must be a JSON object, got %s", name, snippet([]byte(args)))
	}
	return []byte(args), nil
}

// checkToolName refuses names that would make a tool call reach another
// path or host than base/name.
func checkToolName(name string) error {
	if name == "" {
		return fmt.Errorf("empty tool name")
	}
	if strings.ContainsAny(name, "/?#%\\ ") || strings.Contains(name, "..") || strings.Contains(name, ":") {
		return fmt.Errorf("tool name %q refused: it must be a plain name, not a path or URL", record.Clip(name, 100))
	}
	if !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl) {
		return fmt.Errorf("tool name %q refused: it must be a plain name, without control characters or invalid UTF-8", record.Clip(name, 100))
	}
	switch name {
	case "seed_session", "verify", "end_session":
		return fmt.Errorf("tool name %q refused: it is a protocol endpoint", name)
	}
	return nil
}

// End tells the server the session is over (POST /end_session) when the server takes it
// (Server.EndSession, or the server said so with EndSessionHeader); a no-op otherwise. It is best-effort cleanup: not retried, bounded by
// a few seconds, and run even when ctx is already cancelled, so that an interrupted rollout still
// frees its state. Its error is for logs only; the rollout's result does not depend on it.
func (s *Session) End(ctx context.Context) error {
	if !s.srv.EndSession && !s.srv.endAdvertised.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), endSessionTimeout)
	defer cancel()
	u := *s.srv.base
	u.Path += "/end_session"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader("{}"))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return fmt.Errorf("end_session: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("end_session: HTTP %d", resp.StatusCode)
	}
	return nil
}

const endSessionTimeout = 5 * time.Second

// snippet shortens a body for an error message, in valid UTF-8.
func snippet(b []byte) string {
	return strings.ToValidUTF8(record.Clip(string(b), 300), "\uFFFD")
}

// PostVerify posts to /verify (retried like seed_session); it lets a
// Session serve as verify.Poster.
func (s *Session) PostVerify(ctx context.Context, body []byte) (int, []byte, error) {
	a, err := s.Post(ctx, "verify", body, true)
	if err != nil {
		return 0, nil, err
	}
	if a.Truncated {
		return a.Status, a.Body, fmt.Errorf("the answer was longer than %s", retry.FormatBytes(s.srv.maxBody()))
	}
	return a.Status, a.Body, nil
}
