// Package serving is a model of an inference server's serving loop, wrapped around the model
// simulator (pkg/sim) so that a run can measure what routing and concurrency do to a fleet
// without GPUs. It is a model of a server, not a measurement of one: the costs are parameters
// (Config), with defaults chosen for an 8B model on one modern GPU (BENCHMARKS.md says where
// each comes from).
//
// A Replica answers what the simulator answers, later: each request waits in a FIFO queue for
// one of MaxNumSeqs batch slots (continuous batching: a slot frees as soon as its sequence ends,
// and a waiting request takes it at the next step). Each step of the batch costs
//
//	DecodeBase + DecodePerSeq × (sequences in the batch) + PrefillPerToken × (uncached prompt tokens admitted in the step)
//
// and gives every sequence in the batch one output token; a request's output length is the
// simulator's completion_tokens. The prompt is the request's tools and messages, 4 bytes a
// token, cut in blocks of BlockTokens; a block is cached when the same chain of blocks (the same
// prefix) was prefilled before and is still in the LRU cache of KVCacheTokens tokens. So a
// rollout's next round, which re-sends its conversation, pays only the new tokens on a replica
// that still holds the prefix, and the repeats of a task share their prompt's blocks. A request
// that finds MaxQueue requests waiting is answered 429 at once.
//
// That is vLLM's cache (automatic prefix caching: blocks shared by every sequence). With
// Config.Slots the cache is llama.cpp's llama-server's instead (slots.go): each of MaxNumSeqs
// slots keeps the blocks of the last sequence it ran; a request takes the idle slot whose kept
// prefix is longest (more than SlotSimilarity of its prompt), else the least recently used idle
// slot, and finds cached only what that slot shares with it; a host-memory prompt cache of
// KVCacheTokens tokens keeps the sequences slots give up and restores the best one. The two
// models predict different things for routing: see BENCHMARKS.md, "Fleet routing against real
// prefix caches".
//
// Time runs Speed times faster than the model's: a step of 20 ms sleeps 20/Speed ms.
package serving

import (
	"bytes"
	"container/list"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/rollout-dev/rollout/pkg/sim"
)

// Config is a replica's serving model.
type Config struct {
	MaxNumSeqs      int           // sequences in the batch at most
	MaxQueue        int           // requests waiting at most; more are answered 429 (0: no bound)
	KVCacheTokens   int           // prefix-cache capacity in tokens
	BlockTokens     int           // tokens of a cache block
	PrefillPerToken time.Duration // per uncached prompt token
	DecodeBase      time.Duration // a decode step with one sequence
	DecodePerSeq    time.Duration // added to a step per sequence in the batch
	Speed           float64       // model time runs this many times faster than the wall clock
	// Slots models llama-server's per-slot cache (slots.go) instead of a shared block cache:
	// MaxNumSeqs slots, KVCacheTokens the host-memory prompt cache (0: none). It keeps tokens,
	// not blocks (BlockTokens is not used), and counts a prompt as rendered for the model
	// (promptBlocks) rather than as its JSON.
	Slots bool
	// SlotSimilarity is the share of a prompt a slot's kept prefix must exceed for the slot to
	// be chosen by it (llama-server's --slot-prompt-similarity, default 0.1).
	SlotSimilarity float64
}

// Default is the serving model of an 8B model (Llama 3.1 8B, bf16) on one H100 80GB, as vLLM
// serves it; BENCHMARKS.md ("Serving simulator defaults") gives the source of each figure.
var Default = Config{
	MaxNumSeqs:      256,
	MaxQueue:        4096,
	KVCacheTokens:   400_000,
	BlockTokens:     16,
	PrefillPerToken: 40 * time.Microsecond,
	DecodeBase:      7 * time.Millisecond,
	DecodePerSeq:    53 * time.Microsecond,
	Speed:           1,
}

// TinyCPU is the step costs of the tiny agent (a 7M Qwen2 model, test/interop) as
// llama-server serves it on one CPU thread: about 8 ms a generated token on an idle 2-core
// machine (its README), and about 1 ms a prompt token (the servers' logs, scaled from a loaded
// machine's 5-13 ms to idle by the same factor as decode's 70-90 ms), with a CPU batch adding
// most of a step per sequence; model time runs 4 times faster than the clock. What matters for
// routing is that a model call takes hundreds of times a tool call, as on the real servers: with
// least-outstanding a rollout's next call then finds its last server the least loaded (it has
// just finished that call), and comes back to it. A faster clock makes the gap between calls as
// long as a call, and rollouts change servers more than they do on a real fleet.
var TinyCPU = Config{
	MaxNumSeqs:      2,
	KVCacheTokens:   1 << 30, // llama-server's 8 GiB host cache holds every conversation of a run of the tiny agent
	BlockTokens:     1,
	PrefillPerToken: time.Millisecond,
	DecodeBase:      8 * time.Millisecond,
	DecodePerSeq:    4 * time.Millisecond,
	Speed:           4,
	Slots:           true,
	SlotSimilarity:  0.1,
}

