package fleet

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"
)

// gate bounds an endpoint's requests in flight by limit (+Inf: no bound). Its state is
// guarded by the Pool's mutex, which acquire takes and release expects held.
type gate struct {
	limit    float64
	inflight int
	waiters  []chan struct{}
	adapt    *adaptive
	size     func() float64 // when set, the limit, asked each time (Window)
}

// room reports whether one more request may go.
func (g *gate) room() bool {
	if g.size != nil {
		g.limit = g.size()
	}
	return float64(g.inflight) < max(1, math.Floor(g.limit))
}

// acquire waits for a slot (first come, first served) or for ctx to end.
func (g *gate) acquire(ctx context.Context, mu *sync.Mutex) error {
	mu.Lock()
	if len(g.waiters) == 0 && g.room() {
		g.inflight++
		mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	g.waiters = append(g.waiters, ch)
	mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		mu.Lock()
		defer mu.Unlock()
		if i := slices.Index(g.waiters, ch); i >= 0 {
			g.waiters = slices.Delete(g.waiters, i, i+1)
			return ctx.Err()
		}
		// Admitted as the context ended: the slot goes to the next one.
		g.inflight--
		g.wake()
		return ctx.Err()
	}
}

// release frees a slot after an attempt that ended as o, learning from it when adaptive.
func (g *gate) release(o outcome) {
	g.inflight--
	if g.adapt != nil && o.sampled {
		g.adapt.sample(o.start, o.latency, o.drop, g.inflight+1)
		g.limit = g.adapt.limit
	}
	g.wake()
}

// wake admits waiters while there is room.
func (g *gate) wake() {
	for len(g.waiters) > 0 && g.room() {
		ch := g.waiters[0]
		g.waiters = g.waiters[1:]
		g.inflight++
		close(ch)
	}
}

// Adaptive configures adaptive concurrency: each endpoint's limit of requests in flight is
// learnt from the latency of its answers, as in Netflix's concurrency-limits (Gradient2) and
// Envoy's adaptive concurrency filter. Every window of answers (as many as the limit, at least
// 10), the window's mean latency is compared with the no-load latency (the least window mean
// seen, which creeps up 0.2% a window so that it can be learnt again):
//
//	gradient = clamp(Tolerance × noLoad / mean, 0.8, 1)
//	limit    = limit × gradient + sqrt(limit)
//
// Until the first time the gradient falls below 1 the limit doubles every window instead (a slow
// start, as TCP's), so that a large fleet is reached in a few windows. A doubling is capped at
// Tolerance × noLoad / mean times the limit (where the latency would reach the tolerance if it
// grew in proportion to the requests in flight, as a queue's does), and the slow start ends at
// the first window so capped, as TCP's HyStart leaves slow start when the round trip grows. In
// slow start a window counts only the answers to requests sent after the limit last changed:
// the answers to requests sent before measure the old, lower limit, and doubling on them
// overshoots (two doublings before the first answer at the new limit comes back, each server's
// queue then several batches deep and every rollout's first rounds slow).
//
// Gradient2 smooths the new limit and lets the gradient halve it; runs of a few minutes recover
// too slowly from a noisy window that way, so here a window moves the limit by its gradient at
// most 20% down, at once, and a 429 or 503 is the sharp signal: it multiplies the limit by
// Backoff at once, at most once a window. A window in which fewer than half the limit were in
// flight does not raise it: the limit is not the bottleneck then.
type Adaptive struct {
	// Initial, Min and Max bound the limit (defaults 8, 1, 1024; an endpoint's MaxConcurrency
	// lowers Max).
	Initial, Min, Max int
	// Tolerance is how many times the no-load latency the mean latency may reach before the
	// limit goes down (default DefaultTolerance).
	Tolerance float64
	// Backoff multiplies the limit on a 429 or 503 (default 0.5).
	Backoff float64
}

// DefaultTolerance is the latency, as a multiple of the no-load latency, past which an adaptive
// limit goes down. Inference servers batch: their latency grows with the batch well before they
// queue, so the tolerance is larger than Gradient2's 1.5.
const DefaultTolerance = 2.5

// adaptive is one endpoint's adaptive limit.
type adaptive struct {
	cfg        Adaptive
	limit      float64
	noLoad     float64 // seconds; 0: not known yet
	slowStart  bool
	changed    time.Time // when the limit last changed (the end of the answer that changed it)
	n          int
	sum        float64
	peak       int
	dropped    bool // a drop in this window already lowered the limit
	windowDrop bool
}

