package view

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/rundir"
	"github.com/rollout-dev/rollout/pkg/runner"
	"github.com/rollout-dev/rollout/pkg/servers"
	"github.com/rollout-dev/rollout/pkg/sim"
	"github.com/rollout-dev/rollout/pkg/toolclient"
)

// hostile is a tool result that would run script, close the <pre> or a <textarea>, if it were
// not escaped.
const hostile = `</pre></textarea><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">` +
	`<a href="javascript:window.__pwned=3">click</a> & "quotes" 'too'`

// hostileEndpoint and hostileNote are the hostile rollout's endpoint (of a pool) and the
// note of its second round's tokens; the failed rollouts the fixture adds answered from pool-a.
const (
	hostileEndpoint = `pool-<script>window.__pwned=6</script>`
	hostileNote     = `</div><script>window.__pwned=7</script> generation ids missing`
)

// hostileTask is the task index of the hostile rollout the fixture adds.
const hostileTask = 1000

// counterTask is a task of the built-in counter server: increment the counter n times, then
// the server checks the count against expected.
func counterTask(id string, n, expected int) string {
	rounds := ""
	for i := range n {
		if i > 0 {
			rounds += ","
		}
		rounds += `[{"name":"increment_counter","arguments":{"count":1}}]`
	}
	return fmt.Sprintf(`{"id":%q,"category":%q,"responses_create_params":{"input":[{"role":"system","content":"You count."},{"role":"user","content":"Increment the counter %d times, then say its value."}],`+
		`"tools":[{"type":"function","name":"increment_counter","parameters":{"type":"object","properties":{"count":{"type":"integer"}},"required":["count"]}}]},`+
		`"initial_count":0,"expected_count":%d,"reference_plan":{"rounds":[%s],"final":"The counter is at %d."}}`+"\n",
		id, []string{"easy", "hard"}[n%2], n, expected, rounds, n)
}

// keep is an Output that forwards to the sink without closing it, so that the test can add
// results of its own after the run.
type keep struct{ s *rundir.Sink }

func (k keep) Write(r *record.Result) error { return k.s.Write(r) }
func (k keep) Close() error                 { return nil }

var (
	fixtureOnce sync.Once
	fixtureDir  string
	fixtureErr  error
)

// fixtureRun is a real run directory, made once per test binary: counter tasks run by two
// arms (single, multi) three times each against the built-in counter server and the
// simulator (some 500s and wrong arguments), over loopback HTTP, written by rundir's sink
// and finished by rundir.Finish. Then results of the test's own: a rollout whose tool result
// is hostile markup, and rollouts that failed as rate_limited and model_unavailable.
func fixtureRun(t *testing.T) string {
	t.Helper()
	fixtureOnce.Do(func() {
		root, err := os.MkdirTemp("", "view-fixture")
		if err != nil {
			fixtureErr = err
			return
		}
		fixtureDir, fixtureErr = makeRun(root)
	})
	if fixtureErr != nil {
		t.Fatal(fixtureErr)
	}
	return fixtureDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixtureDir != "" {
		os.RemoveAll(filepath.Dir(fixtureDir))
	}
	os.Exit(code)
}