// Validate checks a config.
func (c Config) Validate() error {
	switch {
	case c.MaxNumSeqs < 1:
		return fmt.Errorf("max-num-seqs %d: want at least 1", c.MaxNumSeqs)
	case c.MaxQueue < 0:
		return fmt.Errorf("max-queue %d: want 0 (no bound) or more", c.MaxQueue)
	case c.BlockTokens < 1:
		return fmt.Errorf("block tokens %d: want at least 1", c.BlockTokens)
	case c.KVCacheTokens < 0:
		return fmt.Errorf("kv-cache-tokens %d: want 0 or more", c.KVCacheTokens)
	case c.PrefillPerToken < 0 || c.DecodeBase <= 0 || c.DecodePerSeq < 0:
		return fmt.Errorf("step costs must be >= 0, and the decode base > 0")
	case !(c.Speed > 0):
		return fmt.Errorf("speed %g: want more than 0", c.Speed)
	case c.SlotSimilarity < 0 || c.SlotSimilarity >= 1:
		return fmt.Errorf("slot similarity %g: want 0 to 1", c.SlotSimilarity)
	}
	return nil
}

// bytesPerToken is the simulator's token estimate.
const bytesPerToken = 4

// Stats are a replica's counters.
type Stats struct {
	Replica         int     `json:"replica"`
	Requests        int64   `json:"requests"`         // chat completion POSTs
	Rejected        int64   `json:"rejected_429"`     // answered 429: the queue was full
	Completed       int64   `json:"completed"`        // answered after their decode
	Queue           int     `json:"queue"`            // waiting now
	Running         int     `json:"running"`          // in the batch now
	PrefilledTokens int64   `json:"prefilled_tokens"` // prompt tokens computed
	CachedTokens    int64   `json:"cached_tokens"`    // prompt tokens found in the prefix cache
	HitRate         float64 `json:"prefix_cache_hit_rate"`
	DecodedTokens   int64   `json:"decoded_tokens"`
	Steps           int64   `json:"steps"`
	BusySeconds     float64 `json:"busy_seconds"` // model time spent in steps
}

// seq is a request in the serving loop.
type seq struct {
	blocks []uint64 // the prompt's block hashes, chained
	tokens int      // prompt tokens
	left   int      // output tokens still to decode
	gen    int      // output tokens in all
	done   chan struct{}
	gone   bool // its client went away
	slot   int  // its slot, with Config.Slots
}

// Replica is one simulated inference server.
type Replica struct {
	id    int
	cfg   Config
	inner http.Handler

	mu      sync.Mutex
	queue   []*seq
	running []*seq
	cache   lru
	slots   *slotCache // with Config.Slots
	stats   Stats
	wake    chan struct{}
	stop    chan struct{}
	stopped sync.Once
	loop    sync.Once
}

// NewReplica returns replica id serving inner's answers under cfg. Close stops its loop.
func NewReplica(id int, inner http.Handler, cfg Config) (*Replica, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Replica{id: id, cfg: cfg, inner: inner, wake: make(chan struct{}, 1), stop: make(chan struct{})}
	if cfg.Slots {
		r.cfg.BlockTokens = 1 // llama-server reuses a prefix to the token
		r.slots = newSlotCache(cfg.MaxNumSeqs, cfg.KVCacheTokens, cfg.SlotSimilarity)
	} else {
		r.cache.init(cfg.KVCacheTokens / cfg.BlockTokens)
	}
	r.stats.Replica = id
	return r, nil
}

// Close stops the serving loop; requests waiting end with 503.
func (r *Replica) Close() { r.stopped.Do(func() { close(r.stop) }) }

// Stats are the replica's counters now.
func (r *Replica) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Queue, s.Running = len(r.queue), len(r.running)
	if total := s.PrefilledTokens + s.CachedTokens; total > 0 {
		s.HitRate = float64(s.CachedTokens) / float64(total)
	}
	return s
}

