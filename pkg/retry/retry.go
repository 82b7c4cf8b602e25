// Package retry is an HTTP client wrapper that retries what is worth
// retrying (429, 5xx, connection errors), with exponential backoff, full
// jitter and Retry-After, within a bounded number of attempts per request
// and a budget of retries per rollout, and counts the attempts of each
// rollout through its context.
package retry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Policy says how often and how long to retry.
type Policy struct {
	// MaxAttempts is the number of tries of one request, first included
	// (1: no retry).
	MaxAttempts int
	// BaseDelay is the first backoff; it doubles each retry up to MaxDelay.
	BaseDelay time.Duration
	MaxDelay  time.Duration
	// MaxRetryAfter caps a server's Retry-After (0: DefaultPolicy's cap).
	MaxRetryAfter time.Duration
}

// DefaultPolicy retries up to 4 attempts, 0.5 s doubling to 8 s.
var DefaultPolicy = Policy{MaxAttempts: 4, BaseDelay: 500 * time.Millisecond, MaxDelay: 8 * time.Second, MaxRetryAfter: 30 * time.Second}

// Validate checks a policy.
func (p Policy) Validate() error {
	if p.MaxAttempts < 1 {
		return fmt.Errorf("retry attempts must be at least 1, got %d", p.MaxAttempts)
	}
	if p.BaseDelay < 0 || p.MaxDelay < p.BaseDelay {
		return fmt.Errorf("retry delays must satisfy 0 <= base (%v) <= max (%v)", p.BaseDelay, p.MaxDelay)
	}
	return nil
}

// Doer sends requests with retries. It implements go-openai's HTTPDoer.
type Doer struct {
	Client *http.Client
	Policy Policy
	// AttemptTimeout bounds each attempt, until its body is closed
	// (0: only the request's context). An attempt that runs out of it is
	// retried like a connection error: a new connection may well answer.
	AttemptTimeout time.Duration
	// MaxBodyBytes, when > 0, makes Do read the body of the answer it returns
	// into memory (within the attempt's deadline), at most MaxBodyBytes, and
	// hand it over as a *Body. An answer whose connection breaks mid-body is
	// then retried like any connection error, and a longer body ends the call
	// with a *BodyTooLargeError, not retried (the same request would get the
	// same answer). 0: the body is handed over unread; the caller bounds it.
	MaxBodyBytes int64
	// Sleep waits for d or until ctx ends; tests replace it.
	Sleep func(ctx context.Context, d time.Duration) error
}

// BodyTooLargeError is an answer longer than a cap.
type BodyTooLargeError struct {
	Limit  int64
	Status int    // the answer's HTTP status
	Prefix []byte // the first bytes of the body (at most 512), for messages
}

func (e *BodyTooLargeError) Error() string {
	return fmt.Sprintf("answer larger than %s (HTTP %d)", FormatBytes(e.Limit), e.Status)
}

// FormatBytes writes a byte count for messages: "32 MiB" when it is a
// whole number of MiB or KiB, else "1000 bytes".
func FormatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Counter counts the HTTP attempts made on behalf of one rollout and
// remembers the last status seen.
type Counter struct {
	attempts   atomic.Int32
	lastStatus atomic.Int32
}

// Attempts is the number of HTTP attempts made so far.
func (c *Counter) Attempts() int { return int(c.attempts.Load()) }

// LastStatus is the HTTP status of the last attempt (0: no response).
func (c *Counter) LastStatus() int { return int(c.lastStatus.Load()) }

type counterKey struct{}

// retries counts the retries of every Doer of the process.
var retries atomic.Int64

// Retries is the number of retries the Doers of this process have made so far (a request
// sent again after a 429, a 5xx or a transport error): what a metrics exporter reads.
func Retries() int64 { return retries.Load() }

// WithCounter returns a context whose requests are counted in c.
func WithCounter(ctx context.Context, c *Counter) context.Context {
	return context.WithValue(ctx, counterKey{}, c)
}

func counterFrom(ctx context.Context) *Counter {
	c, _ := ctx.Value(counterKey{}).(*Counter)
	return c
}

// CountAttempt counts one attempt of a request that is sent without Do.
func CountAttempt(ctx context.Context) {
	if c := counterFrom(ctx); c != nil {
		c.attempts.Add(1)
	}
}

// DefaultBudget is the number of retries one rollout may make in all, across
// all its calls (model calls, seed_session, verify), when the runner gives it
// a budget with WithBudget. Each call still makes at most Policy.MaxAttempts
// attempts; the budget stops a rollout that meets error after error from
// retrying every one of its calls in full.
const DefaultBudget = 20

// Budget is the retries left to one rollout. It is safe for concurrent use.
type Budget struct {
	size  int
	left  atomic.Int64
	spent atomic.Bool
}

