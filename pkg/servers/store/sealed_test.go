package store

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/internal/redistest"
)

// A sealed store returns what it wrote, and refuses (ErrTampered, on Get and on Update, which
// then writes nothing) a value altered under it, another session's value copied over, a value
// written without its MAC, and a value sealed with another key or for another server.
func TestSealedRefusesTamperedState(t *testing.T) {
	ctx := context.Background()
	key := []byte(strings.Repeat("k", 32))
	redisURL := redistest.Start(t)
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			open := func() Store {
				url := "memory"
				if kind == "redis" {
					url = redisURL
				}
				st, err := Open(ctx, url, Options{Prefix: "srv-" + kind})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { st.Close() })
				return st
			}
			raw := open()
			sealed := Sealed(raw, key, "srv")
			put := func(st Store, id, v string) {
				t.Helper()
				if err := st.Update(ctx, id, func([]byte, bool) ([]byte, error) { return []byte(v), nil }); err != nil {
					t.Fatal(err)
				}
			}
			rawOf := func(id string) []byte {
				v, ok, err := raw.Get(ctx, id)
				if err != nil || !ok {
					t.Fatalf("%s: %v %v", id, ok, err)
				}
				return v
			}
			put(sealed, "a", `{"done":false}`)
			put(sealed, "b", `{"done":true}`)
			if v, ok, err := sealed.Get(ctx, "a"); err != nil || !ok || string(v) != `{"done":false}` {
				t.Fatalf("a: %q %v %v", v, ok, err)
			}
			if v := rawOf("a"); !strings.HasSuffix(string(v), `{"done":false}`) || len(v) != macSize+versionSize+len(`{"done":false}`) {
				t.Fatalf("stored %q", v)
			}
			if _, ok, err := sealed.Get(ctx, "none"); ok || err != nil {
				t.Fatalf("none: %v %v", ok, err)
			}

			other := Sealed(raw, []byte(strings.Repeat("x", 32)), "srv")
			put(other, "c", `{"done":true}`)
			otherServer := Sealed(raw, key, "srv2")
			put(otherServer, "d", `{"done":true}`)
			b := rawOf("b")
			altered := append([]byte{}, b...)
			altered[len(altered)-6] = 'f' // {"done":true} -> {"done":frue}
			for _, tc := range []struct {
				name  string
				write func()
				id    string
			}{
				{"altered in place", func() { put(raw, "b", string(altered)) }, "b"},
				{"copied from another session", func() { put(raw, "a", string(b)) }, "a"},
				{"written without a MAC", func() { put(raw, "e", `{"done":true}`) }, "e"},
				{"shorter than a MAC", func() { put(raw, "f", `{}`) }, "f"},
				{"sealed with another key", func() {}, "c"},
				{"sealed for another server", func() {}, "d"},
			} {
				tc.write()
				before := rawOf(tc.id)
				if v, ok, err := sealed.Get(ctx, tc.id); !errors.Is(err, ErrTampered) || ok || v != nil {
					t.Errorf("%s: Get %q %v %v", tc.name, v, ok, err)
				}
				called := false
				err := sealed.Update(ctx, tc.id, func([]byte, bool) ([]byte, error) { called = true; return []byte(`{}`), nil })
				if !errors.Is(err, ErrTampered) || called {
					t.Errorf("%s: Update %v (fn called %v)", tc.name, err, called)
				}
				if after := rawOf(tc.id); string(after) != string(before) {
					t.Errorf("%s: Update wrote %q", tc.name, after)
				}
			}
			// Deleting a tampered session works, and the id can be sealed again.
			if err := sealed.Delete(ctx, "b"); err != nil {
				t.Fatal(err)
			}
			put(sealed, "b", `{"n":1}`)
			if v, ok, err := sealed.Get(ctx, "b"); err != nil || !ok || string(v) != `{"n":1}` {
				t.Errorf("b again: %q %v %v", v, ok, err)
			}
		})
	}
}

