package chaos_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/pkg/chaos"
)

// echo is the wrapped server: it answers 200 with the endpoint and the body it got.
type echo struct {
	mu   sync.Mutex
	seen []string
	n    atomic.Int64
}

func (e *echo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.n.Add(1)
	b, _ := io.ReadAll(r.Body)
	e.mu.Lock()
	e.seen = append(e.seen, r.Method+" "+r.URL.Path+" "+string(b))
	e.mu.Unlock()
	fmt.Fprintf(w, `{"path":%q,"body":%q}`, r.URL.Path, b)
}

func serve(t *testing.T, o chaos.Options) (*chaos.Handler, *echo, *httptest.Server) {
	t.Helper()
	e := &echo{}
	h, err := chaos.New(e, o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return h, e, srv
}

func client(timeout time.Duration) *http.Client {
	return &http.Client{Transport: &http.Transport{}, Timeout: timeout}
}

// outcome is what the client saw: "ok", "500", "reset", "hang" (its deadline), or another
// status or error.
func send(t *testing.T, c *http.Client, method, url, body string, timeout time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	resp, err := c.Do(req)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "hang"
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return "reset"
	case err != nil:
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	switch resp.StatusCode {
	case 200:
		var got struct{ Path, Body string }
		if json.Unmarshal(b, &got) != nil || got.Body != body {
			return "corrupt: " + string(b)
		}
		return "ok"
	case 500:
		var e struct{ Error, Detail string }
		if json.Unmarshal(b, &e) != nil || e.Error == "" || e.Detail == "" || resp.Header.Get("Content-Type") != "application/json" {
			return "500 without a JSON error body: " + string(b)
		}
		return "500"
	}
	return fmt.Sprintf("status %d", resp.StatusCode)
}

// At rate 1 each fault always happens, with the right effect on the client, and the wrapped
// server never sees the request; at rate 0 (the zero Options) nothing happens.
func TestChaosFaultsAtOneAndZero(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    chaos.Options
		want string
		stat func(chaos.Stats) int64
	}{
		{"fail", chaos.Options{FailRate: 1}, "500", func(s chaos.Stats) int64 { return s.Failed }},
		{"reset", chaos.Options{ResetRate: 1}, "reset", func(s chaos.Stats) int64 { return s.Reset }},
		{"hang", chaos.Options{HangRate: 1}, "hang", func(s chaos.Stats) int64 { return s.Hung }},
		{"zero", chaos.Options{}, "ok", func(s chaos.Stats) int64 { return s.Passed }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, e, srv := serve(t, tc.o)
			c := client(0)
			defer c.CloseIdleConnections()
			timeout := 5 * time.Second
			if tc.name == "hang" {
				timeout = 100 * time.Millisecond
			}
			for i := range 10 {
				body := fmt.Sprintf(`{"i":%d}`, i)
				if got := send(t, c, "POST", srv.URL+"/get_record", body, timeout); got != tc.want {
					t.Fatalf("request %d: %s, want %s", i, got, tc.want)
				}
			}
			st := h.Stats()
			if tc.name == "zero" {
				if st.Injected() != 0 || e.n.Load() != 10 || st.Eligible != 0 {
					t.Errorf("zero options: stats %+v, server saw %d", st, e.n.Load())
				}
				return
			}
			if tc.stat(st) != 10 || st.Injected() != 10 || st.Passed != 0 || e.n.Load() != 0 {
				t.Errorf("stats %+v, server saw %d", st, e.n.Load())
			}
		})
	}
}

// Requests that draw no fault reach the server with their body intact, and its answer reaches
// the client.
func TestChaosPassThroughKeepsTheBody(t *testing.T) {
	_, e, srv := serve(t, chaos.Options{Seed: 1, FailRate: 0.3})
	c := client(5 * time.Second)
	big := strings.Repeat("x", 64<<10)
	ok := 0
	for i := range 40 {
		body := fmt.Sprintf(`{"i":%d,"pad":%q}`, i, big)
		switch got := send(t, c, "POST", srv.URL+"/read_value", body, 5*time.Second); got {
		case "ok":
			ok++
		case "500":
		default:
			t.Fatalf("request %d: %s", i, got)
		}
	}
	if ok == 0 || ok == 40 || int64(ok) != e.n.Load() {
		t.Errorf("%d passed, server saw %d", ok, e.n.Load())
	}
}

// Faults are a function of the seed and the requests: the same requests in another order get
// the same faults; another seed other faults. A retry of an identical request is a new draw.
func TestChaosDeterministicPerSeed(t *testing.T) {
	run := func(seed int64, reverse bool) string {
		_, _, srv := serve(t, chaos.Options{Seed: seed, FailRate: 0.3, ResetRate: 0.2, HangRate: 0.1})
		c := client(0)
		defer c.CloseIdleConnections()
		// All 40 at once, started in one order or the other: a hang is told by the client's
		// timeout, which is long enough that a slow answer on a loaded machine is not one, and
		// the hangs wait it out together.
		res := make([]string, 40)
		var wg sync.WaitGroup
		for k := range 40 {
			i := k
			if reverse {
				i = 39 - k
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				res[i] = send(t, c, "POST", srv.URL+"/list_sources", fmt.Sprintf(`{"region":"r%d"}`, i), 3*time.Second)[:1]
			}()
		}
		wg.Wait()
		return strings.Join(res, "")
	}
	a, b, other := run(7, false), run(7, true), run(8, false)
	if a != b {
		t.Errorf("seed 7 depends on the order:\n%s\n%s", a, b)
	}
	if a == other {
		t.Errorf("seeds 7 and 8 gave the same faults: %s", a)
	}
	for _, want := range []string{"o", "5", "r", "h"} {
		if !strings.Contains(a, want) {
			t.Errorf("outcomes %s lack %q", a, want)
		}
	}

	// Retries: the identical request eventually gets through at rate 0.5.
	_, _, srv := serve(t, chaos.Options{Seed: 3, FailRate: 0.5})
	c := client(5 * time.Second)
	firstFailed := 0
	for i := range 30 {
		body := fmt.Sprintf(`{"i":%d}`, i)
		for try := 0; ; try++ {
			got := send(t, c, "POST", srv.URL+"/verify", body, 5*time.Second)
			if got == "ok" {
				break
			}
			if try == 0 {
				firstFailed++
			}
			if try > 40 {
				t.Fatalf("request %d: still %s after %d tries", i, got, try)
			}
		}
	}
	if firstFailed == 0 || firstFailed == 30 {
		t.Errorf("%d of 30 first attempts failed at rate 0.5", firstFailed)
	}
}

