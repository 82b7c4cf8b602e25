package counter

import (
	"github.com/rollout-dev/rollout/pkg/servers/gym"
	"github.com/rollout-dev/rollout/pkg/servers/gym/gymtest"
	"github.com/rollout-dev/rollout/pkg/servers/nemogym"

	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/redistest"
	"github.com/rollout-dev/rollout/pkg/servers/store"
)

// Several instances of one server behind one address, sharing a Redis session store: any
// instance may serve any request of a session.

// roundRobin is one address in front of several server instances: request i goes to instance
// i mod n, whatever its session.
type roundRobin struct {
	backends []http.Handler
	next     atomic.Uint64
	hits     []atomic.Int64

	mu     sync.Mutex
	served []int // instance of each request, in order (sequential clients only)
}

func newRoundRobin(backends ...http.Handler) *roundRobin {
	return &roundRobin{backends: backends, hits: make([]atomic.Int64, len(backends))}
}

func (rr *roundRobin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	i := int((rr.next.Add(1) - 1) % uint64(len(rr.backends)))
	rr.hits[i].Add(1)
	rr.mu.Lock()
	rr.served = append(rr.served, i)
	rr.mu.Unlock()
	rr.backends[i].ServeHTTP(w, r)
}

func (rr *roundRobin) order() []int {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return append([]int(nil), rr.served...)
}

