package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rollout-dev/rollout/internal/localserve"
	"github.com/rollout-dev/rollout/pkg/chaos"
	"github.com/rollout-dev/rollout/pkg/servers"
	"github.com/rollout-dev/rollout/pkg/servers/gym"
	"github.com/rollout-dev/rollout/pkg/servers/store"
)

// serveArgs are rollout serve's arguments.
type serveArgs struct {
	name, addr, storeURL, metricsAddr string
	ttl                               time.Duration
	chaos                             chaos.Options
	key                               []byte // --session-key-file's key; nil: the store's
	maxConns                          int    // --max-conns
}

// parseServe reads rollout serve's arguments, checking them.
func parseServe(args []string, e env) (a serveArgs, err error) {
	fs := newFlagSet("rollout serve", e, commandHelp{
		usage: "rollout serve NAME [--addr 127.0.0.1:PORT] [--session-store redis://HOST:PORT/DB] [--metrics-addr ADDR] [--chaos-*]",
		about: "NAME is one of: " + strings.Join(servers.Names(), ", ") + "\n\n" +
			"The --chaos-* flags make the server fail on purpose, to test a client against a flaky server.",
		examples: []string{"rollout serve extraction --addr 127.0.0.1:9000",
			"rollout serve example_session_state_mgmt --session-store redis://127.0.0.1:6379/0 --addr 127.0.0.1:9001"},
	})
	fs.StringVar(&a.addr, "addr", "127.0.0.1:0", "listen `ADDR` (loopback unless told otherwise)")
	fs.StringVar(&a.storeURL, "session-store", "memory", "where sessions live: memory, or redis://HOST:PORT/DB to share them between instances of the server")
	fs.DurationVar(&a.ttl, "session-ttl", store.DefaultTTL, "drop a session this long after its last write")
	co := &a.chaos
	fs.Int64Var(&co.Seed, "chaos-seed", 0, "seed of the injected faults: the same seed and requests get the same faults")
	fs.Float64Var(&co.FailRate, "chaos-fail-rate", 0, "probability per request of an injected HTTP 500 with a JSON body (a retry draws again)")
	fs.Float64Var(&co.ResetRate, "chaos-reset-rate", 0, "probability per request that the connection is reset without an answer")
	fs.Float64Var(&co.HangRate, "chaos-hang-rate", 0, "probability per request of no answer until the client gives up")
	fs.DurationVar(&co.Latency, "chaos-latency", 0, "delay each request chaos may hit by a uniform draw in [0, `D`)")
	metricsFlag(fs, &a.metricsAddr)
	maxConnsFlag(fs, &a.maxConns)
	keyFile := fs.String("session-key-file", "", "sign the session cookies, and MAC the session state, with the key in `FILE` (32 bytes or more, e.g. a mounted Secret) instead of one kept in the session store")
	endpoints := fs.String("chaos-endpoints", strings.Join(chaos.DefaultEndpoints, ","), "requests chaos may hit: a comma-separated list of tools, seed_session, verify, end_session, all, or tool names")
	if a.name, err = parseNamed(fs, args, e); err != nil {
		return a, err
	}
	if a.name == "" {
		return a, badUsage("serve: which server? one of: %s", strings.Join(servers.Names(), ", "))
	}
	if !slices.Contains(servers.Names(), a.name) {
		return a, badUsage("serve: unknown server %q; one of: %s", a.name, strings.Join(servers.Names(), ", "))
	}
	if err := checkMaxConns("serve", a.maxConns); err != nil {
		return a, err
	}
	if *keyFile != "" {
		b, err := os.ReadFile(*keyFile)
		if err != nil {
			return a, badUsage("serve: --session-key-file: %v", err)
		}
		if a.key = bytes.TrimSpace(b); len(a.key) < gym.MinKeySize {
			return a, badUsage("serve: --session-key-file %s: %d bytes, want at least %d (openssl rand -hex 32 makes one)", *keyFile, len(a.key), gym.MinKeySize)
		}
	}
	if co.Endpoints, err = chaos.ParseEndpoints(*endpoints); err != nil {
		return a, badUsage("serve: --chaos-endpoints: %v", err)
	}
	if err := co.Validate(); err != nil {
		return a, badUsage("serve: %v", err)
	}
	return a, nil
}

