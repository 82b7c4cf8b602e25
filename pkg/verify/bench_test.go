package verify_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/internal/benchutil"

	"github.com/rollout-dev/rollout/pkg/toolclient"
	"github.com/rollout-dev/rollout/pkg/verify"
)

// The counter task of the load benchmark, its tools and the runner's response to it.
const (
	benchRow      = benchutil.CounterRow
	benchTools    = benchutil.CounterTools
	benchResponse = benchutil.CounterResponse
)

// benchAnswer is the counter server's verify answer to that rollout: the request echoed, then
// the reward and its components.
var benchAnswer = []byte(strings.TrimSuffix(benchRow, "}") + `,"response":` + benchResponse +
	`,"reward":1.0,"count_correct":1,"tool_calls":2,"count":2}`)

var benchRowKeys = []string{"id", "responses_create_params", "agent_ref", "initial_count", "expected_count", "reference_plan"}

func TestBenchAnswer(t *testing.T) {
	r, err := verify.Parse(benchAnswer, benchRowKeys)
	if err != nil {
		t.Fatal(err)
	}
	if r.Reward != 1 || len(r.Components) != 3 || r.Components["count_correct"] != 1 || r.Components["tool_calls"] != 2 || r.Components["count"] != 2 {
		t.Fatalf("reward %v components %v", r.Reward, r.Components)
	}
}

// go test ./pkg/verify -run '^$' -bench Parse -benchmem
func BenchmarkParse(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchAnswer)))
	start := benchutil.ProcessCPU()
	for b.Loop() {
		if _, err := verify.Parse(benchAnswer, benchRowKeys); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, start)
}

// BenchmarkRemote is Parse behind a loopback /verify (one session, keep-alive), as the runner
// calls it.
func BenchmarkRemote(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(benchAnswer)
	}))
	defer srv.Close()
	ts, err := toolclient.New("v", srv.URL, nil)
	if err != nil {
		b.Fatal(err)
	}
	sess := ts.NewSession()
	body := []byte(strings.TrimSuffix(benchRow, "}") + `,"response":` + benchResponse + `}`)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(int64(len(benchAnswer)))
	start := benchutil.ProcessCPU()
	for b.Loop() {
		if _, err := verify.Remote(ctx, sess, body, benchRowKeys); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, start)
}

// reportCPU reports the process's CPU time per iteration since start, in µs, beside the wall
// time (for Remote it includes the loopback server's share).
func reportCPU(b *testing.B, start time.Duration) {
	if cpu := benchutil.ProcessCPU(); cpu > 0 {
		b.ReportMetric(float64(cpu-start)/1e3/float64(b.N), "cpu-µs/op")
	}
}
