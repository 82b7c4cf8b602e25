package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/localserve"
)

// A --max-conns below 1 is bad usage of serve and sim: exit 2, one line naming the flag.
func TestMaxConnsRefused(t *testing.T) {
	for _, args := range [][]string{{"serve", "counter", "--max-conns", "0"}, {"sim", "--max-conns", "-3"}} {
		r := runCLI(t, context.Background(), nil, args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--max-conns") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("rollout %s: exit %d, stderr %q; want exit %d and one line naming --max-conns", strings.Join(args, " "), r.code, r.stderr, exitUsage)
		}
	}
}

// rollout serve --max-conns N answers N kept-alive connections at once, more than the default
// cap: a runner keeps a connection per rollout in flight, and a connection past the cap sits
// unanswered in the kernel's backlog until the server's idle timeout closes another.
func TestServeMaxConnsHoldsMoreThanTheDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("opens a thousand connections")
	}
	n := localserve.DefaultMaxConns + 16
	addr, _ := startServing(t, nil, `serving counter on http://(\S+) `, "serve", "counter", "--max-conns", fmt.Sprint(n))
	// Well within the server's idle timeout: a connection past the cap would be answered only
	// when one of these had been idle for that long.
	deadline := time.Now().Add(localserve.IdleTimeout / 2)
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, c)
		c.SetDeadline(deadline)
		fmt.Fprintf(c, "POST /get_counter_value HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}", addr)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d of %d held at once (--max-conns %d): no answer: %v", i+1, n, n, err)
		}
		resp.Body.Close()
		if resp.Close {
			t.Fatalf("connection %d: the server closed it", i+1)
		}
		// A session never seeded: the counter server's 409, an answer all the same.
		if resp.StatusCode != http.StatusConflict {
			t.Fatalf("connection %d: HTTP %d, want 409 (no session)", i+1, resp.StatusCode)
		}
	}
}
