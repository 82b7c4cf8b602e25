package toolclient

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// jarHeader is the Cookie header an http.Client with jar puts on a fresh request to u.
func jarHeader(jar http.CookieJar, u *url.URL) string {
	req := &http.Request{Header: http.Header{}}
	for _, c := range jar.Cookies(u) {
		req.AddCookie(c)
	}
	return req.Header.Get("Cookie")
}

// jarSet is what an http.Client with jar does with an answer's Set-Cookie lines to a request to u.
func jarSet(jar http.CookieJar, u *url.URL, lines []string) {
	resp := &http.Response{Header: http.Header{"Set-Cookie": lines}}
	if rc := resp.Cookies(); len(rc) > 0 {
		jar.SetCookies(u, rc)
	}
}

type cookieStep struct {
	path   string // the endpoint the request goes to
	status int
	set    []string // the answer's Set-Cookie lines
}

// starlette is a Set-Cookie line as Starlette's SessionMiddleware writes it (the NeMo Gym
// resource servers' session cookie), and starletteClear its line when the session is cleared.
func starlette(v string) string {
	return "NeMoGym___counter=" + v + "; path=/; Max-Age=1209600; httponly; samesite=lax"
}

const starletteClear = "NeMoGym___counter=null; path=/; expires=Thu, 01 Jan 1970 00:00:00 GMT; httponly; samesite=lax"

var cookieCases = []struct {
	name  string
	steps []cookieStep
}{
	{"starlette session set, kept, re-set and cleared", []cookieStep{
		{"seed_session", 200, []string{starlette("eyJhIjogMX0=.aAbB.sig1")}},
		{"increment_counter", 200, []string{starlette("eyJhIjogMX0=.aAbB.sig1")}},
		{"increment_counter", 200, []string{starlette("eyJhIjogMn0=.aAbC.sig2")}},
		{"get_counter_value", 200, nil},
		{"verify", 200, []string{starletteClear}},
		{"verify", 200, nil},
	}},
	{"replaced in place, deleted by Max-Age=0 and by a past Expires", []cookieStep{
		{"seed_session", 200, []string{"a=1; Path=/", "b=2; Path=/", "c=3; Path=/"}},
		{"t", 200, []string{"a=10; Path=/"}},
		{"t", 200, []string{"b=; Path=/; Max-Age=0"}},
		{"t", 200, []string{"c=3; Path=/; Expires=Thu, 01 Jan 1970 00:00:00 GMT"}},
		{"t", 200, []string{"b=20; Path=/; Max-Age=-1", "d=4; Path=/; Max-Age=60"}},
		{"verify", 200, nil},
	}},
	{"set by 4xx, 5xx and a redirect that is not followed", []cookieStep{
		{"seed_session", 503, []string{"s=from503; Path=/"}},
		{"seed_session", 200, nil},
		{"t", 404, []string{"s=from404; Path=/"}},
		{"t", 307, []string{"r=redirect; Path=/"}},
		{"t", 422, nil},
		{"verify", 500, []string{"s=from500; Path=/"}},
		{"verify", 200, nil},
	}},
	{"paths, domains, secure, quoting and what net/http refuses", []cookieStep{
		{"seed_session", 200, []string{
			"p=deep; Path=/gym/x/verify", "q=gym; Path=/gym", "r=other; Path=/other",
			"def=default", "dom=d; Domain=127.0.0.1", "baddom=x; Domain=example.com",
			"sec=s; Secure", "quoted=\"v 1\"", "sp=a b", "comma=a,b", "empty=", "qempty=\"\"",
			"bad name=x", "badval=a\\b", "noequals", "", " spaced = v ", "MAX=1; mAx-AgE=5; PATH=/gym/",
			"lead=1; Max-Age=05", "exp=1; Expires=Wed, 01-Jan-2098 00:00:00 GMT", "badexp=1; Expires=soon",
		}},
		{"t", 200, nil},
		{"verify", 200, []string{"q=gym2; Path=/gym", "p=; Path=/gym/x/verify; Max-Age=0"}},
		{"verify", 200, nil},
	}},
}

