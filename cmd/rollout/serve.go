package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rollout-dev/rollout/pkg/servers"
	"github.com/rollout-dev/rollout/pkg/session"
)

// cmdServe runs a built-in resource server until interrupted.
func cmdServe(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("rollout serve", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen `ADDR` (loopback unless told otherwise)")
	storeURL := fs.String("session-store", "memory", "where sessions live: memory, or redis://HOST:PORT/DB to share them between instances of the server")
	ttl := fs.Duration("session-ttl", session.DefaultTTL, "drop a session this long after its last write")
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: rollout serve NAME [--addr 127.0.0.1:PORT] [--session-store redis://HOST:PORT/DB]\n\nNAME is one of: %s\n\n", strings.Join(servers.Names(), ", "))
		fs.PrintDefaults()
	}
	name, err := parseNamed(fs, args)
	if err != nil {
		return err
	}
	if name == "" {
		return badUsage("serve: which server? one of: %s", strings.Join(servers.Names(), ", "))
	}
	if !slices.Contains(servers.Names(), name) {
		return badUsage("serve: unknown server %q; one of: %s", name, strings.Join(servers.Names(), ", "))
	}
	h, err := newBuiltin(ctx, name, *storeURL, *ttl)
	if err != nil {
		return badUsage("serve: --session-store: %v", err)
	}
	defer h.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return badUsage("serve: %v", err)
	}
	fmt.Fprintf(e.stdout, "http://%s\n", ln.Addr())
	fmt.Fprintf(e.stderr, "rollout: serving %s on http://%s (Ctrl-C to stop)\n", name, ln.Addr())
	return serveUntilDone(ctx, ln, h)
}

// serveUntilDone serves h on ln until ctx is done, then shuts down: gracefully for 2 s, then
// at once.
func serveUntilDone(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	// Connections a client opened but never used (StateNew) hold a graceful shutdown for
	// 5 s; past the bound, whatever is left is closed: the server has stopped either way.
	sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	return nil
}

// serveLocal serves h on a loopback port in this process, over real HTTP.
func serveLocal(h http.Handler) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}

// startBuiltin starts the built-in resource server name in this process.
// storeURL is memory or redis://…; ttl the sessions' lifetime after their last write.
func startBuiltin(ctx context.Context, name, storeURL string, ttl time.Duration) (string, func(), error) {
	h, err := newBuiltin(ctx, name, storeURL, ttl)
	if err != nil {
		return "", nil, err
	}
	url, stop, err := serveLocal(h)
	if err != nil {
		h.Close()
		return "", nil, err
	}
	return url, func() { stop(); h.Close() }, nil
}

// builtinServer is a built-in resource server with the session store it owns.
type builtinServer struct {
	*servers.Server
	store session.Store
}

func (b builtinServer) Close() error {
	b.Server.Close()
	return b.store.Close()
}

// newBuiltin opens the session store at storeURL (keys prefixed with the server's name) and
// the named server on it.
func newBuiltin(ctx context.Context, name, storeURL string, ttl time.Duration) (*builtinServer, error) {
	if !slices.Contains(servers.Names(), name) {
		return nil, fmt.Errorf("unknown built-in server %q (built-in: %s)", name, strings.Join(servers.Names(), ", "))
	}
	store, err := session.Open(ctx, storeURL, session.Options{Prefix: name, TTL: ttl})
	if err != nil {
		return nil, err
	}
	srv, err := servers.New(name, servers.Options{Store: store})
	if err != nil {
		store.Close()
		return nil, err
	}
	return &builtinServer{Server: srv, store: store}, nil
}
