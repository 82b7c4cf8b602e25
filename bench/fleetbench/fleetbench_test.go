package fleetbench

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unicode"

	"github.com/rollout-dev/rollout/pkg/fleet"
	"github.com/rollout-dev/rollout/pkg/sim/serving"
)

// replica serves one serving-simulator replica of the real simulator (no tasks: random
// schema-valid tool calls) on loopback.
func replica(t *testing.T, cfg serving.Config) (*serving.Replica, string) {
	t.Helper()
	r, err := serving.NewPlain(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r)
	t.Cleanup(func() { r.Close(); srv.Close() })
	return r, srv.URL + "/v1"
}

// small is the default serving model with a batch of seqs, a queue of queue and speed x.
func small(seqs, queue int, x float64) serving.Config {
	c := serving.Default
	c.MaxNumSeqs, c.MaxQueue, c.KVCacheTokens, c.Speed = seqs, queue, 10000, x
	return c
}

// load sends total requests through the pool from clients goroutines in a closed loop (each
// sends its next request when its last one is answered) and returns the statuses in order of
// completion.
func load(t *testing.T, p *fleet.Pool, clients, total int) []int {
	t.Helper()
	var next atomic.Int64
	var mu sync.Mutex
	var statuses []int
	var wg sync.WaitGroup
	client := &http.Client{Transport: p}
	body := `{"model":"rollout-sim","messages":[{"role":"user","content":"Look it up."}],"tools":[{"type":"function","function":{"name":"lookup","parameters":{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}}}]}`
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(total) {
				req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, fleet.BaseURL+"/chat/completions", strings.NewReader(body))
				resp, err := client.Do(req)
				status := 0
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					status = resp.StatusCode
				}
				mu.Lock()
				statuses = append(statuses, status)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return statuses
}

// Adaptive concurrency against a simulated server whose batch holds 8 sequences, offered 128
// clients: from a limit of 2 it grows to about the batch or more (the server's capacity is used;
// 6 leaves room for a loaded machine's noise) and stops at half the 128 offered or less
// (requests past the batch only queue on the server; it settles near 2.5 times the batch).
func TestAdaptiveConverges(t *testing.T) {
	_, url := replica(t, small(8, 0, 3))
	p, err := fleet.New([]fleet.Endpoint{{URL: url}}, fleet.Options{Adaptive: &fleet.Adaptive{Initial: 2, Max: 256}})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range load(t, p, 128, 800) {
		if s != 200 {
			t.Fatalf("status %d", s)
		}
	}
	limit := p.Stats()[0].Limit
	if limit < 6 || limit > 64 {
		t.Errorf("adaptive limit %g against a batch of 8 offered 128 clients: want between 6 and 64", limit)
	}
	t.Logf("limit %g", limit)
}

// A server with a short queue answers 429 when the limit is too high: the limit comes down
// under what the server holds (batch + queue), and the 429s become rarer.
func TestAdaptiveBacksOffOn429(t *testing.T) {
	r, url := replica(t, small(4, 4, 10))
	p, err := fleet.New([]fleet.Endpoint{{URL: url}}, fleet.Options{Adaptive: &fleet.Adaptive{Initial: 64, Max: 256}})
	if err != nil {
		t.Fatal(err)
	}
	statuses := load(t, p, 64, 1200)
	count := func(s []int) (n int) {
		for _, v := range s {
			if v == http.StatusTooManyRequests {
				n++
			}
		}
		return n
	}
	first, last := count(statuses[:300]), count(statuses[len(statuses)-300:])
	if first == 0 {
		t.Fatalf("no 429 at first with a limit of 64 against 4+4: the test does not test")
	}
	if last >= first/2 {
		t.Errorf("429s: %d in the first 300 answers, %d in the last 300: want far fewer once backed off", first, last)
	}
	if limit := p.Stats()[0].Limit; limit > 16 {
		t.Errorf("limit %g, want at most 16 against a server that holds 8", limit)
	}
	if st := r.Stats(); st.Rejected != int64(count(statuses)) {
		t.Errorf("the server rejected %d, the clients saw %d 429s", st.Rejected, count(statuses))
	}
}

// The long workload: every row keeps its question and gets a note of its own of the asked
// length, letters only (no ids or figures a model could copy), from words the tasks use; the
// same file twice is the same; too few rows is an error naming the file.
func TestWriteTasksNotes(t *testing.T) {
	dir := t.TempDir()
	src, a, b := "../../data/extraction.jsonl", dir+"/a.jsonl", dir+"/b.jsonl"
	for _, dst := range []string{a, b} {
		if err := WriteTasks(dst, src, 5, 50); err != nil {
			t.Fatal(err)
		}
	}
	da, _ := os.ReadFile(a)
	db, _ := os.ReadFile(b)
	if string(da) != string(db) {
		t.Fatal("two writes of the same tasks differ")
	}
	orig, err := readRows(src, 5)
	if err != nil {
		t.Fatal(err)
	}
	notes := map[string]bool{}
	for i, line := range strings.Split(strings.TrimSpace(string(da)), "\n") {
		var row, was struct {
			P struct {
				Input []struct{ Content string } `json:"input"`
			} `json:"responses_create_params"`
		}
		if json.Unmarshal([]byte(line), &row) != nil || json.Unmarshal([]byte(orig[i]), &was) != nil {
			t.Fatalf("row %d: not JSON", i+1)
		}
		q, n, ok := strings.Cut(row.P.Input[0].Content, " Notes on file for this question: ")
		if !ok || q != was.P.Input[0].Content {
			t.Fatalf("row %d: question %q, want %q and a note", i+1, q, was.P.Input[0].Content)
		}
		words := strings.Fields(strings.TrimSuffix(n, "."))
		if len(words) != 50 || strings.ContainsFunc(n, unicode.IsDigit) || strings.ContainsAny(n, "-_\"") {
			t.Fatalf("row %d: note %q: want 50 words of letters", i+1, n)
		}
		notes[n] = true
	}
	if len(notes) != 5 {
		t.Fatalf("%d distinct notes in 5 rows", len(notes))
	}
	if err := WriteTasks(dir+"/c.jsonl", src, 1<<20, 50); err == nil || !strings.Contains(err.Error(), src) {
		t.Fatalf("too few rows: %v, want an error naming %s", err, src)
	}
}

// Stay counts, after each rollout's first call, the calls sent where the previous one went.
func TestStay(t *testing.T) {
	for _, c := range []struct {
		eps  [][]string
		want float64
	}{
		{[][]string{{"a", "a", "a"}, {"b", "b"}}, 1},
		{[][]string{{"a", "b", "a"}, {"c"}}, 0},
		{[][]string{{"a", "a", "b"}, {"b", "b"}}, 2.0 / 3},
		{[][]string{{"a"}, nil}, 0},
	} {
		if got := Stay(c.eps); got != c.want {
			t.Errorf("Stay(%v) = %g, want %g", c.eps, got, c.want)
		}
	}
}
