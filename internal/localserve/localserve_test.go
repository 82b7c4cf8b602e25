package localserve

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A server holds at most its cap of connections: 3×cap clients that connect and send nothing
// are never more than cap open at the server at once; the server closes those that send no
// header within its header timeout, and the others get in then, and are served.
func TestConnectionCapAndHeaderTimeout(t *testing.T) {
	const maxConns = 4
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingListener{Listener: raw}
	ln := limit(counted, maxConns)
	srv := Server(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	srv.ReadHeaderTimeout = 300 * time.Millisecond // short, so that the test waits little
	peak := &counted.peak
	go srv.Serve(ln)
	defer srv.Close()

	var conns []net.Conn
	for range 3 * maxConns {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	// Every idle connection is closed by the server in the end (a read sees EOF).
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(2 * time.Minute))
			_, err := c.Read(make([]byte, 1))
			if err == nil {
				t.Error("an idle connection got bytes")
			}
			c.Close()
		}()
	}
	wg.Wait()
	if p := peak.Load(); p > maxConns || p == 0 {
		t.Errorf("at most %d connections were open at the server at once, want 1 to %d", p, maxConns)
	}
	// And the server still serves.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after the idle ones: %v %v", resp, err)
	}
}

func TestHostAllowed(t *testing.T) {
	hosts := Hosts("10.1.2.3:8080", "view.example")
	for host, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:8080": true, "LOCALHOST": true, "[::1]:8080": true, "10.1.2.3:8080": true,
		"view.example:8080": true, "view.example.:8080": true, "view.example": true,
		"attacker.example:8080": false, "attacker.example": false, "": false, "10.1.2.4:8080": false,
		"view.example.attacker.example:8080": false,
	} {
		if got := HostAllowed(hosts, host); got != want {
			t.Errorf("Host %q: allowed %v, want %v", host, got, want)
		}
	}
	// An unspecified address answers the machine's own addresses, not any name.
	all := Hosts("0.0.0.0:80")
	if !HostAllowed(all, "127.0.0.1") || HostAllowed(all, "attacker.example") {
		t.Errorf("0.0.0.0: %v", all)
	}
}

// countingListener counts the connections it accepted that are not closed yet, and their peak.
type countingListener struct {
	net.Listener
	open, peak atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	n := l.open.Add(1)
	for p := l.peak.Load(); n > p && !l.peak.CompareAndSwap(p, n); p = l.peak.Load() {
	}
	return &countedConn{Conn: c, l: l}, nil
}

type countedConn struct {
	net.Conn
	l    *countingListener
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.open.Add(-1) })
	return err
}
