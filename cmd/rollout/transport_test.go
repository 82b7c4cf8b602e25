package main

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// ROLLOUT_HTTP_TRANSPORT=net/http sends the model calls through net/http's Transport (which
// asks for gzip; the runner's own transport does not), the run's records are the same either
// way, and any other value is a usage error naming the variable.
func TestHTTPTransportChoice(t *testing.T) {
	rows := weatherRows(t, 4, "")
	var gzip, plain atomic.Int64
	m := newFakeModel(t, weatherModel)
	inner := m.Config.Handler
	m.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			gzip.Add(1)
		} else {
			plain.Add(1)
		}
		inner.ServeHTTP(w, r)
	})
	rewards := map[string][]float64{}
	for _, v := range []string{"", "net/http"} {
		gzip.Store(0)
		plain.Store(0)
		dir := t.TempDir()
		r := runCLI(t, context.Background(), map[string]string{"ROLLOUT_HTTP_TRANSPORT": v}, "run", "--input", rows, "--out", dir,
			"--model-url", m.URL+"/v1", "--model", "m", "--server", "builtin:example_single_tool_call", "--quiet")
		if r.code != 0 {
			t.Fatalf("ROLLOUT_HTTP_TRANSPORT=%q: exit %d %s", v, r.code, r.stderr)
		}
		for _, rec := range readRecords(t, dir) {
			rewards[v] = append(rewards[v], rec.Reward)
		}
		wantGzip := v == "net/http"
		if got := gzip.Load(); (got > 0) != wantGzip || (plain.Load() > 0) == wantGzip {
			t.Errorf("ROLLOUT_HTTP_TRANSPORT=%q: %d requests asked for gzip, %d did not", v, got, plain.Load())
		}
	}
	if !slices.Equal(rewards[""], []float64{1, 1, 1, 1}) || !slices.Equal(rewards["net/http"], rewards[""]) {
		t.Errorf("rewards: own transport %v, net/http %v; want 4 of 1 each way", rewards[""], rewards["net/http"])
	}
	r := runCLI(t, context.Background(), map[string]string{"ROLLOUT_HTTP_TRANSPORT": "fasthttp"}, "run", "--input", rows, "--out", t.TempDir(),
		"--model-url", m.URL+"/v1", "--model", "m", "--server", "builtin:example_single_tool_call", "--quiet")
	if r.code != exitUsage || !strings.Contains(r.stderr, `ROLLOUT_HTTP_TRANSPORT="fasthttp"`) {
		t.Errorf("a bad value: exit %d, stderr %q", r.code, r.stderr)
	}
}
