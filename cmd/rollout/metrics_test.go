package main

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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

// A `rollout serve` server given by URL says it takes POST /end_session, and the run ends
// every session there without --end-sessions: the server's sessions ended are its sessions
// seeded, one per rollout, instead of each waiting out its TTL.
func TestServeSessionsEndedByURL(t *testing.T) {
	bin := buildRollout(t)
	_, u, errLine := startLines(t, bin, true, "serve", "extraction", "--addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0")
	metricsURL, ok := strings.CutPrefix(strings.TrimSpace(errLine), "rollout: metrics on ")
	if !ok {
		t.Fatalf("serve: %q: no metrics address", errLine)
	}
	dir := filepath.Join(t.TempDir(), "out")
	r := runCLI(t, context.Background(), nil, "run", "--input", headLines(t, extractionData, 5), "--model-url", "builtin:sim",
		"--server", strings.TrimSpace(u), "--num-repeats", "2", "--out", dir, "--quiet")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	count := func(name string) float64 { return serverCounter(t, metricsURL, name) }
	if seeded, ended := count("rollout_server_sessions_seeded_total"), count("rollout_server_sessions_ended_total"); seeded != 10 || ended != 10 {
		t.Errorf("the server seeded %v sessions and ended %v; want 10 and 10", seeded, ended)
	}
}

// serverCounter reads the counter name (without labels) from the Prometheus text a server's
// --metrics-addr serves at metricsURL; -1 when it has none.
func serverCounter(t *testing.T, metricsURL, name string) float64 {
	t.Helper()
	resp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if f := fams[name]; f != nil && len(f.Metric) == 1 {
		return f.Metric[0].Counter.GetValue()
	}
	return -1
}
