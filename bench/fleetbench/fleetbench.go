// Package fleetbench measures what routing and concurrency do to a fleet of simulated inference
// servers (pkg/sim/serving): one case is a whole batch run in this process, with the built-in
// extraction resource server and N serving-simulator replicas on loopback ports, through a
// pkg/fleet pool. The figures are of a model of a server, not of a server.
package fleetbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/fleet"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/runner"
	"github.com/rollout-dev/rollout/pkg/servers"
	"github.com/rollout-dev/rollout/pkg/sim"
	"github.com/rollout-dev/rollout/pkg/sim/serving"
	"github.com/rollout-dev/rollout/pkg/toolclient"
)

// Case is one run of the benchmark.
type Case struct {
	Tasks       string // the extraction task file
	Limit       int    // tasks (0: all)
	Repeats     int
	Replicas    int
	Route       fleet.Route
	Concurrency int  // rollouts in flight; with Auto, the most
	Auto        bool // adaptive concurrency per endpoint
	Serving     serving.Config
	// Every, when set, samples the endpoints' limits and requests in flight at this interval
	// (Result.Trace).
	Every time.Duration
}

// Sample is the pool's state at one moment of a case.
type Sample struct {
	At       time.Duration // since the start
	Done     int64         // rollouts ended
	Limits   []float64     // per endpoint (0: no limit)
	InFlight []int         // requests per endpoint
}

// Result is what one case measured.
type Result struct {
	Case
	Rollouts, Failed    int
	Elapsed             time.Duration
	RolloutsPerSec      float64
	HitRate             float64 // prefix-cache hit rate over the replicas
	PrefilledPerRollout float64 // prompt tokens prefilled per rollout
	Stay                float64 // share of model calls after a rollout's first sent where its previous one went (Stay)
	P50, P99            float64 // rollout latency, ms
	RoundP99            float64 // model-call latency p99, ms (the slowest endpoint's)
	Limits              []float64
	Rejected            int64 // 429s the replicas answered
	Trace               []Sample
}

// records keeps the records of a run (the runner's one writer goroutine calls Write).
type records struct {
	recs      []record.Record
	endpoints [][]string // each rollout's model calls' endpoints
	done      atomic.Int64
}

func (c *records) Write(r *record.Result) error {
	c.recs = append(c.recs, r.Record)
	var tr struct {
		Rounds []struct {
			Endpoint string `json:"endpoint"`
		} `json:"rounds"`
	}
	if len(r.Trajectory) > 0 {
		if err := json.Unmarshal(r.Trajectory, &tr); err != nil {
			return fmt.Errorf("trajectory of task %d: %w", r.Record.TaskIndex, err)
		}
	}
	eps := make([]string, len(tr.Rounds))
	for i, rd := range tr.Rounds {
		eps[i] = rd.Endpoint
	}
	c.endpoints = append(c.endpoints, eps)
	c.done.Add(1)
	return nil
}
func (c *records) Close() error { return nil }

// Run runs one case.
func Run(ctx context.Context, c Case) (Result, error) {
	res := Result{Case: c}
	plans, err := sim.LoadTasks(c.Tasks)
	if err != nil {
		return res, err
	}
	simulator, err := sim.New(plans, sim.Options{})
	if err != nil {
		return res, err
	}
	fl, err := serving.NewFleet(c.Replicas, simulator, c.Serving)
	if err != nil {
		return res, err
	}
	defer fl.Close()
	var eps []fleet.Endpoint
	for i, r := range fl.Replicas {
		srv := httptest.NewServer(r)
		defer srv.Close()
		eps = append(eps, fleet.Endpoint{Name: fmt.Sprintf("sim-%d", i), URL: srv.URL + "/v1"})
	}
	extraction, err := servers.New("extraction", servers.Options{})
	if err != nil {
		return res, err
	}
	rs := httptest.NewServer(extraction)
	defer rs.Close()
	transport := runner.NewTransport(c.Concurrency)
	defer transport.CloseIdleConnections()
	opts := fleet.Options{Route: c.Route, Transport: transport}
	if c.Auto {
		opts.Adaptive = &fleet.Adaptive{Max: c.Concurrency}
	}
	pool, err := fleet.New(eps, opts)
	if err != nil {
		return res, err
	}
	server, err := toolclient.New("extraction", rs.URL, transport)
	if err != nil {
		return res, err
	}
	doer := &retry.Doer{Client: &http.Client{Transport: pool}, Policy: retry.DefaultPolicy}
	model := pool.Model(agent.NewOpenAIModel(fleet.BaseURL, "", doer))
	out := &records{}
	ro := runner.Options{
		Input: c.Tasks, Limit: c.Limit, Repeats: c.Repeats, Concurrency: c.Concurrency,
		Servers: runner.Servers{Default: server},
		Agent:   agent.Config{Model: model, ModelName: sim.ModelID},
	}
	if c.Auto {
		ro.Window = pool.Window(c.Concurrency)
	}
	start := time.Now()
	stop := make(chan struct{})
	traced := make(chan []Sample, 1)
	go func() { traced <- trace(pool, out, start, c.Every, stop) }()
	_, err = runner.Run(ctx, ro, []runner.Output{out})
	res.Elapsed = time.Since(start)
	close(stop)
	res.Trace = <-traced
	if err != nil {
		return res, err
	}
	lat := make([]float64, 0, len(out.recs))
	for _, r := range out.recs {
		res.Rollouts++
		if r.FailureClass != "" {
			res.Failed++
		}
		lat = append(lat, r.LatencyMs)
	}
	res.Stay = Stay(out.endpoints)
	slices.Sort(lat)
	res.P50, res.P99 = quantile(lat, 0.5), quantile(lat, 0.99)
	res.RolloutsPerSec = float64(res.Rollouts) / res.Elapsed.Seconds()
	var prefilled, cached int64
	for _, s := range fl.Stats() {
		prefilled += s.PrefilledTokens
		cached += s.CachedTokens
		res.Rejected += s.Rejected
	}
	if prefilled+cached > 0 {
		res.HitRate = float64(cached) / float64(prefilled+cached)
	}
	if res.Rollouts > 0 {
		res.PrefilledPerRollout = float64(prefilled) / float64(res.Rollouts)
	}
	for _, s := range pool.Stats() {
		res.RoundP99 = max(res.RoundP99, s.LatencyP99Ms)
		res.Limits = append(res.Limits, s.Limit)
	}
	return res, nil
}

