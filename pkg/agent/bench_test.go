package agent_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/rollout-dev/rollout/internal/benchutil"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/toolclient"
)

// The benchmarks of one rollout's hot paths: building a round's request, converting the
// model's answer, recording a round, marshalling the trajectory, a tool call over loopback,
// and a whole 3-round rollout over loopback HTTP (CPU per turn).

// benchRow is a typical small task (about 1 KB): a system and a user message, two tools.
const benchRow = `{"id":"weather-0042","agent_ref":{"type":"responses_api_agents","name":"weather_simple_agent"},` +
	`"responses_create_params":{"input":[{"role":"system","content":"You are a weather assistant.\nUse the tools to look up forecasts; never guess.\nAnswer in one short sentence, in Celsius."},` +
	`{"role":"user","content":"Will it rain in Paris or in Berlin tomorrow (2025-06-12)? Which one is warmer?"}],` +
	`"tools":[{"type":"function","name":"get_forecast","description":"Forecast for one city and date: temperature in Celsius and the chance of rain.",` +
	`"parameters":{"type":"object","properties":{"city":{"type":"string","description":"City name, e.g. Paris."},"date":{"type":"string","description":"YYYY-MM-DD."}},"required":["city","date"],"additionalProperties":false},"strict":true},` +
	`{"type":"function","name":"submit_answer","description":"Submit the final answer.","parameters":{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"],"additionalProperties":false},"strict":true}],` +
	`"parallel_tool_calls":true,"temperature":0.7,"max_output_tokens":1024},` +
	`"expected_answer":{"rain":["Berlin"],"warmer":"Paris"},"category":"weather","difficulty":"easy"}`

// nemoRow is the first row of NeMo Gym's example_multi_step (about 11 KB, mostly its system
// prompt).
func nemoRow(b testing.TB) string {
	data, err := os.ReadFile("../../testdata/nemo-gym/example_multi_step/example.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	return string(line)
}

// benchAnswer is the model's answer of round idx of a benchmark rollout: a call of
// get_forecast in rounds 0 and 1, then the final text.
func benchAnswer(idx int) openai.ChatCompletionResponse {
	msg := openai.ChatCompletionMessage{Role: "assistant", Content: "Paris is warmer; it rains in Berlin."}
	finish := openai.FinishReasonStop
	if idx < 2 {
		city := [2]string{"Paris", "Berlin"}[idx]
		msg = openai.ChatCompletionMessage{Role: "assistant", ToolCalls: []openai.ToolCall{{
			ID: fmt.Sprintf("call_%d", idx), Type: "function",
			Function: openai.FunctionCall{Name: "get_forecast", Arguments: `{"city":"` + city + `","date":"2025-06-12"}`},
		}}}
		finish = openai.FinishReasonToolCalls
	}
	return openai.ChatCompletionResponse{ID: "chatcmpl-1", Object: "chat.completion", Created: 1, Model: "bench-model",
		Choices: []openai.ChatCompletionChoice{{Index: 0, Message: msg, FinishReason: finish}},
		Usage:   openai.Usage{PromptTokens: 320, CompletionTokens: 24, TotalTokens: 344}}
}

const benchToolOutput = `{"city":"Paris","date":"2025-06-12","temp_c":21.5,"rain_chance":0.1}`

// conversation is the trajectory of a rollout of row after rounds rounds (each one tool call
// and its answer), recorded as the loop records it.
func conversation(b testing.TB, row string, rounds int) (*dataset.Task, *agent.Trajectory) {
	task := parseTask(b, row)
	tr := &agent.Trajectory{Messages: agent.ChatMessages(task.Params)}
	for i := range rounds {
		recordRound(tr, i, benchAnswer(min(i, 1)))
	}
	return task, tr
}

// recordRound records round idx as the loop does: the round, the assistant message, and per
// tool call its result and a tool message.
func recordRound(tr *agent.Trajectory, idx int, resp openai.ChatCompletionResponse) {
	rd := agent.NewRound(&resp, idx, 3*time.Millisecond)
	hist := agent.HistoryMessage(&resp.Choices[0].Message, idx)
	tr.Messages = append(tr.Messages, hist)
	if len(hist.ToolCalls) > 0 {
		rd.ToolCalls = make([]agent.ToolCall, 0, len(hist.ToolCalls))
	}
	for _, tc := range hist.ToolCalls {
		rd.ToolCalls = append(rd.ToolCalls, agent.ToolCall{CallID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments,
			Output: benchToolOutput, Status: 200, LatencyMs: 0.4})
		tr.Messages = append(tr.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: tc.ID, Content: benchToolOutput})
	}
	tr.Rounds = append(tr.Rounds, rd)
}

