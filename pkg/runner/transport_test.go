package runner

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
)

// The net/http shards take the requests in turn and each reuses its connections: sequential
// requests open one connection per shard and no more; CloseIdleConnections closes them all.
func TestTransportShardsReuseConnections(t *testing.T) {
	for _, tc := range []struct{ concurrency, shards int }{{1, 1}, {64, 1}, {1024, 8}, {100_000, maxTransportShards}} {
		if got := NewNetHTTPTransport(tc.concurrency).Shards(); got != tc.shards {
			t.Errorf("concurrency %d: %d shards, want %d", tc.concurrency, got, tc.shards)
		}
	}
	var opened, closed atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			opened.Add(1)
		case http.StateClosed:
			closed.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	tr := NewNetHTTPTransport(1024)
	client := &http.Client{Transport: tr}
	for i := range 10 * tr.Shards() {
		resp, err := client.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "ok" {
			t.Fatalf("request %d: %q", i, b)
		}
	}
	if n := opened.Load(); n != int64(tr.Shards()) {
		t.Errorf("%d connections for %d sequential requests over %d shards, want one per shard", n, 10*tr.Shards(), tr.Shards())
	}
	tr.CloseIdleConnections()
	srv.Close() // waits for the connections to be gone
	if c := closed.Load(); c != opened.Load() {
		t.Errorf("%d of %d connections closed after CloseIdleConnections", c, opened.Load())
	}
}

// Bodies much larger than a connection's buffers, and long header lines, go through whole and
// the connection is reused after them.
func TestTransportBodiesLargerThanBuffers(t *testing.T) {
	var opened atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Long", r.Header.Get("X-Long"))
		w.Write(bytes.Repeat(b, 2))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	for _, tr := range []*Transport{NewTransport(1), NewNetHTTPTransport(1)} {
		opened.Store(0)
		client := &http.Client{Transport: tr}
		for _, n := range []int{0, connBufferSize - 1, connBufferSize, connBufferSize + 1, 3 * connBufferSize, 1 << 20} {
			body := bytes.Repeat([]byte("abcdefg"), n/7+1)[:n]
			req, _ := http.NewRequest("POST", srv.URL, bytes.NewReader(body))
			long := strings.Repeat("h", 3*connBufferSize)
			req.Header.Set("X-Long", long)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatalf("%d bytes: %v", n, err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || !bytes.Equal(got, bytes.Repeat(body, 2)) || resp.Header.Get("X-Long") != long {
				t.Fatalf("%d bytes: answer of %d bytes (%v), header of %d", n, len(got), err, len(resp.Header.Get("X-Long")))
			}
		}
		if n := opened.Load(); n != 1 {
			t.Errorf("direct %v: %d connections, want 1 reused", tr.Direct(), n)
		}
	}
}

// Plain-http requests go through internal/h1 (one connection for sequential requests, and
// none kept by net/http's shards); https and a request a proxy takes go through net/http.
func TestTransportRoutes(t *testing.T) {
	var opened atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.String())
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	tr := NewTransport(1024)
	client := &http.Client{Transport: tr}
	get := func(u string) string {
		t.Helper()
		resp, err := client.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	for range 20 {
		if got := get(srv.URL + "/a"); got != "/a" {
			t.Fatalf("answer %q", got)
		}
	}
	if n := opened.Load(); n != 1 || tr.direct.IdleConns() != 1 {
		t.Errorf("20 sequential plain-http requests: %d connections, %d idle in h1; want 1 and 1", n, tr.direct.IdleConns())
	}
	// A proxy from the environment takes the request: it goes to the proxy (here the same
	// server, which then sees the absolute URL a request to a proxy carries) through net/http.
	proxy, _ := url.Parse(srv.URL)
	tr.proxy = func(*http.Request) (*url.URL, error) { return proxy, nil }
	if got := get("http://model.internal:8000/v1/models"); got != "http://model.internal:8000/v1/models" {
		t.Errorf("through the proxy the server saw %q, want the absolute URL", got)
	}
	if n := opened.Load(); n != 2 {
		t.Errorf("the proxied request opened %d connections in all, want a second one (net/http's)", n)
	}
}
