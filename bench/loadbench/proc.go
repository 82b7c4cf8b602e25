package loadbench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Usage is what a process cost, from its rusage when it exited.
type Usage struct {
	User, System time.Duration
	MaxRSS       int64 // bytes
}

// CPU is user + system time.
func (u Usage) CPU() time.Duration { return u.User + u.System }

func usageOf(ps *os.ProcessState) Usage {
	ru, ok := ps.SysUsage().(*syscall.Rusage)
	if !ok || ru == nil {
		return Usage{}
	}
	return Usage{
		User:   time.Duration(ru.Utime.Nano()),
		System: time.Duration(ru.Stime.Nano()),
		MaxRSS: ru.Maxrss * 1024, // kilobytes on Linux
	}
}

// server is a `rollout sim` or `rollout serve` process: it prints its URL on stdout's first line.
type server struct {
	name   string
	cmd    *exec.Cmd
	URL    string
	stderr bytes.Buffer
	exited chan struct{}
}

// startServer starts bin with args and waits for the URL it prints.
func startServer(ctx context.Context, name, bin string, env []string, args ...string) (*server, error) {
	s := &server{name: name, exited: make(chan struct{})}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Env = env
	s.cmd.Stderr = &s.stderr
	out, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			urls <- strings.TrimSpace(sc.Text())
		}
		close(urls)
		io.Copy(io.Discard, out)
	}()
	go func() { s.cmd.Wait(); close(s.exited) }()
	select {
	case u, ok := <-urls:
		if !ok || u == "" {
			<-s.exited
			return nil, fmt.Errorf("%s exited before it listened: %s", name, strings.TrimSpace(s.stderr.String()))
		}
		s.URL = u
		return s, nil
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		return nil, fmt.Errorf("%s did not start within 30 s", name)
	case <-ctx.Done():
		s.cmd.Process.Kill()
		return nil, ctx.Err()
	}
}

// stop interrupts the server (it shuts down gracefully) and returns its usage.
func (s *server) stop() Usage {
	s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	return usageOf(s.cmd.ProcessState)
}

// simStats are the simulator's counters (GET /stats).
type simStats struct {
	Requests, Answers, FinalAnswers, ToolCalls int64
}

var statsClient = &http.Client{Timeout: 5 * time.Second}

func getSimStats(base string) (simStats, error) {
	var st simStats
	resp, err := statsClient.Get(strings.TrimSuffix(base, "/v1") + "/stats")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("simulator /stats: %s", resp.Status)
	}
	return st, json.NewDecoder(resp.Body).Decode(&st)
}

// rss reads a live process's resident set size (VmRSS) from /proc, in bytes.
func rss(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024, err
			}
		}
	}
	return 0, errors.New("no VmRSS in /proc/PID/status")
}
