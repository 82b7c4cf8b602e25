package main

import (
	"flag"
	"fmt"
	"net/http"

	"github.com/rollout-dev/rollout/pkg/metrics"
	"github.com/rollout-dev/rollout/pkg/rundir"
	"github.com/rollout-dev/rollout/pkg/runner"
)

// --metrics-addr of rollout run and rollout serve: Prometheus metrics at http://ADDR/metrics.

const metricsAddrUsage = "serve Prometheus metrics at http://`ADDR`/metrics (e.g. 0.0.0.0:9090)"

// runMetrics is a run's metrics and their server; a nil *runMetrics does nothing.
type runMetrics struct {
	m    *metrics.Run
	stop func()
}

// startRunMetrics serves a run's metrics on addr (nil, nil without one).
func startRunMetrics(addr string, e env) (*runMetrics, error) {
	if addr == "" {
		return nil, nil
	}
	m := metrics.NewRun()
	at, stop, err := metrics.Serve(addr, m.Registry())
	if err != nil {
		return nil, badUsage("--metrics-addr %s: %v", addr, err)
	}
	fmt.Fprintf(e.stderr, "rollout: metrics on http://%s%s\n", at, metrics.Path)
	return &runMetrics{m: m, stop: stop}, nil
}

func (r *runMetrics) close() {
	if r != nil {
		r.stop()
	}
}

// transport is t, timed into the metrics.
func (r *runMetrics) transport(t http.RoundTripper) http.RoundTripper {
	if r == nil {
		return t
	}
	return r.m.Transport(t)
}

// attach makes the metrics observe the run in dir (whose manifest gives rollout_info's config
// hash): each rollout's start and record. It returns outputs with the metrics' added.
func (r *runMetrics) attach(opts *runner.Options, outputs []runner.Output, dir string, shard runner.Shard) []runner.Output {
	if r == nil {
		return outputs
	}
	hash := ""
	if mf, err := rundir.ReadManifest(dir); err == nil {
		hash = mf.ConfigSHA256
	}
	r.m.SetInfo(hash, shard.String())
	r.m.SetPlan(runner.Planned(opts), opts.Done.Len())
	opts.OnStart = r.m.Started
	return append(outputs, r.m)
}

// serveMetrics wraps a resource server's handler h with its metrics, served on addr (h as it
// is without one); stop ends the metrics server.
func serveMetrics(addr, name string, h http.Handler, e env) (http.Handler, func(), error) {
	if addr == "" {
		return h, func() {}, nil
	}
	m := metrics.NewServer(name)
	at, stop, err := metrics.Serve(addr, m.Registry())
	if err != nil {
		return nil, nil, badUsage("serve: --metrics-addr %s: %v", addr, err)
	}
	fmt.Fprintf(e.stderr, "rollout: metrics on http://%s%s\n", at, metrics.Path)
	return m.Handler(h), stop, nil
}

// metricsFlag registers --metrics-addr.
func metricsFlag(fs *flag.FlagSet, addr *string) {
	fs.StringVar(addr, "metrics-addr", "", metricsAddrUsage)
}
