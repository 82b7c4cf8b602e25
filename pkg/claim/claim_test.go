package claim

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/redistest"
)

// stores are the two stores, each as n processes of one run would open it.
func stores(t *testing.T, n int, ttl time.Duration) map[string][]Store {
	dir := t.TempDir()
	url := redistest.Start(t)
	out := map[string][]Store{}
	for p := range n {
		f, err := NewFiles(dir, ttl, fmt.Sprintf("proc %d", p))
		if err != nil {
			t.Fatal(err)
		}
		r, err := OpenRedis(context.Background(), url, "run", ttl, fmt.Sprintf("proc %d", p))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		out["files"] = append(out["files"], f)
		out["redis"] = append(out["redis"], r)
	}
	return out
}

// Eight holders racing for each of 20 shards: each shard goes to exactly one.
func TestTakeIsExclusive(t *testing.T) {
	for name, ss := range stores(t, 8, time.Hour) {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			winners := map[int][]int{}
			var wg sync.WaitGroup
			for p, s := range ss {
				wg.Go(func() {
					for i := range 20 {
						_, ok, err := s.Take(context.Background(), i)
						if err != nil {
							t.Error(err)
							return
						}
						if ok {
							mu.Lock()
							winners[i] = append(winners[i], p)
							mu.Unlock()
						}
					}
				})
			}
			wg.Wait()
			for i := range 20 {
				if len(winners[i]) != 1 {
					t.Errorf("shard %d taken by %v, want exactly one holder", i, winners[i])
				}
			}
		})
	}
}

// A released shard is taken at once by another holder; a live lease is not taken; a lapsed
// one is, and its old holder learns it lost the shard.
func TestReleaseLapseAndTakeOver(t *testing.T) {
	ctx := context.Background()
	ttl := 300 * time.Millisecond
	for name, ss := range stores(t, 2, ttl) {
		t.Run(name, func(t *testing.T) {
			a, b := ss[0], ss[1]
			la, ok, err := a.Take(ctx, 0)
			if !ok || err != nil {
				t.Fatalf("first take: %v %v", ok, err)
			}
			if err := la.Release(ctx); err != nil {
				t.Fatal(err)
			}
			lb, ok, err := b.Take(ctx, 0)
			if !ok || err != nil {
				t.Fatalf("take after release: %v %v", ok, err)
			}
			// b renews for two lease times: a never takes it.
			for range 8 {
				if held, err := lb.Renew(ctx); !held || err != nil {
					t.Fatalf("renew: %v %v", held, err)
				}
				if _, ok, _ := a.Take(ctx, 0); ok {
					t.Fatal("a live lease was taken over")
				}
				time.Sleep(ttl / 4)
			}
			// b stops renewing (it died): after the lease a takes the shard over.
			deadline := time.Now().Add(10 * ttl)
			for {
				_, ok, err := a.Take(ctx, 0)
				if err != nil {
					t.Fatal(err)
				}
				if ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("a lapsed lease was never taken over")
				}
				time.Sleep(ttl / 10)
			}
			if held, _ := lb.Renew(ctx); held {
				t.Error("the old holder still holds the shard taken over")
			}
		})
	}
}

func TestDoneMarks(t *testing.T) {
	dir := t.TempDir()
	if done, _, err := Done(dir, 3); done || err != nil {
		t.Fatalf("unmarked shard: %v %v", done, err)
	}
	if err := MarkDone(dir, 3, "exit 4 by h pid 1"); err != nil {
		t.Fatal(err)
	}
	if done, what, err := Done(dir, 3); !done || what != "exit 4 by h pid 1" || err != nil {
		t.Fatalf("marked shard: %v %q %v", done, what, err)
	}
}