// NewBudget returns a budget of n retries (n < 0: 0).
func NewBudget(n int) *Budget {
	b := &Budget{size: max(n, 0)}
	b.left.Store(int64(b.size))
	return b
}

// Size is the budget it started with.
func (b *Budget) Size() int { return b.size }

// Left is the number of retries left.
func (b *Budget) Left() int { return int(max(b.left.Load(), 0)) }

// Spent reports whether a retry was refused because the budget was spent.
func (b *Budget) Spent() bool { return b.spent.Load() }

// take takes one retry from the budget; false when there is none left.
func (b *Budget) take() bool {
	if b.left.Add(-1) >= 0 {
		return true
	}
	b.left.Add(1)
	b.spent.Store(true)
	return false
}

type budgetKey struct{}

// WithBudget returns a context whose requests share a budget of n retries:
// once they have retried n times in all, a request that fails is not
// retried again, and Do returns a *BudgetSpentError. Without a budget in
// the context, only Policy.MaxAttempts bounds the retries of each request.
func WithBudget(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, budgetKey{}, NewBudget(n))
}

// BudgetFrom returns the context's budget, or nil.
func BudgetFrom(ctx context.Context) *Budget {
	b, _ := ctx.Value(budgetKey{}).(*Budget)
	return b
}

// BudgetSpentError is a request that failed and was not retried because the
// rollout's retry budget was spent. Status and Body are its last answer's
// (Status 0: it got none, and Err says why); the failure is that answer's.
type BudgetSpentError struct {
	Budget int
	Status int
	Body   []byte // the start of the answer's body (at most 512 bytes)
	Err    error
}

func (e *BudgetSpentError) Error() string {
	last := "no answer"
	switch {
	case e.Status != 0:
		last = fmt.Sprintf("HTTP %d", e.Status)
		if body := strings.TrimSpace(strings.ToValidUTF8(string(e.Body), "")); body != "" {
			last += ": " + body
		}
	case e.Err != nil:
		last = e.Err.Error()
	}
	return fmt.Sprintf("retry budget of this rollout spent (%d retries); last attempt: %s", e.Budget, last)
}

func (e *BudgetSpentError) Unwrap() error { return e.Err }