// A sealed store refuses a session's earlier state written back (a replay of a value it sealed
// itself) once the request's client knows a later one (WithKnown), on Get and on Update; each
// read and write raises what the client knows; an Update whose fn runs more than once writes
// one version; a client that knows less than the store holds (an answer it never got) is
// served; a session dropped and written again goes on past what the client knew.
func TestSealedRefusesReplayedState(t *testing.T) {
	ctx := context.Background()
	key := []byte(strings.Repeat("k", 32))
	redisURL := redistest.Start(t)
	for _, kind := range []string{"memory", "redis"} {
		t.Run(kind, func(t *testing.T) {
			url := "memory"
			if kind == "redis" {
				url = redisURL
			}
			raw, err := Open(ctx, url, Options{Prefix: "replay-" + kind})
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			sealed := Sealed(raw, key, "srv")
			client := NewKnown(0)
			cctx := WithKnown(ctx, client)
			put := func(ctx context.Context, v string) error {
				return sealed.Update(ctx, "a", func([]byte, bool) ([]byte, error) { return []byte(v), nil })
			}
			rawOf := func() []byte {
				v, ok, err := raw.Get(ctx, "a")
				if err != nil || !ok {
					t.Fatalf("a: %v %v", ok, err)
				}
				return v
			}
			if err := put(cctx, `{"step":0}`); err != nil {
				t.Fatal(err)
			}
			seeded := rawOf()
			if err := put(cctx, `{"step":1}`); err != nil {
				t.Fatal(err)
			}
			if got := client.Version(); got != 2 {
				t.Fatalf("after two writes the client knows version %d, want 2", got)
			}
			progressed := rawOf()

			// The seeded state written back under the client that knows version 2.
			if err := raw.Update(ctx, "a", func([]byte, bool) ([]byte, error) { return seeded, nil }); err != nil {
				t.Fatal(err)
			}
			if v, ok, err := sealed.Get(cctx, "a"); !errors.Is(err, ErrTampered) || ok || v != nil {
				t.Errorf("replayed: Get %q %v %v", v, ok, err)
			}
			called := false
			if err := sealed.Update(cctx, "a", func([]byte, bool) ([]byte, error) { called = true; return []byte(`{}`), nil }); !errors.Is(err, ErrTampered) || called {
				t.Errorf("replayed: Update %v (fn called %v)", err, called)
			}
			if string(rawOf()) != string(seeded) {
				t.Error("replayed: Update wrote")
			}
			// Without what the client knows the store cannot tell (the same sealed value).
			if v, ok, err := sealed.Get(ctx, "a"); err != nil || !ok || string(v) != `{"step":0}` {
				t.Errorf("no client: Get %q %v %v", v, ok, err)
			}

			// A client that missed the answer of the last write (knows 1, the store holds 2)
			// reads and writes on, and then knows what it wrote.
			if err := raw.Update(ctx, "a", func([]byte, bool) ([]byte, error) { return progressed, nil }); err != nil {
				t.Fatal(err)
			}
			behind := NewKnown(1)
			bctx := WithKnown(ctx, behind)
			if v, ok, err := sealed.Get(bctx, "a"); err != nil || !ok || string(v) != `{"step":1}` || behind.Version() != 2 {
				t.Errorf("behind: Get %q %v %v, knows %d", v, ok, err, behind.Version())
			}
			behind = NewKnown(1)
			calls := 0
			err = sealed.Update(WithKnown(ctx, behind), "a", func(old []byte, _ bool) ([]byte, error) {
				calls++
				if calls == 1 && kind == "redis" {
					// Another server instance on the store wins this attempt: fn runs again on
					// its state.
					other, err := Open(ctx, url, Options{Prefix: "replay-" + kind})
					if err != nil {
						t.Fatal(err)
					}
					defer other.Close()
					if err := Sealed(other, key, "srv").Update(WithKnown(ctx, NewKnown(0)), "a", func([]byte, bool) ([]byte, error) { return []byte(`{"step":2}`), nil }); err != nil {
						t.Error(err)
					}
				}
				return append(append([]byte{}, old...), ' '), nil
			})
			if err != nil {
				t.Fatal(err)
			}
			want := uint64(3)
			if kind == "redis" {
				want = 4
				if calls != 2 {
					t.Errorf("fn ran %d times, want 2", calls)
				}
			}
			if behind.Version() != want {
				t.Errorf("after the update the client knows %d, want %d", behind.Version(), want)
			}
			if v, _, err := sealed.Get(WithKnown(ctx, NewKnown(want)), "a"); err != nil {
				t.Errorf("the state written: %q %v", v, err)
			}

			// Dropped, then written again by a client that knew version 9: version 10.
			if err := sealed.Delete(ctx, "a"); err != nil {
				t.Fatal(err)
			}
			late := NewKnown(9)
			if v, ok, err := sealed.Get(WithKnown(ctx, late), "a"); ok || err != nil {
				t.Errorf("dropped: %q %v %v", v, ok, err)
			}
			if err := put(WithKnown(ctx, late), `{"step":0}`); err != nil || late.Version() != 10 {
				t.Errorf("written again: %v, knows %d", err, late.Version())
			}
		})
	}
}
