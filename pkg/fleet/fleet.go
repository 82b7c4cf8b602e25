// Package fleet spreads a run's model requests over a pool of OpenAI-compatible endpoints
// (replicas of one model): routing (affinity, least-outstanding, round-robin), health
// (ejection after consecutive failures, a half-open probe, retries that move), per-endpoint
// concurrency limits, fixed or adaptive, and per-endpoint counters.
//
// A Pool is an http.RoundTripper under the model client's retries: every attempt of a model
// request picks its endpoint, so that a retry may move to another one. The rollout a request
// belongs to is read from its X-Rollout-Id header (wire.RolloutIDHeader); the endpoint that
// answered is named in the answer's X-Rollout-Endpoint header (wire.EndpointHeader), which the
// agent records per round.
package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/internal/redact"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/wire"
)

// Endpoint is one model endpoint of a pool.
type Endpoint struct {
	// Name labels the endpoint in trajectories, records and the summary (default: the URL's
	// host:port, made unique).
	Name string
	// URL is the OpenAI-compatible base URL (…/v1); a query in it is sent with every request.
	URL string
	// Model is the model name sent to this endpoint ("": the request's).
	Model string
	// Weight is its share of the load relative to the others (0: 1).
	Weight float64
	// MaxConcurrency bounds its requests in flight (0: no bound of its own).
	MaxConcurrency int
	// APIKey is sent as a Bearer token ("": the request's Authorization, if any, is dropped).
	APIKey string
}

// Options configure a Pool.
type Options struct {
	Route Route // default Affinity
	// LoadFactor is affinity's load bound (default DefaultLoadFactor; at least 1).
	LoadFactor float64
	// EjectAfter consecutive failures (connection errors, 5xx, timeouts, redirects, answers
	// over the client's cap) eject an endpoint
	// (default DefaultEjectAfter).
	EjectAfter int
	// EjectBackoff is how long an ejected endpoint waits before its probe; it doubles with
	// each failed probe up to MaxEjectBackoff (defaults DefaultEjectBackoff, 30 s).
	EjectBackoff, MaxEjectBackoff time.Duration
	// Adaptive, when set, limits each endpoint's requests in flight adaptively (see Adaptive).
	Adaptive *Adaptive
	// Transport sends the requests (default http.DefaultTransport).
	Transport http.RoundTripper
	// Now is the clock (tests replace it; default time.Now).
	Now func() time.Time
}

// Defaults of Options.
const (
	DefaultEjectAfter   = 5
	DefaultEjectBackoff = time.Second
)

// BaseURL is the base URL to give the model client of a pool: the pool replaces its scheme,
// host and path prefix with the endpoint's.
const BaseURL = "http://fleet.rollout.invalid"

// Pool routes model requests over endpoints. It is safe for concurrent use.
type Pool struct {
	opts Options
	eps  []*endpoint
	ring *ring
	next http.RoundTripper
	now  func() time.Time

	mu      sync.Mutex
	rr      int
	loads   []int // requests in flight per endpoint, waiting for a slot included
	weights []float64
	homes   homes
	byName  map[string]int
	events  []Event
	window  *Window // the run's window of rollouts, when asked for
}

// endpoint is an Endpoint with its parsed URL and its state (guarded by Pool.mu, except stats).
type endpoint struct {
	Endpoint
	base  *url.URL
	query url.Values

	fails       int // consecutive failures
	ejected     bool
	until       time.Time // an ejected endpoint's probe is due then
	backoff     time.Duration
	probing     bool // its half-open probe is in flight
	lastFailure string

	gate  gate
	stats counters
}