// ServeHTTP answers GET /stats with this replica's Stats, and delays the simulator's chat
// completions through the serving loop; the rest goes to the simulator as it is.
func (r *Replica) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodGet && req.URL.Path == "/stats" {
		writeJSON(w, []Stats{r.Stats()})
		return
	}
	if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/chat/completions") {
		r.inner.ServeHTTP(w, req)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	// The simulator answers first (at once: the serving loop is the latency); its answer is
	// held until the loop has decoded it.
	rec := httptest.NewRecorder()
	inner := req.Clone(req.Context())
	inner.Body = io.NopCloser(bytes.NewReader(body))
	r.inner.ServeHTTP(rec, inner)
	r.mu.Lock()
	r.stats.Requests++
	r.mu.Unlock()
	if rec.Code != http.StatusOK {
		copyAnswer(w, rec)
		return
	}
	s := &seq{done: make(chan struct{})}
	s.blocks, s.tokens = promptBlocks(body, r.cfg.BlockTokens, r.slots != nil)
	s.left = max(1, completionTokens(rec.Body.Bytes()))
	s.gen = s.left
	if err := r.enqueue(s); err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		fmt.Fprintf(w, `{"object":"error","message":%q,"type":"TooManyRequests","code":429}`, err.Error())
		return
	}
	select {
	case <-s.done:
		copyAnswer(w, rec)
	case <-req.Context().Done():
		r.mu.Lock()
		s.gone = true
		r.mu.Unlock()
	case <-r.stop:
		http.Error(w, `{"object":"error","message":"server shutting down","code":503}`, http.StatusServiceUnavailable)
	}
}

var errQueueFull = errors.New("the server's queue is full")

func (r *Replica) enqueue(s *seq) error {
	r.loop.Do(func() { go r.serve() })
	r.mu.Lock()
	if n := len(r.queue); r.cfg.MaxQueue > 0 && n >= r.cfg.MaxQueue {
		r.stats.Rejected++
		r.mu.Unlock()
		return fmt.Errorf("%w (%d requests waiting)", errQueueFull, n)
	}
	r.queue = append(r.queue, s)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	return nil
}

// serve is the serving loop: admit, step, finish, on a clock of absolute deadlines so that the
// wall clock's jitter does not add up.
func (r *Replica) serve() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var deadline time.Time
	for {
		r.mu.Lock()
		step := r.admit()
		idle := len(r.running) == 0
		r.mu.Unlock()
		if idle {
			select {
			case <-r.wake:
				deadline = time.Time{}
				continue
			case <-r.stop:
				return
			}
		}
		now := time.Now()
		if deadline.IsZero() || now.Sub(deadline) > 50*time.Millisecond {
			deadline = now // idle, or too far behind to catch up
		}
		deadline = deadline.Add(time.Duration(float64(step) / r.cfg.Speed))
		timer.Reset(time.Until(deadline))
		select {
		case <-timer.C:
		case <-r.stop:
			return
		}
		r.mu.Lock()
		r.stats.Steps++
		r.stats.BusySeconds += step.Seconds()
		kept := r.running[:0]
		for _, s := range r.running {
			s.left--
			r.stats.DecodedTokens++
			if s.left <= 0 || s.gone {
				if !s.gone {
					r.stats.Completed++
				}
				if r.slots != nil {
					r.slots.release(s.slot)
				}
				close(s.done)
				continue
			}
			kept = append(kept, s)
		}
		clear(r.running[len(kept):])
		r.running = kept
		r.mu.Unlock()
	}
}

// admit moves waiting requests into the batch while it has room, prefilling their uncached
// blocks, and returns the cost of the next step. r.mu is held.
func (r *Replica) admit() time.Duration {
	uncached := 0
	for len(r.running) < r.cfg.MaxNumSeqs && len(r.queue) > 0 {
		s := r.queue[0]
		r.queue[0] = nil
		r.queue = r.queue[1:]
		if s.gone {
			close(s.done)
			continue
		}
		var hit, genHit int
		if r.slots != nil {
			s.slot, hit, genHit = r.slots.take(s.blocks, s.gen)
		} else {
			hit = r.cache.prefix(s.blocks)
		}
		cached := min(hit*r.cfg.BlockTokens+genHit, s.tokens)
		r.stats.CachedTokens += int64(cached)
		r.stats.PrefilledTokens += int64(s.tokens - cached)
		uncached += s.tokens - cached
		r.running = append(r.running, s)
	}
	if len(r.running) == 0 {
		return 0
	}
	return r.cfg.DecodeBase + time.Duration(len(r.running))*r.cfg.DecodePerSeq + time.Duration(uncached)*r.cfg.PrefillPerToken
}

