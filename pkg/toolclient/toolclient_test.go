package toolclient_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/rollout-dev/rollout/pkg/toolclient"
)

func TestCallToolRefusesNames(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("request sent to %s", r.URL)
	}))
	defer srv.Close()
	ts, err := toolclient.New("x", srv.URL+"/base/", nil)
	if err != nil {
		t.Fatal(err)
	}
	sess := ts.NewSession()
	for _, name := range []string{"", "../verify", "..", "http://evil", "//evil.example/x", "a/b", `a\b`, "a?b", "a#b", "a%2Fb", "a b", "verify", "seed_session", "end_session", "x:y"} {
		r := sess.CallTool(context.Background(), name, `{}`)
		if !r.Failed || !strings.HasPrefix(r.Output, "Error:") || r.Unreachable {
			t.Errorf("%q: %+v", name, r)
		}
	}
}

// A tool call goes to base/name under a base with a path.
func TestToolServerBasePath(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type"))
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	ts, err := toolclient.New("x", srv.URL+"/gym/weather/", nil)
	if err != nil {
		t.Fatal(err)
	}
	if ts.Base() != srv.URL+"/gym/weather" {
		t.Fatalf("base %q", ts.Base())
	}
	r := ts.NewSession().CallTool(context.Background(), "get_weather", `{"city":"Paris"}`)
	mu.Lock()
	defer mu.Unlock()
	if r.Failed || r.Output != "ok" || len(got) != 1 || got[0] != "POST /gym/weather/get_weather application/json" {
		t.Fatalf("%+v %v", r, got)
	}
}

func TestNewToolServerValidates(t *testing.T) {
	for _, base := range []string{"", "localhost:8000", "ftp://x", "http://", "http://x/?a=1", "http://x/#f", "://bad"} {
		if _, err := toolclient.New("x", base, nil); err == nil {
			t.Errorf("%q accepted", base)
		}
	}
	for _, base := range []string{"http://127.0.0.1:8000", "https://gym.example/v1/"} {
		if _, err := toolclient.New("x", base, nil); err != nil {
			t.Errorf("%q: %v", base, err)
		}
	}
}

// End posts /end_session with the session's cookie only when the server takes it, and runs even
// when the rollout's context is already cancelled.
func TestSessionEnd(t *testing.T) {
	var mu sync.Mutex
	var ended []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "s", Value: "abc", Path: "/"})
		if r.URL.Path == "/end_session" {
			c, err := r.Cookie("s")
			mu.Lock()
			if err == nil {
				ended = append(ended, c.Value)
			} else {
				ended = append(ended, "no cookie")
			}
			mu.Unlock()
		}
		io.WriteString(w, `{}`)
	}))
	defer srv.Close()
	ts, err := toolclient.New("s", srv.URL, srv.Client().Transport)
	if err != nil {
		t.Fatal(err)
	}

	sess := ts.NewSession()
	if err := sess.Seed(context.Background(), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := sess.End(context.Background()); err != nil || len(ended) != 0 {
		t.Fatalf("End without EndSession: err %v, posted %v", err, ended)
	}

	ts.EndSession = true
	sess = ts.NewSession()
	if err := sess.Seed(context.Background(), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := sess.End(ctx); err != nil {
		t.Fatalf("End after cancel: %v", err)
	}
	if len(ended) != 1 || ended[0] != "abc" {
		t.Fatalf("end_session posts: %v, want one with the session's cookie", ended)
	}
}

// A server that says it takes POST /end_session (EndSessionHeader on its seed_session or
// verify answer, as rollout's own servers do) has its sessions ended without EndSession; the
// header on a tool call's answer does not count, and a server that never sends it is never sent
// /end_session.
func TestSessionEndAdvertised(t *testing.T) {
	for _, c := range []struct {
		name   string
		header string // the path whose answers carry the header ("": none)
		want   int    // end_session posts for two sessions, each seeded, a tool call, verified
	}{
		{"seed_session", "/seed_session", 2},
		{"verify", "/verify", 2}, // the first session learns it at its own verify, before its end
		{"tool", "/add", 0},
		{"none", "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			var ended atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == c.header {
					w.Header().Set(toolclient.EndSessionHeader, "/end_session")
				}
				if r.URL.Path == "/end_session" {
					ended.Add(1)
				}
				io.WriteString(w, `{}`)
			}))
			defer srv.Close()
			ts, err := toolclient.New("s", srv.URL, srv.Client().Transport)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				sess := ts.NewSession()
				ctx := context.Background()
				if err := sess.Seed(ctx, []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
				if res := sess.CallTool(ctx, "add", `{}`); res.Failed {
					t.Fatalf("tool call: %s", res.Output)
				}
				if _, _, err := sess.PostVerify(ctx, []byte(`{}`)); err != nil {
					t.Fatal(err)
				}
				if err := sess.End(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if got := int(ended.Load()); got != c.want {
				t.Errorf("%d end_session posts, want %d", got, c.want)
			}
		})
	}
}