func makeRun(root string) (string, error) {
	tasks := filepath.Join(root, "tasks.jsonl")
	rows := ""
	for i := range 8 {
		n := 1 + i%4
		expected := n
		if i%3 == 2 {
			expected++ // the plan falls short: reward 0
		}
		rows += counterTask(fmt.Sprintf("count-%02d", i), n, expected)
	}
	if err := os.WriteFile(tasks, []byte(rows), 0o644); err != nil {
		return "", err
	}
	counter, err := servers.New("counter", servers.Options{})
	if err != nil {
		return "", err
	}
	rs := httptest.NewServer(counter)
	defer rs.Close()
	plans, err := sim.LoadTasks(tasks)
	if err != nil {
		return "", err
	}
	simulator, err := sim.New(plans, sim.Options{Seed: 3, WrongArgument: 0.15, HTTP500: 0.1})
	if err != nil {
		return "", err
	}
	model := httptest.NewServer(simulator)
	defer model.Close()

	dir := filepath.Join(root, "run")
	d, err := rundir.Prepare(dir, rundir.PrepareOptions{Input: tasks, Config: map[string]any{"arms": "single,multi", "num_repeats": 3, "model": "rollout-sim"}})
	if err != nil {
		return "", err
	}
	defer d.Unlock()
	sink, err := d.OpenSink(nil)
	if err != nil {
		return "", err
	}
	transport := runner.NewTransport(4)
	server, err := toolclient.New("counter", rs.URL, transport)
	if err != nil {
		return "", err
	}
	doer := &retry.Doer{Client: &http.Client{Transport: transport}, Policy: retry.Policy{MaxAttempts: 1}}
	_, err = runner.Run(context.Background(), runner.Options{
		Input: tasks, Repeats: 3, Concurrency: 4, Seed: 1,
		Arms:    []runner.Arm{{Name: "single", Policy: agent.PolicySingle}, {Name: "multi", Policy: agent.PolicyMulti}},
		Servers: runner.Servers{Default: server},
		Agent:   agent.Config{Model: agent.NewOpenAIModel(model.URL+"/v1", "", doer), ModelName: "rollout-sim", MaxRounds: 8},
	}, []runner.Output{keep{sink}})
	if err != nil {
		sink.Close()
		return "", err
	}
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	// The hostile rollout: markup in the user message, the reasoning, the arguments and the tool result.
	traj := agent.Trajectory{Termination: agent.Completed, Rounds: []agent.Round{
		{Index: 0, ModelLatencyMs: 12.5, Usage: agent.Usage{PromptTokens: 30, CompletionTokens: 7}, FinishReason: "tool_calls",
			ToolCalls: []agent.ToolCall{{CallID: "call_1", Name: "increment_counter", Status: 200, LatencyMs: 1.5}},
			Endpoint:  hostileEndpoint, PromptTokenIDs: []int32{1, 2, 3}, GenerationTokenIDs: []int32{4, 5}, GenerationLogProbs: []float64{-0.1, -0.2}},
		{Index: 1, ModelLatencyMs: 8, Usage: agent.Usage{PromptTokens: 50, CompletionTokens: 5}, FinishReason: "stop",
			Endpoint: "pool-a", GenerationLogProbs: []float64{-0.5}, TokenNote: hostileNote},
	}}
	traj.Messages = append(traj.Messages,
		msg("system", "You count.", ""),
		msg("user", "<b>bold?</b> Increment the counter </textarea>", ""),
	)
	a := msg("assistant", "", "<script>window.__pwned = 4</script> thinking")
	a.ToolCalls = append(a.ToolCalls, toolCall("call_1", "increment_counter", `{"count":"<script>window.__pwned=5</script>"}`))
	traj.Messages = append(traj.Messages, a, msg("tool", hostile, ""), msg("assistant", "The counter is at <i>1</i>.", ""))
	traj.Messages[3].ToolCallID = "call_1"
	tj, err := json.Marshal(traj)
	if err != nil {
		return "", err
	}
	results := []record.Result{{Record: record.Record{TaskIndex: hostileTask, RolloutIndex: 0, TaskID: `hostile-<script>x</script>`, Arm: "multi", Endpoint: hostileEndpoint,
		Reward: 0, HasReward: true, Termination: "completed", Rounds: 2, ToolCalls: 1, StartedAt: start, SourceFile: tasks,
		RewardComponents: map[string]float64{"count_ok": 0}}, Trajectory: tj}}
	for i, class := range []record.FailureClass{record.FailRateLimited, record.FailRateLimited, record.FailRateLimited, record.FailModelUnavailable, record.FailModelUnavailable} {
		ft, _ := json.Marshal(agent.Trajectory{Termination: agent.ModelError, FailureClass: class, Error: "HTTP 429: slow down",
			Messages: []openai.ChatCompletionMessage{msg("user", "Increment the counter.", "")}})
		results = append(results, record.Result{Record: record.Record{TaskIndex: int64(hostileTask + 1 + i), TaskID: fmt.Sprintf("failing-%d", i),
			Arm: []string{"single", "multi"}[i%2], FailureClass: class, Termination: "model_error", Error: "HTTP 429: slow down",
			StartedAt: start, SourceFile: tasks, Endpoint: "pool-a"}, Trajectory: ft})
	}
	for i := range results {
		if err := sink.Write(&results[i]); err != nil {
			sink.Close()
			return "", err
		}
	}
	if err := sink.Close(); err != nil {
		return "", err
	}
	if _, err := rundir.Finish(dir, rundir.FinishOptions{Stats: report.StatsOptions{GroupBy: "category"}}); err != nil {
		return "", err
	}
	return dir, nil
}

func msg(role, content, reasoning string) openai.ChatCompletionMessage {
	return openai.ChatCompletionMessage{Role: role, Content: content, ReasoningContent: reasoning}
}

func toolCall(id, name, args string) openai.ToolCall {
	return openai.ToolCall{ID: id, Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: name, Arguments: args}}
}
