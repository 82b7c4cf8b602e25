package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// --metrics-addr: a run serves its metrics (and says where); an address it cannot listen on
// is a usage error before anything runs.
func TestRunMetricsAddr(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	args := []string{"run", "--input", examples, "--out", out, "--model-url", "replay:" + exampleRollouts, "--quiet", "--limit", "2"}
	args = append(args, builtinServers...)
	r := runCLI(t, context.Background(), nil, append(args, "--metrics-addr", "127.0.0.1:0")...)
	if r.code != 0 || !strings.Contains(r.stderr, "rollout: metrics on http://127.0.0.1:") || !strings.Contains(r.stderr, "/metrics") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	r = runCLI(t, context.Background(), nil, append(args, "--overwrite", "--metrics-addr", "256.0.0.1:x")...)
	if r.code != 2 || !strings.Contains(r.stderr, "--metrics-addr 256.0.0.1:x") {
		t.Errorf("a bad --metrics-addr: exit %d: %s", r.code, r.stderr)
	}
	r = runCLI(t, context.Background(), nil, "serve", "counter", "--metrics-addr", "256.0.0.1:x")
	if r.code != 2 || !strings.Contains(r.stderr, "serve: --metrics-addr 256.0.0.1:x") {
		t.Errorf("serve with a bad --metrics-addr: exit %d: %s", r.code, r.stderr)
	}
}