// The default endpoints are the tool calls, seed_session and verify: end_session, GETs and the
// root pass; Endpoints narrows or widens the set; a base path is matched by its last element.
func TestChaosEndpoints(t *testing.T) {
	cases := []struct {
		endpoints []string
		hit, pass []string // "METHOD /path"
	}{
		{nil,
			[]string{"POST /get_record", "POST /seed_session", "POST /verify", "POST /gym/x/verify", "POST /gym/x/list_sources"},
			[]string{"POST /end_session", "GET /", "GET /get_record", "POST /", "HEAD /verify"}},
		{[]string{"tools"},
			[]string{"POST /get_record", "POST /gym/x/submit_answer"},
			[]string{"POST /seed_session", "POST /verify", "POST /end_session", "GET /get_record"}},
		{[]string{"verify", "get_record"},
			[]string{"POST /verify", "POST /get_record"},
			[]string{"POST /seed_session", "POST /read_value", "POST /end_session"}},
		{[]string{"all"},
			[]string{"POST /get_record", "POST /end_session", "GET /", "GET /get_record", "POST /seed_session"},
			nil},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.endpoints, ","), func(t *testing.T) {
			_, _, srv := serve(t, chaos.Options{FailRate: 1, Endpoints: tc.endpoints})
			c := client(5 * time.Second)
			check := func(reqs []string, want string) {
				for _, r := range reqs {
					method, p, _ := strings.Cut(r, " ")
					req, _ := http.NewRequest(method, srv.URL+p, strings.NewReader("{}"))
					resp, err := c.Do(req)
					if err != nil {
						t.Fatal(err)
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					got := "pass"
					if resp.StatusCode == 500 {
						got = "hit"
					}
					if got != want {
						t.Errorf("%s: %s, want %s", r, got, want)
					}
				}
			}
			check(tc.hit, "hit")
			check(tc.pass, "pass")
		})
	}
}

// A hanging request ends when the client gives up, and its handler returns.
func TestChaosHangEndsWithTheClient(t *testing.T) {
	h, _, srv := serve(t, chaos.Options{HangRate: 1})
	c := client(0)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := send(t, c, "POST", srv.URL+"/t", fmt.Sprintf(`{"i":%d}`, i), 100*time.Millisecond); got != "hang" {
				t.Errorf("request %d: %s", i, got)
			}
		}()
	}
	wg.Wait()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
	if h.Stats().Hung != 10 {
		t.Errorf("stats %+v", h.Stats())
	}
	// srv.Close (cleanup) waits for every handler: it returns only if the hangs ended.
	done := make(chan struct{})
	go func() { srv.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("hanging handlers outlived their clients")
	}
}

// Latency delays eligible requests only, by less than Latency.
func TestChaosLatency(t *testing.T) {
	_, _, srv := serve(t, chaos.Options{Latency: 200 * time.Millisecond, Seed: 2})
	c := client(5 * time.Second)
	var total time.Duration
	for i := range 10 {
		start := time.Now()
		if got := send(t, c, "POST", srv.URL+"/t", fmt.Sprintf(`{"i":%d}`, i), 5*time.Second); got != "ok" {
			t.Fatal(got)
		}
		total += time.Since(start)
	}
	if total < 300*time.Millisecond || total > 10*time.Second {
		t.Errorf("10 requests with latency up to 200ms took %v", total)
	}
	start := time.Now()
	resp, err := c.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if d := time.Since(start); d > 150*time.Millisecond {
		t.Errorf("a GET (not eligible) took %v", d)
	}
}

func TestChaosOptions(t *testing.T) {
	for _, o := range []chaos.Options{
		{FailRate: -0.1}, {ResetRate: 1.5}, {HangRate: 2}, {Latency: -time.Second}, {Endpoints: []string{"a/b"}}, {Endpoints: []string{""}},
	} {
		if _, err := chaos.New(http.NotFoundHandler(), o); err == nil {
			t.Errorf("New accepted %+v", o)
		}
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("Wrap did not panic on invalid options")
			}
		}()
		chaos.Wrap(http.NotFoundHandler(), chaos.Options{FailRate: 2})
	}()
	eps, err := chaos.ParseEndpoints(" tools, verify ,,")
	if err != nil || len(eps) != 2 || eps[0] != "tools" || eps[1] != "verify" {
		t.Errorf("ParseEndpoints = %v, %v", eps, err)
	}
	if _, err := chaos.ParseEndpoints("tools,http://x"); err == nil {
		t.Error("ParseEndpoints accepted a URL")
	}
	if (chaos.Options{Seed: 3, Endpoints: []string{"all"}}).Enabled() {
		t.Error("options without a rate or latency are enabled")
	}
}
