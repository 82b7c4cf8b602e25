package gym

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/servers/store"
)

// The session cookie is written as http.SetCookie writes it, for a new session and a known one,
// and a known session keeps its cookie value.
func TestSessionCookieHeader(t *testing.T) {
	srv, err := New(context.Background(), testBuiltin, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	want := func(value string) string {
		w := httptest.NewRecorder()
		http.SetCookie(w, &http.Cookie{Name: srv.cookieName, Value: value, Path: "/", MaxAge: sessionMaxAge, HttpOnly: true, SameSite: http.SameSiteLaxMode})
		return w.Header().Get("Set-Cookie")
	}
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	got := w.Header().Values("Set-Cookie")
	if len(got) != 1 {
		t.Fatalf("Set-Cookie %q", got)
	}
	value := strings.TrimPrefix(strings.SplitN(got[0], ";", 2)[0], srv.cookieName+"=")
	sid, sig, _ := strings.Cut(value, ".")
	if len(sid) != 32 || sig != srv.sign(sid) || got[0] != want(value) {
		t.Fatalf("new session: Set-Cookie %q, want %q", got[0], want(value))
	}
	for range 3 { // the pooled MACs sign the same
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.AddCookie(&http.Cookie{Name: srv.cookieName, Value: value})
		w = httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		if got := w.Header().Values("Set-Cookie"); len(got) != 1 || got[0] != want(value) {
			t.Fatalf("known session: Set-Cookie %q, want %q", got, want(value))
		}
	}
}

// testBuiltin is a server without tools, for the framework's own tests: the cookie name is the
// counter server's.
var testBuiltin = Builtin{Name: "counter", Class: "CounterResourcesServer",
	New: func(string, store.Store) ResourceServer { return noTools{} }}

type noTools struct{}

func (noTools) Tool(string) (ToolFunc, bool)                       { return nil, false }
func (noTools) SeedSession(context.Context, string, *Object) error { return nil }
func (noTools) Verify(context.Context, SessionState, *Object, []OutputItem, *ValidationErrors) ([]Field, error) {
	return []Field{{Key: "reward", Value: PyFloat(0)}}, nil
}

// A cookie's version is signed with its id: a version changed without the key, or a cookie of
// version 0, is not that session's cookie; a signed version is read back.
func TestSessionCookieVersionIsSigned(t *testing.T) {
	srv, err := New(context.Background(), testBuiltin, Options{Key: []byte(strings.Repeat("k", MinKeySize))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	const sid = "s-0123456789abcdef0123456789abcdef"
	if got, v, ok := srv.checkCookie(sid + ".7." + srv.sign(sid+".7")); !ok || got != sid || v != 7 {
		t.Errorf("signed version 7: %q %d %v", got, v, ok)
	}
	for _, value := range []string{
		sid + ".9." + srv.sign(sid+".7"), // the version raised, the signature kept
		sid + ".7." + srv.sign(sid),      // a version 0 signature
		sid + ".0." + srv.sign(sid+".0"), // version 0 is written without a version
		sid + ".x." + srv.sign(sid+".x"),
	} {
		if got, v, ok := srv.checkCookie(value); ok {
			t.Errorf("%s: accepted as %q version %d", value, got, v)
		}
	}
}
