package runner

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// The shards take the requests in turn and each reuses its connections: sequential requests
// open one connection per shard and no more; CloseIdleConnections closes them all.
func TestTransportShardsReuseConnections(t *testing.T) {
	for _, tc := range []struct{ concurrency, shards int }{{1, 1}, {64, 1}, {1024, 8}, {100_000, maxTransportShards}} {
		if got := NewTransport(tc.concurrency).Shards(); got != tc.shards {
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
	tr := NewTransport(1024)
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
	client := &http.Client{Transport: NewTransport(1)}
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
		t.Errorf("%d connections, want 1 reused", n)
	}
}
