package retry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/testnet"
)

// post makes one call through d under ctx and returns its status (0 with an error).
func post(t *testing.T, ctx context.Context, d *Doer, url string) (int, error) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"x":1}`))
	resp, err := d.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// A server that always answers 429, called 10 times with a budget of 5 retries and 4
// attempts a call: the first call retries 3 times, the second 2 and is refused its third
// retry, the 8 others are not retried at all. 15 attempts in all: calls + budget.
func TestBudgetBoundsRetriesAcrossCalls(t *testing.T) {
	s := newServer(t, []int{429})
	var c Counter
	ctx := WithBudget(WithCounter(context.Background(), &c), 5)
	d := &Doer{Client: &http.Client{}, Policy: fast} // 4 attempts
	status, err := post(t, ctx, d, s.srv.URL)
	if status != 429 || err != nil {
		t.Fatalf("call 1: status %d err %v, want the 429 after 4 attempts", status, err)
	}
	for i := 2; i <= 10; i++ {
		_, err := post(t, ctx, d, s.srv.URL)
		var be *BudgetSpentError
		if !errors.As(err, &be) || be.Status != 429 || be.Budget != 5 {
			t.Fatalf("call %d: %v, want a *BudgetSpentError with status 429", i, err)
		}
		want := "retry budget of this rollout spent (5 retries); last attempt: HTTP 429: Too Many Requests"
		if err.Error() != want {
			t.Fatalf("call %d: %q, want %q", i, err, want)
		}
	}
	if n := len(s.seen()); n != 15 || c.Attempts() != 15 || c.LastStatus() != 429 {
		t.Fatalf("%d requests, %d attempts, last status %d; want 15 (10 calls + 5 retries)", n, c.Attempts(), c.LastStatus())
	}
	b := BudgetFrom(ctx)
	if b.Left() != 0 || !b.Spent() || b.Size() != 5 {
		t.Fatalf("budget left %d spent %v size %d", b.Left(), b.Spent(), b.Size())
	}
}

// Budgets are per context: rollouts running at the same time against the same failing
// server each get their own, and a context without one keeps the per-request bound only.
func TestBudgetPerRollout(t *testing.T) {
	s := newServer(t, []int{503})
	d := &Doer{Client: &http.Client{}, Policy: fast}
	const rollouts, calls, budget = 8, 5, 2
	counters := make([]Counter, rollouts)
	var wg sync.WaitGroup
	for i := range rollouts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := WithBudget(WithCounter(context.Background(), &counters[i]), budget)
			for range calls {
				post(t, ctx, d, s.srv.URL)
			}
		}()
	}
	wg.Wait()
	for i := range counters {
		if n := counters[i].Attempts(); n != calls+budget {
			t.Errorf("rollout %d: %d attempts, want %d", i, n, calls+budget)
		}
	}
	var c Counter
	ctx := WithCounter(context.Background(), &c)
	for range calls {
		post(t, ctx, d, s.srv.URL)
	}
	if c.Attempts() != calls*fast.MaxAttempts {
		t.Fatalf("without a budget: %d attempts, want %d", c.Attempts(), calls*fast.MaxAttempts)
	}
	if n := len(s.seen()); n != rollouts*(calls+budget)+calls*fast.MaxAttempts {
		t.Fatalf("the server saw %d requests", n)
	}
}

// A budget of 0 means no retries at all; a spent budget on a connection error keeps the
// cause (errors.As finds the *url.Error).
func TestBudgetZeroAndTransportCause(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + ln.Addr().String()
	ln.Close()
	var c Counter
	ctx := WithBudget(WithCounter(context.Background(), &c), 0)
	_, err = post(t, ctx, &Doer{Client: &http.Client{}, Policy: fast}, addr)
	var be *BudgetSpentError
	var ue *url.Error
	if !errors.As(err, &be) || be.Status != 0 || !errors.As(err, &ue) || c.Attempts() != 1 {
		t.Fatalf("err %v attempts %d", err, c.Attempts())
	}
	if !strings.Contains(err.Error(), "retry budget of this rollout spent (0 retries); last attempt: Post") ||
		!strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("message %q", err)
	}
	// Success needs no budget.
	s := newServer(t, []int{200})
	if status, err := post(t, ctx, &Doer{Client: &http.Client{}, Policy: fast}, s.srv.URL); status != 200 || err != nil {
		t.Fatalf("status %d err %v", status, err)
	}
}

// hijack answers with raw bytes on the connection, then closes it.
func hijack(w http.ResponseWriter, raw string) { testnet.RawAnswer(w, raw) }

// With MaxBodyBytes, an answer whose connection closes mid-body (Content-Length larger than
// what is sent) is retried like any connection error, and counted; without it, the caller
// gets the response and meets the break when it reads.
func TestMidBodyCloseRetried(t *testing.T) {
	var mu sync.Mutex
	n := 0
	srv := newRawServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		n++
		i := n
		mu.Unlock()
		if i%2 == 1 {
			hijack(w, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"choi")
			return
		}
		io.WriteString(w, `{"ok":true}`)
	})
	var c Counter
	ctx := WithCounter(context.Background(), &c)
	d := &Doer{Client: &http.Client{}, Policy: fast, MaxBodyBytes: 1 << 20}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv, strings.NewReader("{}"))
	resp, err := d.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != `{"ok":true}` || resp.ContentLength != int64(len(b)) || c.Attempts() != 2 {
		t.Fatalf("body %q err %v attempts %d, want the second answer after 2 attempts", b, err, c.Attempts())
	}

	// Without MaxBodyBytes: one attempt, and the break is the reader's.
	var c2 Counter
	req, _ = http.NewRequestWithContext(WithCounter(context.Background(), &c2), http.MethodPost, srv, strings.NewReader("{}"))
	resp, err = (&Doer{Client: &http.Client{}, Policy: fast}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !errors.Is(err, io.ErrUnexpectedEOF) || c2.Attempts() != 1 {
		t.Fatalf("streamed: err %v attempts %d", err, c2.Attempts())
	}
}

// A server that always breaks mid-body: after the last attempt, the error says so.
func TestMidBodyCloseGivesUp(t *testing.T) {
	srv := newRawServer(t, func(w http.ResponseWriter, r *http.Request) {
		hijack(w, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 1000\r\n\r\n<html>")
	})
	var c Counter
	ctx := WithCounter(context.Background(), &c)
	_, err := post(t, ctx, &Doer{Client: &http.Client{}, Policy: fast, MaxBodyBytes: 1 << 20}, srv)
	if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "reading the answer (HTTP 502): unexpected EOF") {
		t.Fatalf("err %v", err)
	}
	if c.Attempts() != fast.MaxAttempts {
		t.Fatalf("attempts %d, want %d", c.Attempts(), fast.MaxAttempts)
	}
}

// newRawServer is an httptest server whose handlers may hijack.
func newRawServer(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	s := newServer(t, []int{200})
	s.srv.Config.Handler = h
	return s.srv.URL
}

// A body over MaxBodyBytes is a *BodyTooLargeError with the status and the first bytes, not
// retried, whether its length is announced or chunked; a body of exactly the cap reads.
func TestBodyCap(t *testing.T) {
	big := strings.Repeat("x", 5000)
	for _, chunked := range []bool{false, true} {
		srv := newRawServer(t, func(w http.ResponseWriter, r *http.Request) {
			size := 5000
			if r.URL.Path == "/exact" {
				size = 1000
			}
			if !chunked {
				w.Header().Set("Content-Length", fmt.Sprint(size))
			}
			w.WriteHeader(200)
			for i := 0; i < size; i += 100 {
				io.WriteString(w, big[:100])
				w.(http.Flusher).Flush()
			}
		})
		var c Counter
		ctx := WithCounter(context.Background(), &c)
		d := &Doer{Client: &http.Client{}, Policy: fast, MaxBodyBytes: 1000}
		_, err := post(t, ctx, d, srv)
		var tl *BodyTooLargeError
		if !errors.As(err, &tl) || tl.Limit != 1000 || tl.Status != 200 || len(tl.Prefix) == 0 || tl.Prefix[0] != 'x' || len(tl.Prefix) > 512 {
			t.Fatalf("chunked %v: err %v", chunked, err)
		}
		if err.Error() != "answer larger than 1000 bytes (HTTP 200)" || c.Attempts() != 1 {
			t.Fatalf("chunked %v: %q after %d attempts", chunked, err, c.Attempts())
		}
		if status, err := post(t, ctx, d, srv+"/exact"); status != 200 || err != nil {
			t.Fatalf("chunked %v: a body of exactly the cap: %d %v", chunked, status, err)
		}
	}
	// A cap smaller than the prefix kept for messages.
	srv := newRawServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush() // chunked: no Content-Length to go by
		io.WriteString(w, big[:200])
	})
	_, err := post(t, context.Background(), &Doer{Client: &http.Client{}, Policy: fast, MaxBodyBytes: 100}, srv)
	var tl *BodyTooLargeError
	if !errors.As(err, &tl) || len(tl.Prefix) != 101 {
		t.Fatalf("cap 100: %v", err)
	}
	for n, want := range map[int64]string{32 << 20: "32 MiB", 16 << 10: "16 KiB", 1000: "1000 bytes", 1<<20 + 1: "1048577 bytes"} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

// silentServer is a server that accepts connections and never answers.
func silentServer(t *testing.T) (string, func() int) { return testnet.Silent(t) }

// A server that accepts and never answers costs each attempt its AttemptTimeout, and the
// error names that timeout; the attempts are counted and Do returns in bounded time.
func TestAttemptTimeoutNamed(t *testing.T) {
	url, accepted := silentServer(t)
	var c Counter
	ctx := WithCounter(context.Background(), &c)
	d := &Doer{Client: &http.Client{}, Policy: Policy{MaxAttempts: 2, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}, AttemptTimeout: 50 * time.Millisecond}
	start := time.Now()
	_, err := post(t, ctx, d, url)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "no answer within the attempt timeout of 50ms: ") {
		t.Fatalf("err %v", err)
	}
	if c.Attempts() != 2 || accepted() != 2 {
		t.Fatalf("attempts %d connections %d, want 2", c.Attempts(), accepted())
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Fatalf("took %v", el)
	}

	// The request's own deadline is not an attempt timeout: not retried, not renamed.
	ctx, cancel := context.WithTimeout(WithCounter(context.Background(), &c), 50*time.Millisecond)
	defer cancel()
	d.AttemptTimeout = time.Minute
	_, err = post(t, ctx, d, url)
	if !errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "attempt timeout") || c.Attempts() != 3 {
		t.Fatalf("err %v attempts %d", err, c.Attempts())
	}
}

// A body that stalls mid-way is cut by the attempt timeout when the Doer reads it.
func TestAttemptTimeoutCoversBody(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	srv := newRawServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(200)
		io.WriteString(w, `{"a":`)
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	d := &Doer{Client: &http.Client{}, Policy: Policy{MaxAttempts: 1}, AttemptTimeout: 50 * time.Millisecond, MaxBodyBytes: 1 << 20}
	_, err := post(t, context.Background(), d, srv)
	if err == nil || !strings.HasPrefix(err.Error(), "no answer within the attempt timeout of 50ms: reading the answer (HTTP 200): ") {
		t.Fatalf("err %v", err)
	}
}

// With MaxBodyBytes, Do hands the answer over as a *Body whose buffer ReadBody returns as it is:
// the answer is read once, into one buffer of its announced length (or grown for a chunked one).
func TestBodyHandedOver(t *testing.T) {
	want := strings.Repeat("answer ", 300)
	for _, chunked := range []bool{false, true} {
		srv := newRawServer(t, func(w http.ResponseWriter, r *http.Request) {
			if !chunked {
				w.Header().Set("Content-Length", fmt.Sprint(len(want)))
			}
			w.WriteHeader(200)
			for i := 0; i < len(want); i += 500 {
				io.WriteString(w, want[i:min(i+500, len(want))])
				w.(http.Flusher).Flush()
			}
		})
		req, _ := http.NewRequest(http.MethodPost, srv, strings.NewReader(`{}`))
		resp, err := (&Doer{Client: &http.Client{}, Policy: fast, MaxBodyBytes: 1 << 20}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, ok := resp.Body.(*Body)
		if !ok || string(body.Bytes()) != want || resp.ContentLength != int64(len(want)) {
			t.Fatalf("chunked %v: body %T, %d bytes, Content-Length %d", chunked, resp.Body, len(body.Bytes()), resp.ContentLength)
		}
		if !chunked && cap(body.Bytes()) != len(want)+1 {
			t.Errorf("a body of %d bytes announced read into a buffer of %d", len(want), cap(body.Bytes()))
		}
		got, err := ReadBody(resp.Body, resp.ContentLength, 1<<20)
		if err != nil || string(got) != want || &got[0] != &body.Bytes()[0] {
			t.Fatalf("chunked %v: ReadBody copied or changed the doer's buffer (%v)", chunked, err)
		}
		if rest, err := io.ReadAll(resp.Body); len(rest) != 0 || err != nil {
			t.Fatalf("after ReadBody the body still reads %d bytes (%v)", len(rest), err)
		}
		resp.Body.Close()
	}
	// ReadBody of any other reader: capped at n, an announced length under n read into one
	// buffer, a body longer than announced read whole up to n, a read error returned with the
	// bytes before it.
	cases := []struct {
		r       io.Reader
		size, n int64
		want    string
		err     bool
	}{
		{strings.NewReader("abcdef"), 6, 10, "abcdef", false},
		{strings.NewReader("abcdef"), -1, 4, "abcd", false},
		{strings.NewReader("abcdef"), 2, 10, "abcdef", false},
		{&Body{b: []byte("partly read")}, 11, 100, "partly read", false},
		{io.MultiReader(strings.NewReader("abc"), iotest{}), 10, 20, "abc", true},
	}
	for i, c := range cases {
		if b, ok := c.r.(*Body); ok {
			b.Reset(b.b)
			b.ReadByte() // a Body already read from is read as any reader: what is left
			c.want = c.want[1:]
		}
		got, err := ReadBody(c.r, c.size, c.n)
		if string(got) != c.want || (err != nil) != c.err {
			t.Errorf("case %d: %q %v, want %q (error %v)", i, got, err, c.want, c.err)
		}
	}
}

type iotest struct{}

func (iotest) Read([]byte) (int, error) { return 0, errors.New("connection reset") }