// New returns a pool of eps (at least one).
func New(eps []Endpoint, opts Options) (*Pool, error) {
	if len(eps) == 0 {
		return nil, errors.New("fleet: no endpoint")
	}
	if opts.Route == "" {
		opts.Route = Affinity
	}
	if _, err := ParseRoute(string(opts.Route)); err != nil {
		return nil, err
	}
	if opts.LoadFactor == 0 {
		opts.LoadFactor = DefaultLoadFactor
	}
	if opts.LoadFactor < 1 {
		return nil, fmt.Errorf("fleet: load factor %g: want at least 1", opts.LoadFactor)
	}
	if opts.EjectAfter == 0 {
		opts.EjectAfter = DefaultEjectAfter
	}
	if opts.EjectBackoff == 0 {
		opts.EjectBackoff = DefaultEjectBackoff
	}
	if opts.MaxEjectBackoff < opts.EjectBackoff {
		opts.MaxEjectBackoff = max(30*time.Second, opts.EjectBackoff)
	}
	p := &Pool{opts: opts, next: opts.Transport, now: opts.Now, byName: map[string]int{}}
	if p.next == nil {
		p.next = http.DefaultTransport
	}
	if p.now == nil {
		p.now = time.Now
	}
	names := make([]string, len(eps))
	for i, e := range eps {
		u, err := url.Parse(e.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("fleet: endpoint %d: %s: want an http:// or https:// URL", i+1, redact.URL(e.URL))
		}
		if e.Weight == 0 {
			e.Weight = 1
		}
		if e.Weight < 0 || math.IsNaN(e.Weight) || math.IsInf(e.Weight, 0) {
			return nil, fmt.Errorf("fleet: endpoint %s: weight %g: want a positive number", redact.URL(e.URL), e.Weight)
		}
		if e.MaxConcurrency < 0 {
			return nil, fmt.Errorf("fleet: endpoint %s: max concurrency %d: want 0 (no bound) or more", redact.URL(e.URL), e.MaxConcurrency)
		}
		if e.Name == "" {
			e.Name = u.Host
		}
		name := e.Name
		for k := 2; ; k++ {
			if _, dup := p.byName[name]; !dup {
				break
			}
			name = fmt.Sprintf("%s#%d", e.Name, k)
		}
		e.Name = name
		p.byName[name] = i
		q := u.Query()
		u.RawQuery, u.ForceQuery, u.Fragment = "", false, ""
		u.Path = strings.TrimRight(u.Path, "/")
		ep := &endpoint{Endpoint: e, base: u, query: q, backoff: opts.EjectBackoff}
		ep.gate.limit = math.Inf(1)
		if e.MaxConcurrency > 0 {
			ep.gate.limit = float64(e.MaxConcurrency)
		}
		if opts.Adaptive != nil {
			ep.gate.adapt = opts.Adaptive.start(e.MaxConcurrency)
			ep.gate.limit = ep.gate.adapt.limit
		}
		p.eps = append(p.eps, ep)
		p.weights = append(p.weights, e.Weight)
		names[i] = name
	}
	p.loads = make([]int, len(eps))
	p.ring = newRing(names, p.weights)
	return p, nil
}

// Endpoints are the pool's endpoints, with their names as the records show them.
func (p *Pool) Endpoints() []Endpoint {
	out := make([]Endpoint, len(p.eps))
	for i, e := range p.eps {
		out[i] = e.Endpoint
	}
	return out
}

// errAllDown is the error of an attempt when no endpoint may take it.
type errAllDown struct{ what string }

func (e *errAllDown) Error() string { return "fleet: no endpoint available: " + e.what }

