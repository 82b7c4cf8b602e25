package metrics_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/chaos"
	"github.com/rollout-dev/rollout/pkg/metrics"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/runner"
	"github.com/rollout-dev/rollout/pkg/servers"
	"github.com/rollout-dev/rollout/pkg/sim"
	"github.com/rollout-dev/rollout/pkg/toolclient"
)

// scrape gets http://addr/metrics over loopback and parses it with Prometheus' own text
// parser (prometheus/common/expfmt).
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + metrics.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %s, %s", resp.Status, resp.Header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("the metrics do not parse: %v", err)
	}
	return fams
}

// value is the sum of family name's samples whose labels include want (counters, gauges,
// and histograms' counts); found says whether any sample matched.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (v float64, found bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		labels := map[string]string{}
		for _, l := range m.Label {
			labels[l.GetName()] = l.GetValue()
		}
		for k, w := range want {
			if labels[k] != w {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			v += m.Counter.GetValue()
		case m.Gauge != nil:
			v += m.Gauge.GetValue()
		case m.Histogram != nil:
			v += float64(m.Histogram.GetSampleCount())
		}
	}
	return v, found
}

// collect keeps the records.
type collect struct{ recs []record.Record }

func (c *collect) Write(r *record.Result) error { c.recs = append(c.recs, r.Record); return nil }
func (c *collect) Close() error                 { return nil }

