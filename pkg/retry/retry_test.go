package retry

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

var fast = Policy{MaxAttempts: 4, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}

// server answers request i with codes[i] (the last repeats) and records
// the bodies.
type server struct {
	srv    *httptest.Server
	mu     sync.Mutex
	bodies []string
	hook   func(i int)
}

func newServer(t *testing.T, codes []int, header ...string) *server {
	s := &server{}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		i := len(s.bodies)
		s.bodies = append(s.bodies, string(b))
		hook := s.hook
		s.mu.Unlock()
		if hook != nil {
			hook(i)
		}
		for j := 0; j+1 < len(header); j += 2 {
			w.Header().Set(header[j], header[j+1])
		}
		code := codes[min(i, len(codes)-1)]
		w.WriteHeader(code)
		io.WriteString(w, http.StatusText(code))
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *server) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...)
}

func TestRetryAfterParsing(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		v    string
		want time.Duration
		ok   bool
	}{
		{"2", 2 * time.Second, true},
		{"0", 0, true},
		{"1.5", 1500 * time.Millisecond, true},
		{"120", 2 * time.Minute, true},
		{now.Add(10 * time.Second).Format(http.TimeFormat), 10 * time.Second, true},
		{"Sat, 01 Mar 2025 12:00:30 GMT", 30 * time.Second, true},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0, true}, // a date in the past: now
		{"", 0, false},
		{"soon", 0, false},
		{"-3", 0, false},
		{"99999999999", time.Duration(math.MaxInt64), true}, // saturates, not wraps
		{"1e300", time.Duration(math.MaxInt64), true},
		{"2 seconds", 0, false},
		{"NaN", 0, false},
	}
	for _, c := range cases {
		got, ok := retryAfter(c.v, now)
		if got != c.want || ok != c.ok {
			t.Errorf("retryAfter(%q) = %v, %v; want %v, %v", c.v, got, ok, c.want, c.ok)
		}
	}
}

func TestNoRetryOnClientErrors(t *testing.T) {
	for _, code := range []int{200, 201, 400, 401, 404, 422} {
		s := newServer(t, []int{code})
		var c Counter
		ctx := WithCounter(context.Background(), &c)
		d := &Doer{Client: &http.Client{}, Policy: fast}
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.srv.URL, strings.NewReader("x"))
		resp, err := d.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != code || string(body) != http.StatusText(code) {
			t.Errorf("%d: got %d %q", code, resp.StatusCode, body)
		}
		if n := len(s.seen()); n != 1 || c.Attempts() != 1 || c.LastStatus() != code {
			t.Errorf("%d: %d requests, %d attempts, last status %d", code, n, c.Attempts(), c.LastStatus())
		}
	}
}

// Retried requests carry the same body, whether the body can be got again
// (GetBody) or is a one-shot reader that the Doer buffers.
func TestRetryReplaysBody(t *testing.T) {
	const payload = `{"model":"m","messages":[{"role":"user","content":"héllo"}]}`
	for name, mk := range map[string]func(url string) *http.Request{
		"GetBody": func(url string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(payload)))
			return r
		},
		"one-shot": func(url string) *http.Request {
			r, _ := http.NewRequest(http.MethodPost, url, io.NopCloser(strings.NewReader(payload)))
			if r.GetBody != nil {
				t.Fatal("want a one-shot body")
			}
			return r
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := newServer(t, []int{500, 503, 429, 200})
			var c Counter
			req := mk(s.srv.URL)
			req = req.WithContext(WithCounter(context.Background(), &c))
			resp, err := (&Doer{Client: &http.Client{}, Policy: fast}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			bodies := s.seen()
			if resp.StatusCode != 200 || len(bodies) != 4 || c.Attempts() != 4 || c.LastStatus() != 200 {
				t.Fatalf("status %d, %d requests, %d attempts", resp.StatusCode, len(bodies), c.Attempts())
			}
			for i, b := range bodies {
				if b != payload {
					t.Errorf("request %d body %q", i, b)
				}
			}
		})
	}
}