// promptBlocks cuts a chat request's prompt (its tools, then each message, as sent) into
// blocks of n tokens and returns their chained hashes (full blocks only, as a prefix cache keeps
// them) and the prompt's token count. With rendered, a message counts as a chat template renders
// it rather than as its JSON: its role, its text, and each tool call's name and arguments (no
// ids, no escaping, no wrapper fields), so that an assistant turn sent back is as long as the
// answer the model generated (the simulator's completion_tokens count the same bytes).
func promptBlocks(body []byte, n int, rendered bool) ([]uint64, int) {
	var req struct {
		Tools    json.RawMessage   `json:"tools"`
		Messages []json.RawMessage `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil, max(1, len(body)/bytesPerToken)
	}
	var prompt []byte
	prompt = append(prompt, req.Tools...)
	for _, m := range req.Messages {
		if !rendered {
			prompt = append(prompt, m...)
			continue
		}
		var msg struct {
			Role      string `json:"role"`
			Content   any    `json:"content"`
			ToolCalls []struct {
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		}
		if json.Unmarshal(m, &msg) != nil {
			prompt = append(prompt, m...)
			continue
		}
		prompt = append(prompt, msg.Role...)
		switch c := msg.Content.(type) {
		case string:
			prompt = append(prompt, c...)
		case nil:
		default: // parts: as sent
			b, _ := json.Marshal(c)
			prompt = append(prompt, b...)
		}
		for _, tc := range msg.ToolCalls {
			prompt = append(prompt, tc.Function.Name...)
			prompt = append(prompt, tc.Function.Arguments...)
		}
	}
	tokens := max(1, len(prompt)/bytesPerToken)
	size := n * bytesPerToken
	blocks := make([]uint64, 0, len(prompt)/size)
	var prev uint64
	for i := 0; i+size <= len(prompt); i += size {
		h := fnv.New64a()
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], prev)
		h.Write(b[:])
		h.Write(prompt[i : i+size])
		prev = h.Sum64()
		blocks = append(blocks, prev)
	}
	return blocks, tokens
}

// completionTokens is the usage.completion_tokens of a chat completion (0: none).
func completionTokens(answer []byte) int {
	var a struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	json.Unmarshal(answer, &a)
	return a.Usage.CompletionTokens
}

func copyAnswer(w http.ResponseWriter, rec *httptest.ResponseRecorder) {
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	w.Write(rec.Body.Bytes())
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// lru is the prefix cache: block hashes, least recently used first out.
type lru struct {
	cap   int
	order *list.List
	at    map[uint64]*list.Element
}

func (c *lru) init(capacity int) {
	c.cap, c.order, c.at = capacity, list.New(), map[uint64]*list.Element{}
}

// prefix returns how many leading blocks of a chain are cached, and caches the whole chain
// (most recently used).
func (c *lru) prefix(blocks []uint64) int {
	hit := 0
	for hit < len(blocks) {
		if _, ok := c.at[blocks[hit]]; !ok {
			break
		}
		hit++
	}
	if c.cap == 0 {
		return hit
	}
	for _, b := range blocks {
		if e, ok := c.at[b]; ok {
			c.order.MoveToBack(e)
			continue
		}
		c.at[b] = c.order.PushBack(b)
		for c.order.Len() > c.cap {
			old := c.order.Front()
			c.order.Remove(old)
			delete(c.at, old.Value.(uint64))
		}
	}
	return hit
}

// Fleet is several replicas of one simulator.
type Fleet struct {
	Replicas []*Replica
}

// NewFleet returns n replicas of inner under cfg.
func NewFleet(n int, inner http.Handler, cfg Config) (*Fleet, error) {
	f := &Fleet{}
	for i := range n {
		r, err := NewReplica(i, inner, cfg)
		if err != nil {
			return nil, err
		}
		f.Replicas = append(f.Replicas, r)
	}
	return f, nil
}

// Close stops every replica.
func (f *Fleet) Close() {
	for _, r := range f.Replicas {
		r.Close()
	}
}

// Stats are every replica's counters.
func (f *Fleet) Stats() []Stats {
	out := make([]Stats, len(f.Replicas))
	for i, r := range f.Replicas {
		out[i] = r.Stats()
	}
	return out
}

// WriteTable writes replicas' counters for people.
func WriteTable(w io.Writer, stats []Stats) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "simulated server\trequests\t429\tprefix-cache hit rate\tprefilled tokens\tcached tokens\tbusy s")
	for _, s := range stats {
		fmt.Fprintf(tw, "sim-%d\t%d\t%d\t%.3f\t%d\t%d\t%.1f\n", s.Replica, s.Requests, s.Rejected, s.HitRate, s.PrefilledTokens, s.CachedTokens, s.BusySeconds)
	}
	return tw.Flush()
}

// NewPlain returns a replica of a simulator without tasks (every conversation gets random
// schema-valid tool calls, then an answer) under cfg: a server to load with any chat request.
func NewPlain(cfg Config) (*Replica, error) {
	ts, err := sim.LoadTasks()
	if err != nil {
		return nil, err
	}
	s, err := sim.New(ts, sim.Options{})
	if err != nil {
		return nil, err
	}
	return NewReplica(0, s, cfg)
}
