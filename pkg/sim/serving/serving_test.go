package serving

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// newReplica serves one replica of the real simulator (no task file: schema-valid random calls)
// on a loopback server.
func newReplica(t *testing.T, cfg Config) (*Replica, string) {
	t.Helper()
	r, err := NewPlain(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r)
	t.Cleanup(func() { r.Close(); srv.Close() })
	return r, srv.URL
}

// chat is a chat request whose conversation is msgs (each a user message of that text).
func chat(msgs ...string) string {
	var parts []string
	for _, m := range msgs {
		parts = append(parts, fmt.Sprintf(`{"role":"user","content":%q}`, m))
	}
	return `{"model":"rollout-sim","messages":[` + strings.Join(parts, ",") + `]}`
}

func post(t *testing.T, ctx context.Context, url, body string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

var fast = Config{MaxNumSeqs: 8, MaxQueue: 64, KVCacheTokens: 100_000, BlockTokens: 16,
	PrefillPerToken: time.Microsecond, DecodeBase: time.Millisecond, DecodePerSeq: 10 * time.Microsecond, Speed: 100}

// The prefix cache: a conversation sent again with one more message finds every full block of
// its earlier prompt cached (counted by an independent path: the prompt's bytes / 64), and a
// replica that never saw it finds none.
func TestPrefixCache(t *testing.T) {
	r, url := newReplica(t, fast)
	first := strings.Repeat("a long system prompt shared by every round. ", 20)
	if s := post(t, context.Background(), url, chat(first)); s != 200 {
		t.Fatalf("status %d", s)
	}
	st := r.Stats()
	if st.CachedTokens != 0 || st.PrefilledTokens == 0 {
		t.Fatalf("first request: %+v", st)
	}
	if s := post(t, context.Background(), url, chat(first, "and one more turn")); s != 200 {
		t.Fatalf("status %d", s)
	}
	msg, _ := json.Marshal(map[string]string{"role": "user", "content": first})
	wantCached := int64(len(msg) / 64 * 16)
	st2 := r.Stats()
	if got := st2.CachedTokens; got != wantCached {
		t.Errorf("second request: %d cached tokens, want %d (the full 16-token blocks of the first prompt)", got, wantCached)
	}
	if st2.HitRate <= 0 || st2.HitRate >= 1 {
		t.Errorf("hit rate %g", st2.HitRate)
	}
	other, url2 := newReplica(t, fast)
	post(t, context.Background(), url2, chat(first, "and one more turn"))
	if st := other.Stats(); st.CachedTokens != 0 {
		t.Errorf("a fresh replica found %d cached tokens", st.CachedTokens)
	}
	// GET /stats answers the same counters as JSON.
	resp, err := http.Get(url + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got []Stats
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil || len(got) != 1 || got[0].Requests != 2 || got[0].CachedTokens != wantCached {
		t.Errorf("GET /stats: %+v, %v", got, err)
	}
}

// The LRU cache drops the least recently used blocks past its capacity.
func TestLRU(t *testing.T) {
	var c lru
	c.init(3)
	if hit := c.prefix([]uint64{1, 2}); hit != 0 {
		t.Fatalf("hit %d", hit)
	}
	if hit := c.prefix([]uint64{1, 2, 3}); hit != 2 {
		t.Fatalf("hit %d, want 2", hit)
	}
	c.prefix([]uint64{7, 8}) // evicts 1 and 2, the least recently used
	if hit := c.prefix([]uint64{1, 2, 3}); hit != 0 {
		t.Errorf("after eviction: hit %d, want 0", hit)
	}
	if len(c.at) != 3 || c.order.Len() != 3 {
		t.Errorf("cache holds %d blocks, want its capacity 3", len(c.at))
	}
}

// A step's cost: the decode base, a cost per sequence in the batch, and the prefill of the
// uncached tokens admitted; past max-num-seqs requests wait.
func TestStepCost(t *testing.T) {
	cfg := Config{MaxNumSeqs: 2, KVCacheTokens: 1000, BlockTokens: 16, PrefillPerToken: 3 * time.Microsecond,
		DecodeBase: 5 * time.Millisecond, DecodePerSeq: 100 * time.Microsecond, Speed: 1}
	r, err := NewReplica(0, http.NotFoundHandler(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r.queue = []*seq{{tokens: 100}, {tokens: 40, blocks: []uint64{9}}, {tokens: 7}}
	r.cache.prefix([]uint64{9}) // the second's block is cached: 16 of its 40 tokens
	got := r.admit()
	want := 5*time.Millisecond + 2*100*time.Microsecond + time.Duration(100+40-16)*3*time.Microsecond
	if got != want || len(r.running) != 2 || len(r.queue) != 1 {
		t.Errorf("admit: step %v, %d running, %d waiting; want %v, 2, 1", got, len(r.running), len(r.queue), want)
	}
}

// A full queue answers 429 at once; a request whose client goes away leaves the queue.
func TestQueueFull429(t *testing.T) {
	slow := Config{MaxNumSeqs: 1, MaxQueue: 1, KVCacheTokens: 1000, BlockTokens: 16, DecodeBase: time.Hour, Speed: 1}
	r, url := newReplica(t, slow)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() { defer wg.Done(); post(t, ctx, url, chat(fmt.Sprint("held ", i))) }()
		for r.Stats().Running+r.Stats().Queue < i+1 {
			time.Sleep(time.Millisecond)
		}
	}
	if s := post(t, context.Background(), url, chat("third")); s != http.StatusTooManyRequests {
		t.Errorf("third request with one running and one waiting: status %d, want 429", s)
	}
	if st := r.Stats(); st.Rejected != 1 || st.Running != 1 || st.Queue != 1 {
		t.Errorf("stats %+v", st)
	}
	cancel()
	wg.Wait()
}

func TestConfigValidate(t *testing.T) {
	if err := Default.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.MaxNumSeqs = 0 }, "max-num-seqs 0"},
		{func(c *Config) { c.MaxQueue = -1 }, "max-queue -1"},
		{func(c *Config) { c.Speed = 0 }, "speed 0"},
		{func(c *Config) { c.DecodeBase = 0 }, "decode base"},
		{func(c *Config) { c.KVCacheTokens = -5 }, "kv-cache-tokens -5"},
	} {
		c := Default
		tc.mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate = %v, want %q", err, tc.want)
		}
	}
}
