package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/retry"
)

// ---- network failures: ConnectionReset and Hang ----

// freshClient has its own transport, so that one test's broken connections are not another's.
func freshClient(timeout time.Duration) *http.Client {
	return &http.Client{Transport: &http.Transport{}, Timeout: timeout}
}

// rawPost posts body and returns the status, or the transport error.
func rawPost(ctx context.Context, c *http.Client, url string, body []byte) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// inFlight counts the simulator's handlers that have not returned.
type inFlight struct {
	h http.Handler
	n atomic.Int64
}

func (f *inFlight) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.n.Add(1)
	defer f.n.Add(-1)
	f.h.ServeHTTP(w, r)
}

func (f *inFlight) waitIdle(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for f.n.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d handlers still running %v after their clients gave up", f.n.Load(), within)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// At rate 1 every request's connection is reset: the client gets a transport error (a TCP RST,
// "connection reset by peer", or an EOF), never an answer, and the simulator counts each.
func TestSimConnectionResetAtOne(t *testing.T) {
	tasks, rows := mustTasks(t, knobRow)
	s, srv := newSim(t, tasks, Options{ConnectionReset: 1})
	c := freshClient(5 * time.Second)
	for seed := range 10 {
		body, _ := json.Marshal(baseRequest(rows[0], seed))
		status, err := rawPost(context.Background(), c, srv.URL, body)
		if err == nil {
			t.Fatalf("seed %d: answered %d, want a reset connection", seed, status)
		}
		if !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("seed %d: error %v, want a connection reset or EOF", seed, err)
		}
	}
	st := s.Stats()
	if st.Injected.ConnectionReset != 10 || st.Answers != 0 || st.Injected.Total() != 10 {
		t.Errorf("stats %+v", st)
	}
}

// The reset's draw includes the attempt number: the identical request sent again is a new
// draw, so a retrying client gets through at a rate below 1.
func TestSimConnectionResetThenRetrySucceeds(t *testing.T) {
	tasks, rows := mustTasks(t, knobRow)
	s, srv := newSim(t, tasks, Options{ConnectionReset: 0.5})
	c := freshClient(5 * time.Second)
	firstReset := 0
	for seed := range 30 {
		body, _ := json.Marshal(baseRequest(rows[0], seed))
		for try := 0; ; try++ {
			status, err := rawPost(context.Background(), c, srv.URL, body)
			if err == nil {
				if status != http.StatusOK {
					t.Fatalf("seed %d: status %d", seed, status)
				}
				break
			}
			if try == 0 {
				firstReset++
			}
			if try > 40 {
				t.Fatalf("seed %d: still reset after %d tries", seed, try)
			}
		}
	}
	if firstReset == 0 || firstReset == 30 {
		t.Errorf("%d of 30 first attempts reset at rate 0.5", firstReset)
	}
	if st := s.Stats(); st.Injected.ConnectionReset < int64(firstReset) || st.Answers != 30 {
		t.Errorf("stats %+v", st)
	}
}