// pick chooses the endpoint of an attempt of rollout id, and counts it in flight there.
func (p *Pool) pick(id string) (int, error) {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	eligible := make([]bool, len(p.eps))
	any := false
	for i, e := range p.eps {
		eligible[i] = !e.ejected || !e.probing && !now.Before(e.until)
		any = any || eligible[i]
	}
	if !any {
		var parts []string
		for _, e := range p.eps {
			parts = append(parts, fmt.Sprintf("%s ejected (%s; probe in %s)", e.Name, e.lastFailure, max(e.until.Sub(now), 0).Round(time.Millisecond)))
		}
		return -1, &errAllDown{strings.Join(parts, "; ")}
	}
	h, known := p.homes.get(id)
	if known && h.avoid >= 0 && eligible[h.avoid] {
		// The last attempt failed there: a retry moves, unless it is the only one left.
		eligible[h.avoid] = false
		if !anyTrue(eligible) {
			eligible[h.avoid] = true
		}
	}
	e := -1
	switch p.opts.Route {
	case Affinity:
		if known && h.home >= 0 && eligible[h.home] {
			e = h.home
		} else {
			// A new rollout goes where its task's ring and the load bound say, among the
			// endpoints whose limit has room when there are such: a full one would only keep
			// it waiting.
			roomy := make([]bool, len(p.eps))
			for i, ep := range p.eps {
				roomy[i] = eligible[i] && len(ep.gate.waiters) == 0 && ep.gate.room()
			}
			if e = boundedPick(p.ring, TaskKey(id), p.loads, p.weights, roomy, p.opts.LoadFactor); e < 0 {
				e = boundedPick(p.ring, TaskKey(id), p.loads, p.weights, eligible, p.opts.LoadFactor)
			}
		}
		if id != "" {
			p.homes.put(id, home{home: e, avoid: -1})
		}
	case LeastOutstanding:
		e = leastOutstanding(p.loads, p.weights, eligible)
	case RoundRobin:
		for k := range p.eps {
			c := (p.rr + k) % len(p.eps)
			if eligible[c] {
				e = c
				break
			}
		}
		p.rr = e + 1
	}
	if known && h.avoid >= 0 && p.opts.Route != Affinity {
		p.homes.put(id, home{home: -1, avoid: -1})
	}
	ep := p.eps[e]
	if ep.ejected {
		ep.probing = true // half-open: this attempt is the probe
	}
	p.loads[e]++
	return e, nil
}

func anyTrue(b []bool) bool {
	for _, v := range b {
		if v {
			return true
		}
	}
	return false
}

// outcome is how an attempt ended.
type outcome struct {
	class   record.FailureClass // "" on success
	health  bool                // a failure that counts towards ejection
	drop    bool                // an overload answer (429, 503): the limit goes down
	start   time.Time           // when the attempt was sent
	latency time.Duration
	sampled bool // the latency is a sample for the adaptive limit
	helper  bool // a helper request (wire.ServerRootHelper): not a model call, not counted
	detail  string
}

