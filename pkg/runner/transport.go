package runner

import (
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/rollout-dev/rollout/internal/h1"
)

// Transport is the HTTP transport shared by all rollouts of a run.
//
// A plain-http request that no proxy takes (a local vLLM, llama-server or resource server:
// where a run's requests are many and its CPU and memory matter) goes through internal/h1,
// which writes the request and reads the answer on the rollout's own goroutine: a connection
// holds no goroutine and no buffer while it waits or sits idle. Everything else (https, a
// proxy from the environment, Expect and Upgrade requests) goes through net/http's Transport,
// as a few http.Transports (shards) that take the requests in turn: each guards its idle
// connections with one mutex for all hosts, and at a thousand rollouts in flight a mutex
// profile showed ~35 goroutines waiting on it on average, so a run spreads its requests over
// one shard per transportShardSize rollouts in flight, at most maxTransportShards. Each idle
// pool per host is sized to the concurrency, so that connections are reused.
type Transport struct {
	direct *h1.Transport // nil: every request goes through the shards
	proxy  func(*http.Request) (*url.URL, error)
	shards []*http.Transport
	next   atomic.Uint64
}

const (
	// connBufferSize is each net/http connection's read and write buffer (net/http's
	// default: 4 KiB).
	connBufferSize     = 2 << 10
	transportShardSize = 128
	maxTransportShards = 16
	idleTimeout        = 90 * time.Second
)

// NewTransport returns the transport of a run of concurrency rollouts in flight.
func NewTransport(concurrency int) *Transport {
	t := NewNetHTTPTransport(concurrency)
	t.direct = h1.New(h1.Options{MaxIdlePerHost: concurrency + 16, IdleTimeout: idleTimeout})
	return t
}

// NewNetHTTPTransport returns a transport that sends every request through net/http's
// Transport: the benchmarks' reference for what Go's HTTP client costs, and a way around
// internal/h1 should a server need what only net/http does.
func NewNetHTTPTransport(concurrency int) *Transport {
	n := min(max(concurrency/transportShardSize, 1), maxTransportShards)
	t := &Transport{shards: make([]*http.Transport, n), proxy: http.ProxyFromEnvironment}
	for i := range t.shards {
		s := http.DefaultTransport.(*http.Transport).Clone()
		s.Proxy = func(r *http.Request) (*url.URL, error) { return t.proxy(r) }
		s.MaxIdleConns = 0
		s.MaxIdleConnsPerHost = (concurrency+n-1)/n + 16
		s.IdleConnTimeout = idleTimeout
		s.ResponseHeaderTimeout = 0 // deadlines come from contexts
		s.ReadBufferSize, s.WriteBufferSize = connBufferSize, connBufferSize
		t.shards[i] = s
	}
	return t
}

// RoundTrip sends req through internal/h1 when it takes it and no proxy does, else through
// the next shard.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.direct != nil && h1.CanTake(req) {
		if p, err := t.proxy(req); err == nil && p == nil {
			return t.direct.RoundTrip(req)
		}
	}
	return t.shards[(t.next.Add(1)-1)%uint64(len(t.shards))].RoundTrip(req)
}

// CloseIdleConnections closes every idle connection.
func (t *Transport) CloseIdleConnections() {
	if t.direct != nil {
		t.direct.CloseIdleConnections()
	}
	for _, s := range t.shards {
		s.CloseIdleConnections()
	}
}

// Shards is the number of http.Transports the requests h1 does not take are spread over.
func (t *Transport) Shards() int { return len(t.shards) }

// Direct reports whether plain-http requests go through internal/h1.
func (t *Transport) Direct() bool { return t.direct != nil }