func benchConfig(b testing.TB, m agent.Model) *agent.Config {
	c := &agent.Config{Model: m, ModelName: "bench-model"}
	if err := c.Validate(); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkRequest is a round's request: "setup" is what a rollout converts once (messages,
// tools, tool_choice, sampling), "round1" and "round10" what the loop does per round (the
// request takes the trajectory's messages, no copy); "encode" is the same requests as the
// model client writes them onto the wire (the whole conversation, every round; json.Marshal's
// bytes, written by its direct encoder).
func BenchmarkRequest(b *testing.B) {
	c := benchConfig(b, agent.NewOpenAIModel("http://127.0.0.1:1/v1", "", nil)) // never called
	task := parseTask(b, benchRow)
	b.Run("setup", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tr := &agent.Trajectory{Messages: agent.ChatMessages(task.Params)}
			req := c.MultiRequest(task.Params, 7)
			req.Messages = tr.Messages
			sinkRequest = req
		}
	})
	for _, rounds := range []int{1, 10} {
		_, tr := conversation(b, benchRow, rounds-1)
		req := c.MultiRequest(task.Params, 7)
		b.Run(fmt.Sprintf("round%d", rounds), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req.Messages = tr.Messages // the loop's own step
				sinkRequest = req
			}
		})
		b.Run(fmt.Sprintf("encode/round%d", rounds), func(b *testing.B) {
			req.Messages = tr.Messages
			n, _ := agent.AppendChatRequest(nil, &req)
			b.SetBytes(int64(len(n)))
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := agent.AppendChatRequest(make([]byte, 0, agent.RequestSizeHint(&req)), &req); !ok {
					b.Fatal("not encoded")
				}
			}
		})
	}
}

var sinkRequest openai.ChatCompletionRequest

// BenchmarkAnswer converts a model answer with one tool call into the round's record and
// the history's assistant message, and checks the call's arguments as a tool call does.
func BenchmarkAnswer(b *testing.B) {
	resp := benchAnswer(0)
	b.ReportAllocs()
	for b.Loop() {
		rd := agent.NewRound(&resp, 0, time.Millisecond)
		hist := agent.HistoryMessage(&resp.Choices[0].Message, 0)
		for _, tc := range hist.ToolCalls {
			if _, err := toolclient.Arguments(tc.Function.Name, tc.Function.Arguments); err != nil {
				b.Fatal(err)
			}
		}
		sinkRound, sinkMessage = rd, hist
	}
}

// BenchmarkDecodeAnswer decodes the answer with one tool call once per model call, before the
// answer reaches the loop: "encoding-json" as go-openai does (its json.Decoder on the body),
// "direct" as the model client does (decodeAnswer, the same result).
func BenchmarkDecodeAnswer(b *testing.B) {
	body, _ := json.Marshal(benchAnswer(0))
	b.Run("encoding-json", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var resp openai.ChatCompletionResponse
			if err := json.NewDecoder(bytes.NewReader(body)).Decode(&resp); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			var resp openai.ChatCompletionResponse
			if !agent.DecodeAnswer(body, &resp) {
				b.Fatal("not decoded")
			}
		}
	})
}

