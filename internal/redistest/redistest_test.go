package redistest

import (
	"bufio"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestStart(t *testing.T) {
	var addr string
	t.Run("server", func(t *testing.T) {
		u := Start(t)
		if !strings.HasPrefix(u, "redis://127.0.0.1:") || !strings.HasSuffix(u, "/0") {
			t.Fatalf("Start = %q", u)
		}
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		addr = parsed.Host
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		// A second server in the same test gets its own port.
		if u2 := Start(t); u2 == u {
			t.Errorf("two servers at %s", u)
		}
	})
	// The subtest's cleanup killed the server: nothing listens there any more.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("redis-server at %s still answers after its test ended", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// fakeTB records what Start reports instead of ending the test.
type fakeTB struct {
	testing.TB
	fatal, skip string
}

func (f *fakeTB) Helper()                        {}
func (f *fakeTB) Fatalf(format string, a ...any) { f.fatal = fmt.Sprintf(format, a...) }
func (f *fakeTB) Skipf(format string, a ...any)  { f.skip = fmt.Sprintf(format, a...) }

func TestStartWithoutRedisFails(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv(SkipEnv, "")
	f := &fakeTB{TB: t}
	if u := Start(f); u != "" || f.skip != "" || !strings.Contains(f.fatal, "apt-get install -y redis-server") {
		t.Errorf("without redis-server: url %q, fatal %q, skip %q; want a failure saying how to install it", u, f.fatal, f.skip)
	}

	t.Setenv(SkipEnv, "1")
	f = &fakeTB{TB: t}
	if u := Start(f); u != "" || f.fatal != "" || f.skip == "" {
		t.Errorf("with %s=1: url %q, fatal %q, skip %q; want a skip", SkipEnv, u, f.fatal, f.skip)
	}
}

// Restart gives an empty Redis at the same URL: a key set before is gone after.
func TestRestart(t *testing.T) {
	s := StartServer(t)
	addr := strings.TrimSuffix(strings.TrimPrefix(s.URL, "redis://"), "/0")
	do := func(args ...string) string {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(command(args...))
		r := bufio.NewReader(c)
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(line, "$") && line != "$-1\r\n" {
			v, _ := r.ReadString('\n')
			line += v
		}
		return line
	}
	url := s.URL
	if got := do("SET", "k", "v"); got != "+OK\r\n" {
		t.Fatalf("SET: %q", got)
	}
	if got := do("GET", "k"); got != "$1\r\nv\r\n" {
		t.Fatalf("GET before the restart: %q", got)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.URL != url {
		t.Errorf("the URL changed: %s, was %s", s.URL, url)
	}
	if got := do("GET", "k"); got != "$-1\r\n" {
		t.Errorf("GET after the restart: %q, want nil", got)
	}
}
