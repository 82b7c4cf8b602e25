package export_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// rollout is one rollout of a test run: its key, reward (or failure) and whether its model
// calls carry tokens.
type rollout struct {
	task, repeat int
	arm          string
	reward       float64
	class        record.FailureClass
	tokens       bool
	parts        bool // the user message as content parts (go-openai's MultiContent)
	// endsOnTool: the rollout ends after the tool's answer (max rounds), without a final answer.
	endsOnTool bool
	truncated  bool   // the final answer was cut off by the token limit
	badArgs    bool   // the tool call's arguments are not a JSON object
	reasoning  string // the final answer's reasoning
	args       string // the tool call's arguments, when not {"to":TASK}
	// parallel: the first answer calls the tool twice, and two tool messages follow it.
	parallel bool
	content  string // the first answer's text beside its tool call
}

// taskRow is test task i: a system and a user message, and one tool.
func taskRow(i int) string {
	return fmt.Sprintf(`{"id": "t%d", "responses_create_params": {"input": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Count to %d."}], "tools": [{"type": "function", "name": "count", "description": "counts", "parameters": {"type": "object", "properties": {"to": {"type": "integer"}}}}]}}`, i, i)
}

// trajectory is what the agent records for rollout r of task row i: a tool call, its output,
// a final answer; the rounds' tokens when r.tokens.
func trajectory(i int, r rollout) []byte {
	tr := &agent.Trajectory{Termination: agent.Completed}
	tr.Messages = []openai.ChatCompletionMessage{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: fmt.Sprintf("Count to %d.", i)},
		{Role: "assistant", ToolCalls: []openai.ToolCall{{ID: "call_1", Type: "function", Function: openai.FunctionCall{Name: "count", Arguments: fmt.Sprintf(`{"to":%d}`, i)}}}},
		{Role: "tool", ToolCallID: "call_1", Content: fmt.Sprintf("1..%d", i)},
		{Role: "assistant", Content: fmt.Sprintf("Done: %d (repeat %d).", i, r.repeat)},
	}
	tr.Rounds = []agent.Round{
		{Index: 0, FinishReason: "tool_calls", Usage: agent.Usage{PromptTokens: 3, CompletionTokens: 2}, ToolCalls: []agent.ToolCall{{CallID: "call_1", Name: "count"}}},
		{Index: 1, FinishReason: "stop", Usage: agent.Usage{PromptTokens: 5, CompletionTokens: 1}},
	}
	if r.parts {
		tr.Messages[1] = openai.ChatCompletionMessage{Role: "user", MultiContent: []openai.ChatMessagePart{
			{Type: "text", Text: "Count "}, {Type: "text", Text: fmt.Sprintf("to %d.", i)}}}
	}
	if r.args != "" {
		tr.Messages[2].ToolCalls[0].Function.Arguments = r.args
	}
	if r.parallel {
		tr.Messages[2].ToolCalls = append(tr.Messages[2].ToolCalls, openai.ToolCall{ID: "call_2", Type: "function", Function: openai.FunctionCall{Name: "count", Arguments: `{"to":99}`}})
		tr.Messages = append(tr.Messages[:4], append([]openai.ChatCompletionMessage{{Role: "tool", ToolCallID: "call_2", Content: "1..99"}}, tr.Messages[4:]...)...)
		tr.Rounds[0].ToolCalls = append(tr.Rounds[0].ToolCalls, agent.ToolCall{CallID: "call_2", Name: "count"})
	}
	tr.Messages[2].Content = r.content
	if r.badArgs {
		tr.Messages[2].ToolCalls[0].Function.Arguments = `{"to":`
	}
	if r.truncated {
		tr.Rounds[1].FinishReason = "length"
	}
	tr.Rounds[1].Reasoning = r.reasoning
	if r.endsOnTool {
		tr.Messages, tr.Rounds = tr.Messages[:len(tr.Messages)-1], tr.Rounds[:1]
		tr.Termination = agent.MaxRounds
	}
	if r.tokens {
		tr.Rounds[0].PromptTokenIDs, tr.Rounds[0].GenerationTokenIDs, tr.Rounds[0].GenerationLogProbs = []int32{1, 2, 3}, []int32{10, int32(i)}, []float64{-0.5, -0.25}
		if len(tr.Rounds) > 1 {
			tr.Rounds[1].PromptTokenIDs, tr.Rounds[1].GenerationTokenIDs, tr.Rounds[1].GenerationLogProbs = []int32{1, 2, 3, 10, int32(i)}, []int32{99}, []float64{-1.5}
		}
	}
	b, err := tr.MarshalJSON()
	if err != nil {
		panic(err)
	}
	return b
}

// writeRun writes a run directory of tasks rows through rundir's real writer: its manifest
// (naming the task file), journal and trajectories. It returns the directory.
func writeRun(t *testing.T, tasks int, rollouts []rollout) string {
	t.Helper()
	root := t.TempDir()
	input := filepath.Join(root, "tasks.jsonl")
	var rows strings.Builder
	for i := range tasks {
		rows.WriteString(taskRow(i) + "\n")
	}
	if err := os.WriteFile(input, []byte(rows.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	dir, sink := openRun(t, root, input)
	for _, r := range rollouts {
		arm := r.arm
		if arm == "" {
			arm = "multi"
		}
		rec := record.Record{TaskIndex: int64(r.task), RolloutIndex: int64(r.repeat), TaskID: fmt.Sprintf("t%d", r.task), Arm: arm,
			Reward: r.reward, HasReward: r.class == "", FailureClass: r.class, Termination: "completed", Model: "m",
			RewardComponents: map[string]float64{"accuracy": r.reward, "steps": 2}}
		res := &record.Result{Record: rec}
		if r.class == "" {
			res.Trajectory = trajectory(r.task, r)
		} else {
			rec.Reward, rec.RewardComponents = 0, nil
			res.Record = rec
			if r.class != record.FailBadTask {
				res.Trajectory = []byte(`{"messages":[],"rounds":[],"usage":{"prompt_tokens":0,"completion_tokens":0},"termination":"model_error"}`)
			}
		}
		if err := sink.Write(res); err != nil {
			t.Fatal(err)
		}
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// openRun prepares the run directory root/run of the task file input and opens its sink (the
// directory is unlocked at once: the tests write it from one goroutine).
func openRun(tb testing.TB, root, input string) (string, *rundir.Sink) {
	tb.Helper()
	dir := filepath.Join(root, "run")
	d, err := rundir.Prepare(dir, rundir.PrepareOptions{Input: input, Config: map[string]int{}})
	if err != nil {
		tb.Fatal(err)
	}
	defer d.Unlock()
	sink, err := d.OpenSink(nil)
	if err != nil {
		tb.Fatal(err)
	}
	return dir, sink
}

// readJSONL decodes every line of path into a T, checking that each is one JSON object.
func readJSONL[T any](t *testing.T, path string) []T {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for n := 1; sc.Scan(); n++ {
		var v T
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s:%d: %v\n%s", path, n, err, sc.Text())
		}
		out = append(out, v)
	}
	return out
}