// After the last attempt the last response is returned as it is, body
// included.
func TestRetryGivesUpWithLastResponse(t *testing.T) {
	s := newServer(t, []int{503, 503, 502})
	var c Counter
	req, _ := http.NewRequestWithContext(WithCounter(context.Background(), &c), http.MethodPost, s.srv.URL, strings.NewReader("x"))
	resp, err := (&Doer{Client: &http.Client{}, Policy: Policy{MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 502 || string(body) != "Bad Gateway" || c.Attempts() != 3 || c.LastStatus() != 502 {
		t.Fatalf("status %d body %q attempts %d", resp.StatusCode, body, c.Attempts())
	}
}

func TestRetryTransportErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	var c Counter
	req, _ := http.NewRequestWithContext(WithCounter(context.Background(), &c), http.MethodGet, url, nil)
	resp, err := (&Doer{Client: &http.Client{}, Policy: fast}).Do(req)
	if err == nil || resp != nil {
		t.Fatalf("resp %v err %v", resp, err)
	}
	if c.Attempts() != fast.MaxAttempts || c.LastStatus() != 0 {
		t.Fatalf("attempts %d last status %d", c.Attempts(), c.LastStatus())
	}
}

// A cancel during the backoff ends Do at once with the context's error.
func TestRetryCancelDuringBackoff(t *testing.T) {
	s := newServer(t, []int{503})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.mu.Lock()
	s.hook = func(i int) { cancel() } // cancel once the first attempt is in
	s.mu.Unlock()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.srv.URL, strings.NewReader("x"))
	d := &Doer{Client: &http.Client{}, Policy: Policy{MaxAttempts: 5, BaseDelay: time.Hour, MaxDelay: time.Hour}}
	done := make(chan error, 1)
	go func() {
		resp, err := d.Do(req)
		if resp != nil {
			resp.Body.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Do kept waiting after the context was cancelled")
	}
	if n := len(s.seen()); n != 1 {
		t.Fatalf("%d requests after cancel, want 1", n)
	}
}

// Retry-After sets the wait, capped by MaxRetryAfter (DefaultPolicy's cap
// when the policy has none).
func TestRetryAfterWaits(t *testing.T) {
	cases := []struct {
		header   string
		maxAfter time.Duration
		want     time.Duration
	}{
		{"2", 0, 2 * time.Second},
		{"2", 30 * time.Second, 2 * time.Second},
		{"90", 0, DefaultPolicy.MaxRetryAfter},
		{"90", 500 * time.Millisecond, 500 * time.Millisecond},
		{"0", time.Minute, 0},
		{"99999999999", 0, DefaultPolicy.MaxRetryAfter}, // beyond time.Duration
		{"Inf", time.Second, time.Second},
	}
	for _, c := range cases {
		s := newServer(t, []int{429, 200}, "Retry-After", c.header)
		var waits []time.Duration
		p := fast
		p.MaxRetryAfter = c.maxAfter
		d := &Doer{Client: &http.Client{}, Policy: p, Sleep: func(ctx context.Context, d time.Duration) error {
			waits = append(waits, d)
			return nil
		}}
		req, _ := http.NewRequest(http.MethodGet, s.srv.URL, nil)
		resp, err := d.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if len(waits) != 1 || waits[0] != c.want {
			t.Errorf("Retry-After %s (max %v): waits %v, want [%v]", c.header, c.maxAfter, waits, c.want)
		}
	}
	// Without Retry-After: the backoff, within [0, BaseDelay*2^(n-1)].
	s := newServer(t, []int{500, 500, 500, 200})
	var waits []time.Duration
	d := &Doer{Client: &http.Client{}, Policy: Policy{MaxAttempts: 4, BaseDelay: 10 * time.Second, MaxDelay: 25 * time.Second},
		Sleep: func(ctx context.Context, d time.Duration) error { waits = append(waits, d); return nil }}
	req, _ := http.NewRequest(http.MethodGet, s.srv.URL, nil)
	resp, err := d.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ceil := []time.Duration{10 * time.Second, 20 * time.Second, 25 * time.Second}
	if len(waits) != 3 {
		t.Fatalf("waits %v", waits)
	}
	for i, w := range waits {
		if w < 0 || w > ceil[i] {
			t.Errorf("wait %d = %v, want in [0, %v]", i, w, ceil[i])
		}
	}
}

func TestBackoffBounds(t *testing.T) {
	d := &Doer{Policy: Policy{MaxAttempts: 100, BaseDelay: 500 * time.Millisecond, MaxDelay: 8 * time.Second}}
	for attempt := 1; attempt < 80; attempt++ {
		ceil := min(d.Policy.MaxDelay, d.Policy.BaseDelay<<min(attempt-1, 20))
		for i := 0; i < 50; i++ {
			if w := d.backoff(attempt); w < 0 || w > ceil {
				t.Fatalf("backoff(%d) = %v, want in [0, %v]", attempt, w, ceil)
			}
		}
	}
	if w := (&Doer{}).backoff(3); w != 0 {
		t.Fatalf("zero policy backoff %v", w)
	}
}

// A redirect refused by NoRedirect is not retried.
func TestNoRedirectNotRetried(t *testing.T) {
	var mu sync.Mutex
	hits := 0
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Error("redirect followed")
	}))
	defer target.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
		http.Redirect(w, r, target.URL, http.StatusFound)
	}))
	defer srv.Close()
	var c Counter
	req, _ := http.NewRequestWithContext(WithCounter(context.Background(), &c), http.MethodPost, srv.URL, strings.NewReader("{}"))
	resp, err := (&Doer{Client: &http.Client{CheckRedirect: NoRedirect}, Policy: fast}).Do(req)
	if resp != nil {
		resp.Body.Close()
	}
	if err == nil || !errors.Is(err, errNoRedirect) || !strings.Contains(err.Error(), target.URL) {
		t.Fatalf("err %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if hits != 1 || c.Attempts() != 1 {
		t.Fatalf("hits %d attempts %d", hits, c.Attempts())
	}
}