// openRedisStore opens a store on the test's Redis with the given options.
func openRedisStore(t testing.TB, url string, opts store.Options) store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := store.Open(ctx, url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// redisPair is two instances of the named server, each with its own Redis client (as two
// processes would have), behind one round-robin address.
func redisPair(t *testing.T, url, name string, ttl time.Duration) (*roundRobin, *httptest.Server) {
	t.Helper()
	var hs []http.Handler
	for range 2 {
		h, err := newServer(name, gym.Options{Store: openRedisStore(t, url, store.Options{Prefix: name, TTL: ttl})})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		hs = append(hs, h)
	}
	rr := newRoundRobin(hs...)
	srv := httptest.NewServer(rr)
	t.Cleanup(srv.Close)
	return rr, srv
}

// wantAlternating checks that the requests went to instance 0, 1, 0, 1, …
func wantAlternating(t *testing.T, rr *roundRobin, requests int) {
	t.Helper()
	order := rr.order()
	if len(order) != requests {
		t.Fatalf("%d requests served, want %d", len(order), requests)
	}
	for i, inst := range order {
		if inst != i%2 {
			t.Fatalf("request %d went to instance %d: order %v", i, inst, order)
		}
	}
}

func TestSharedStoreCounterAcrossInstances(t *testing.T) {
	url := redistest.Start(t)
	rr, srv := redisPair(t, url, "counter", 0)
	c := newCounterClient(t, srv.URL, nil)

	// seed on instance 0, the increments on 1, 0, 1, verify on 0: one session throughout.
	n, err := c.seedAndCount(5, []int{1, 1, 1})
	if err != nil {
		t.Fatal(err)
	}
	if n != 8 {
		t.Fatalf("count %d", n)
	}
	wantVerify(t, c, counterRow(5, 8), map[string]any{"reward": 1.0, "count": 8.0, "tool_calls": 3.0})
	wantAlternating(t, rr, 5)

	// end_session on one instance ends the session for both.
	c.mustWant(t, http.StatusOK, "/end_session", ``) // instance 1
	wantVerify(t, c, counterRow(5, 8), map[string]any{"reward": 0.0, "reason": "session_not_found"})
	wantNotFound(t, c, "/get_counter_value", `{}`) // instance 1
	wantAlternating(t, rr, 8)

	// Control: the same pair with their own memory stores loses the session when the second
	// instance serves (it rejects the first's cookie), so the shared store is what keeps it.
	var own []http.Handler
	for range 2 {
		h, err := newServer("counter", gym.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		own = append(own, h)
	}
	alone := httptest.NewServer(newRoundRobin(own...))
	defer alone.Close()
	lost := newCounterClient(t, alone.URL, nil)
	lost.mustWant(t, http.StatusOK, "/seed_session", counterRow(5, 8))
	wantNotFound(t, lost, "/increment_counter", `{"count":3}`)
}

func TestSharedStoreConcurrentCallsOfOneSession(t *testing.T) {
	// One session's tool calls arriving at once on both instances are applied atomically
	// (Redis optimistic transactions): none is lost.
	url := redistest.Start(t)
	_, srv := redisPair(t, url, "counter", 0)
	transport := &http.Transport{MaxIdleConnsPerHost: 64}
	defer transport.CloseIdleConnections()
	c := newCounterClient(t, srv.URL, transport)
	c.mustWant(t, http.StatusOK, "/seed_session", counterRow(0, 0))
	const calls = 100
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			path := "/increment_counter"
			if i%4 == 3 {
				path = "/decrement_counter"
			}
			if _, err := c.want(http.StatusOK, path, `{"count":2}`); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	want := 2 * (calls*3/4 - calls/4)
	wantVerify(t, c, counterRow(0, want), map[string]any{"reward": 1.0, "count": float64(want), "tool_calls": float64(calls)})
}

func TestSharedStoreTTL(t *testing.T) {
	url := redistest.Start(t)
	const ttl = 300 * time.Millisecond
	_, srv := redisPair(t, url, "counter", ttl)
	c := newCounterClient(t, srv.URL, nil)
	start := time.Now()
	if _, err := c.seedAndCount(5, []int{3}); err != nil {
		t.Fatal(err)
	}
	waitForSessionLost(t, c, counterRow(5, 8), 5*time.Second)
	if since := time.Since(start); since < ttl {
		t.Errorf("state gone after %v, before its TTL %v", since, ttl)
	}
	wantNotFound(t, c, "/increment_counter", `{"count":1}`)
}

func TestSharedStoreSessionStateMgmtAcrossInstances(t *testing.T) {
	url := redistest.Start(t)
	rr, srv := redisPair(t, url, "example_session_state_mgmt", 0)
	rec := gymtest.LoadRecords(t, "example_session_state_mgmt")[0]
	row := gymtest.SetField(t, gymtest.SetField(t, rec.Task, "initial_count", 5), "expected_count", 8)

	s := gymtest.NewSession(t, srv)
	s.MustPost("/seed_session", row)
	for range 3 {
		s.MustPost("/increment_counter", []byte(`{"count":1}`))
	}
	if out := s.MustPost("/get_counter_value", []byte(`{}`)); string(out) != `{"count": 8}` {
		t.Errorf("get_counter_value = %s", out)
	}
	if got := s.Verify(row, rec.Response); got["reward"] != 1.0 {
		t.Errorf("reward %v, want 1", got["reward"])
	}
	wantAlternating(t, rr, 6)
	// A client without the cookie is another session, on either instance.
	if got := gymtest.NewSession(t, srv).Verify(row, rec.Response); got["reward"] != 0.0 {
		t.Errorf("cookie lost: reward %v, want 0", got["reward"])
	}
}

func TestSharedStoreManySessions(t *testing.T) {
	url := redistest.Start(t)
	rr, srv := redisPair(t, url, "counter", 0)
	const sessions, workers = 1000, 64
	transport := &http.Transport{MaxIdleConns: 2 * workers, MaxIdleConnsPerHost: 2 * workers}
	defer transport.CloseIdleConnections()

	results := make([]sessionResult, sessions)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range jobs {
				results[i] = runSession(t, srv.URL, transport, i)
			}
		})
	}
	start := time.Now()
	for i := range sessions {
		jobs <- i
	}
	close(jobs)
	wg.Wait()

	failed := 0
	for i, r := range results {
		if r.err != nil {
			failed++
			if failed <= 10 {
				t.Errorf("session %d: %v", i, r.err)
			}
		} else if want := sessionTotal(i); r.count != want {
			t.Errorf("session %d: count %d, want %d", i, r.count, want)
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d sessions failed", failed, sessions)
	}
	h0, h1 := rr.hits[0].Load(), rr.hits[1].Load()
	if h0 == 0 || h1 == 0 || h0+h1 != int64(sessions*stepsPerSession) {
		t.Errorf("instances served %d and %d requests, want %d in all on both", h0, h1, sessions*stepsPerSession)
	}
	t.Logf("%d sessions, %d requests over 2 instances (%d/%d) in %v with %d workers, GOMAXPROCS %d",
		sessions, h0+h1, h0, h1, time.Since(start).Round(time.Millisecond), workers, runtime.GOMAXPROCS(0))
}

// Each session of TestSharedStoreManySessions: seed with initial i, increments by steps(i),
// one decrement by 1, get_counter_value, verify. stepsPerSession requests in all.
const stepsPerSession = 1 + 3 + 1 + 1 + 1

func sessionSteps(i int) []int { return []int{i%5 + 1, 2, i % 3} }

func sessionTotal(i int) int {
	n := i
	for _, s := range sessionSteps(i) {
		n += s
	}
	return n - 1
}

