// Package metrics is rollout's live Prometheus metrics, with the official Go client
// (prometheus/client_golang): a run's (Run: a runner.Output that counts every record, and an
// http.RoundTripper that times the model and tool calls) and a resource server's (Server: an
// http.Handler around it). Serve serves a registry's metrics over HTTP at /metrics, in the
// text format Prometheus scrapes.
//
// Nothing here is inside the agent loop: a Run sees finished records (runner.Output), the
// start of each rollout (runner.Options.OnStart) and the HTTP requests of the run's
// transport.
package metrics

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/rollout-dev/rollout/internal/localserve"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/retry"
)

// Path is where Serve answers with the metrics.
const Path = "/metrics"

// callBuckets are the latency buckets of model and tool calls, in seconds: 5 ms to about 80 s.
var callBuckets = prometheus.ExponentialBuckets(0.005, 2, 15)

// Run is the metrics of one rollout run. Write and Close make it a runner.Output (Write is
// called from the runner's one writer goroutine); Started is safe for concurrent use, and so
// is the RoundTripper of Transport.
type Run struct {
	reg       *prometheus.Registry
	rollouts  *prometheus.CounterVec
	failures  *prometheus.CounterVec
	tokens    *prometheus.CounterVec
	inFlight  prometheus.Gauge
	reward    prometheus.Gauge
	scored    prometheus.Counter
	calls     *prometheus.HistogramVec
	info      *prometheus.GaugeVec
	planned   prometheus.Gauge
	remaining prometheus.Gauge

	mu   sync.Mutex
	n    int
	mean float64
	left int // rollouts of the plan without a record; -1: not known
}

// NewRun registers a run's metrics in a registry of its own (with the Go runtime's and the
// process's collectors): Registry gives it to Serve.
func NewRun() *Run {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	r := &Run{
		reg: reg,
		rollouts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rollout_rollouts_total",
			Help: "Rollouts done (one record each), by arm and termination."}, []string{"arm", "termination"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rollout_failures_total",
			Help: "Rollouts that failed, by failure class (rate_limited, model_unavailable, timeout, ...)."}, []string{"class"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rollout_tokens_total",
			Help: "Tokens the model endpoint reported, by kind (prompt, completion)."}, []string{"kind"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rollout_rollouts_in_flight",
			Help: "Rollouts started and not yet recorded."}),
		reward: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rollout_mean_reward",
			Help: "Running mean reward of the scored rollouts (a reward and no failure class) recorded so far."}),
		scored: prometheus.NewCounter(prometheus.CounterOpts{Name: "rollout_scored_total",
			Help: "Rollouts with a reward and no failure class."}),
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rollout_call_duration_seconds",
			Help:    "Duration of each HTTP attempt of a model call (kind model) or a resource-server call (kind tool), by endpoint (host:port), until its answer's headers.",
			Buckets: callBuckets}, []string{"kind", "endpoint"}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rollout_info",
			Help: "1, with the run's config hash (manifest.json's config_sha256) and shard (I/N; empty for a whole run)."}, []string{"config_hash", "shard"}),
		planned: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rollout_rollouts_planned",
			Help: "Rollouts the run (this shard) plans in all, those recorded before a resume included; -1 when the input cannot be counted (stdin)."}),
		remaining: prometheus.NewGauge(prometheus.GaugeOpts{Name: "rollout_rollouts_remaining",
			Help: "Rollouts of the plan without a record yet: 0 when the run (this shard) is done; with the shard label of rollout_info, the straggler shards."}),
	}
	r.SetPlan(-1, 0) // until the run knows its plan
	reg.MustRegister(r.planned, r.remaining)
	reg.MustRegister(r.rollouts, r.failures, r.tokens, r.inFlight, r.reward, r.scored, r.calls, r.info,
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "rollout_retries_total",
			Help: "HTTP requests sent again after a 429, a 5xx or a transport error (model and resource-server calls)."},
			func() float64 { return float64(retry.Retries()) }))
	return r
}

// Registry is the run's registry.
func (r *Run) Registry() *prometheus.Registry { return r.reg }