// Retryable reports whether an HTTP status is worth another try.
func Retryable(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// Do sends req, retrying on 429, 5xx and transport errors (attempt
// timeouts and, with MaxBodyBytes, breaks mid-body included), at most
// Policy.MaxAttempts attempts and within the context's Budget. The body of
// a retried request is replayed with GetBody (http.NewRequest sets it for
// in-memory bodies). The last response is returned as it is, so that its
// status and body reach the caller; but when the budget refuses a retry,
// Do returns a *BudgetSpentError that carries the last status instead.
func (d *Doer) Do(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	counter := counterFrom(ctx)
	sleep := d.Sleep
	if sleep == nil {
		sleep = Sleep
	}
	attempts := max(d.Policy.MaxAttempts, 1)
	var body []byte
	if req.Body != nil && req.GetBody == nil {
		// Buffer a one-shot body so that it can be sent again.
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = b
	}
	budget := BudgetFrom(ctx)
	for attempt := 1; ; attempt++ {
		r := req
		if attempt > 1 || body != nil {
			r = req.Clone(ctx)
			switch {
			case body != nil:
				r.Body = io.NopCloser(bytes.NewReader(body))
			case req.GetBody != nil:
				b, err := req.GetBody()
				if err != nil {
					return nil, err
				}
				r.Body = b
			}
		}
		if counter != nil {
			counter.attempts.Add(1)
		}
		// An answer that will not be retried for its status is the one
		// returned: with MaxBodyBytes, its body is read in the attempt.
		resp, err := d.send(r, func(status int) bool { return !Retryable(status) || attempt >= attempts })
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		var tooLarge *BodyTooLargeError
		if errors.As(err, &tooLarge) {
			status = tooLarge.Status
		}
		if counter != nil {
			counter.lastStatus.Store(int32(status))
		}
		retry := (err != nil && ctx.Err() == nil && !errors.Is(err, errNoRedirect) && tooLarge == nil) || (err == nil && Retryable(status))
		if !retry || attempt >= attempts {
			return resp, err
		}
		if budget != nil && !budget.take() {
			e := &BudgetSpentError{Budget: budget.Size(), Status: status, Err: err}
			if resp != nil {
				e.Body, _ = io.ReadAll(io.LimitReader(resp.Body, 512))
				resp.Body.Close()
			}
			return nil, e
		}
		retries.Add(1)
		wait := d.backoff(attempt)
		if resp != nil {
			if ra, ok := retryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
				limit := d.Policy.MaxRetryAfter
				if limit <= 0 {
					limit = DefaultPolicy.MaxRetryAfter
				}
				wait = min(ra, limit)
			}
			// Drain a little so that the connection can be reused.
			io.CopyN(io.Discard, resp.Body, 64<<10)
			resp.Body.Close()
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
	}
}

// send makes one attempt, under AttemptTimeout when set: the deadline
// covers reading the body too, and ends when the body is closed. With
// MaxBodyBytes, the body of an answer whose status final(status) says is
// the last is read here, so that a break mid-body is an attempt's error.
func (d *Doer) send(r *http.Request, final func(status int) bool) (*http.Response, error) {
	parent := r.Context()
	ctx, cancel := parent, context.CancelFunc(func() {})
	if d.AttemptTimeout > 0 {
		ctx, cancel = context.WithTimeout(parent, d.AttemptTimeout)
		r = r.WithContext(ctx)
	}
	// timedOut names the attempt timeout in an error it caused.
	timedOut := func(err error) error {
		if d.AttemptTimeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
			return fmt.Errorf("no answer within the attempt timeout of %v: %w", d.AttemptTimeout, err)
		}
		return err
	}
	resp, err := d.Client.Do(r)
	if err != nil {
		err = timedOut(err)
		cancel()
		return nil, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	if d.MaxBodyBytes <= 0 || !final(resp.StatusCode) {
		return resp, nil
	}
	defer resp.Body.Close()
	b, err := readCapped(resp, d.MaxBodyBytes)
	if err != nil {
		var tooLarge *BodyTooLargeError
		if errors.As(err, &tooLarge) {
			return nil, err
		}
		return nil, timedOut(fmt.Errorf("reading the answer (HTTP %d): %w", resp.StatusCode, err))
	}
	body := &Body{b: b}
	body.Reset(b)
	resp.Body, resp.ContentLength = body, int64(len(b))
	return resp, nil
}

// Body is the body of an answer that Do read whole (Doer.MaxBodyBytes): a reader of its
// bytes, which Bytes hands over without a copy.
type Body struct {
	bytes.Reader
	b []byte
}

// Bytes is the whole body, however much of it was read; Do keeps no reference to it.
func (b *Body) Bytes() []byte { return b.b }

// Unread reports whether none of the body has been read yet: Bytes is then what a reader
// would get.
func (b *Body) Unread() bool { return b.Len() == len(b.b) }

// Close does nothing: the answer was read and its connection released.
func (b *Body) Close() error { return nil }

// ReadBody reads at most n bytes of r into one buffer: r's own when r is a *Body not yet read
// (no copy), else one of size+1 bytes when size (the announced length) is under n, so that an
// answer is read without growing its buffer.
func ReadBody(r io.Reader, size, n int64) ([]byte, error) {
	if b, ok := r.(*Body); ok && b.Unread() {
		k := min(int64(len(b.b)), max(n, 0))
		_, _ = b.Seek(k, io.SeekStart)
		return b.b[:k], nil
	}
	if size < 0 || size >= n {
		return io.ReadAll(io.LimitReader(r, n))
	}
	// One byte more than announced, so that the end is seen without a second buffer.
	buf := make([]byte, 0, size+1)
	for {
		m, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
		if len(buf) == cap(buf) {
			// Longer than announced (a transport would not let that happen): read the rest.
			rest, err := io.ReadAll(io.LimitReader(r, n-int64(len(buf))))
			return append(buf, rest...), err
		}
	}
}

type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// readCapped reads resp's body, at most limit bytes.
func readCapped(resp *http.Response, limit int64) ([]byte, error) {
	if resp.ContentLength > limit {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, &BodyTooLargeError{Limit: limit, Status: resp.StatusCode, Prefix: b}
	}
	b, err := ReadBody(resp.Body, resp.ContentLength, limit+1)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, &BodyTooLargeError{Limit: limit, Status: resp.StatusCode, Prefix: bytes.Clone(b[:min(512, len(b))])}
	}
	return b, nil
}

// backoff is full jitter: a uniform wait in [0, min(max, base*2^(n-1))].
func (d *Doer) backoff(attempt int) time.Duration {
	ceil := d.Policy.BaseDelay << (attempt - 1)
	if ceil > d.Policy.MaxDelay || ceil <= 0 {
		ceil = d.Policy.MaxDelay
	}
	if ceil <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(ceil) + 1))
}

// retryAfter parses a Retry-After header: seconds or an HTTP date.
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		if s >= float64(math.MaxInt64/int64(time.Second)) {
			return math.MaxInt64, true // saturate: a converted overflow is negative
		}
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}

// Sleep waits for d or until ctx ends, whichever comes first; it returns ctx.Err() when ctx
// ended first (also when d <= 0 and ctx has ended), else nil.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

var errNoRedirect = errors.New("redirects are not followed")

// NoRedirect is an http.Client CheckRedirect that refuses every redirect,
// so that a request never leaves the base URL it was configured with.
func NoRedirect(req *http.Request, via []*http.Request) error {
	return fmt.Errorf("%w (server redirected to %s)", errNoRedirect, req.URL.Redacted())
}
