package counter

import (
	"github.com/rollout-dev/rollout/pkg/servers/gym"

	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/benchutil"
)

// The counter task of the load benchmark, its tools and the runner's response to it.
const (
	benchRow      = benchutil.CounterRow
	benchTools    = benchutil.CounterTools
	benchResponse = benchutil.CounterResponse
)

// Benchmarks of the "counter" server's handler, as the load benchmark drives it: a memory
// session store, the handler called directly (no network), one session.
//
//	go test ./pkg/servers -run '^$' -bench Counter -benchmem

var benchVerifyBody = []byte(strings.TrimSuffix(benchRow, "}") + `,"response":` + benchResponse + `}`)

// benchWriter is a reusable http.ResponseWriter that keeps the last status and body.
type benchWriter struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) WriteHeader(status int)      { w.status = status }
func (w *benchWriter) Write(p []byte) (int, error) { return w.body.Write(p) }

// benchClient calls one handler within one session.
type benchClient struct {
	tb     testing.TB
	h      http.Handler
	cookie string
	w      benchWriter
}

func newBenchClient(tb testing.TB, name string) *benchClient {
	srv, err := newServer(name, gym.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { srv.Close() })
	return &benchClient{tb: tb, h: srv, w: benchWriter{h: http.Header{}}}
}

// post serves one POST and returns the answer, failing unless the status is 200. The answer is
// valid until the next call.
func (c *benchClient) post(path string, body []byte) []byte {
	req, err := http.NewRequest(http.MethodPost, "http://bench"+path, bytes.NewReader(body))
	if err != nil {
		c.tb.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.cookie != "" {
		req.Header.Set("Cookie", c.cookie)
	}
	clear(c.w.h)
	c.w.status = http.StatusOK
	c.w.body.Reset()
	c.h.ServeHTTP(&c.w, req)
	if c.w.status != http.StatusOK {
		c.tb.Fatalf("POST %s: %d %s", path, c.w.status, c.w.body.Bytes())
	}
	if c.cookie == "" {
		c.cookie = strings.SplitN(c.w.h.Get("Set-Cookie"), ";", 2)[0]
	}
	return c.w.body.Bytes()
}

var benchIncrement = []byte(`{"count":1}`)

// seeded is a client whose session is seeded with benchRow and has had the rollout's two
// increment_counter calls: its verify scores 1.
func seeded(tb testing.TB) *benchClient {
	c := newBenchClient(tb, "counter")
	c.post("/seed_session", []byte(benchRow))
	c.post("/increment_counter", benchIncrement)
	c.post("/increment_counter", benchIncrement)
	if out := c.post("/verify", benchVerifyBody); !bytes.Contains(out, []byte(`"reward":1.0,"count_correct":1,"tool_calls":2,"count":2}`)) {
		tb.Fatalf("verify answered %s", out)
	}
	return c
}

// reportCPU reports the process's CPU time per iteration since start, in µs, beside the wall
// time.
func reportCPU(b *testing.B, start time.Duration) {
	if cpu := benchutil.ProcessCPU(); cpu > 0 {
		b.ReportMetric(float64(cpu-start)/1e3/float64(b.N), "cpu-µs/op")
	}
}

func BenchmarkCounterVerify(b *testing.B) {
	c := seeded(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(benchVerifyBody)))
	start := benchutil.ProcessCPU()
	for b.Loop() {
		c.post("/verify", benchVerifyBody)
	}
	reportCPU(b, start)
}

func BenchmarkCounterSeedSession(b *testing.B) {
	c := seeded(b)
	row := []byte(benchRow)
	b.ReportAllocs()
	b.SetBytes(int64(len(row)))
	start := benchutil.ProcessCPU()
	for b.Loop() {
		c.post("/seed_session", row)
	}
	reportCPU(b, start)
}

func BenchmarkCounterToolCall(b *testing.B) {
	c := seeded(b)
	// A session of a long rollout: its history is full.
	for range stateCounterHistory {
		c.post("/increment_counter", benchIncrement)
	}
	b.ReportAllocs()
	start := benchutil.ProcessCPU()
	for b.Loop() {
		c.post("/increment_counter", benchIncrement)
	}
	reportCPU(b, start)
}

// BenchmarkCounterRollout is the server's share of one 3-round rollout: a new session's
// seed_session, two increment_counter calls, verify and end_session.
func BenchmarkCounterRollout(b *testing.B) {
	c := newBenchClient(b, "counter")
	b.ReportAllocs()
	start := benchutil.ProcessCPU()
	for b.Loop() {
		c.cookie = ""
		c.post("/seed_session", []byte(benchRow))
		c.post("/increment_counter", benchIncrement)
		c.post("/increment_counter", benchIncrement)
		c.post("/verify", benchVerifyBody)
		c.post("/end_session", nil)
	}
	reportCPU(b, start)
}

// The benchmark's verify answer is the echoed request plus the reward fields.
func TestBenchVerifyAnswer(t *testing.T) {
	c := seeded(t)
	out := c.post("/verify", benchVerifyBody)
	want := strings.TrimSuffix(string(benchVerifyBody), "}") + `,"reward":1.0,"count_correct":1,"tool_calls":2,"count":2}`
	if string(out) != want {
		t.Fatalf("verify answered\n%s\nwant\n%s", out, want)
	}
}