// sessionResult is a session's final count, or what went wrong.
type sessionResult struct {
	count int
	err   error
}

// runSession runs one session with its own cookie jar and checks every answer.
func runSession(t *testing.T, base string, transport http.RoundTripper, i int) (r sessionResult) {
	c := newCounterClient(t, base, transport)
	n, err := c.seedAndCount(i, sessionSteps(i))
	if err != nil {
		r.err = err
		return r
	}
	m, err := c.want(http.StatusOK, "/decrement_counter", `{"count":1}`)
	if err != nil {
		r.err = err
		return r
	}
	n--
	if m["count"] != float64(n) {
		r.err = fmt.Errorf("decrement_counter answered %v, want count %d", m, n)
		return r
	}
	m, err = c.want(http.StatusOK, "/get_counter_value", `{}`)
	if err != nil {
		r.err = err
		return r
	}
	if m["count"] != float64(n) {
		r.err = fmt.Errorf("get_counter_value answered %v, want %d", m, n)
		return r
	}
	m, err = c.want(http.StatusOK, "/verify", counterVerify(counterRow(i, sessionTotal(i))))
	if err != nil {
		r.err = err
		return r
	}
	if m["reward"] != 1.0 || m["tool_calls"] != float64(len(sessionSteps(i))+2) {
		r.err = fmt.Errorf("verify answered reward %v, count %v, tool_calls %v, reason %v", m["reward"], m["count"], m["tool_calls"], m["reason"])
		return r
	}
	r.count = int(m["count"].(float64))
	if strings.TrimSpace(c.cookie(counterCookie)) == "" {
		r.err = fmt.Errorf("no session cookie")
	}
	return r
}

// A server knows a session it seeded from one it never saw: after its Redis restarts empty, a
// tool call and the verify of a seeded session are answered 409 session_not_found (the session
// was lost, not scored 0, and not started again from 0), while a session never seeded, or ended
// with /end_session, still scores 0, as NeMo Gym's server does. Both counters: rollout's
// (counter) and NeMo Gym's example (example_session_state_mgmt, whose tool calls start a
// missing counter at 0).
func TestSharedStoreRestartLosesSeededSessions(t *testing.T) {
	for _, name := range []string{"counter", "example_session_state_mgmt"} {
		t.Run(name, func(t *testing.T) {
			redis := redistest.StartServer(t)
			_, srv := redisPair(t, redis.URL, name, 0)
			seeded, never, ended := newCounterClient(t, srv.URL, nil), newCounterClient(t, srv.URL, nil), newCounterClient(t, srv.URL, nil)
			seeded.mustWant(t, http.StatusOK, "/seed_session", counterRow(5, 0))
			seeded.mustWant(t, http.StatusOK, "/increment_counter", `{"count":3}`)
			ended.mustWant(t, http.StatusOK, "/seed_session", counterRow(1, 0))
			ended.mustWant(t, http.StatusOK, "/end_session", ``)
			wantVerify(t, seeded, counterRow(5, 8), map[string]any{"reward": 1.0})

			if err := redis.Restart(); err != nil {
				t.Fatal(err)
			}
			for _, call := range [][2]string{{"/increment_counter", `{"count":3}`}, {"/get_counter_value", `{}`}, {"/verify", counterVerify(counterRow(5, 8))}} {
				code, out, err := seeded.post(call[0], call[1])
				if err != nil || code != http.StatusConflict || !strings.Contains(string(out), `"error":"session_not_found"`) {
					t.Errorf("%s of a seeded session after the restart: %d %s %v, want 409 session_not_found", call[0], code, out, err)
				}
			}
			wantReward(t, never, counterRow(5, 8), 0)
			wantReward(t, ended, counterRow(1, 1), 0)
			// Seeding again makes it a session like any other.
			seeded.mustWant(t, http.StatusOK, "/seed_session", counterRow(5, 0))
			seeded.mustWant(t, http.StatusOK, "/increment_counter", `{"count":3}`)
			wantVerify(t, seeded, counterRow(5, 8), map[string]any{"reward": 1.0})
		})
	}
}

// wantReward verifies row and wants the reward (200).
func wantReward(t *testing.T, c *counterClient, row string, reward float64) {
	t.Helper()
	if m := c.mustWant(t, http.StatusOK, "/verify", counterVerify(row)); m["reward"] != reward {
		t.Errorf("verify = %v, want reward %v", m, reward)
	}
}

