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
			if v := rawOf("a"); !strings.HasSuffix(string(v), `{"done":false}`) || len(v) != macSize+len(`{"done":false}`) {
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
