package fleet

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"net/http/httptest"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/internal/testnet"
	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/wire"
)

func sleepBriefly() { time.Sleep(time.Millisecond) }

// clock is a manual clock for the pool's backoffs.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// An endpoint that starts failing (HTTP 500) is ejected after EjectAfter consecutive failures;
// requests go to the others meanwhile; after the backoff one probe goes to it (half-open), and
// when it answers again it is put back. The events say which endpoint and when.
func TestEjectionAndRecovery(t *testing.T) {
	rs, eps := replicas(t, 2)
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	p, err := New(eps, Options{Route: RoundRobin, EjectAfter: 3, EjectBackoff: 10 * time.Second, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	bad := rs[1]
	bad.status.Store(500)
	for i := range 12 {
		send(t, ctx, p, rolloutID(i, 0))
	}
	if n := bad.requests.Load(); n != 3 {
		t.Fatalf("the failing endpoint got %d requests, want 3 (then ejected)", n)
	}
	st := p.Stats()
	if !st[1].Ejected || st[1].Ejections != 1 || st[1].Failures["model_unavailable"] != 3 {
		t.Fatalf("stats %+v", st[1])
	}
	// The probe fails: backoff doubles, no other request reaches it.
	clk.advance(10 * time.Second)
	send(t, ctx, p, rolloutID(100, 0))
	send(t, ctx, p, rolloutID(101, 0))
	if n := bad.requests.Load(); n != 4 {
		t.Fatalf("after the backoff the failing endpoint got %d requests in all, want 4 (one probe)", n)
	}
	clk.advance(10 * time.Second) // less than the doubled backoff
	for i := range 4 {
		send(t, ctx, p, rolloutID(200+i, 0))
	}
	if n := bad.requests.Load(); n != 4 {
		t.Fatalf("within the doubled backoff it got %d requests, want still 4", n)
	}
	// It comes back: the next probe succeeds and it takes its share again.
	bad.status.Store(0)
	clk.advance(10 * time.Second)
	for i := range 10 {
		if _, status := send(t, ctx, p, rolloutID(300+i, 0)); status != 200 {
			t.Fatalf("status %d after recovery", status)
		}
	}
	if n := bad.requests.Load(); n < 4+5 {
		t.Errorf("after recovery the endpoint got %d requests in all, want its half of 10 more", n)
	}
	if p.Stats()[1].Ejected {
		t.Error("still ejected after answering its probe")
	}
	var whats []string
	for _, e := range p.Events() {
		if e.Endpoint != bad.name {
			t.Errorf("event of %s: %+v", e.Endpoint, e)
		}
		whats = append(whats, e.What)
	}
	if strings.Join(whats, ",") != "ejected,probe failed,restored" {
		t.Errorf("events %v", p.Events())
	}
	if ev := p.Events()[0]; !ev.At.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) || !strings.Contains(ev.Detail, "3 consecutive failures, the last: HTTP 500") {
		t.Errorf("ejection event %+v", ev)
	}
}

// A retry moves: with affinity, a rollout whose home fails is re-homed at its next attempt, and
// its later rounds stay on the new home.
func TestRetryMovesAndRehomes(t *testing.T) {
	rs, eps := replicas(t, 3)
	p, err := New(eps, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := rolloutID(7, 0)
	first, _ := send(t, ctx, p, id)
	var home *replica
	for _, r := range rs {
		if r.name == first {
			home = r
		}
	}
	home.status.Store(502)
	doer := &retry.Doer{Client: &http.Client{Transport: p}, Policy: retry.Policy{MaxAttempts: 3}, Sleep: func(context.Context, time.Duration) error { return nil }}
	for round := range 3 {
		req, _ := http.NewRequest(http.MethodPost, BaseURL+"/chat/completions", strings.NewReader(`{}`))
		req.Header.Set(wire.RolloutIDHeader, id)
		resp, err := doer.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("round %d: status %d: the retry did not move", round, resp.StatusCode)
		}
		if got := resp.Header.Get(wire.EndpointHeader); got == first {
			t.Fatalf("round %d answered by the failing home %s", round, got)
		}
	}
	if n := home.requests.Load(); n != 2 {
		t.Errorf("the failed home got %d requests, want 2 (the first round, then the first attempt of the next)", n)
	}
}

// All endpoints down (a closed port, and one answering 503): attempts fail at once with an error
// naming each endpoint, which the model client treats as a connection failure.
func TestAllDown(t *testing.T) {
	rs, eps := replicas(t, 1)
	rs[0].status.Store(503)
	eps = append(eps, Endpoint{URL: testnet.ClosedPort(t) + "/v1"})
	p, err := New(eps, Options{EjectAfter: 1, EjectBackoff: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		send(t, context.Background(), p, rolloutID(i, 0))
	}
	req, _ := http.NewRequest(http.MethodPost, BaseURL+"/chat/completions", strings.NewReader(`{}`))
	_, err = p.RoundTrip(req)
	var down *errAllDown
	if !errors.As(err, &down) || !strings.Contains(err.Error(), "no endpoint available") || !strings.Contains(err.Error(), rs[0].name+" ejected (HTTP 503") {
		t.Fatalf("err %v", err)
	}
}

// A cancelled request does not count against its endpoint.
func TestCancelledIsNotAFailure(t *testing.T) {
	rs, eps := replicas(t, 1)
	hold := make(chan struct{})
	rs[0].setHold(hold)
	defer close(hold)
	p, _ := New(eps, Options{EjectAfter: 1})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		waitFor(t, func() bool { return rs[0].inflight.Load() == 1 })
		cancel()
	}()
	send(t, ctx, p, rolloutID(1, 0))
	if st := p.Stats()[0]; st.Ejected || st.Failures["cancelled"] != 1 {
		t.Errorf("stats after a cancelled request: %+v", st)
	}
}

// Every failure of an endpoint counts: an endpoint whose every answer is a redirect, or a body
// over the model client's cap (with or without a Content-Length), shows its failures and is
// ejected, through the model client's own stack (retries, no redirects, the answer cap).
func TestEveryFailureCounts(t *testing.T) {
	big := strings.Repeat("x", 4096)
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
	}{
		{"redirect", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://127.0.0.1:1/elsewhere", http.StatusFound)
		}},
		{"oversized body with a length", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"`+big+`"}`)
		}},
		{"oversized chunked body", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"`)
			w.(http.Flusher).Flush()
			io.WriteString(w, big+`"}`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			p, err := New([]Endpoint{{URL: srv.URL + "/v1", Name: "bad"}}, Options{EjectAfter: 3, EjectBackoff: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			doer := &retry.Doer{Client: &http.Client{Transport: p, CheckRedirect: retry.NoRedirect}, Policy: retry.Policy{MaxAttempts: 1}}
			m := p.Model(agent.NewOpenAIModel(BaseURL, "", doer, agent.WithMaxAnswerBytes(1024)))
			for range 3 {
				if _, err := m.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "m"}); err == nil {
					t.Fatal("the call succeeded")
				}
			}
			st := p.Stats()[0]
			var failures int64
			for _, n := range st.Failures {
				failures += n
			}
			if failures != 3 || !st.Ejected || st.Ejections != 1 {
				t.Errorf("after 3 failed calls: failures %v, ejected %v, ejections %d; want 3 failures and an ejection", st.Failures, st.Ejected, st.Ejections)
			}
			var table strings.Builder
			WriteTable(&table, p.Stats(), p.Events())
			if strings.Contains(table.String(), " - ") {
				t.Errorf("the endpoint table shows no failure:\n%s", table.String())
			}
		})
	}
}
