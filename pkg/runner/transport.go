package runner

import (
	"net/http"
	"sync/atomic"
	"time"
)

// Transport is the HTTP transport shared by all rollouts of a run: a few http.Transports
// (shards) that take the requests in turn. Each http.Transport guards its idle connections
// with one mutex for all hosts; at a thousand rollouts in flight a mutex profile showed ~35
// goroutines waiting on it on average (BENCHMARKS.md), so a run spreads its requests over one
// shard per transportShardSize rollouts in flight, at most maxTransportShards. Each shard's
// idle pool per host is sized to its share of the concurrency, so that connections are reused.
type Transport struct {
	shards []*http.Transport
	next   atomic.Uint64
}

const (
	// connBufferSize is each connection's read and write buffer (net/http's default: 4 KiB).
	connBufferSize     = 2 << 10
	transportShardSize = 128
	maxTransportShards = 16
)

// NewTransport returns the transport of a run of concurrency rollouts in flight.
func NewTransport(concurrency int) *Transport {
	n := min(max(concurrency/transportShardSize, 1), maxTransportShards)
	t := &Transport{shards: make([]*http.Transport, n)}
	for i := range t.shards {
		s := http.DefaultTransport.(*http.Transport).Clone()
		s.MaxIdleConns = 0
		s.MaxIdleConnsPerHost = (concurrency+n-1)/n + 16
		s.IdleConnTimeout = 90 * time.Second
		s.ResponseHeaderTimeout = 0 // deadlines come from contexts
		s.ReadBufferSize, s.WriteBufferSize = connBufferSize, connBufferSize
		t.shards[i] = s
	}
	return t
}

// RoundTrip sends req through the next shard.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.shards[(t.next.Add(1)-1)%uint64(len(t.shards))].RoundTrip(req)
}

// CloseIdleConnections closes every shard's idle connections.
func (t *Transport) CloseIdleConnections() {
	for _, s := range t.shards {
		s.CloseIdleConnections()
	}
}

// Shards is the number of http.Transports the requests are spread over.
func (t *Transport) Shards() int { return len(t.shards) }