func (a Adaptive) start(maxConc int) *adaptive {
	if a.Min <= 0 {
		a.Min = 1
	}
	if a.Max <= 0 {
		a.Max = 1024
	}
	if maxConc > 0 {
		a.Max = min(a.Max, maxConc)
	}
	if a.Initial <= 0 {
		a.Initial = 8
	}
	a.Initial = min(max(a.Initial, a.Min), a.Max)
	if a.Tolerance <= 0 {
		a.Tolerance = DefaultTolerance
	}
	if a.Backoff <= 0 || a.Backoff >= 1 {
		a.Backoff = 0.5
	}
	return &adaptive{cfg: a, limit: float64(a.Initial), slowStart: true}
}

// sample learns from one answer: when its request was sent, its latency, whether it was an
// overload answer, and the requests in flight when it ended (itself included).
func (a *adaptive) sample(sent time.Time, latency time.Duration, drop bool, inflight int) {
	end := sent.Add(latency)
	if drop {
		if !a.dropped {
			a.dropped = true
			a.slowStart = false
			a.set(a.limit*a.cfg.Backoff, end)
		}
		a.windowDrop = true
	} else if a.slowStart && sent.Before(a.changed) {
		return // sent under the previous limit: it does not measure this one
	} else {
		a.n++
		a.sum += latency.Seconds()
	}
	a.peak = max(a.peak, inflight)
	if a.n+boolInt(a.windowDrop) < max(10, int(a.limit)) {
		return
	}
	defer func() { a.n, a.sum, a.peak, a.dropped, a.windowDrop = 0, 0, 0, false, false }()
	if a.n == 0 || a.windowDrop {
		return
	}
	mean := a.sum / float64(a.n)
	if a.noLoad == 0 || mean < a.noLoad {
		a.noLoad = mean
	} else {
		a.noLoad *= 1.002
	}
	gradient := min(1, max(0.8, a.cfg.Tolerance*a.noLoad/mean))
	appLimited := float64(a.peak) < a.limit/2
	if a.slowStart && gradient == 1 {
		// Grow at most to where the latency would reach the tolerance if it grew in
		// proportion to the requests in flight (a queue); once that is less than a doubling,
		// the latency has risen past half the tolerance and the slow start ends there.
		growth := min(2, a.cfg.Tolerance*a.noLoad/mean)
		if !appLimited {
			a.set(a.limit*growth, end)
		}
		if growth < 2 {
			a.slowStart = false
		}
		return
	}
	a.slowStart = false
	next := a.limit*gradient + math.Sqrt(a.limit)
	if next < a.limit || !appLimited {
		a.set(next, end)
	}
}

// set changes the limit to l (within its bounds) at the moment at.
func (a *adaptive) set(l float64, at time.Time) {
	if next := min(max(l, float64(a.cfg.Min)), float64(a.cfg.Max)); next != a.limit {
		a.limit, a.changed = next, at
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// WindowHeadroom is how many rollouts a Window keeps in flight per request an endpoint's limit
// lets in: a rollout spends part of its time in tool calls, between its model calls.
const WindowHeadroom = 1.5

// Window is a bound on a run's rollouts in flight that follows the pool's adaptive limits
// (runner.Options.Window): WindowHeadroom times the sum of the limits of the endpoints not
// ejected, at least 1 and at most its max. Without adaptive limits it is its max.
type Window struct {
	p   *Pool
	max int
	g   gate
}

// Window returns the pool's window of at most max rollouts (one per pool).
func (p *Pool) Window(max int) *Window {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.window == nil {
		w := &Window{p: p, max: max}
		w.g.size = w.size
		p.window = w
	}
	return p.window
}

// size is the window's bound now; p.mu is held.
func (w *Window) size() float64 {
	sum := 0.0
	for _, ep := range w.p.eps {
		if math.IsInf(ep.gate.limit, 1) {
			return float64(w.max)
		}
		if !ep.ejected {
			sum += math.Floor(ep.gate.limit)
		}
	}
	return min(float64(w.max), max(1, math.Ceil(WindowHeadroom*sum)))
}

// Acquire waits for room in the window or for ctx to end.
func (w *Window) Acquire(ctx context.Context) error { return w.g.acquire(ctx, &w.p.mu) }

// Release ends a rollout's hold on the window.
func (w *Window) Release() {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	w.g.release(outcome{})
}