// finish ends an attempt at endpoint e of rollout id.
func (p *Pool) finish(e int, id string, o outcome, admitted bool) {
	now := p.now()
	ep := p.eps[e]
	if !o.helper {
		ep.stats.attempt(o)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loads[e]--
	if admitted {
		ep.gate.release(o)
		if p.window != nil {
			p.window.g.wake() // the limits may have grown
		}
	}
	if o.class == record.FailCancelled {
		if ep.probing {
			ep.probing = false // the probe did not tell; the next attempt probes again
		}
		return
	}
	if !o.health {
		if ep.ejected && ep.probing || ep.fails > 0 {
			if ep.ejected {
				p.event(now, ep, "restored", "answered its probe")
			}
			ep.ejected, ep.probing, ep.fails, ep.backoff = false, false, 0, p.opts.EjectBackoff
		}
		return
	}
	if id != "" {
		h, _ := p.homes.get(id)
		h.avoid = e
		if p.opts.Route == Affinity {
			h.home = -1 // re-homed at its next attempt
		}
		p.homes.put(id, h)
	}
	ep.lastFailure = o.detail
	switch {
	case ep.ejected && ep.probing:
		ep.probing = false
		ep.backoff = min(2*ep.backoff, p.opts.MaxEjectBackoff)
		ep.until = now.Add(ep.backoff)
		p.event(now, ep, "probe failed", fmt.Sprintf("%s; next probe in %s", o.detail, ep.backoff))
	case ep.ejected:
		// An attempt that started before the ejection.
	default:
		ep.fails++
		if ep.fails >= p.opts.EjectAfter {
			ep.ejected = true
			ep.until = now.Add(ep.backoff)
			ep.stats.ejections.Add(1)
			p.event(now, ep, "ejected", fmt.Sprintf("%d consecutive failures, the last: %s; probe in %s", ep.fails, o.detail, ep.backoff))
		}
	}
}

// RoundTrip sends one attempt of a model request to the endpoint the route picks.
func (p *Pool) RoundTrip(req *http.Request) (*http.Response, error) {
	id := req.Header.Get(wire.RolloutIDHeader)
	e, err := p.pick(id)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	ep := p.eps[e]
	ctx := req.Context()
	// A helper request of the token-in path (llama-server's /props, /tokenize,
	// /apply-template) takes no slot of the endpoint's limit: it is not a generation.
	helper := req.Header.Get(wire.ServerRootHeader) == wire.ServerRootHelper
	admitted := !helper
	if admitted {
		if err := ep.gate.acquire(ctx, &p.mu); err != nil {
			if req.Body != nil {
				req.Body.Close()
			}
			p.finish(e, id, outcome{class: record.FailCancelled}, false)
			return nil, err
		}
	}
	// end finishes the attempt as o; a helper request's is not counted, nor its latency taken
	// as a sample.
	end := func(o outcome) {
		o.helper = helper
		o.sampled = o.sampled && !helper
		p.finish(e, id, o, admitted)
	}
	out, err := p.rewrite(req, ep)
	if err != nil {
		end(outcome{class: record.FailModelError, detail: err.Error()})
		return nil, err
	}
	start := p.now()
	resp, err := p.next.RoundTrip(out)
	if err != nil {
		end(failed(ctx, err, p.now().Sub(start)))
		return nil, err
	}
	resp.Header.Set(wire.EndpointHeader, ep.Name)
	o := statusOutcome(resp.StatusCode)
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		// A redirect is never followed: the endpoint failed, not the request. The client gets
		// a 502 naming it, which it retries, so that the retry moves to another endpoint.
		resp.Body.Close()
		o.start, o.latency = start, p.now().Sub(start)
		end(o)
		msg := fmt.Sprintf("fleet: endpoint %s answered HTTP %d, a redirect (not followed)", ep.Name, resp.StatusCode)
		body, _ := json.Marshal(map[string]any{"error": map[string]string{"message": msg, "type": "bad_gateway"}})
		return &http.Response{StatusCode: http.StatusBadGateway, Status: "502 Bad Gateway", Proto: resp.Proto, ProtoMajor: resp.ProtoMajor, ProtoMinor: resp.ProtoMinor,
			Header: http.Header{"Content-Type": {"application/json"}, wire.EndpointHeader: {ep.Name}}, Body: io.NopCloser(bytes.NewReader(body)),
			ContentLength: int64(len(body)), Request: out}, nil
	}
	resp.Body = &doneBody{ReadCloser: resp.Body, empty: resp.ContentLength == 0, done: func(readErr error) {
		o.start, o.latency = start, p.now().Sub(start)
		switch {
		case readErr == errClosedEarly && o.class == "" && ctx.Err() == nil:
			// The client stopped reading a whole answer: it was larger than the client's
			// cap (or broke its framing). That is the endpoint's failure as much as a 5xx.
			o = outcome{class: record.FailModelError, health: true, latency: o.latency, detail: fmt.Sprintf("HTTP %d answer not read to its end (larger than the client's cap)", resp.StatusCode)}
		case readErr == errClosedEarly:
			if ctx.Err() != nil && o.class == "" {
				o = failed(ctx, ctx.Err(), o.latency)
			}
		case readErr != nil && o.class == "":
			o = failed(ctx, readErr, o.latency)
		}
		o.sampled = o.class == "" || o.drop
		end(o)
	}}
	return resp, nil
}

// failed is the outcome of an attempt that got no (whole) answer.
func failed(ctx context.Context, err error, latency time.Duration) outcome {
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return outcome{class: record.FailCancelled, latency: latency}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return outcome{class: record.FailTimeout, health: true, latency: latency, detail: "timeout"}
	}
	return outcome{class: record.FailModelUnavailable, health: true, latency: latency, detail: record.Clip(err.Error(), 200)}
}

// statusOutcome is the outcome of an attempt answered with status.
func statusOutcome(status int) outcome {
	detail := fmt.Sprintf("HTTP %d", status)
	switch {
	case status == http.StatusTooManyRequests:
		return outcome{class: record.FailRateLimited, drop: true, detail: detail}
	case status == http.StatusServiceUnavailable:
		return outcome{class: record.FailModelUnavailable, health: true, drop: true, detail: detail}
	case status >= 500:
		return outcome{class: record.FailModelUnavailable, health: true, detail: detail}
	case status >= 400:
		return outcome{class: record.FailModelError, detail: detail}
	case status >= 300:
		// The model client follows no redirect: an endpoint that answers with one fails
		// every call, and counts towards its ejection like a 5xx.
		return outcome{class: record.FailModelError, health: true, detail: detail + " (a redirect, not followed)"}
	}
	return outcome{}
}