// BenchmarkVerifyResponse encodes the Responses object of a 3-round rollout, once per rollout
// for /verify: "encoding-json" by reflection, "direct" by Response.MarshalJSON (the same bytes).
func BenchmarkVerifyResponse(b *testing.B) {
	task, tr := conversation(b, benchRow, 2)
	recordRound(tr, 2, benchAnswer(2))
	r := agent.BuildResponse("resp_1", 1764200000, "bench-model", task.Params, tr)
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := agent.PlainResponseJSON(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := r.MarshalJSON(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

var (
	sinkRound   agent.Round
	sinkMessage openai.ChatCompletionMessage
)

// BenchmarkRecord records the three rounds of a rollout (two with one tool call, then the
// answer) into a new trajectory, as the loop does: per round, the round and its messages.
func BenchmarkRecord(b *testing.B) {
	task := parseTask(b, benchRow)
	answers := []openai.ChatCompletionResponse{benchAnswer(0), benchAnswer(1), benchAnswer(2)}
	b.ReportAllocs()
	for b.Loop() {
		tr := &agent.Trajectory{Messages: agent.ChatMessages(task.Params)}
		for i, a := range answers {
			recordRound(tr, i, a)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*3), "ns/round")
}

// memModel answers benchAnswer without HTTP: tool calls while the conversation has fewer
// than two tool messages, then text.
type memModel [3]openai.ChatCompletionResponse

func (m *memModel) CreateChatCompletion(_ context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error) {
	n := 0
	for i := range req.Messages {
		if req.Messages[i].Role == openai.ChatMessageRoleTool {
			n++
		}
	}
	return m[min(n, 2)], nil
}

// memTools answers every tool call with benchToolOutput, without HTTP.
type memTools struct{}

func (memTools) CallTool(_ context.Context, name, arguments string) toolclient.Result {
	return toolclient.Result{Output: benchToolOutput, Status: 200}
}

// BenchmarkLoop runs 3-round rollouts through Config.Run with a model and tools in memory:
// the loop's own work per round (the request, the answer, the records), without HTTP.
func BenchmarkLoop(b *testing.B) {
	m := &memModel{benchAnswer(0), benchAnswer(1), benchAnswer(2)}
	c := benchConfig(b, m)
	task := parseTask(b, benchRow)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if tr := c.Run(ctx, task, memTools{}, 7); len(tr.Rounds) != 3 {
			b.Fatalf("%d rounds", len(tr.Rounds))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*3), "ns/round")
}

// BenchmarkMarshalTrajectory marshals the trajectory of a 3-round rollout, as the runner
// does for every rollout: of the small row and of the NeMo Gym row (11 KB system prompt).
// "json.Marshal" is the runner's call today; "MarshalJSON" calls the trajectory's encoder
// directly, without encoding/json's compaction of a Marshaler's output (the same bytes).
func BenchmarkMarshalTrajectory(b *testing.B) {
	for _, c := range []struct{ name, row string }{{"small", benchRow}, {"nemo", nemoRow(b)}} {
		_, tr := conversation(b, c.row, 2)
		recordRound(tr, 2, benchAnswer(2))
		tr.Termination = agent.Completed
		out, err := json.Marshal(tr)
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range []struct {
			name    string
			marshal func() ([]byte, error)
		}{{"json.Marshal", func() ([]byte, error) { return json.Marshal(tr) }}, {"MarshalJSON", tr.MarshalJSON}} {
			b.Run(c.name+"/"+m.name, func(b *testing.B) {
				b.SetBytes(int64(len(out)))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := m.marshal(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// benchTransport is a transport shared by all sessions, like the runner's.
func benchTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return t
}

// toolHandler is a resource server answering every tool call with a small JSON object, and
// giving a session cookie to a request without one.
func toolHandler() http.Handler {
	body := []byte(benchToolOutput)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if _, err := r.Cookie("sid"); err != nil {
			http.SetCookie(w, &http.Cookie{Name: "sid", Value: "s1", Path: "/"})
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
}

// modelHandler is a Chat Completions endpoint answering benchAnswer: tool calls while the
// conversation has fewer than two tool messages, then text.
func modelHandler() http.Handler {
	var answers [3][]byte
	for i := range answers {
		answers[i], _ = json.Marshal(benchAnswer(i))
	}
	toolRole := []byte(`"role":"tool"`)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answers[min(bytes.Count(body, toolRole), 2)])
	})
}

// BenchmarkToolCall is one tool call of a session over loopback HTTP: the runner's side
// (the session, its client and the shared transport) and the httptest server's.
func BenchmarkToolCall(b *testing.B) {
	srv := httptest.NewServer(toolHandler())
	defer srv.Close()
	ts, err := toolclient.New("bench", srv.URL, benchTransport())
	if err != nil {
		b.Fatal(err)
	}
	ts.CallTimeout = time.Minute // rollout run's default --tool-timeout
	sess := ts.NewSession()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if res := sess.CallTool(ctx, "get_forecast", `{"city":"Paris","date":"2025-06-12"}`); res.Failed {
			b.Fatal(res.Output)
		}
	}
}

// BenchmarkRollout runs whole 3-round multi-step rollouts (tool call, tool call, answer)
// through the real go-openai client, the retrying Doer and a session over loopback HTTP, one
// after another, and reports the CPU time per turn (one model call and its tool call) of the
// process. "inproc" serves the fake model and resource server in this process, so its CPU
// counts theirs too; "subprocess" serves them from a child process, so it is the runner's
// side alone.
func BenchmarkRollout(b *testing.B) {
	b.Run("inproc", func(b *testing.B) {
		model := httptest.NewServer(modelHandler())
		defer model.Close()
		tools := httptest.NewServer(toolHandler())
		defer tools.Close()
		benchRollouts(b, model.URL, tools.URL, 1)
	})
	b.Run("subprocess", func(b *testing.B) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestBenchServers$")
		cmd.Env = append(os.Environ(), "ROLLOUT_BENCH_SERVERS=1")
		stdin, err := cmd.StdinPipe()
		if err != nil {
			b.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			b.Skip("no child process:", err)
		}
		defer func() {
			stdin.Close()
			_ = cmd.Wait()
		}()
		line, err := bufio.NewReader(stdout).ReadString('\n')
		var modelURL, toolURL string
		if _, serr := fmt.Sscanf(line, "model=%s tools=%s", &modelURL, &toolURL); err != nil || serr != nil {
			b.Fatalf("the servers' process said %q (%v, %v)", line, err, serr)
		}
		b.Run("serial", func(b *testing.B) { benchRollouts(b, modelURL, toolURL, 1) })
		// 32 rollouts at a time, as the runner runs them: the process is never idle, so the
		// figure leaves out the scheduler's spinning while one rollout waits.
		b.Run("parallel", func(b *testing.B) { benchRollouts(b, modelURL, toolURL, 16) })
	})
}

// benchRollouts runs the rollouts, one at a time (parallelism 0) or parallelism*GOMAXPROCS
// at a time.
func benchRollouts(b *testing.B, modelURL, toolURL string, parallelism int) {
	transport := benchTransport()
	defer transport.CloseIdleConnections()
	// As rollout run builds them: one model client and one tool server for the run.
	doer := &retry.Doer{Client: &http.Client{Transport: transport, CheckRedirect: retry.NoRedirect}, Policy: retry.DefaultPolicy, AttemptTimeout: 5 * time.Minute}
	c := benchConfig(b, agent.RedactModel(agent.NewOpenAIModel(modelURL+"/v1", "", doer), ""))
	ts, err := toolclient.New("bench", toolURL, transport)
	if err != nil {
		b.Fatal(err)
	}
	ts.CallTimeout = time.Minute
	task := parseTask(b, benchRow)
	ctx := context.Background()
	rollout := func() {
		tr := c.Run(ctx, task, ts.NewSession(), 7)
		if tr.Termination != agent.Completed || len(tr.Rounds) != 3 {
			b.Errorf("termination %s after %d rounds: %s", tr.Termination, len(tr.Rounds), tr.Error)
		}
	}
	rollout() // connections up
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := benchutil.ProcessCPU()
	if parallelism <= 1 {
		for i := 0; i < b.N; i++ {
			rollout()
		}
	} else {
		b.SetParallelism(parallelism)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				rollout()
			}
		})
	}
	cpu := benchutil.ProcessCPU() - cpu0
	b.StopTimer()
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*3), "cpu-µs/turn")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*3), "µs/turn")
}