// SetInfo sets rollout_info's labels: the run's config hash and its shard ("I/N", or "").
func (r *Run) SetInfo(configHash, shard string) {
	r.info.Reset()
	r.info.WithLabelValues(configHash, shard).Set(1)
}

// SetPlan sets rollout_rollouts_planned to planned (-1: not known) and
// rollout_rollouts_remaining to planned less done, the rollouts that already have a record;
// each record written then takes one off the remaining.
func (r *Run) SetPlan(planned, done int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.planned.Set(float64(planned))
	r.left = -1
	if planned >= 0 {
		r.left = max(planned-done, 0)
	}
	r.remaining.Set(float64(r.left))
}

// Started counts a rollout that started: it is in flight until its record is written.
func (r *Run) Started() { r.inFlight.Inc() }

// Write counts one rollout's record.
func (r *Run) Write(res *record.Result) error {
	rec := &res.Record
	r.inFlight.Dec()
	r.mu.Lock()
	if r.left > 0 {
		r.left--
		r.remaining.Set(float64(r.left))
	}
	r.mu.Unlock()
	term := rec.Termination
	if term == "" {
		term = "none" // a bad_task record: the rollout never ran
	}
	r.rollouts.WithLabelValues(rec.Arm, term).Inc()
	if rec.FailureClass != record.FailNone {
		r.failures.WithLabelValues(string(rec.FailureClass)).Inc()
	}
	// A counter panics when it would go down: a record's counts are added only when they are
	// counts (the model client refuses usage out of range; a record is input all the same).
	addCount(r.tokens.WithLabelValues("prompt"), rec.PromptTokens)
	addCount(r.tokens.WithLabelValues("completion"), rec.CompletionTokens)
	if rec.HasReward && rec.FailureClass == record.FailNone {
		r.mu.Lock()
		r.n++
		n := float64(r.n)
		r.mean += rec.Reward/n - r.mean/n
		r.reward.Set(r.mean)
		r.mu.Unlock()
		r.scored.Inc()
	}
	return nil
}

// addCount adds n to c when n > 0 (a counter never goes down).
func addCount(c prometheus.Counter, n int64) {
	if n > 0 {
		c.Add(float64(n))
	}
}

// Close does nothing: the metrics stay served until Serve's stop.
func (r *Run) Close() error { return nil }

// Transport returns next timing each request in rollout_call_duration_seconds: kind model
// for a Chat Completions (or models) request, tool for any other (a resource server's).
func (r *Run) Transport(next http.RoundTripper) http.RoundTripper {
	return roundTripper{next: next, calls: r.calls}
}

type roundTripper struct {
	next  http.RoundTripper
	calls *prometheus.HistogramVec
}

func (t roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	start := time.Now()
	resp, err := t.next.RoundTrip(req)
	kind := "tool"
	if p := req.URL.Path; strings.HasSuffix(p, "/chat/completions") || strings.HasSuffix(p, "/models") {
		kind = "model"
	}
	t.calls.WithLabelValues(kind, req.URL.Host).Observe(time.Since(start).Seconds())
	return resp, err
}

// CloseIdleConnections closes the idle connections of the transport underneath.
func (t roundTripper) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// MaxConns bounds the connections of the metrics server (scrapers are few).
const MaxConns = 64

// Serve serves reg's metrics at http://ADDR/metrics (and a pointer to it at /) until stop;
// addr is the address it listens on (a port 0 chosen).
func Serve(addr string, reg *prometheus.Registry) (listening string, stop func(), err error) {
	ln, err := localserve.Listen(addr, MaxConns)
	if err != nil {
		return "", nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(Path, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/", func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/" {
			http.NotFound(w, req)
			return
		}
		w.Write([]byte("rollout metrics: " + Path + "\n"))
	})
	srv := localserve.Server(mux)
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ln) // ends with http.ErrServerClosed at stop
	}()
	return ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if srv.Shutdown(ctx) != nil {
			srv.Close()
		}
		<-done
	}, nil
}
