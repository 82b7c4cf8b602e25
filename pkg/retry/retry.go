// Package retry is an HTTP client wrapper that retries what is worth
// retrying (429, 5xx, connection errors), with exponential backoff, full
// jitter and Retry-After, within a bounded number of attempts, and counts
// the attempts of each rollout through its context.
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
	// (0: only the request's context).
	AttemptTimeout time.Duration
	// Sleep waits for d or until ctx ends; tests replace it.
	Sleep func(ctx context.Context, d time.Duration) error
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

// Retryable reports whether an HTTP status is worth another try.
func Retryable(status int) bool {
	return status == http.StatusTooManyRequests || status >= 500
}

// Do sends req, retrying on 429, 5xx and transport errors. The body of a
// retried request is replayed with GetBody (http.NewRequest sets it for
// in-memory bodies). The last response is returned as it is, so that its
// status and body reach the caller.
func (d *Doer) Do(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	counter := counterFrom(ctx)
	sleep := d.Sleep
	if sleep == nil {
		sleep = sleepCtx
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
		resp, err := d.send(r)
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		if counter != nil {
			counter.lastStatus.Store(int32(status))
		}
		retry := (err != nil && ctx.Err() == nil && !errors.Is(err, errNoRedirect)) || (err == nil && Retryable(status))
		if !retry || attempt >= attempts {
			return resp, err
		}
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
// covers reading the body too, and ends when the body is closed.
func (d *Doer) send(r *http.Request) (*http.Response, error) {
	if d.AttemptTimeout <= 0 {
		return d.Client.Do(r)
	}
	ctx, cancel := context.WithTimeout(r.Context(), d.AttemptTimeout)
	resp, err := d.Client.Do(r.WithContext(ctx))
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
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

func sleepCtx(ctx context.Context, d time.Duration) error {
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
