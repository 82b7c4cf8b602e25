package fleet

import (
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/rollout-dev/rollout/internal/redact"
	"github.com/rollout-dev/rollout/pkg/record"
)

// EndpointStats are one endpoint's counters: plain values, a copy taken by Pool.Stats, in the
// shape of endpoints.json and of summary.json's per-endpoint table.
type EndpointStats struct {
	Name  string `json:"name"`
	URL   string `json:"url"` // redacted of credentials
	Model string `json:"model,omitempty"`
	// Calls counts the attempts sent there (retries included); Failures counts the failed ones
	// by failure class (rate_limited, model_unavailable, timeout, model_error, cancelled).
	Calls    int64            `json:"calls"`
	Failures map[string]int64 `json:"failures_by_class"`
	// LatencyP50Ms and LatencyP99Ms are over the answered attempts (within 5%: a histogram).
	LatencyP50Ms     float64 `json:"latency_p50_ms"`
	LatencyP99Ms     float64 `json:"latency_p99_ms"`
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	Ejections        int64   `json:"ejections"`
	// Ejected, InFlight and Limit are the state when the copy was taken (Limit 0: no limit).
	Ejected  bool    `json:"ejected"`
	InFlight int     `json:"in_flight"`
	Limit    float64 `json:"limit,omitempty"`
}

// Event is a change of an endpoint's health: "ejected", "probe failed", "restored".
type Event struct {
	At       time.Time `json:"at"`
	Endpoint string    `json:"endpoint"`
	What     string    `json:"what"`
	Detail   string    `json:"detail"`
}

// maxEvents bounds the events kept (the first ones, then the last ones).
const maxEvents = 200

// event records a health change; p.mu is held.
func (p *Pool) event(at time.Time, ep *endpoint, what, detail string) {
	ev := Event{At: at.UTC(), Endpoint: ep.Name, What: what, Detail: detail}
	if len(p.events) >= maxEvents {
		copy(p.events[maxEvents/2:], p.events[maxEvents/2+1:])
		p.events = p.events[:maxEvents-1]
	}
	p.events = append(p.events, ev)
}

// Events are the health changes so far, oldest first.
func (p *Pool) Events() []Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.events)
}

// Stats are the endpoints' counters now, in the order given to New.
func (p *Pool) Stats() []EndpointStats {
	out := make([]EndpointStats, len(p.eps))
	for i, ep := range p.eps {
		s := ep.stats.snapshot()
		s.Name, s.URL, s.Model = ep.Name, redact.URL(ep.URL), ep.Endpoint.Model
		s.Ejections = ep.stats.ejections.Load()
		out[i] = s
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, ep := range p.eps {
		out[i].Ejected, out[i].InFlight = ep.ejected, p.loads[i]
		if !math.IsInf(ep.gate.limit, 1) {
			out[i].Limit = math.Round(ep.gate.limit*10) / 10
		}
	}
	return out
}

// counters are an endpoint's running counts.
type counters struct {
	mu               sync.Mutex
	calls            int64
	failures         map[record.FailureClass]int64
	hist             [histBuckets]int64
	answered         int64
	prompt, complete int64
	ejections        atomic.Int64
}

// The latency histogram: 16 buckets per doubling from 0.1 ms, up to about 10^5 s.
const (
	histBuckets  = 16 * 30
	histPerOctav = 16
	histBase     = 1e-4 // seconds
)

func histBucket(d time.Duration) int {
	s := d.Seconds()
	if s <= histBase {
		return 0
	}
	b := int(math.Log2(s/histBase) * histPerOctav)
	return min(b, histBuckets-1)
}

func (c *counters) attempt(o outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if o.class != "" {
		if c.failures == nil {
			c.failures = map[record.FailureClass]int64{}
		}
		c.failures[o.class]++
	}
	if o.class == "" || o.drop || o.class == record.FailModelError {
		c.hist[histBucket(o.latency)]++
		c.answered++
	}
}

func (c *counters) tokens(prompt, completion int64) {
	c.mu.Lock()
	c.prompt += prompt
	c.complete += completion
	c.mu.Unlock()
}

func (c *counters) snapshot() EndpointStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := EndpointStats{Calls: c.calls, Failures: map[string]int64{}, PromptTokens: c.prompt, CompletionTokens: c.complete}
	for k, v := range c.failures {
		s.Failures[string(k)] = v
	}
	s.LatencyP50Ms = c.quantile(0.5)
	s.LatencyP99Ms = c.quantile(0.99)
	return s
}

// quantile is the q-quantile of the latencies in ms: the middle of its bucket (0: none).
func (c *counters) quantile(q float64) float64 {
	if c.answered == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(c.answered)))
	var seen int64
	for b, n := range c.hist {
		seen += n
		if seen >= rank {
			mid := histBase * math.Exp2((float64(b)+0.5)/histPerOctav)
			return math.Round(mid*1e4) / 10
		}
	}
	return 0
}

// WriteTable writes the per-endpoint table and the health events for people.
func WriteTable(w io.Writer, stats []EndpointStats, events []Event) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "endpoint\tcalls\tfailures\tp50 ms\tp99 ms\tprompt tokens\tcompletion tokens\tejections")
	for _, s := range stats {
		var fails []string
		for _, k := range slices.Sorted(maps.Keys(s.Failures)) {
			fails = append(fails, fmt.Sprintf("%s %d", k, s.Failures[k]))
		}
		f := "-"
		if len(fails) > 0 {
			f = strings.Join(fails, ", ")
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.1f\t%.1f\t%d\t%d\t%d\n", s.Name, s.Calls, f, s.LatencyP50Ms, s.LatencyP99Ms, s.PromptTokens, s.CompletionTokens, s.Ejections)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, e := range events {
		if _, err := fmt.Fprintf(w, "%s  %s %s: %s\n", e.At.Format("15:04:05.000"), e.Endpoint, e.What, e.Detail); err != nil {
			return err
		}
	}
	return nil
}

// home is where a rollout's requests go (affinity; -1: to be picked) and the endpoint its last
// attempt failed at (-1: none).
type home struct{ home, avoid int }

// homes maps rollout ids to their home, in two generations: when the current one reaches
// homesCap entries it becomes the old one, and entries not used since are dropped, so that the
// map stays bounded however many rollouts a run has (a rollout in flight is used every round).
type homes struct {
	cur, old map[string]home
}

const homesCap = 1 << 16

func (h *homes) get(id string) (home, bool) {
	if v, ok := h.cur[id]; ok {
		return v, true
	}
	if v, ok := h.old[id]; ok {
		h.put(id, v)
		return v, true
	}
	return home{-1, -1}, false
}

func (h *homes) put(id string, v home) {
	if id == "" {
		return
	}
	if h.cur == nil {
		h.cur = map[string]home{}
	}
	if _, ok := h.cur[id]; !ok && len(h.cur) >= homesCap {
		h.old, h.cur = h.cur, map[string]home{}
	}
	h.cur[id] = v
}
