package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/rollout-dev/rollout/pkg/servers"
)

// cmdServe runs a built-in resource server until interrupted.
func cmdServe(ctx context.Context, args []string, e env) error {
	fs := flag.NewFlagSet("rollout serve", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	addr := fs.String("addr", "127.0.0.1:0", "listen `ADDR` (loopback unless told otherwise)")
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "Usage: rollout serve NAME [--addr 127.0.0.1:PORT]\n\nNAME is one of: %s\n\n", strings.Join(servers.Names(), ", "))
		fs.PrintDefaults()
	}
	name := ""
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return usageError{err}
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	}
	if name == "" {
		return badUsage("serve: which server? one of: %s", strings.Join(servers.Names(), ", "))
	}
	h, err := servers.New(name, servers.Options{})
	if err != nil {
		return usageError{err}
	}
	defer h.Close()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return badUsage("serve: %v", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(e.stdout, "http://%s\n", ln.Addr())
	fmt.Fprintf(e.stderr, "rollout: serving %s on http://%s (Ctrl-C to stop)\n", name, ln.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
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
func startBuiltin(name string, opts servers.Options) (string, func(), error) {
	h, err := servers.New(name, opts)
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