// doneBody calls done once: at the end of the body (nil), at a read error (the error), or at
// Close before either (errClosedEarly; nil for an empty body).
type doneBody struct {
	io.ReadCloser
	empty bool // the answer has no body (Content-Length 0)
	once  sync.Once
	done  func(error)
}

// errClosedEarly is a body closed before its end.
var errClosedEarly = errors.New("fleet: answer closed before its end")

func (b *doneBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		end := err
		if err == io.EOF {
			end = nil
		}
		b.once.Do(func() { b.done(end) })
	}
	return n, err
}

func (b *doneBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() {
		if b.empty {
			b.done(nil)
			return
		}
		b.done(errClosedEarly)
	})
	return err
}

// rewrite is req sent to ep: its URL's scheme, host and path prefix (BaseURL's path, none)
// replaced by ep's, ep's query added, ep's key as the Bearer token, and ep's model name in the
// body when it has one. A request marked with wire.ServerRootHeader goes to ep's base without
// its /v1, with its body as it is.
func (p *Pool) rewrite(req *http.Request, ep *endpoint) (*http.Request, error) {
	out := req.Clone(req.Context())
	u := *req.URL
	u.Scheme, u.Host, u.User = ep.base.Scheme, ep.base.Host, ep.base.User
	base := ep.base.Path
	root := req.Header.Get(wire.ServerRootHeader) != ""
	if root {
		// A path from the server's root (llama-server's /completion, /tokenize, ...): the
		// endpoint's base without its OpenAI /v1.
		base = strings.TrimSuffix(strings.TrimSuffix(base, "/"), "/v1")
	}
	u.Path = base + req.URL.Path
	u.RawPath = ""
	if len(ep.query) > 0 {
		q := u.Query()
		for k, vs := range ep.query {
			if _, ok := q[k]; !ok {
				q[k] = vs
			}
		}
		u.RawQuery = q.Encode()
	}
	out.URL, out.Host = &u, ""
	out.Header.Del(wire.EndpointHeader)
	out.Header.Del(wire.ServerRootHeader)
	if ep.APIKey != "" {
		out.Header.Set("Authorization", "Bearer "+ep.APIKey)
	} else {
		out.Header.Del("Authorization")
	}
	if ep.Model == "" || req.Body == nil || req.Method != http.MethodPost || root {
		return out, nil
	}
	body, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	body, err = setModel(body, ep.Model)
	if err != nil {
		return nil, fmt.Errorf("fleet: endpoint %s: %w", ep.Name, err)
	}
	out.Body = io.NopCloser(bytes.NewReader(body))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	out.ContentLength = int64(len(body))
	return out, nil
}

// setModel is a JSON request body with its top-level "model" set to name.
func setModel(body []byte, name string) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, fmt.Errorf("the request body is not a JSON object: %w", err)
	}
	v, _ := json.Marshal(name)
	m["model"] = v
	return json.Marshal(m)
}

// Model is a Chat Completions client: the method of the model client (agent.Model), which the
// pool's Model wraps.
type Model interface {
	CreateChatCompletion(ctx context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error)
}

// Model wraps m, a client that sends through the pool, so that each answer's tokens are counted
// for the endpoint that gave it.
func (p *Pool) Model(m Model) Model { return &countingModel{m, p} }

type countingModel struct {
	Model
	p *Pool
}

func (c *countingModel) CreateChatCompletion(ctx context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error) {
	resp, err := c.Model.CreateChatCompletion(ctx, req)
	if err == nil && wire.CheckUsage(resp.Usage) == nil { // usage out of range is no count (the agent refuses the answer)
		if e, ok := c.p.byName[resp.Header().Get(wire.EndpointHeader)]; ok {
			c.p.eps[e].stats.tokens(int64(resp.Usage.PromptTokens), int64(resp.Usage.CompletionTokens))
		}
	}
	return resp, err
}