// TestBenchServers is BenchmarkRollout's child process: it serves the fake model and
// resource server on loopback, prints their URLs, and stops when its stdin closes.
func TestBenchServers(t *testing.T) {
	if os.Getenv("ROLLOUT_BENCH_SERVERS") == "" {
		t.Skip("the servers of BenchmarkRollout/subprocess")
	}
	serve := func(h http.Handler) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go http.Serve(l, h) //nolint:errcheck // ends with the process
		return "http://" + l.Addr().String()
	}
	fmt.Printf("model=%s tools=%s\n", serve(modelHandler()), serve(toolHandler()))
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// ---- behaviour (not timing) ----

// connCounter counts the connections a test server accepts.
func connCounter(srv *httptest.Server) *atomic.Int64 {
	n := new(atomic.Int64)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	return n
}

// checkReused fails unless the calls reused their connections: one each to the model and the
// tool server, plus one more at most, because net/http returns a connection whose answer was
// read to its end to the idle pool on its read loop's goroutine, after the caller has the body,
// and the next call can miss it on a busy machine. Calls that never reuse open one each.
func checkReused(t *testing.T, model, tools int64) {
	t.Helper()
	if model < 1 || model > 2 || tools < 1 || tools > 2 {
		t.Fatalf("new connections: %d to the model, %d to the tool server; want 1 each (2 at most)", model, tools)
	}
}