// A real run (the built-in counter server and the simulator, with 429s and 500s, on
// loopback) observed by a metrics.Run: the scraped metrics say what the records say.
func TestRunMetricsScraped(t *testing.T) {
	dir := t.TempDir()
	tasks := filepath.Join(dir, "tasks.jsonl")
	var rows strings.Builder
	for i := range 6 {
		n := i%3 + 1
		calls := strings.TrimSuffix(strings.Repeat(`[{"name":"increment_counter","arguments":{"count":1}}],`, n), ",")
		fmt.Fprintf(&rows, `{"id":"t%d","responses_create_params":{"input":[{"role":"user","content":"Increment the counter %d times (%d)."}],`+
			`"tools":[{"type":"function","name":"increment_counter","parameters":{"type":"object","properties":{"count":{"type":"integer"}}}}]},`+
			`"initial_count":0,"expected_count":%d,"reference_plan":{"rounds":[%s],"final":"done"}}`+"\n", i, n, i, n+i%2, calls)
	}
	if err := os.WriteFile(tasks, []byte(rows.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	counter, err := servers.New("counter", servers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	resourceServer := httptest.NewServer(counter)
	defer resourceServer.Close()
	plans, err := sim.LoadTasks(tasks)
	if err != nil {
		t.Fatal(err)
	}
	simulator, err := sim.New(plans, sim.Options{Seed: 3, HTTP429: 0.2, HTTP500: 0.2, RetryAfter: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	model := httptest.NewServer(simulator)
	defer model.Close()

	m := metrics.NewRun()
	addr, stop, err := metrics.Serve("127.0.0.1:0", m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	transport := m.Transport(runner.NewTransport(4))
	server, err := toolclient.New("counter", resourceServer.URL, transport)
	if err != nil {
		t.Fatal(err)
	}
	retriesBefore := retry.Retries()
	out := &collect{}
	m.SetInfo("abc123", "1/4")
	o := runner.Options{Input: tasks, Repeats: 3, Concurrency: 4, RetryBudget: 20, Servers: runner.Servers{Default: server}, OnStart: m.Started,
		Agent: agent.Config{Model: agent.NewOpenAIModel(model.URL+"/v1", "", &retry.Doer{Client: &http.Client{Transport: transport}, Policy: retry.Policy{MaxAttempts: 8}}), ModelName: "rollout-sim"},
		Arms:  []runner.Arm{{Name: "single", Policy: agent.PolicySingle}, {Name: "multi", Policy: agent.PolicyMulti}}}
	if _, err := runner.Run(context.Background(), o, []runner.Output{out, m}); err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, addr)

	// The records, counted apart.
	byArmTerm := map[[2]string]int{}
	failures := map[string]int{}
	var prompt, completion int64
	var rounds, scored int
	var sum float64
	for _, r := range out.recs {
		byArmTerm[[2]string{r.Arm, r.Termination}]++
		if r.FailureClass != "" {
			failures[string(r.FailureClass)]++
		} else if r.HasReward {
			scored++
			sum += r.Reward
		}
		prompt += r.PromptTokens
		completion += r.CompletionTokens
		rounds += int(r.Rounds)
	}
	if len(out.recs) != 36 {
		t.Fatalf("%d records, want 36", len(out.recs))
	}
	total := 0.0
	for k, n := range byArmTerm {
		v, _ := value(fams, "rollout_rollouts_total", map[string]string{"arm": k[0], "termination": k[1]})
		if v != float64(n) {
			t.Errorf("rollout_rollouts_total{arm=%q,termination=%q} = %v, want %d", k[0], k[1], v, n)
		}
		total += v
	}
	if all, _ := value(fams, "rollout_rollouts_total", nil); all != total || all != 36 {
		t.Errorf("rollout_rollouts_total sums to %v, want 36", all)
	}
	for class, n := range failures {
		if v, _ := value(fams, "rollout_failures_total", map[string]string{"class": class}); v != float64(n) {
			t.Errorf("rollout_failures_total{class=%q} = %v, want %d", class, v, n)
		}
	}
	if v, _ := value(fams, "rollout_tokens_total", map[string]string{"kind": "prompt"}); v != float64(prompt) || prompt == 0 {
		t.Errorf("prompt tokens %v, want %d", v, prompt)
	}
	if v, _ := value(fams, "rollout_tokens_total", map[string]string{"kind": "completion"}); v != float64(completion) || completion == 0 {
		t.Errorf("completion tokens %v, want %d", v, completion)
	}
	if v, found := value(fams, "rollout_rollouts_in_flight", nil); !found || v != 0 {
		t.Errorf("in flight after the run: %v (found %v), want 0", v, found)
	}
	if v, _ := value(fams, "rollout_scored_total", nil); v != float64(scored) {
		t.Errorf("scored %v, want %d", v, scored)
	}
	if v, _ := value(fams, "rollout_mean_reward", nil); scored > 0 && (v-sum/float64(scored) > 1e-12 || sum/float64(scored)-v > 1e-12) {
		t.Errorf("mean reward %v, want %v", v, sum/float64(scored))
	}
	// Every model round is at least one model attempt; the 429s and 500s make more, each a retry.
	modelHost := strings.TrimPrefix(model.URL, "http://")
	modelCalls, _ := value(fams, "rollout_call_duration_seconds", map[string]string{"kind": "model", "endpoint": modelHost})
	toolCalls, _ := value(fams, "rollout_call_duration_seconds", map[string]string{"kind": "tool", "endpoint": strings.TrimPrefix(resourceServer.URL, "http://")})
	retries, _ := value(fams, "rollout_retries_total", nil)
	if modelCalls < float64(rounds) || toolCalls < 36*2 {
		t.Errorf("model call attempts %v for %d rounds; tool calls %v for 36 rollouts", modelCalls, rounds, toolCalls)
	}
	if retries <= float64(retriesBefore) || modelCalls-float64(rounds) > retries-float64(retriesBefore) {
		t.Errorf("retries %v (before %d): the model's %v attempts beyond its %d rounds are retries", retries, retriesBefore, modelCalls, rounds)
	}
	if v, found := value(fams, "rollout_info", map[string]string{"config_hash": "abc123", "shard": "1/4"}); !found || v != 1 {
		t.Errorf("rollout_info: %v, %v", v, found)
	}
}

// rollout serve's metrics: requests by endpoint and code, sessions seeded and ended, and
// errors (a 500, and a connection reset by the chaos handler, which hijacks it).
func TestServerMetricsScraped(t *testing.T) {
	counter, err := servers.New("counter", servers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := chaos.New(counter, chaos.Options{Seed: 1, ResetRate: 1, Endpoints: []string{"reset_me"}})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.NewServer("counter")
	srv := httptest.NewServer(m.Handler(ch))
	defer srv.Close()
	addr, stop, err := metrics.Serve("127.0.0.1:0", m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()

	client := toolclientSession(t, srv.URL)
	post := func(path, body string) int {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for range 3 {
		if c := post("/seed_session", `{"initial_count":0,"expected_count":1}`); c != 200 {
			t.Fatalf("seed_session: %d", c)
		}
		post("/increment_counter", `{"count":1}`)
	}
	post("/increment_counter", `{"count":"x"}`) // 422
	post("/end_session", `{}`)
	post("/reset_me", `{}`) // reset by chaos: no answer
	fams := scrape(t, addr)
	s := map[string]string{"server": "counter"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{"server": "counter"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"rollout_server_requests_total", with("endpoint", "seed_session", "code", "200"), 3},
		{"rollout_server_requests_total", with("endpoint", "tool", "code", "200"), 3},
		{"rollout_server_requests_total", with("endpoint", "tool", "code", "422"), 1},
		{"rollout_server_requests_total", with("endpoint", "end_session", "code", "200"), 1},
		{"rollout_server_requests_total", with("endpoint", "tool", "code", "none"), 1},
		{"rollout_server_requests_total", s, 9},
		{"rollout_server_request_duration_seconds", with("endpoint", "tool"), 5},
		{"rollout_server_sessions_seeded_total", s, 3},
		{"rollout_server_sessions_ended_total", s, 1},
		{"rollout_server_errors_total", with("endpoint", "tool"), 1},
	} {
		if v, _ := value(fams, tc.name, tc.labels); v != tc.want {
			t.Errorf("%s%v = %v, want %v", tc.name, tc.labels, v, tc.want)
		}
	}
}

// toolclientSession is an HTTP client with a cookie jar: one session, as a rollout has.
func toolclientSession(t *testing.T, _ string) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar}
}

// A record is input: token counts that are not counts (negative, from a journal written before
// the model client checked usage, or any other source) are not added, and never panic a
// counter.
func TestRunMetricsTakeAnyRecord(t *testing.T) {
	m := metrics.NewRun()
	for _, n := range []int64{-5000, 0, 7, -1 << 62, 1 << 62} {
		m.Started()
		if err := m.Write(&record.Result{Record: record.Record{Arm: "multi", Termination: "completed", PromptTokens: n, CompletionTokens: -n}}); err != nil {
			t.Fatal(err)
		}
	}
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "rollout_tokens_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			if v := s.GetCounter().GetValue(); v < 0 {
				t.Errorf("rollout_tokens_total %v = %g", s.GetLabel(), v)
			}
		}
	}
}

// rollout_rollouts_planned and rollout_rollouts_remaining: the plan (those recorded before a
// resume included) and what of it has no record yet, one less per record; -1 before the plan
// is known or when it cannot be (stdin).
func TestPlannedAndRemaining(t *testing.T) {
	r := metrics.NewRun()
	get := func(name string) float64 {
		fams, err := r.Registry().Gather()
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]*dto.MetricFamily{}
		for _, f := range fams {
			byName[f.GetName()] = f
		}
		v, found := value(byName, name, nil)
		if !found {
			t.Fatalf("no %s", name)
		}
		return v
	}
	if p, rem := get("rollout_rollouts_planned"), get("rollout_rollouts_remaining"); p != -1 || rem != -1 {
		t.Errorf("before the plan: planned %v remaining %v, want -1 and -1", p, rem)
	}
	r.SetPlan(10, 3) // a resume: 3 of 10 have a record
	for i := range 8 {
		r.Started()
		if err := r.Write(&record.Result{Record: record.Record{Arm: "multi", Termination: "completed"}}); err != nil {
			t.Fatal(err)
		}
		if want := float64(max(7-(i+1), 0)); get("rollout_rollouts_remaining") != want {
			t.Errorf("after %d records: remaining %v, want %v", i+1, get("rollout_rollouts_remaining"), want)
		}
	}
	if get("rollout_rollouts_planned") != 10 {
		t.Errorf("planned %v, want 10", get("rollout_rollouts_planned"))
	}
	r.SetPlan(-1, 0)
	r.Write(&record.Result{Record: record.Record{Arm: "multi", Termination: "completed"}})
	if get("rollout_rollouts_remaining") != -1 {
		t.Errorf("stdin: remaining %v, want -1", get("rollout_rollouts_remaining"))
	}
}