// A verify of a seeded session is scored on the state it read, or answered 409
// session_not_found: the state lost while the verify runs (the Redis restarts empty after the
// first or the second read of the session) never makes it score 0 with a 200. The verify used to
// check that the state exists with one read and score it with another: a restart in between
// scored a rollout that did everything right 0, reason session_not_found, with no failure class
// (test/soak TestSoakMixed, about 1 run in 10). The extraction and workflow servers have the
// same test in their packages.
func TestSharedStoreRestartDuringVerify(t *testing.T) {
	counterPlay := func(t *testing.T, s *gymtest.Session) []byte {
		s.MustPost("/seed_session", []byte(counterRow(5, 8)))
		s.MustPost("/increment_counter", []byte(`{"count":3}`))
		return []byte(counterVerify(counterRow(5, 8)))
	}
	for _, b := range []gym.Builtin{Builtin, nemogym.SessionStateMgmt} {
		t.Run(b.Name, func(t *testing.T) { gymtest.RestartDuringVerify(t, b, counterPlay) })
	}
}

// counters are the two counter servers the shared-store tests run, by name: rollout's and NeMo
// Gym's example.
var counters = map[string]gym.Builtin{Builtin.Name: Builtin, nemogym.SessionStateMgmt.Name: nemogym.SessionStateMgmt}

// newServer returns the named counter server, as servers.New does.
func newServer(name string, opts gym.Options) (*gym.Server, error) {
	b, ok := counters[name]
	if !ok {
		return nil, fmt.Errorf("no counter server %q", name)
	}
	return gym.New(context.Background(), b, opts)
}

// With a session key held outside the store, a session's state altered in Redis (the count
// rewritten) or replaced with another session's value is answered 409 session_tampered by the
// tool calls and the verify of both instances, never scored; untouched sessions go on as before.
func TestSharedStoreTamperedStateRefused(t *testing.T) {
	for _, name := range []string{"counter", "example_session_state_mgmt"} {
		t.Run(name, func(t *testing.T) {
			url := redistest.Start(t)
			key := []byte(strings.Repeat("s", 32))
			var hs []http.Handler
			for range 2 {
				h, err := newServer(name, gym.Options{Store: openRedisStore(t, url, store.Options{Prefix: name}), Key: key})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { h.Close() })
				hs = append(hs, h)
			}
			srv := httptest.NewServer(newRoundRobin(hs...))
			t.Cleanup(srv.Close)
			raw := openRedisStore(t, url, store.Options{Prefix: name})
			ctx := context.Background()
			altered, copied, good := newCounterClient(t, srv.URL, nil), newCounterClient(t, srv.URL, nil), newCounterClient(t, srv.URL, nil)
			for _, c := range []*counterClient{altered, copied, good} {
				c.mustWant(t, http.StatusOK, "/seed_session", counterRow(5, 0))
			}
			good.mustWant(t, http.StatusOK, "/increment_counter", `{"count":3}`)
			sidOf := func(c *counterClient) string {
				t.Helper()
				u, _ := neturl.Parse(srv.URL)
				for _, ck := range c.c.Jar.Cookies(u) {
					if sid, _, ok := strings.Cut(ck.Value, "."); ok {
						return sid
					}
				}
				t.Fatal("no session cookie")
				return ""
			}
			goodState, ok, err := raw.Get(ctx, sidOf(good))
			if err != nil || !ok {
				t.Fatal(ok, err)
			}
			// The count 5 rewritten to 8 in place, and good's value (count 8) copied over.
			set := func(sid string, v []byte) {
				if err := raw.Update(ctx, sid, func([]byte, bool) ([]byte, error) { return v, nil }); err != nil {
					t.Fatal(err)
				}
			}
			a, _, _ := raw.Get(ctx, sidOf(altered))
			if !bytes.Contains(a, []byte("5")) {
				t.Fatalf("state %q", a)
			}
			set(sidOf(altered), bytes.Replace(a, []byte("5"), []byte("8"), 1))
			set(sidOf(copied), goodState)
			for _, c := range []*counterClient{altered, copied} {
				for _, call := range [][2]string{{"/verify", counterVerify(counterRow(5, 8))}, {"/increment_counter", `{"count":3}`}, {"/get_counter_value", `{}`}, {"/verify", counterVerify(counterRow(5, 8))}} {
					code, out, err := c.post(call[0], call[1])
					if err != nil || code != http.StatusConflict || !strings.Contains(string(out), `"error":"session_tampered"`) {
						t.Errorf("%s of a tampered session: %d %s %v, want 409 session_tampered", call[0], code, out, err)
					}
				}
			}
			wantVerify(t, good, counterRow(5, 8), map[string]any{"reward": 1.0})
		})
	}
}