// cmdServe runs a built-in resource server until interrupted.
func cmdServe(ctx context.Context, args []string, e env) error {
	a, err := parseServe(args, e)
	if err != nil {
		return err
	}
	name, co := a.name, a.chaos
	h, err := newBuiltin(ctx, name, a.storeURL, a.ttl, a.key)
	if err != nil {
		return badUsage("serve: --session-store: %v", err)
	}
	defer h.Close()
	var handler http.Handler = h
	var ch *chaos.Handler
	if co.Enabled() {
		if ch, err = chaos.New(h, co); err != nil {
			return badUsage("serve: %v", err)
		}
		handler = ch
	}
	handler, stopMetrics, err := serveMetrics(a.metricsAddr, name, handler, e)
	if err != nil {
		return err
	}
	defer stopMetrics()
	ln, err := localserve.Listen(a.addr, a.maxConns)
	if err != nil {
		return badUsage("serve: %v", err)
	}
	fmt.Fprintf(e.stdout, "http://%s\n", ln.Addr())
	fmt.Fprintf(e.stderr, "rollout: serving %s on http://%s (Ctrl-C to stop)\n", name, ln.Addr())
	if ch != nil {
		fmt.Fprintf(e.stderr, "rollout: chaos on %s: seed %d, fail %g, reset %g, hang %g, latency up to %v\n",
			strings.Join(co.Endpoints, ","), co.Seed, co.FailRate, co.ResetRate, co.HangRate, co.Latency)
	}
	err = serveUntilDone(ctx, ln, handler)
	if ch != nil {
		st := ch.Stats()
		fmt.Fprintf(e.stderr, "rollout: chaos: %d requests, %d eligible: %d failed (500), %d reset, %d hung, %d passed\n",
			st.Requests, st.Eligible, st.Failed, st.Reset, st.Hung, st.Passed)
	}
	return err
}

// maxConnsFlag is --max-conns of a server command (serve, sim).
func maxConnsFlag(fs *flag.FlagSet, n *int) {
	fs.IntVar(n, "max-conns", localserve.DefaultMaxConns, "hold at most `N` connections at once; more wait unanswered in the kernel's backlog until one closes, so give at least the clients' concurrency (rollout run keeps a connection per rollout in flight)")
}

// checkMaxConns refuses a --max-conns below 1.
func checkMaxConns(cmd string, n int) error {
	if n < 1 {
		return badUsage("%s: --max-conns %d: want at least 1", cmd, n)
	}
	return nil
}

// serveUntilDone serves h on ln until ctx is done, then shuts down: gracefully for 2 s, then
// at once.
func serveUntilDone(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := localserve.Server(h)
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

// serveLocal serves h on a loopback port in this process, over real HTTP, holding at most
// maxConns connections at once (<= 0: localserve.DefaultMaxConns).
func serveLocal(h http.Handler, maxConns int) (url string, stop func(), err error) {
	ln, err := localserve.Listen("127.0.0.1:0", maxConns)
	if err != nil {
		return "", nil, err
	}
	srv := localserve.Server(h)
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}

// startBuiltin starts the built-in resource server name in this process, holding at most
// maxConns connections (<= 0: localserve.DefaultMaxConns).
// storeURL is memory or redis://…; ttl the sessions' lifetime after their last write.
func startBuiltin(ctx context.Context, name, storeURL string, ttl time.Duration, maxConns int) (string, func(), error) {
	h, err := newBuiltin(ctx, name, storeURL, ttl, nil)
	if err != nil {
		return "", nil, err
	}
	url, stop, err := serveLocal(h, maxConns)
	if err != nil {
		h.Close()
		return "", nil, err
	}
	return url, func() { stop(); h.Close() }, nil
}

// builtinServer is a built-in resource server with the session store it owns.
type builtinServer struct {
	*servers.Server
	store store.Store
}

func (b builtinServer) Close() error {
	b.Server.Close()
	return b.store.Close()
}

// newBuiltin opens the session store at storeURL (keys prefixed with the server's name) and
// the named server on it; key signs its cookies (nil: a key kept in the store).
func newBuiltin(ctx context.Context, name, storeURL string, ttl time.Duration, key []byte) (*builtinServer, error) {
	if !slices.Contains(servers.Names(), name) {
		return nil, fmt.Errorf("unknown built-in server %q (built-in: %s)", name, strings.Join(servers.Names(), ", "))
	}
	st, err := store.Open(ctx, storeURL, store.Options{Prefix: name, TTL: ttl})
	if err != nil {
		return nil, err
	}
	srv, err := servers.New(name, servers.Options{Store: st, Key: key})
	if err != nil {
		st.Close()
		return nil, err
	}
	return &builtinServer{Server: srv, store: st}, nil
}