// The store keeps and sends cookies as an http.Client with net/http's cookie jar does: the same
// Set-Cookie lines, answered over real HTTP to a session, give each request the Cookie header
// the jar would give it.
func TestCookiesAreTheJars(t *testing.T) {
	for _, tc := range cookieCases {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []string
			step := 0
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, r.Header.Get("Cookie"))
				if n := len(r.Header["Cookie"]); n > 1 {
					t.Errorf("request %d: %d Cookie headers", step, n)
				}
				s := tc.steps[step]
				step++
				for _, l := range s.set {
					w.Header().Add("Set-Cookie", l)
				}
				if s.status == 307 {
					w.Header().Set("Location", "/elsewhere")
				}
				w.WriteHeader(s.status)
			}))
			defer srv.Close()
			ts, err := New("x", srv.URL+"/gym/x", nil)
			if err != nil {
				t.Fatal(err)
			}
			sess := ts.NewSession()
			jar, _ := cookiejar.New(nil)
			var want []string
			for i, s := range tc.steps {
				u, _ := url.Parse(ts.url(s.path))
				want = append(want, jarHeader(jar, u))
				if _, err := sess.Post(context.Background(), s.path, []byte(`{}`), false); (err != nil) != (s.status == 307) {
					t.Fatalf("step %d: %v", i, err)
				}
				jarSet(jar, u, s.set)
			}
			mu.Lock()
			defer mu.Unlock()
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("request %d (%s): Cookie %q, the jar's %q", i, tc.steps[i].path, got[i], want[i])
				}
			}
		})
	}
}

// A retried call sends the cookie an attempt's answer set, once, on the next attempt.
func TestCookiesAcrossRetries(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, strings.Join(r.Header["Cookie"], " | "))
		http.SetCookie(w, &http.Cookie{Name: "s", Value: fmt.Sprint(len(got)), Path: "/"})
		if len(got)%2 == 1 {
			w.WriteHeader(503)
		}
	}))
	defer srv.Close()
	ts, err := New("x", srv.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts.Retry.BaseDelay, ts.Retry.MaxDelay = 0, 0
	sess := ts.NewSession()
	if err := sess.Seed(context.Background(), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sess.PostVerify(context.Background(), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"", "s=1", "s=2", "s=3"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Cookie headers %q, want %q", got, want)
	}
	if h := sess.CookieHeader("verify"); h != "s=4" {
		t.Fatalf("after verify the session holds %q, want s=4", h)
	}
}

// Sessions of one server never share cookies, and a cookie's Max-Age runs out.
func TestCookiesPerSessionAndExpiry(t *testing.T) {
	ts, err := New("x", "http://127.0.0.1:9/", nil)
	if err != nil {
		t.Fatal(err)
	}
	a, b := ts.NewSession(), ts.NewSession()
	now := time.Now()
	a.cookies.cookies.set("/seed_session", []string{"s=a; Path=/; Max-Age=10"}, now)
	if h := b.CookieHeader("verify"); h != "" {
		t.Fatalf("session b holds %q", h)
	}
	if h := a.CookieHeader("verify"); h != "s=a" {
		t.Fatalf("session a holds %q", h)
	}
	later := func() time.Time { return now.Add(11 * time.Second) }
	if h := a.cookies.cookies.header(false, "/verify", later); h != nil {
		t.Fatalf("after its Max-Age the cookie is still sent: %q", h)
	}
	if len(a.cookies.cookies.entries) != 0 {
		t.Fatalf("expired cookie kept: %+v", a.cookies.cookies.entries)
	}
}

// FuzzCookiesAreTheJars holds the store to net/http's cookie jar for any Set-Cookie lines (one
// answer a line of the input; "|" separates an answer's lines) to requests to a few paths.
func FuzzCookiesAreTheJars(f *testing.F) {
	for _, tc := range cookieCases {
		var answers []string
		for _, s := range tc.steps {
			answers = append(answers, strings.Join(s.set, "|"))
		}
		f.Add("http://127.0.0.1:8000/gym", strings.Join(answers, "\n"))
	}
	f.Add("https://Gym.Example.com./v1", "a=1; Domain=example.com; Secure|b=2; Domain=.gym.example.com\na=; Domain=EXAMPLE.com; Max-Age=0|c=3; Domain=other.com")
	f.Add("http://localhost:8000", "s=1; Secure; Path=/x|t=2; Path=/x/\ns=2; Secure")
	f.Add("http://[::1]:8000", "s=1; Domain=::1|t=2")
	f.Fuzz(func(t *testing.T, base, input string) {
		u, err := url.Parse(base)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			return
		}
		for i := 0; i < len(u.Host); i++ {
			if u.Host[i] >= 0x80 {
				return // non-ASCII hosts: the jar's punycode is not taken on
			}
		}
		ts, err := New("x", base, nil)
		if err != nil {
			return
		}
		store := newCookieStore(ts.base.Host)
		jar, _ := cookiejar.New(nil)
		paths := []string{"seed_session", "t", "verify", "x/y"}
		for i, answer := range strings.Split(input, "\n") {
			p, _ := url.Parse(ts.url(paths[i%len(paths)]))
			want := jarHeader(jar, p)
			got := ""
			if h := store.header(p.Scheme == "https", p.Path, time.Now); h != nil {
				got = h[0]
			}
			if got != want {
				t.Fatalf("answer %d, request to %s: Cookie %q, the jar's %q", i, p, got, want)
			}
			lines := strings.Split(answer, "|")
			jarSet(jar, p, lines)
			store.set(p.Path, lines, time.Now())
		}
	})
}
