// Package localserve is how rollout serves HTTP on a local port (view, serve, sim, metrics, the
// debug profiles): a listener that holds at most a bounded number of connections, a server
// with header and idle timeouts, and a Host allow-list against DNS rebinding.
package localserve

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"golang.org/x/net/netutil"
)

// Limits of a local server.
const (
	// DefaultMaxConns bounds the connections a server holds at once; more wait in the
	// kernel's backlog until one closes (19,995 idle connections once exhausted the process's
	// file descriptors).
	DefaultMaxConns = 1024
	// ReadHeaderTimeout bounds reading a request's header, and so how long a connection that
	// sends nothing is held.
	ReadHeaderTimeout = 10 * time.Second
	// IdleTimeout closes a kept-alive connection with no request for this long.
	IdleTimeout = 60 * time.Second
	// MaxHeaderBytes bounds a request's header.
	MaxHeaderBytes = 64 << 10
)

// MaxConnsFor is the connection cap of a server that serves a run of concurrency rollouts:
// each rollout in flight keeps a connection to it, and a connection past the cap waits
// unanswered in the kernel's backlog until another closes (a tool call then runs out of its
// timeout), so the cap is twice the concurrency, at least DefaultMaxConns.
func MaxConnsFor(concurrency int) int { return max(DefaultMaxConns, 2*concurrency) }

// Listen listens on addr and accepts at most maxConns connections at once (<= 0:
// DefaultMaxConns).
func Listen(addr string, maxConns int) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return limit(ln, maxConns), nil
}

func limit(ln net.Listener, maxConns int) net.Listener {
	if maxConns <= 0 {
		maxConns = DefaultMaxConns
	}
	return netutil.LimitListener(ln, maxConns)
}

// Server is an http.Server of h with the timeouts above (no write timeout: a profile or a
// long page may take its time once asked for).
func Server(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, IdleTimeout: IdleTimeout, MaxHeaderBytes: MaxHeaderBytes}
}

// Hosts are the host names (without port) a server listening at addr (its actual address,
// port chosen) answers to: the loopback names; the address's own host; for an unspecified
// address (0.0.0.0, ::) the machine's interface addresses and its host name; and extra.
func Hosts(addr string, extra ...string) []string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	names := []string{"localhost", "127.0.0.1", "::1", host}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		if as, err := net.InterfaceAddrs(); err == nil {
			for _, a := range as {
				if n, ok := a.(*net.IPNet); ok {
					names = append(names, n.IP.String())
				}
			}
		}
		if h, err := os.Hostname(); err == nil && h != "" {
			names = append(names, h)
		}
	}
	for _, e := range extra {
		if e = strings.TrimSpace(e); e != "" {
			names = append(names, e)
		}
	}
	return names
}

// HostAllowed says whether a request's Host header names one of hosts (any port; names
// compared without case, IPv6 literals with or without brackets).
func HostAllowed(hosts []string, hostHeader string) bool {
	name := hostHeader
	if h, _, err := net.SplitHostPort(hostHeader); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	name = strings.TrimSuffix(name, ".")
	if name == "" {
		return false
	}
	for _, h := range hosts {
		if strings.EqualFold(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), name) {
			return true
		}
	}
	return false
}

// CheckHost answers 421 to a request whose Host is not one of hosts, and passes the others to h.
func CheckHost(hosts []string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !HostAllowed(hosts, r.Host) {
			http.Error(w, fmt.Sprintf("host %q is not this server's", r.Host), http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}
