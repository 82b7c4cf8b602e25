package fleet

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rollout-dev/rollout/pkg/wire"
)

// replica is a loopback HTTP server standing for one model endpoint: it answers every POST with
// a tiny chat completion, counts requests and requests in flight, and can hold answers back
// (hold) or fail them (status).
type replica struct {
	srv      *httptest.Server
	name     string
	requests atomic.Int64
	inflight atomic.Int64
	peak     atomic.Int64
	status   atomic.Int64 // 0: 200
	hold     chan struct{}
	mu       sync.Mutex
	models   []string // the "model" of each request body
}

func newReplica(t *testing.T) *replica {
	r := &replica{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		n := r.inflight.Add(1)
		defer r.inflight.Add(-1)
		for {
			p := r.peak.Load()
			if n <= p || r.peak.CompareAndSwap(p, n) {
				break
			}
		}
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		if i := strings.Index(string(body), `"model":"`); i >= 0 {
			rest := string(body[i+9:])
			r.models = append(r.models, rest[:strings.IndexByte(rest, '"')])
		}
		hold := r.hold
		r.mu.Unlock()
		if hold != nil {
			<-hold
		}
		if s := r.status.Load(); s != 0 {
			http.Error(w, `{"error":{"message":"down"}}`, int(s))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`)
	}))
	t.Cleanup(r.srv.Close)
	r.name = strings.TrimPrefix(r.srv.URL, "http://")
	return r
}

func (r *replica) setHold(ch chan struct{}) {
	r.mu.Lock()
	r.hold = ch
	r.mu.Unlock()
}

func replicas(t *testing.T, n int) ([]*replica, []Endpoint) {
	rs := make([]*replica, n)
	eps := make([]Endpoint, n)
	for i := range rs {
		rs[i] = newReplica(t)
		eps[i] = Endpoint{URL: rs[i].srv.URL + "/v1"}
	}
	return rs, eps
}

// send makes one model request of rollout id through the pool and returns the endpoint that
// answered (from the answer's header) and its status.
func send(t *testing.T, ctx context.Context, p *Pool, id string) (string, int) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, BaseURL+"/chat/completions", strings.NewReader(`{"model":"m","messages":[]}`))
	req.Header.Set(wire.RolloutIDHeader, id)
	resp, err := p.RoundTrip(req)
	if err != nil {
		return "", 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.Header.Get(wire.EndpointHeader), resp.StatusCode
}

func rolloutID(task, repeat int) string {
	return fmt.Sprintf("multi/data%%2Ft.jsonl/%d/%d", task, repeat)
}

func TestTaskKey(t *testing.T) {
	for _, tc := range []struct{ id, want string }{
		{"multi/data%2Ft.jsonl/3/7", "data%2Ft.jsonl/3"},
		{"single/data%2Ft.jsonl/3/0", "data%2Ft.jsonl/3"},
		{"odd", "odd"},
		{"", ""},
	} {
		if got := TaskKey(tc.id); got != tc.want {
			t.Errorf("TaskKey(%q) = %q, want %q", tc.id, got, tc.want)
		}
	}
}

// Affinity: every round of a rollout goes to one endpoint, while the rollouts of many tasks run
// interleaved, and the repeats of a task share it while loads are even (one request at a time).
func TestAffinityRoundsAndRepeatsStayTogether(t *testing.T) {
	rs, eps := replicas(t, 4)
	p, err := New(eps, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	served := map[string]map[string]bool{} // rollout → endpoints
	byTask := map[int]map[string]bool{}
	for round := range 5 {
		for task := range 40 {
			for rep := range 4 {
				id := rolloutID(task, rep)
				name, status := send(t, ctx, p, id)
				if status != 200 {
					t.Fatalf("round %d of %s: status %d", round, id, status)
				}
				if served[id] == nil {
					served[id] = map[string]bool{}
				}
				served[id][name] = true
				if byTask[task] == nil {
					byTask[task] = map[string]bool{}
				}
				byTask[task][name] = true
			}
		}
	}
	for id, names := range served {
		if len(names) != 1 {
			t.Errorf("rollout %s went to %d endpoints: %v", id, len(names), names)
		}
	}
	for task, names := range byTask {
		if len(names) != 1 {
			t.Errorf("task %d's repeats went to %d endpoints: %v", task, len(names), names)
		}
	}
	// 40 tasks over 4 endpoints: each gets some.
	for _, r := range rs {
		if r.requests.Load() == 0 {
			t.Errorf("endpoint %s got no task of 40", r.name)
		}
	}
}

// Bounded loads: with every request of one task in flight at once, no endpoint takes more than
// ceil(1.25 × m / N) of the m requests, so the task's repeats spread once its home is full.
func TestAffinityBoundHolds(t *testing.T) {
	rs, eps := replicas(t, 4)
	hold := make(chan struct{})
	for _, r := range rs {
		r.setHold(hold)
	}
	p, err := New(eps, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const m = 64
	var wg sync.WaitGroup
	for rep := range m {
		wg.Add(1)
		go func() {
			defer wg.Done()
			send(t, context.Background(), p, rolloutID(1, rep))
		}()
	}
	waitFor(t, func() bool {
		var n int64
		for _, r := range rs {
			n += r.inflight.Load()
		}
		return n == m
	})
	close(hold)
	wg.Wait()
	bound := int64(math.Ceil(DefaultLoadFactor * m / 4))
	used := 0
	for _, r := range rs {
		if r.peak.Load() > bound {
			t.Errorf("endpoint %s held %d requests in flight, over the bound %d", r.name, r.peak.Load(), bound)
		}
		if r.peak.Load() > 0 {
			used++
		}
	}
	if used < 4 {
		t.Errorf("64 requests of one task used %d of 4 endpoints: the bound did not spread them", used)
	}
}

// boundedPick never picks an endpoint whose load would pass the bound, over random loads,
// weights and eligibility, and always picks one when any is eligible.
func TestBoundedPickProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		n := 1 + rng.IntN(8)
		names := make([]string, n)
		weights := make([]float64, n)
		loads := make([]int, n)
		eligible := make([]bool, n)
		anyEligible := false
		for i := range n {
			names[i] = fmt.Sprintf("e%d", i)
			weights[i] = float64(1 + rng.IntN(3))
			loads[i] = rng.IntN(20)
			eligible[i] = rng.IntN(5) > 0
			anyEligible = anyEligible || eligible[i]
		}
		r := newRing(names, weights)
		factor := 1 + rng.Float64()
		e := boundedPick(r, fmt.Sprint("task", trial), loads, weights, eligible, factor)
		if !anyEligible {
			if e != -1 {
				t.Fatalf("trial %d: picked %d with none eligible", trial, e)
			}
			continue
		}
		if e < 0 || !eligible[e] {
			t.Fatalf("trial %d: picked %d (eligible %v)", trial, e, eligible)
		}
		m, w := 0, 0.0
		for i := range n {
			if eligible[i] {
				m += loads[i]
				w += weights[i]
			}
		}
		if float64(loads[e]+1) > Bound(factor, m, weights[e], w) {
			t.Fatalf("trial %d: endpoint %d's load %d+1 passes its bound %g", trial, e, loads[e], Bound(factor, m, weights[e], w))
		}
	}
}

// Consistent hashing: adding a fifth... sixth endpoint moves about 1/6 of the tasks, all to the
// new one; removing one moves only its own tasks.
func TestRingMovesAboutOneNth(t *testing.T) {
	names := []string{"a:8000", "b:8000", "c:8000", "d:8000", "e:8000"}
	rings := map[int]*ring{}
	pick := func(names []string, key string) string {
		w := make([]float64, len(names))
		el := make([]bool, len(names))
		for i := range w {
			w[i], el[i] = 1, true
		}
		r := rings[len(names)]
		if r == nil {
			r = newRing(names, w)
			rings[len(names)] = r
		}
		return names[boundedPick(r, key, make([]int, len(names)), w, el, DefaultLoadFactor)]
	}
	const keys = 6000
	grown := append(append([]string{}, names...), "f:8000")
	shrunk := []string{"a:8000", "b:8000", "d:8000", "e:8000"} // c removed
	moved, removedMoved := 0, 0
	for k := range keys {
		key := fmt.Sprintf("tasks.jsonl/%d", k)
		before := pick(names, key)
		if after := pick(grown, key); after != before {
			moved++
			if after != "f:8000" {
				t.Fatalf("key %s moved from %s to %s, not to the new endpoint", key, before, after)
			}
		}
		if after := pick(shrunk, key); after != before {
			removedMoved++
			if before != "c:8000" {
				t.Fatalf("key %s moved from %s to %s though its endpoint stayed", key, before, after)
			}
		}
	}
	if f := float64(moved) / keys; f < 1.0/6*0.7 || f > 1.0/6*1.3 {
		t.Errorf("adding a sixth endpoint moved %.3f of the tasks, want about 1/6", f)
	}
	if f := float64(removedMoved) / keys; f < 0.2*0.7 || f > 0.2*1.3 {
		t.Errorf("removing one of five endpoints moved %.3f of the tasks, want about 1/5", f)
	}
}

// Weights: an endpoint of weight 2 owns about twice the tasks of one of weight 1.
func TestRingWeights(t *testing.T) {
	names := []string{"a", "b", "c"}
	w := []float64{1, 2, 1}
	r := newRing(names, w)
	count := make([]int, 3)
	for k := range 20000 {
		count[r.walk(fmt.Sprint(k), 3, func(int) bool { return true })]++
	}
	if ratio := float64(count[1]) / float64(count[0]+count[2]) * 2 / 2; ratio < 0.85 || ratio > 1.15 {
		t.Errorf("shares %v for weights %v: weight 2 got %.2f of the other two together, want about 1", count, w, ratio)
	}
}

func TestLeastOutstandingAndRoundRobin(t *testing.T) {
	rs, eps := replicas(t, 3)
	t.Run("round-robin", func(t *testing.T) {
		p, _ := New(eps, Options{Route: RoundRobin})
		var got []string
		for range 6 {
			name, _ := send(t, context.Background(), p, rolloutID(1, 0))
			got = append(got, name)
		}
		want := []string{rs[0].name, rs[1].name, rs[2].name, rs[0].name, rs[1].name, rs[2].name}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("round-robin went %v, want %v", got, want)
		}
	})
	t.Run("least-outstanding", func(t *testing.T) {
		// Two requests held at whichever endpoints they go to: the third goes to the idle one.
		hold := make(chan struct{})
		for _, r := range rs {
			r.setHold(hold)
		}
		defer func() {
			for _, r := range rs {
				r.setHold(nil)
			}
		}()
		p, _ := New(eps, Options{Route: LeastOutstanding})
		var wg sync.WaitGroup
		names := make([]string, 2)
		for i := range 2 {
			wg.Add(1)
			go func() { defer wg.Done(); names[i], _ = send(t, context.Background(), p, rolloutID(i, 0)) }()
			waitFor(t, func() bool { return rs[0].inflight.Load()+rs[1].inflight.Load()+rs[2].inflight.Load() == int64(i+1) })
		}
		for _, r := range rs {
			r.setHold(nil)
		}
		third, _ := send(t, context.Background(), p, rolloutID(9, 0))
		close(hold)
		wg.Wait()
		if third == names[0] || third == names[1] || names[0] == names[1] {
			t.Errorf("least-outstanding sent the held requests to %v and the third to %s: want three different endpoints", names, third)
		}
	})
}

func TestNewRefuses(t *testing.T) {
	for _, tc := range []struct {
		eps  []Endpoint
		opts Options
		want string
	}{
		{nil, Options{}, "no endpoint"},
		{[]Endpoint{{URL: "localhost:8000"}}, Options{}, "localhost:8000: want an http:// or https:// URL"},
		{[]Endpoint{{URL: "http://a/v1", Weight: -1}}, Options{}, "weight -1"},
		{[]Endpoint{{URL: "http://a/v1", MaxConcurrency: -2}}, Options{}, "max concurrency -2"},
		{[]Endpoint{{URL: "http://a/v1"}}, Options{Route: "random"}, `unknown route "random"`},
		{[]Endpoint{{URL: "http://a/v1"}}, Options{LoadFactor: 0.5}, "load factor 0.5"},
	} {
		_, err := New(tc.eps, tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%v, %+v) = %v, want an error with %q", tc.eps, tc.opts, err, tc.want)
		}
	}
	// Two endpoints on one host get distinct names.
	p, err := New([]Endpoint{{URL: "http://a:1/v1"}, {URL: "http://a:1/v2"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if e := p.Endpoints(); e[0].Name != "a:1" || e[1].Name != "a:1#2" {
		t.Errorf("names %q, %q", e[0].Name, e[1].Name)
	}
}

// The pool rewrites each request for its endpoint: the URL's path prefix and query, the key,
// the model name.
func TestRewrite(t *testing.T) {
	var got *http.Request
	var body string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		b, _ := io.ReadAll(r.Body)
		body = string(b)
		io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	p, err := New([]Endpoint{{URL: srv.URL + "/openai/v1?api-version=2024", APIKey: "k1", Model: "qwen-8b"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, BaseURL+"/chat/completions", strings.NewReader(`{"model":"m","messages":[],"seed":3}`))
	req.Header.Set("Authorization", "Bearer other")
	resp, err := p.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got.URL.Path != "/openai/v1/chat/completions" || got.URL.Query().Get("api-version") != "2024" {
		t.Errorf("sent to %s", got.URL)
	}
	if a := got.Header.Get("Authorization"); a != "Bearer k1" {
		t.Errorf("Authorization %q", a)
	}
	if !strings.Contains(body, `"model":"qwen-8b"`) || !strings.Contains(body, `"seed":3`) {
		t.Errorf("body %s", body)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for range 5000 {
		if cond() {
			return
		}
		sleepBriefly()
	}
	t.Fatal("condition not reached")
}
