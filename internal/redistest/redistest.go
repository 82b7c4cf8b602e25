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
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv(SkipEnv) == "1" {
			t.Skipf("redis-server not found on PATH and %s=1: skipping", SkipEnv)
			return ""
		}
		t.Fatalf("redis-server not found on PATH: these tests need a real Redis; install it (apt-get install -y redis-server), or set %s=1 to skip them", SkipEnv)
		return ""
	}
	dir := t.TempDir()
	var lastErr error
	// The free port is found by listening and closing, so another process may take it before
	// redis-server binds it: try a few ports.
	for range 5 {
		url, err := start(t, bin, dir, args)
		if err == nil {
			return url
		}
		lastErr = err
	}
	t.Fatalf("redistest: %v", lastErr)
	return ""
}

func start(t testing.TB, bin, dir string, args []string) (string, error) {
	port, err := freePort()
	if err != nil {
		return "", err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(bin, append([]string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
	}, args...)...)
	cmd.Dir = dir
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %v", bin, err)
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
		if ping(addr, password(args), cmd.Process.Pid) == nil {
			t.Cleanup(stop)
			return "redis://" + addr + "/0", nil
		}
		select {
		case <-exited:
			return "", fmt.Errorf("redis-server on port %d exited: %s", port, out.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return "", fmt.Errorf("redis-server on port %d did not answer PING within %v: %s", port, startTimeout, out.String())
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
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
