package store

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/redistest"
)

// backend opens stores of one kind for the conformance suite.
type backend struct {
	name string
	// open returns a new store; stores opened by one backend in one test share their data
	// when the backend is shared (Redis), and not otherwise.
	open func(t *testing.T, opts Options) Store
	// wait lets d pass for the stores' TTL: a fake clock for Memory, the wall clock for Redis.
	wait func(t *testing.T, d time.Duration)
	// shared is true when two stores opened with the same Options see the same sessions.
	shared bool
	// ttl is the TTL used by the expiry tests.
	ttl time.Duration
}

// memoryBackend gives every store of the test one fake clock.
func memoryBackend() backend {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	return backend{
		name: "memory",
		open: func(t *testing.T, opts Options) Store {
			m := newMemory(opts, clock)
			t.Cleanup(func() { m.Close() })
			return m
		},
		wait: func(_ *testing.T, d time.Duration) {
			mu.Lock()
			now = now.Add(d)
			mu.Unlock()
		},
		ttl: time.Minute,
	}
}

// redisBackend starts one redis-server per test.
func redisBackend(t *testing.T) backend {
	url := redistest.Start(t)
	return backend{
		name: "redis",
		open: func(t *testing.T, opts Options) Store {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			s, err := Open(ctx, url, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		wait:   func(_ *testing.T, d time.Duration) { time.Sleep(d) },
		shared: true,
		ttl:    400 * time.Millisecond,
	}
}

// TestConformance runs the same behavioural checks against every backend.
func TestConformance(t *testing.T) {
	for _, b := range []struct {
		name string
		mk   func(t *testing.T) backend
	}{
		{"memory", func(*testing.T) backend { return memoryBackend() }},
		{"redis", redisBackend},
	} {
		t.Run(b.name, func(t *testing.T) { conformance(t, b.mk) })
	}
}

func conformance(t *testing.T, mk func(t *testing.T) backend) {
	ctx := context.Background()
	// Each subtest gets its own backend (and, for Redis, its own server), so they are independent.
	run := func(name string, f func(t *testing.T, b backend)) {
		t.Run(name, func(t *testing.T) { f(t, mk(t)) })
	}

	run("get missing", func(t *testing.T, b backend) {
		s := b.open(t, Options{Prefix: "p"})
		state, ok, err := s.Get(ctx, "nope")
		if err != nil || ok || state != nil {
			t.Errorf("Get(missing) = %q, %v, %v; want nil, false, nil", state, ok, err)
		}
		// Deleting a missing session is not an error.
		if err := s.Delete(ctx, "nope"); err != nil {
			t.Errorf("Delete(missing) = %v", err)
		}
	})

	run("update and get", func(t *testing.T, b backend) {
		s := b.open(t, Options{Prefix: "p"})
		calls := 0
		err := s.Update(ctx, "a", func(old []byte, ok bool) ([]byte, error) {
			calls++
			if ok || old != nil {
				t.Errorf("first Update saw %q, %v", old, ok)
			}
			return []byte(`{"n":1}`), nil
		})
		if err != nil || calls != 1 {
			t.Fatalf("Update = %v after %d calls", err, calls)
		}
		err = s.Update(ctx, "a", func(old []byte, ok bool) ([]byte, error) {
			if !ok || string(old) != `{"n":1}` {
				t.Errorf("second Update saw %q, %v", old, ok)
			}
			old[0] = 'X' // fn's copy is its own
			return []byte(`{"n":2}`), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		state, ok, err := s.Get(ctx, "a")
		if err != nil || !ok || string(state) != `{"n":2}` {
			t.Errorf("Get = %q, %v, %v", state, ok, err)
		}
		state[0] = 'X' // the caller's copy is its own
		if again, _, _ := s.Get(ctx, "a"); string(again) != `{"n":2}` {
			t.Errorf("Get after mutating a result = %q", again)
		}
		// Binary state survives as it is.
		bin := []byte{0, 1, 2, 0xff, '\r', '\n'}
		if err := s.Update(ctx, "bin", func([]byte, bool) ([]byte, error) { return bin, nil }); err != nil {
			t.Fatal(err)
		}
		if got, _, _ := s.Get(ctx, "bin"); !bytes.Equal(got, bin) {
			t.Errorf("binary state = %q, want %q", got, bin)
		}
		// Another session is untouched.
		if _, ok, _ := s.Get(ctx, "b"); ok {
			t.Error("session b exists")
		}
	})

	run("fn error leaves state", func(t *testing.T, b backend) {
		s := b.open(t, Options{Prefix: "p"})
		put(t, s, "a", "keep")
		boom := errors.New("boom")
		if err := s.Update(ctx, "a", func([]byte, bool) ([]byte, error) { return []byte("lost"), boom }); !errors.Is(err, boom) {
			t.Errorf("Update = %v, want fn's error", err)
		}
		wantState(t, s, "a", "keep")
		// And on a missing session it creates nothing.
		if err := s.Update(ctx, "new", func([]byte, bool) ([]byte, error) { return []byte("x"), boom }); !errors.Is(err, boom) {
			t.Errorf("Update = %v, want fn's error", err)
		}
		wantMissing(t, s, "new")
	})

	run("nil state deletes", func(t *testing.T, b backend) {
		s := b.open(t, Options{Prefix: "p"})
		put(t, s, "a", "x")
		if err := s.Update(ctx, "a", func([]byte, bool) ([]byte, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
		wantMissing(t, s, "a")
		// nil on a missing session is a no-op.
		if err := s.Update(ctx, "b", func([]byte, bool) ([]byte, error) { return nil, nil }); err != nil {
			t.Fatal(err)
		}
		wantMissing(t, s, "b")
	})

	run("delete", func(t *testing.T, b backend) {
		s := b.open(t, Options{Prefix: "p"})
		put(t, s, "a", "x")
		put(t, s, "b", "y")
		if err := s.Delete(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		wantMissing(t, s, "a")
		wantState(t, s, "b", "y")
	})

	run("ttl", func(t *testing.T, b backend) {
		s := b.open(t, Options{Prefix: "p", TTL: b.ttl})
		put(t, s, "a", "1")
		wantState(t, s, "a", "1")
		// A write refreshes the TTL: written at 0 and at 0.6 TTL, alive at 1.2 TTL.
		b.wait(t, b.ttl*6/10)
		put(t, s, "a", "2")
		b.wait(t, b.ttl*6/10)
		wantState(t, s, "a", "2")
		// A read does not: gone TTL after the last write.
		waitMissing(t, b, s, "a")
		// An Update after expiry starts from nothing.
		if err := s.Update(ctx, "a", func(old []byte, ok bool) ([]byte, error) {
			if ok {
				t.Errorf("Update after expiry saw %q", old)
			}
			return []byte("3"), nil
		}); err != nil {
			t.Fatal(err)
		}
		wantState(t, s, "a", "3")
	})

	run("default ttl", func(t *testing.T, b backend) {
		s := b.open(t, Options{Prefix: "p"})
		put(t, s, "a", "1")
		if m, ok := s.(*Memory); ok {
			b.wait(t, DefaultTTL-time.Second)
			wantState(t, s, "a", "1")
			b.wait(t, time.Second)
			wantMissing(t, s, "a")
			if m.Len() != 0 {
				t.Errorf("Len = %d after expiry", m.Len())
			}
			return
		}
		r := s.(*redisStore)
		ttl, err := r.c.PTTL(ctx, r.key("a")).Result()
		if err != nil || ttl <= DefaultTTL-time.Minute || ttl > DefaultTTL {
			t.Errorf("PTTL = %v, %v; want about %v", ttl, err, DefaultTTL)
		}
	})

	run("prefix isolation", func(t *testing.T, b backend) {
		a := b.open(t, Options{Prefix: "alpha"})
		z := b.open(t, Options{Prefix: "beta"})
		put(t, a, "same-id", "from alpha")
		wantMissing(t, z, "same-id")
		put(t, z, "same-id", "from beta")
		wantState(t, a, "same-id", "from alpha")
		wantState(t, z, "same-id", "from beta")
		if err := z.Delete(ctx, "same-id"); err != nil {
			t.Fatal(err)
		}
		wantState(t, a, "same-id", "from alpha")
		if b.shared {
			// Two stores with the same prefix on one Redis are one store.
			a2 := b.open(t, Options{Prefix: "alpha"})
			wantState(t, a2, "same-id", "from alpha")
			put(t, a2, "other", "x")
			wantState(t, a, "other", "x")
		}
	})

	run("secret", func(t *testing.T, b backend) {
		s := b.open(t, Options{Prefix: "p"})
		k1, err := s.Secret(ctx, "cookie")
		if err != nil || len(k1) != 32 {
			t.Fatalf("Secret = %x, %v; want 32 bytes", k1, err)
		}
		if bytes.Equal(k1, make([]byte, 32)) {
			t.Error("Secret is all zeros")
		}
		k1[0] ^= 0xff // the caller's copy is its own
		k1[0] ^= 0xff
		if again, _ := s.Secret(ctx, "cookie"); !bytes.Equal(again, k1) {
			t.Error("Secret changed between calls")
		}
		if other, _ := s.Secret(ctx, "other"); bytes.Equal(other, k1) {
			t.Error("two names, one secret")
		}
		// A session write does not touch secrets, and secrets never expire.
		put(t, s, "cookie", "state")
		if !b.shared {
			b.wait(t, 2*DefaultTTL) // Redis: TestRedisKeys checks the key has no TTL
		}
		if again, _ := s.Secret(ctx, "cookie"); !bytes.Equal(again, k1) {
			t.Error("Secret changed after a session write or time")
		}
		otherPrefix := b.open(t, Options{Prefix: "q"})
		if k, _ := otherPrefix.Secret(ctx, "cookie"); bytes.Equal(k, k1) {
			t.Error("two prefixes, one secret")
		}
		sibling := b.open(t, Options{Prefix: "p"})
		k2, err := sibling.Secret(ctx, "cookie")
		if err != nil {
			t.Fatal(err)
		}
		if b.shared != bytes.Equal(k1, k2) {
			t.Errorf("second store's secret equal = %v, want %v (shared backend)", bytes.Equal(k1, k2), b.shared)
		}
		if b.shared {
			// Many instances starting at once agree on one key.
			var wg sync.WaitGroup
			keys := make([][]byte, 16)
			fresh := b.name + "-fresh"
			for i := range keys {
				st := b.open(t, Options{Prefix: "p"})
				wg.Go(func() {
					k, err := st.Secret(ctx, fresh)
					if err != nil {
						t.Error(err)
					}
					keys[i] = k
				})
			}
			wg.Wait()
			for i, k := range keys {
				if len(k) != 32 || !bytes.Equal(k, keys[0]) {
					t.Errorf("instance %d got key %x, instance 0 %x", i, k, keys[0])
				}
			}
		}
	})

	run("concurrent updates are atomic", func(t *testing.T, b backend) {
		// Several stores when the backend is shared: the contention is then between clients.
		stores := []Store{b.open(t, Options{Prefix: "p"})}
		if b.shared {
			stores = append(stores, b.open(t, Options{Prefix: "p"}), b.open(t, Options{Prefix: "p"}))
		}
		const workers, each = 50, 10
		var wg sync.WaitGroup
		var calls atomic.Int64
		for w := range workers {
			s := stores[w%len(stores)]
			wg.Go(func() {
				for range each {
					err := s.Update(ctx, "counter", func(old []byte, ok bool) ([]byte, error) {
						calls.Add(1)
						n := 0
						if ok {
							var err error
							if n, err = strconv.Atoi(string(old)); err != nil {
								return nil, err
							}
						}
						return []byte(strconv.Itoa(n + 1)), nil
					})
					if err != nil {
						t.Errorf("Update: %v", err)
						return
					}
				}
			})
		}
		wg.Wait()
		wantState(t, stores[0], "counter", strconv.Itoa(workers*each))
		t.Logf("%s: %d fn calls for %d updates", b.name, calls.Load(), workers*each)
	})

	run("cancelled context", func(t *testing.T, b backend) {
		s := b.open(t, Options{Prefix: "p"})
		put(t, s, "a", "x")
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, _, err := s.Get(cctx, "a"); !errors.Is(err, context.Canceled) {
			t.Errorf("Get = %v, want context.Canceled", err)
		}
		called := false
		if err := s.Update(cctx, "a", func([]byte, bool) ([]byte, error) { called = true; return []byte("y"), nil }); !errors.Is(err, context.Canceled) {
			t.Errorf("Update = %v, want context.Canceled", err)
		}
		if called {
			t.Error("Update called fn with a cancelled context")
		}
		if err := s.Delete(cctx, "a"); !errors.Is(err, context.Canceled) {
			t.Errorf("Delete = %v, want context.Canceled", err)
		}
		if _, err := s.Secret(cctx, "k"); !errors.Is(err, context.Canceled) {
			t.Errorf("Secret = %v, want context.Canceled", err)
		}
		wantState(t, s, "a", "x")
		// A deadline that passes during the call also ends it.
		dctx, dcancel := context.WithTimeout(ctx, time.Nanosecond)
		defer dcancel()
		<-dctx.Done()
		if _, _, err := s.Get(dctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Get after deadline = %v", err)
		}
	})

	run("close", func(t *testing.T, b backend) {
		s := b.open(t, Options{Prefix: "p"})
		if err := s.Close(); err != nil {
			t.Errorf("Close = %v", err)
		}
	})
}

// TestRedisContextDeadlineMidUpdate cancels an Update while fn runs: the transaction is not
// committed and the error is the context's.
func TestRedisContextDeadlineMidUpdate(t *testing.T) {
	b := redisBackend(t)
	s := b.open(t, Options{Prefix: "p"})
	put(t, s, "a", "x")
	ctx, cancel := context.WithCancel(context.Background())
	err := s.Update(ctx, "a", func([]byte, bool) ([]byte, error) {
		cancel()
		return []byte("y"), nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Update = %v, want context.Canceled", err)
	}
	wantState(t, s, "a", "x")
}

// TestRedisConflict: when every optimistic attempt loses (another client writes the session
// while fn runs), Update gives up with ErrConflict and the other writer's state stands.
func TestRedisConflict(t *testing.T) {
	b := redisBackend(t)
	s, other := b.open(t, Options{Prefix: "p"}), b.open(t, Options{Prefix: "p"})
	ctx := context.Background()
	attempts := 0
	err := s.Update(ctx, "a", func([]byte, bool) ([]byte, error) {
		attempts++
		put(t, other, "a", "theirs-"+strconv.Itoa(attempts))
		return []byte("mine"), nil
	})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("Update = %v, want ErrConflict", err)
	}
	if attempts != maxUpdateAttempts {
		t.Errorf("fn called %d times, want %d", attempts, maxUpdateAttempts)
	}
	wantState(t, s, "a", "theirs-"+strconv.Itoa(attempts))
}

// TestRedisKeys pins the key layout and TTL, which other tools (and operators) rely on.
func TestRedisKeys(t *testing.T) {
	b := redisBackend(t)
	s := b.open(t, Options{Prefix: "counter", TTL: time.Minute}).(*redisStore)
	ctx := context.Background()
	put(t, s, "abc", "state")
	if _, err := s.Secret(ctx, "cookie:counter"); err != nil {
		t.Fatal(err)
	}
	keys, err := s.c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"rollout:session:counter:abc": true, "rollout:secret:counter:cookie:counter": true}
	if len(keys) != len(want) {
		t.Errorf("keys = %v, want %v", keys, want)
	}
	for _, k := range keys {
		if !want[k] {
			t.Errorf("unexpected key %q", k)
		}
	}
	if ttl := s.c.PTTL(ctx, "rollout:session:counter:abc").Val(); ttl <= 50*time.Second || ttl > time.Minute {
		t.Errorf("session PTTL = %v, want about 1m", ttl)
	}
	if ttl := s.c.PTTL(ctx, "rollout:secret:counter:cookie:counter").Val(); ttl != -1 {
		t.Errorf("secret PTTL = %v, want none (-1)", ttl)
	}
	// A corrupt secret is reported, not used.
	s.c.Set(ctx, "rollout:secret:counter:short", "abc", 0)
	if _, err := s.Secret(ctx, "short"); err == nil || !strings.Contains(err.Error(), "rollout:secret:counter:short") {
		t.Errorf("Secret(corrupt) = %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, url := range []string{"", "memory", "memory:"} {
		s, err := Open(ctx, url, Options{})
		if err != nil {
			t.Errorf("Open(%q) = %v", url, err)
			continue
		}
		if _, ok := s.(*Memory); !ok {
			t.Errorf("Open(%q) = %T, want *Memory", url, s)
		}
		s.Close()
	}

	cases := []struct {
		name, url string
		mention   []string
	}{
		{"unreachable", "redis://127.0.0.1:1/0", []string{"redis://127.0.0.1:1/0", "connect to Redis at 127.0.0.1:1", "connection refused"}},
		{"unreachable with password", "redis://user:hunter2@127.0.0.1:1/0", []string{"127.0.0.1:1", "user:xxxxx@"}},
		{"unknown scheme", "mysql://db:3306/x", []string{"mysql://db:3306/x", "want memory or redis://"}},
		{"unknown scheme with password", "postgres://u:hunter2@db/x", []string{"postgres://u:xxxxx@db/x"}},
		{"bare word", "redis", []string{`"redis"`, "want memory or redis://"}},
		{"bad port", "redis://u:hunter2@127.0.0.1:notaport/0", []string{"invalid Redis URL", "port"}},
		{"bad database", "redis://u:hunter2@127.0.0.1:6379/notadb", []string{"u:xxxxx@127.0.0.1:6379/notadb", "database"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Open(ctx, c.url, Options{})
			if err == nil {
				s.Close()
				t.Fatalf("Open(%q) succeeded", c.url)
			}
			msg := err.Error()
			for _, m := range c.mention {
				if !strings.Contains(msg, m) {
					t.Errorf("error %q does not mention %q", msg, m)
				}
			}
			if strings.Contains(msg, "hunter2") {
				t.Errorf("error %q shows the password", msg)
			}
		})
	}

	t.Run("password", func(t *testing.T) {
		// A server with a password: the right one opens, a wrong one is refused with an error
		// naming the server, never the password.
		url := redistest.Start(t, "--requirepass", "right horse")
		addr := strings.TrimSuffix(strings.TrimPrefix(url, "redis://"), "/0")
		good := strings.Replace(url, "redis://", "redis://:right%20horse@", 1)
		s, err := Open(ctx, good, Options{})
		if err != nil {
			t.Fatalf("Open with the right password: %v", err)
		}
		put(t, s, "a", "x")
		s.Close()
		for _, bad := range []string{
			strings.Replace(url, "redis://", "redis://:hunter2@", 1),
			strings.Replace(url, "redis://", "redis://default:hunter2@", 1),
			url, // none
		} {
			s, err := Open(ctx, bad, Options{})
			if err == nil {
				s.Close()
				t.Fatalf("Open(%s) succeeded", bad)
			}
			if msg := err.Error(); strings.Contains(msg, "hunter2") || strings.Contains(msg, "horse") || !strings.Contains(msg, addr) {
				t.Errorf("error %q: want the address and no password", msg)
			}
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		url := redistest.Start(t)
		cctx, ccancel := context.WithCancel(ctx)
		ccancel()
		if s, err := Open(cctx, url, Options{}); err == nil {
			s.Close()
			t.Error("Open with a cancelled context succeeded")
		}
	})
}

// ---- helpers ----

func put(t *testing.T, s Store, id, state string) {
	t.Helper()
	if err := s.Update(context.Background(), id, func([]byte, bool) ([]byte, error) { return []byte(state), nil }); err != nil {
		t.Fatalf("Update(%s): %v", id, err)
	}
}

func wantState(t *testing.T, s Store, id, want string) {
	t.Helper()
	got, ok, err := s.Get(context.Background(), id)
	if err != nil || !ok || string(got) != want {
		t.Errorf("Get(%s) = %q, %v, %v; want %q", id, got, ok, err, want)
	}
}

func wantMissing(t *testing.T, s Store, id string) {
	t.Helper()
	got, ok, err := s.Get(context.Background(), id)
	if err != nil || ok {
		t.Errorf("Get(%s) = %q, %v, %v; want missing", id, got, ok, err)
	}
}

// waitMissing lets the TTL run out and wants the session gone: exactly for Memory's fake clock,
// by polling for Redis.
func waitMissing(t *testing.T, b backend, s Store, id string) {
	t.Helper()
	b.wait(t, b.ttl*5/10)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, ok, err := s.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return
		}
		if !b.shared || time.Now().After(deadline) {
			t.Fatalf("session %s still there TTL after its last write", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRedisLocalTurns: one process's updates of a session take turns before their optimistic
// transactions, waiting for the turn honours the context, and the turns are dropped afterwards.
func TestRedisLocalTurns(t *testing.T) {
	b := redisBackend(t)
	s := b.open(t, Options{Prefix: "p"}).(*redisStore)
	ctx := context.Background()
	inside, release := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		done <- s.Update(ctx, "a", func([]byte, bool) ([]byte, error) {
			close(inside)
			<-release
			return []byte("first"), nil
		})
	}()
	<-inside
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	called := false
	if err := s.Update(wctx, "a", func([]byte, bool) ([]byte, error) { called = true; return []byte("second"), nil }); !errors.Is(err, context.DeadlineExceeded) || called {
		t.Errorf("Update while another holds the turn = %v (fn called %v), want a deadline error", err, called)
	}
	// Another session is not held up.
	put(t, s, "b", "free")
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wantState(t, s, "a", "first")
	s.mu.Lock()
	n := len(s.locks)
	s.mu.Unlock()
	if n != 0 {
		t.Errorf("%d turns left after the updates", n)
	}
}