// Sessions share the tool server's transport: many tool calls of many sequential rollouts
// reuse one keep-alive connection, and so do the model calls of the run's one client.
func TestConnectionsAreReused(t *testing.T) {
	model := httptest.NewUnstartedServer(modelHandler())
	modelConns := connCounter(model)
	model.Start()
	defer model.Close()
	tools := httptest.NewUnstartedServer(toolHandler())
	toolConns := connCounter(tools)
	tools.Start()
	defer tools.Close()

	transport := benchTransport()
	defer transport.CloseIdleConnections()
	doer := &retry.Doer{Client: &http.Client{Transport: transport, CheckRedirect: retry.NoRedirect}, Policy: retry.DefaultPolicy}
	c := benchConfig(t, agent.NewOpenAIModel(model.URL+"/v1", "", doer))
	ts, err := toolclient.New("bench", tools.URL, transport)
	if err != nil {
		t.Fatal(err)
	}
	ts.CallTimeout = time.Minute
	task := parseTask(t, benchRow)
	for range 20 {
		sess := ts.NewSession()
		if res := sess.CallTool(context.Background(), "get_forecast", `{"city":"Oslo"}`); res.Failed {
			t.Fatal(res.Output)
		}
		if tr := c.Run(context.Background(), task, sess, 1); tr.Termination != agent.Completed {
			t.Fatalf("termination %s: %s", tr.Termination, tr.Error)
		}
	}
	// 20 rollouts: 60 model calls, 60 tool calls.
	model.Close() // waits for the handlers, so the counts are final
	tools.Close()
	checkReused(t, modelConns.Load(), toolConns.Load())
}

