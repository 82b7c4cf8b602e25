package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/internal/testnet"
)

// rollout view serves the run on loopback, prints its URL, and stops on Ctrl-C (the context);
// rollout report --html writes one file. Bad arguments are one line naming what is wrong.
func TestView(t *testing.T) {
	input := headLines(t, extractionData, 3)
	dir := t.TempDir()
	r := runCLI(t, context.Background(), nil, "run", "--input", input, "--out", dir, "--arms", "single,multi", "--model-url", "builtin:sim",
		"--server", "builtin:extraction", "--quiet")
	if r.code != 0 {
		t.Fatalf("run: exit %d: %s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "trajectories.idx")); err != nil {
		t.Errorf("the run wrote no trajectory index: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var stderr testnet.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"view", dir, "--addr", "127.0.0.1:0"}, env{stdin: strings.NewReader(""), stdout: pw, stderr: &stderr, getenv: func(string) string { return "" }})
		pw.Close()
	}()
	url, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil || !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("first line %q (%v), stderr %s", url, err, stderr.String())
	}
	go io.Copy(io.Discard, pr)
	url = strings.TrimSpace(url)
	for path, want := range map[string]string{"": "Mean reward with its 95% CI", "rollouts?arm=multi": "<b id=\"total\">3</b> rollouts",
		"trajectory?run=0&task=0&repeat=0&arm=multi": "Verify:", "compare": "Compare: multi vs single"} {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), want) {
			t.Errorf("GET /%s: %d, want a page with %q", path, resp.StatusCode, want)
		}
	}
	// Another Host name than loopback's is refused.
	req, _ := http.NewRequest("GET", url, nil)
	req.Host = "attacker.example"
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusMisdirectedRequest {
		t.Errorf("Host attacker.example: %v %v", resp.StatusCode, err)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("view: exit %d after Ctrl-C: %s", code, stderr.String())
	}

	html := filepath.Join(t.TempDir(), "report.html")
	r = runCLI(t, context.Background(), nil, "report", dir, "--html", html, "--html-per-arm", "1")
	if r.code != 0 || r.stderr != "rollout: wrote "+html+"\n" {
		t.Fatalf("report --html: exit %d: %s", r.code, r.stderr)
	}
	b, err := os.ReadFile(html)
	if err != nil || !strings.Contains(string(b), `<svg id="ci-arms"`) || strings.Count(string(b), `<article class="transcript"`) < 2 {
		t.Errorf("report.html: %v, %d bytes", err, len(b))
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"view"}, "rollout: view: which run directory? rollout view DIR\n"},
		{[]string{"view", filepath.Join(dir, "none")}, "rollout: view: stat " + filepath.Join(dir, "none") + ": no such file or directory\n"},
		{[]string{"view", input}, "rollout: view: " + input + ": not a directory (rollout view reads run directories)\n"},
		{[]string{"view", t.TempDir()}, "not a run's output directory\n"},
		{[]string{"view", dir, "--addr", "127.0.0.1:http-alt-nope"}, "rollout: view: listen tcp"},
		{[]string{"report", dir, "--html", filepath.Join(t.TempDir(), "no", "such", "dir", "r.html")}, "rollout: report: --html: stat "},
		{[]string{"report", dir, "--html", filepath.Join(dir, "r.html")}, "rollout: report: --html " + filepath.Join(dir, "r.html") + " is inside the run directory " + dir},
	} {
		r := runCLI(t, context.Background(), nil, tt.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr %q, want 2 and %q", tt.args, r.code, r.stderr, tt.want)
		}
	}
}
