package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/testnet"
)

// startServing runs a long-lived command (view, sim, serve) in this process until the test ends,
// and returns its stderr, once pattern matched in it (its first submatch: an address).
func startServing(t *testing.T, environ map[string]string, pattern string, args ...string) (string, *testnet.Buffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var stderr testnet.Buffer
	done := make(chan struct{})
	code := 0
	go func() {
		defer close(done)
		code = run(ctx, args, env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: &stderr, getenv: func(k string) string { return environ[k] }})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	re := regexp.MustCompile(pattern)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if m := re.FindStringSubmatch(stderr.String()); m != nil {
			return m[1], &stderr
		}
		select {
		case <-done:
			t.Fatalf("rollout %s: exit %d before serving: %s", strings.Join(args, " "), code, stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("rollout %s: not serving: %s", strings.Join(args, " "), stderr.String())
		}
	}
}

// getHost makes a GET of url with the Host header host, and returns the status and body.
func getHost(t *testing.T, url, host string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// smallRun is a finished run of 2 extraction tasks, one arm.
func smallRun(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	r := runCLI(t, context.Background(), nil, "run", "--input", headLines(t, extractionData, 2), "--out", dir, "--model-url", "builtin:sim",
		"--server", "builtin:extraction", "--quiet")
	if r.code != 0 {
		t.Fatalf("run: exit %d: %s", r.code, r.stderr)
	}
	return dir
}

// rollout view on a non-loopback address keeps its Host allow-list (DNS rebinding): the
// address's own host and loopback's answer, --allow-host adds a name, any other Host is 421.
func TestViewHostAllowListOffLoopback(t *testing.T) {
	dir := smallRun(t)
	addr, _ := startServing(t, nil, `view on http://([^/ ]+)/`, "view", dir, "--addr", "0.0.0.0:0", "--allow-host", "view.example")
	_, port, _ := net.SplitHostPort(addr)
	url := "http://127.0.0.1:" + port + "/"
	for host, want := range map[string]int{
		"127.0.0.1:" + port:        200,
		"localhost:" + port:        200,
		"view.example:" + port:     200,
		"attacker.example:" + port: http.StatusMisdirectedRequest,
		"attacker.example":         http.StatusMisdirectedRequest,
	} {
		if code, _ := getHost(t, url, host); code != want {
			t.Errorf("Host %s: %d, want %d", host, code, want)
		}
	}
}

// ROLLOUT_DEBUG_ADDR serves Go's profiles to the loopback names only, and never the command
// line's credentials.
func TestDebugServerHostAndCommandLine(t *testing.T) {
	dir := smallRun(t)
	saved := os.Args
	os.Args = append(slices0(saved), "--model-url", "http://user:hunter2@model.example/v1?api_key=hunter3", "--api-key=hunter4", "--token", "hunter5")
	t.Cleanup(func() { os.Args = saved })
	addr, _ := startServing(t, map[string]string{"ROLLOUT_DEBUG_ADDR": "127.0.0.1:0"}, `profiles on http://([^/ ]+)/`, "view", dir, "--addr", "127.0.0.1:0")
	_, port, _ := net.SplitHostPort(addr)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline", "/debug/pprof/goroutine?debug=1"} {
		if code, _ := getHost(t, "http://"+addr+path, "attacker.example:"+port); code != http.StatusMisdirectedRequest {
			t.Errorf("GET %s with Host attacker.example: %d, want 421", path, code)
		}
		code, body := getHost(t, "http://"+addr+path, "127.0.0.1:"+port)
		if code != 200 {
			t.Errorf("GET %s: %d", path, code)
		}
		if strings.Contains(body, "hunter") {
			t.Errorf("GET %s shows a credential of the command line:\n%s", path, body)
		}
	}
	if _, body := getHost(t, "http://"+addr+"/debug/pprof/cmdline", "localhost:"+port); !strings.Contains(body, "model.example") {
		t.Errorf("cmdline shows no command line: %q", body)
	}
}

func slices0(s []string) []string { return append([]string(nil), s...) }
