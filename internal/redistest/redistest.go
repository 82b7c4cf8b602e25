// Package redistest starts a real, throwaway redis-server for tests.
//
// The tests that use it need redis-server on PATH (apt-get install -y redis-server). Without it
// they fail, so that a missing dependency is never mistaken for a pass; set ROLLOUT_SKIP_REDIS=1
// to skip them instead.
package redistest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/testnet"
)

// SkipEnv is the environment variable that, set to 1, makes Start skip the test instead of
// failing it when redis-server is not installed.
const SkipEnv = "ROLLOUT_SKIP_REDIS"

// startTimeout bounds how long a server may take to answer its first PING.
const startTimeout = 10 * time.Second

// Start starts a redis-server on a free loopback port, with no persistence and its working
// directory in t.TempDir(), waits until it answers PING, and returns its URL
// (redis://127.0.0.1:PORT/0). The server is killed when the test ends. args are added to the
// server's command line, e.g. "--requirepass", "secret".
func Start(t testing.TB, args ...string) string {
	t.Helper()
	s := StartServer(t, args...)
	if s == nil {
		return ""
	}
	return s.URL
}

// Server is a redis-server started by StartServer, which a test can kill and start again,
// empty, on the same port: a Redis restart that lost every key.
type Server struct {
	URL  string
	bin  string
	dir  string
	args []string
	port int
	stop func() // kills the process and waits for it
}

// StartServer is Start, returning the server (nil when the test is skipped).
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(SkipEnv) == "1" {
			t.Skipf("redis-server not found on PATH and %s=1: skipping", SkipEnv)
			return nil
		}
		t.Fatalf("redis-server not found on PATH: these tests need a real Redis; install it (apt-get install -y redis-server), or set %s=1 to skip them", SkipEnv)
		return nil
	}
	s := &Server{bin: bin, dir: t.TempDir(), args: args}
	var lastErr error
	// The free port is found by listening and closing, so another process may take it before
	// redis-server binds it: try a few ports.
	for range 5 {
		if s.port, lastErr = testnet.FreePort(); lastErr != nil {
			continue
		}
		if lastErr = s.start(); lastErr == nil {
			t.Cleanup(func() { s.stop() })
			return s
		}
	}
	t.Fatalf("redistest: %v", lastErr)
	return nil
}

// Restart kills the server (SIGKILL: nothing is saved) and starts a new one on the same port,
// with no keys. Clients see their connections drop, then an empty Redis at the same URL. It may
// be called from any goroutine; the error says why the new server did not start.
func (s *Server) Restart() error {
	s.stop()
	var err error
	for range 50 { // the port may take a moment to be free again
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("redistest: restart on port %d: %w", s.port, err)
}

// Kill kills the server (SIGKILL) without starting another: clients see connection errors.
func (s *Server) Kill() { s.stop() }

// start starts redis-server on s.port and waits until it answers PING.
func (s *Server) start() error {
	port := s.port
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(s.bin, append([]string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
	}, s.args...)...)
	cmd.Dir = s.dir
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %v", s.bin, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}

	deadline := time.Now().Add(startTimeout)
	for {
		if ping(addr, password(s.args), cmd.Process.Pid) == nil {
			s.stop = stop
			s.URL = "redis://" + addr + "/0"
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("redis-server on port %d exited: %s", port, out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return fmt.Errorf("redis-server on port %d did not answer PING within %v: %s", port, startTimeout, out.String())
		}
	}
}

// password is the value of --requirepass in args, if any.
func password(args []string) string {
	for i, a := range args {
		if a == "--requirepass" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// command is one RESP command.
func command(args ...string) []byte {
	b := fmt.Appendf(nil, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b
}

// ping checks that the server at addr answers PING and is the process pid (not another
// server that took the port first), authenticating first when it has a password.
func ping(addr, password string, pid int) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	var req []byte
	if password != "" {
		req = command("AUTH", password)
	}
	req = append(req, command("PING")...)
	req = append(req, command("INFO", "server")...)
	if _, err := c.Write(req); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	if password != "" {
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if line != "+OK\r\n" {
			return fmt.Errorf("AUTH answered %q", line)
		}
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	line, err = r.ReadString('\n')
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
	if !strings.HasPrefix(line, "$") || err != nil {
		return fmt.Errorf("INFO answered %q", line)
	}
	info := make([]byte, n)
	if _, err := io.ReadFull(r, info); err != nil {
		return err
	}
	if !bytes.Contains(info, []byte("\r\nprocess_id:"+strconv.Itoa(pid)+"\r\n")) {
		return fmt.Errorf("%s is another redis-server, not process %d", addr, pid)
	}
	return nil
}

// syncBuffer collects a process's output while it runs.
type syncBuffer = testnet.Buffer
