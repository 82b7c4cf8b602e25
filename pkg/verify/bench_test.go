package verify_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/verify"
)

// benchRow is a counter task row as the load benchmark writes it (3 rounds: 2 increment_counter
// calls, then the answer), about 1 KB.
const benchRow = `{"id":4711,"responses_create_params":{"input":[{"role":"user","content":"The counter starts at 0. Increment it by 1, one call per round, 2 times; then say its value."}],` +
	`"tools":[{"type":"function","name":"increment_counter","description":"Add count to the session's counter; returns the new value.","parameters":{"type":"object","properties":{"count":{"type":"integer","description":"How much to add."}},"required":["count"],"additionalProperties":false},"strict":true},` +
	`{"type":"function","name":"get_counter_value","description":"The counter's value.","parameters":{"type":"object","properties":{},"additionalProperties":false},"strict":true}],` +
	`"parallel_tool_calls":false},"agent_ref":{"type":"responses_api_agents","name":"counter"},"initial_count":0,"expected_count":2,` +
	`"reference_plan":{"rounds":[[{"name":"increment_counter","arguments":{"count":1}}],[{"name":"increment_counter","arguments":{"count":1}}]],"final":"The counter is at 2."}}`

// benchTools is the row's tools, which the runner's response repeats.
const benchTools = `[{"type":"function","name":"increment_counter","description":"Add count to the session's counter; returns the new value.","parameters":{"type":"object","properties":{"count":{"type":"integer","description":"How much to add."}},"required":["count"],"additionalProperties":false},"strict":true},` +
	`{"type":"function","name":"get_counter_value","description":"The counter's value.","parameters":{"type":"object","properties":{},"additionalProperties":false},"strict":true}]`

// benchResponse is the Responses API object of a 3-round rollout, as agent.BuildResponse writes
// it: two function_call / function_call_output pairs and the final message.
const benchResponse = `{"id":"resp_4711_0_multi","created_at":1767225600,"model":"sim","object":"response","output":[` +
	`{"type":"function_call","id":"fc_4711_0_multi_1","status":"completed","call_id":"call_0_0","name":"increment_counter","arguments":"{\"count\":1}"},` +
	`{"type":"function_call_output","call_id":"call_0_0","output":"{\"success\": true, \"count\": 1}"},` +
	`{"type":"function_call","id":"fc_4711_0_multi_2","status":"completed","call_id":"call_1_0","name":"increment_counter","arguments":"{\"count\":1}"},` +
	`{"type":"function_call_output","call_id":"call_1_0","output":"{\"success\": true, \"count\": 2}"},` +
	`{"type":"message","id":"msg_4711_0_multi_3","status":"completed","role":"assistant","content":[{"type":"output_text","text":"The counter is at 2.","annotations":[]}]}],` +
	`"parallel_tool_calls":false,"tool_choice":"auto","tools":` + benchTools + `,"status":"completed","error":null,"incomplete_details":null,"instructions":null,` +
	`"temperature":null,"top_p":null,"max_output_tokens":null,"usage":{"input_tokens":412,"input_tokens_details":{"cached_tokens":0},"output_tokens":57,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":469}}`

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
	start := processCPU()
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
	ts, err := agent.NewToolServer("v", srv.URL, nil)
	if err != nil {
		b.Fatal(err)
	}
	sess := ts.NewSession()
	body := []byte(strings.TrimSuffix(benchRow, "}") + `,"response":` + benchResponse + `}`)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetBytes(int64(len(benchAnswer)))
	start := processCPU()
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
	if cpu := processCPU(); cpu > 0 {
		b.ReportMetric(float64(cpu-start)/1e3/float64(b.N), "cpu-µs/op")
	}
}