// A hanging request never answers; the client's timeout ends it, and the handler returns as
// soon as the client is gone: no handler and no goroutine is left behind.
func TestSimHangRespectsClientTimeout(t *testing.T) {
	tasks, rows := mustTasks(t, knobRow)
	s, err := New(tasks, Options{Hang: 1, Now: fixedNow})
	if err != nil {
		t.Fatal(err)
	}
	f := &inFlight{h: s}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := freshClient(0)
	defer c.CloseIdleConnections()

	before := runtime.NumGoroutine()
	const n = 20
	errs := make(chan error, n)
	start := time.Now()
	for seed := range n {
		go func() {
			body, _ := json.Marshal(baseRequest(rows[0], seed))
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			defer cancel()
			status, err := rawPost(ctx, c, srv.URL, body)
			if err == nil {
				err = errors.New("answered " + http.StatusText(status))
			} else if !errors.Is(err, context.DeadlineExceeded) {
				err = errors.New("not the client's deadline: " + err.Error())
			} else {
				err = nil
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("hanging requests took %v with a 150ms client timeout", d)
	}
	f.waitIdle(t, 5*time.Second)
	if st := s.Stats(); st.Injected.Hang != n || st.Answers != 0 {
		t.Errorf("stats %+v", st)
	}
	c.CloseIdleConnections()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before+2 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("goroutines: %d before, %d after the hangs\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A hanging handler also returns when the server closes the connection (shutdown).
func TestSimHangReturnsOnServerClose(t *testing.T) {
	tasks, rows := mustTasks(t, knobRow)
	s, err := New(tasks, Options{Hang: 1})
	if err != nil {
		t.Fatal(err)
	}
	f := &inFlight{h: s}
	srv := httptest.NewServer(f)
	body, _ := json.Marshal(baseRequest(rows[0], 1))
	done := make(chan error, 1)
	go func() {
		_, err := rawPost(context.Background(), freshClient(0), srv.URL, body)
		done <- err
	}()
	for s.Stats().Injected.Hang == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	srv.CloseClientConnections()
	select {
	case err := <-done:
		if err == nil {
			t.Error("the hanging request was answered")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the client still waits after the server closed its connection")
	}
	f.waitIdle(t, 5*time.Second)
	srv.Close()
}

// At rate 0 neither knob ever acts, and no attempt table is kept for them.
func TestSimNetworkKnobsAtZero(t *testing.T) {
	tasks, rows := mustTasks(t, knobRow)
	s, srv := newSim(t, tasks, Options{ConnectionReset: 0, Hang: 0})
	c := freshClient(2 * time.Second)
	for seed := range 100 {
		body, _ := json.Marshal(baseRequest(rows[0], seed))
		status, err := rawPost(context.Background(), c, srv.URL, body)
		if err != nil || status != http.StatusOK {
			t.Fatalf("seed %d: %d %v", seed, status, err)
		}
	}
	if st := s.Stats(); st.Injected.Total() != 0 || st.Answers != 100 {
		t.Errorf("stats %+v", st)
	}
	if n := len(s.attempts); n != 0 {
		t.Errorf("%d attempts tracked with no HTTP or network error rate", n)
	}
}

// The draws are deterministic: the same seed and requests reset and hang the same requests,
// in any order.
func TestSimNetworkKnobsAreDeterministic(t *testing.T) {
	tasks, rows := mustTasks(t, knobRow)
	outcome := func(reverse bool) string {
		_, srv := newSim(t, tasks, Options{Seed: 9, ConnectionReset: 0.3, Hang: 0.2})
		c := freshClient(0)
		res := make([]byte, 40)
		// The 40 requests go out at once (in the order asked), each with 2 s to answer: a hang
		// never answers, and an answer, even on a loaded machine, comes well within that.
		var wg sync.WaitGroup
		for k := range 40 {
			seed := k
			if reverse {
				seed = 39 - k
			}
			body, _ := json.Marshal(baseRequest(rows[0], seed))
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				defer cancel()
				status, err := rawPost(ctx, c, srv.URL, body)
				switch {
				case err == nil && status == 200:
					res[seed] = 'o'
				case errors.Is(err, context.DeadlineExceeded):
					res[seed] = 'h'
				case err != nil:
					res[seed] = 'r'
				default:
					res[seed] = '?'
				}
			}()
		}
		wg.Wait()
		return string(res)
	}
	a, b := outcome(false), outcome(true)
	if a != b {
		t.Errorf("outcomes depend on the order:\n%s\n%s", a, b)
	}
	if !strings.Contains(a, "o") || !strings.Contains(a, "h") || !strings.Contains(a, "r") {
		t.Errorf("outcomes %s: want answers, hangs and resets", a)
	}
}

// rollout's own loop (pkg/agent) with its retrying client (pkg/retry, an attempt timeout like
// --model-timeout) plays the plan to the end through resets and hangs.
func TestSimRunnerLoopThroughResetsAndHangs(t *testing.T) {
	tasks, rows := mustTasks(t, recordsRow)
	s, srv := newSim(t, tasks, Options{Seed: 5, ConnectionReset: 0.3, Hang: 0.2})
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	doer := &retry.Doer{Client: client, AttemptTimeout: 200 * time.Millisecond,
		Policy: retry.Policy{MaxAttempts: 30, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}}
	cfg := &agent.Config{Model: agent.NewOpenAIModel(srv.URL+"/v1", "", doer), ModelName: "sim"}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	for seed := range 5 {
		tr := cfg.Run(context.Background(), rows[0], toolsFunc(recordsTool), int64(seed))
		if tr.Termination != agent.Completed || tr.FinalText != "accepted rec17,rec42" {
			t.Errorf("seed %d: %s %q %q", seed, tr.Termination, tr.Error, tr.FinalText)
		}
	}
	if st := s.Stats(); st.Injected.ConnectionReset == 0 || st.Injected.Hang == 0 || st.Answers != 20 {
		t.Errorf("stats %+v", st)
	}
}

func TestSimNetworkKnobsValidate(t *testing.T) {
	for want, o := range map[string]Options{
		"connection-reset": {ConnectionReset: 1.5},
		"hang":             {Hang: -0.1},
	} {
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate(%+v) = %v, want an error about %s", o, err, want)
		}
	}
	if err := (Options{ConnectionReset: 1, Hang: 1}).Validate(); err != nil {
		t.Error(err)
	}
}