// Stay is the share of model calls, after each rollout's first, that went to the endpoint of the
// rollout's previous call; endpoints holds each rollout's calls' endpoints in order. On a
// server whose cache is per slot, a call elsewhere finds at most the prefix all tasks share.
func Stay(endpoints [][]string) float64 {
	stayed, calls := 0, 0
	for _, eps := range endpoints {
		for i := 1; i < len(eps); i++ {
			calls++
			if eps[i] == eps[i-1] {
				stayed++
			}
		}
	}
	if calls == 0 {
		return 0
	}
	return float64(stayed) / float64(calls)
}

// trace samples the pool every interval until stop is closed (none when every is 0).
func trace(pool *fleet.Pool, out *records, start time.Time, every time.Duration, stop <-chan struct{}) []Sample {
	if every <= 0 {
		return nil
	}
	var samples []Sample
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return samples
		case <-tick.C:
		}
		s := Sample{At: time.Since(start), Done: out.done.Load()}
		for _, e := range pool.Stats() {
			s.Limits = append(s.Limits, e.Limit)
			s.InFlight = append(s.InFlight, e.InFlight)
		}
		samples = append(samples, s)
	}
}

// WriteTrace writes a case's samples as lines: time, rollouts ended, and per endpoint its
// requests in flight / its limit.
func WriteTrace(w io.Writer, r Result) error {
	for _, s := range r.Trace {
		var eps []string
		for i := range s.Limits {
			eps = append(eps, fmt.Sprintf("%d/%.0f", s.InFlight[i], s.Limits[i]))
		}
		if _, err := fmt.Fprintf(w, "%6.2fs %4d done  %s\n", s.At.Seconds(), s.Done, strings.Join(eps, " ")); err != nil {
			return err
		}
	}
	return nil
}

// quantile of sorted values (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// WriteMarkdown writes results as a Markdown table.
func WriteMarkdown(w io.Writer, results []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| route\t concurrency\t rollouts/s\t prefix-cache hit rate\t prefilled tokens / rollout\t rollout p50 ms\t rollout p99 ms\t round p99 ms\t 429s\t failed\t final limits\t")
	fmt.Fprintln(tw, "| ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t ---\t")
	for _, r := range results {
		conc := fmt.Sprint(r.Concurrency)
		limits := "-"
		if r.Auto {
			conc = fmt.Sprintf("auto:%d", r.Concurrency)
			var ls []string
			for _, l := range r.Limits {
				ls = append(ls, fmt.Sprintf("%.0f", l))
			}
			limits = strings.Join(ls, " ")
		}
		fmt.Fprintf(tw, "| %s\t %s\t %.1f\t %.3f\t %.0f\t %.0f\t %.0f\t %.0f\t %d\t %d\t %s\t\n", r.Route, conc, r.RolloutsPerSec, r.HitRate, r.PrefilledPerRollout, r.P50, r.P99, r.RoundP99, r.Rejected, r.Failed, limits)
	}
	return tw.Flush()
}

// Prediction is the mean, over runs of one case, of what the simulated servers counted.
type Prediction struct {
	HitRate, Stay float64 // means
	Min, Max      float64 // of the hit rate
	Runs          int
}

// Predict runs c runs times and returns the mean hit rate and stay: a simulated run's counts
// depend on the timing of its requests (which slot and which server is free), and the
// simulator's clock runs on a shared machine.
func Predict(ctx context.Context, c Case, runs int) (Prediction, error) {
	p := Prediction{Runs: runs, Min: 1}
	for range runs {
		res, err := Run(ctx, c)
		if err != nil {
			return p, err
		}
		p.HitRate += res.HitRate / float64(runs)
		p.Stay += res.Stay / float64(runs)
		p.Min, p.Max = min(p.Min, res.HitRate), max(p.Max, res.HitRate)
	}
	return p, nil
}