func TestPolicyValidate(t *testing.T) {
	if err := DefaultPolicy.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []Policy{
		{MaxAttempts: 0},
		{MaxAttempts: 1, BaseDelay: -1},
		{MaxAttempts: 1, BaseDelay: 2 * time.Second, MaxDelay: time.Second},
	} {
		if p.Validate() == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	if err := (Policy{MaxAttempts: 1}).Validate(); err != nil {
		t.Fatalf("no retry, no delay: %v", err)
	}
}

// CountAttempt counts only with a counter in the context.
func TestCountAttempt(t *testing.T) {
	CountAttempt(context.Background()) // no counter: no panic
	var c Counter
	ctx := WithCounter(context.Background(), &c)
	CountAttempt(ctx)
	CountAttempt(ctx)
	if c.Attempts() != 2 {
		t.Fatalf("attempts %d", c.Attempts())
	}
}

// Sleep returns nil when the wait is over and ctx.Err() when ctx ended first, whatever d is.
func TestSleep(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancelExpired()
	for _, c := range []struct {
		name string
		ctx  context.Context
		d    time.Duration
		want error
	}{
		{"no wait", live, 0, nil},
		{"negative", live, -time.Second, nil},
		{"short wait", live, time.Microsecond, nil},
		{"cancelled, no wait", cancelled, 0, context.Canceled},
		{"cancelled, an hour", cancelled, time.Hour, context.Canceled},
		{"past deadline, an hour", expired, time.Hour, context.DeadlineExceeded},
	} {
		if err := Sleep(c.ctx, c.d); !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// A context cancelled during the wait ends it.
	ctx, cancelLater := context.WithCancel(context.Background())
	go cancelLater()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled during an hour's wait: %v", err)
	}
}
