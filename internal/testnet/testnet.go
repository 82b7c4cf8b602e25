// Package testnet holds network fixtures for tests: servers that misbehave on purpose.
package testnet

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
)

// Silent starts a TCP server on loopback that accepts connections, reads what is sent and
// never writes a byte: a server that hangs. Its connections are closed when the test ends.
// It returns the base URL (http://127.0.0.1:PORT) and a count of the connections accepted.
func Silent(t testing.TB) (url string, accepted func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go io.Copy(io.Discard, bufio.NewReader(c)) // read the request, answer nothing
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return len(conns) }
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