// A long answer (chunked, not read to its end by go-openai's JSON decoder) and a tool answer
// of a few hundred KB still leave the connection reusable.
func TestConnectionsAreReusedAfterLongAnswers(t *testing.T) {
	long := strings.Repeat("x", 300<<10)
	model := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		resp := benchAnswer(2)
		resp.Choices[0].Message.Content = long
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(resp) // chunked, with a final newline
	}))
	modelConns := connCounter(model)
	model.Start()
	defer model.Close()
	tools := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `"`+long+`"`)
	}))
	toolConns := connCounter(tools)
	tools.Start()
	defer tools.Close()

	transport := benchTransport()
	defer transport.CloseIdleConnections()
	doer := &retry.Doer{Client: &http.Client{Transport: transport, CheckRedirect: retry.NoRedirect}, Policy: retry.DefaultPolicy}
	m := agent.NewOpenAIModel(model.URL+"/v1", "", doer)
	ts, err := toolclient.New("bench", tools.URL, transport)
	if err != nil {
		t.Fatal(err)
	}
	sess := ts.NewSession()
	for range 5 {
		resp, err := m.CreateChatCompletion(context.Background(), openai.ChatCompletionRequest{Model: "m",
			Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "hi"}}})
		if err != nil || resp.Choices[0].Message.Content != long {
			t.Fatalf("model call: %v", err)
		}
		if res := sess.CallTool(context.Background(), "t", `{}`); res.Failed || len(res.Output) != len(long)+2 {
			t.Fatalf("tool call: %.100s", res.Output)
		}
	}
	model.Close()
	tools.Close()
	checkReused(t, modelConns.Load(), toolConns.Load())
}

// recordingModel answers a tool call until the conversation has calls tool messages, then
// text, recording where each request's messages and tools live.
type recordingModel struct {
	calls int
	msgs  []*openai.ChatCompletionMessage // the messages' array, per request
	caps  []int
	tools []*openai.Tool
}

func (m *recordingModel) CreateChatCompletion(_ context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error) {
	m.msgs = append(m.msgs, unsafe.SliceData(req.Messages))
	m.caps = append(m.caps, cap(req.Messages))
	m.tools = append(m.tools, unsafe.SliceData(req.Tools))
	if len(m.msgs) > m.calls {
		return benchAnswer(2), nil
	}
	return benchAnswer(0), nil
}

// A round's request is the rollout's one request with the trajectory's messages: the tools
// are converted once per rollout, and the messages are the slice the loop appends to, never a
// copy (a new array only where append grows it: a few times in 10 rounds).
func TestRoundsShareMessagesAndTools(t *testing.T) {
	m := &recordingModel{calls: 9}
	tr := benchConfig(t, m).Run(context.Background(), parseTask(t, benchRow), memTools{}, 7)
	if len(tr.Rounds) != 10 || len(m.msgs) != 10 || tr.Termination != agent.Completed {
		t.Fatalf("%d rounds, %d model calls, %s", len(tr.Rounds), len(m.msgs), tr.Termination)
	}
	arrays := 1
	for i := 1; i < len(m.msgs); i++ {
		if m.tools[i] != m.tools[0] || m.tools[0] == nil {
			t.Errorf("round %d: the tools were converted again", i)
		}
		if m.msgs[i] != m.msgs[i-1] {
			arrays++
			if m.caps[i] == m.caps[i-1] {
				t.Errorf("round %d: the messages were copied", i)
			}
		}
	}
	if arrays > 4 { // 3 messages, then 6, 12, 24 by append's doubling
		t.Errorf("the messages of 10 rounds were in %d arrays: copied", arrays)
	}
	if last := len(m.msgs) - 1; m.caps[last] == cap(tr.Messages) && m.msgs[last] != unsafe.SliceData(tr.Messages) {
		t.Error("the last request's messages are not the trajectory's")
	}
}
