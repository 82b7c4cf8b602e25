package fleet

import (
	"context"
	"testing"
	"time"
)

// epoch is the synthetic clock's start.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// feed gives a limiter n answers of latency d, with inflight requests in flight, all sent at
// *at, which then moves on by d (the next answers were sent after these came back).
func feed(a *adaptive, at *time.Time, n int, d time.Duration, inflight int) {
	for range n {
		a.sample(*at, d, false, inflight)
	}
	*at = at.Add(d)
}

// wantLimit checks a limiter's limit after what was fed to it.
func wantLimit(t *testing.T, a *adaptive, want float64, after string) {
	t.Helper()
	if a.limit != want {
		t.Errorf("limit %g after %s, want %g", a.limit, after, want)
	}
}

func TestAdaptiveLimit(t *testing.T) {
	t.Run("slow start doubles while latency stays flat", func(t *testing.T) {
		a := Adaptive{Initial: 4, Max: 100}.start(0)
		at := epoch
		for range 4 {
			feed(a, &at, max(10, int(a.limit)), 100*time.Millisecond, int(a.limit))
		}
		wantLimit(t, a, 64, "four flat windows from 4")
		feed(a, &at, 200, 100*time.Millisecond, 64)
		wantLimit(t, a, 100, "more flat windows (the max)")
	})
	t.Run("latency past the tolerance lowers it", func(t *testing.T) {
		a := Adaptive{Initial: 64}.start(0)
		at := epoch
		feed(a, &at, 64, 100*time.Millisecond, 64) // the no-load latency
		before := a.limit
		for range 20 {
			last := a.limit
			feed(a, &at, int(a.limit)+10, 400*time.Millisecond, int(a.limit)) // 4x: past 2.5x
			if a.limit >= last {
				t.Fatalf("limit %g after a window 4x the no-load latency, was %g", a.limit, last)
			}
		}
		// The fixed point of limit×0.8+√limit is 25.
		if a.limit >= before/4 {
			t.Errorf("limit %g after latency rose 4x (from %g)", a.limit, before)
		}
	})
	t.Run("a 429 halves it once a window", func(t *testing.T) {
		a := Adaptive{Initial: 40}.start(0)
		a.sample(epoch, 0, true, 40)
		a.sample(epoch, 0, true, 40)
		if a.limit != 20 {
			t.Errorf("limit %g after two 429s in one window, want 20", a.limit)
		}
		if a.slowStart {
			t.Error("still in slow start after a 429")
		}
	})
	t.Run("slow start does not double on answers sent under the old limit", func(t *testing.T) {
		a := Adaptive{Initial: 8}.start(0)
		at := epoch
		sent := at
		feed(a, &at, 10, 100*time.Millisecond, 8)
		wantLimit(t, a, 16, "a flat window from 8")
		for range 100 { // still in flight when it doubled: sent at 8
			a.sample(sent, 150*time.Millisecond, false, 16)
		}
		wantLimit(t, a, 16, "answers sent under the limit of 8 (kept)")
		feed(a, &at, 16, 100*time.Millisecond, 16)
		wantLimit(t, a, 32, "a flat window sent at 16")
	})
	t.Run("slow start ends capped where the latency would reach the tolerance", func(t *testing.T) {
		a := Adaptive{Initial: 32}.start(0)
		at := epoch
		feed(a, &at, 32, 100*time.Millisecond, 32) // the no-load latency: doubles
		feed(a, &at, 64, 200*time.Millisecond, 64) // 2x: a queue would reach 2.5x at 80
		if a.limit < 79 || a.limit > 81 {          // the no-load latency creeps up 0.2% a window
			t.Errorf("limit %g, want about 64 × 2.5/2 = 80", a.limit)
		}
		if a.slowStart {
			t.Error("still in slow start after a capped window")
		}
	})
	t.Run("not raised when it is not the bottleneck", func(t *testing.T) {
		a := Adaptive{Initial: 32}.start(0)
		at := epoch
		feed(a, &at, 100, 100*time.Millisecond, 3)
		if a.limit != 32 {
			t.Errorf("limit %g with 3 in flight of 32, want it kept at 32", a.limit)
		}
	})
	t.Run("bounds", func(t *testing.T) {
		a := Adaptive{Initial: 500, Max: 64}.start(16)
		if a.limit != 16 {
			t.Errorf("limit %g: want the endpoint's max concurrency 16", a.limit)
		}
		at := epoch
		for range 20 {
			a.sample(at, 0, true, 1)
			feed(a, &at, 9, time.Millisecond, 1) // the rest of the window
		}
		if a.limit != 1 {
			t.Errorf("limit %g after many 429s, want the min 1", a.limit)
		}
	})
}

// The window of rollouts follows the endpoints' adaptive limits: 1.5 times their sum, without
// the ejected ones; a rollout past it waits until one ends.
func TestWindow(t *testing.T) {
	_, eps := replicas(t, 4)
	p, err := New(eps, Options{Adaptive: &Adaptive{Initial: 8}})
	if err != nil {
		t.Fatal(err)
	}
	w := p.Window(1000)
	ctx := context.Background()
	for i := range 48 { // 1.5 × 4 × 8
		if err := w.Acquire(ctx); err != nil {
			t.Fatalf("acquire %d: %v", i, err)
		}
	}
	short, cancel := context.WithCancel(ctx)
	cancel()
	if err := w.Acquire(short); err == nil {
		t.Fatal("a 49th rollout got in a window of 48")
	}
	got := make(chan struct{})
	go func() { w.Acquire(ctx); close(got) }()
	w.Release()
	<-got
	// An ejected endpoint's limit leaves the window: 1.5 × 3 × 8 = 36.
	p.mu.Lock()
	p.eps[0].ejected = true
	size := w.size()
	p.mu.Unlock()
	if size != 36 {
		t.Errorf("window %g with one of four endpoints ejected, want 36", size)
	}
	fixed, _ := New(eps, Options{})
	if s := fixed.Window(77).size(); s != 77 {
		t.Errorf("window %g without adaptive limits, want its max 77", s)
	}
}
