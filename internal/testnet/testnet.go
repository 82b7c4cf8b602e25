// Package testnet holds network fixtures for tests: servers that misbehave on purpose.
package testnet

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
)

// Silent starts a TCP server on loopback that accepts connections, reads what is sent and
// never writes a byte: a server that hangs. Its connections are closed when the test ends.
// It returns the base URL (http://127.0.0.1:PORT) and a count of the connections accepted.
func Silent(t testing.TB) (url string, accepted func() int) {
	t.Helper()
	var n atomic.Int64
	url = Raw(t, func(_ int, c net.Conn) {
		n.Add(1)
		io.Copy(io.Discard, bufio.NewReader(c)) // read the request, answer nothing
	})
	return url, func() int { return int(n.Load()) }
}

// Raw starts a TCP server on loopback that runs serve on each connection it accepts (n counts
// them from 1), then closes it: a server that writes whatever bytes a test needs. When the
// test ends it stops accepting, closes every connection and waits for serve to return.
// It returns the base URL (http://127.0.0.1:PORT).
func Raw(t testing.TB, serve func(n int, c net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for n := 1; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); serve(n, c) }()
		}
	}()
	return "http://" + ln.Addr().String()
}

// FreePort is a TCP port on loopback that was free a moment ago: found by listening and
// closing, so another process may take it first (callers that start a server on it retry).
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// RawAnswer answers a request with raw bytes written on its connection (a broken or truncated
// HTTP answer, say), then closes the connection.
func RawAnswer(w http.ResponseWriter, raw string) {
	conn, buf, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	buf.WriteString(raw)
	buf.Flush()
	conn.Close()
}

// Buffer is a bytes.Buffer safe for concurrent use: a child process's output, collected for
// error messages while it runs.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ClosedPort returns the base URL (http://127.0.0.1:PORT) of a loopback port on which nothing
// listens: a connection to it is refused.
func ClosedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}
