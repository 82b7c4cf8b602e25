package export_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/export"
)

// checkChatFineTuning checks one line against the rules of OpenAI's chat fine-tuning format:
// an object of "messages" (and optionally "tools", "parallel_tool_calls"); roles system,
// user, assistant, tool; every content a string, null only for an assistant message that
// calls tools; tool calls {"id", "type": "function", "function": {"name", "arguments"}} with
// arguments a string holding JSON; each tool message answering a call made before it; at
// least one assistant message; tools {"type": "function", "function": {"name", "parameters"}}.
func checkChatFineTuning(line []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(line, &top); err != nil {
		return err
	}
	for k := range top {
		if k != "messages" && k != "tools" && k != "parallel_tool_calls" {
			return fmt.Errorf("unknown key %q", k)
		}
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(top["messages"], &msgs); err != nil || len(msgs) == 0 {
		return fmt.Errorf("messages: %v (%d)", err, len(msgs))
	}
	calls := map[string]bool{}
	assistants := 0
	for i, m := range msgs {
		var role string
		json.Unmarshal(m["role"], &role)
		content, hasContent := m["content"]
		isNull := !hasContent || string(content) == "null"
		var text string
		if !isNull && json.Unmarshal(content, &text) != nil {
			return fmt.Errorf("message %d: content %s is not a string", i, content)
		}
		switch role {
		case "system", "user":
			if isNull {
				return fmt.Errorf("message %d (%s): no content", i, role)
			}
		case "assistant":
			assistants++
			var tcs []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      *string          `json:"name"`
					Arguments *json.RawMessage `json:"arguments"`
				} `json:"function"`
			}
			if raw, ok := m["tool_calls"]; ok {
				if err := json.Unmarshal(raw, &tcs); err != nil {
					return fmt.Errorf("message %d: tool_calls: %v", i, err)
				}
			}
			if isNull && len(tcs) == 0 {
				return fmt.Errorf("message %d: assistant without content or tool calls", i)
			}
			for _, tc := range tcs {
				var args string
				if tc.ID == "" || tc.Type != "function" || tc.Function.Name == nil || *tc.Function.Name == "" || tc.Function.Arguments == nil ||
					json.Unmarshal(*tc.Function.Arguments, &args) != nil || !json.Valid([]byte(args)) {
					return fmt.Errorf("message %d: bad tool call %+v", i, tc)
				}
				calls[tc.ID] = true
			}
		case "tool":
			var id string
			json.Unmarshal(m["tool_call_id"], &id)
			if !calls[id] || isNull {
				return fmt.Errorf("message %d: tool message answers no call (%q)", i, id)
			}
		default:
			return fmt.Errorf("message %d: role %q", i, role)
		}
	}
	if assistants == 0 {
		return fmt.Errorf("no assistant message")
	}
	if raw, ok := top["tools"]; ok {
		var tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name       string         `json:"name"`
				Parameters map[string]any `json:"parameters"`
			} `json:"function"`
		}
		if err := json.Unmarshal(raw, &tools); err != nil || len(tools) == 0 {
			return fmt.Errorf("tools: %v", err)
		}
		for _, tl := range tools {
			if tl.Type != "function" || tl.Function.Name == "" || tl.Function.Parameters["type"] != "object" {
				return fmt.Errorf("bad tool %+v", tl)
			}
		}
	}
	return nil
}

// checkChatTemplate checks one sft line as the HF-template trainers read it: NeMo RL's
// OpenAIFormatDataset.format_data (the last message is the assistant's), TRL's SFTTrainer
// (tools is JSON text it json.loads), and a chat template (Qwen's: every content a string, a
// tool call's arguments an object for | tojson); every message has the same keys (role,
// content, tool_calls, tool_call_id, reasoning_content), so that datasets keeps them one struct.
func checkChatTemplate(line []byte) error {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(line, &top); err != nil {
		return err
	}
	var msgs []map[string]json.RawMessage
	if err := json.Unmarshal(top["messages"], &msgs); err != nil || len(msgs) == 0 {
		return fmt.Errorf("messages: %v (%d)", err, len(msgs))
	}
	for i, m := range msgs {
		if len(m) != 5 {
			return fmt.Errorf("message %d has keys %v", i, keys(m))
		}
		for _, k := range []string{"role", "content", "tool_calls", "tool_call_id", "reasoning_content"} {
			if _, ok := m[k]; !ok {
				return fmt.Errorf("message %d lacks %s", i, k)
			}
		}
		var content string
		if err := json.Unmarshal(m["content"], &content); err != nil || string(m["content"]) == "null" {
			return fmt.Errorf("message %d: content %s is not a string", i, m["content"])
		}
		var tcs []struct {
			Function struct {
				Arguments json.RawMessage `json:"arguments"`
			} `json:"function"`
		}
		if err := json.Unmarshal(m["tool_calls"], &tcs); err != nil || tcs == nil {
			return fmt.Errorf("message %d: tool_calls %s", i, m["tool_calls"])
		}
		for _, tc := range tcs {
			var obj map[string]any
			if err := json.Unmarshal(tc.Function.Arguments, &obj); err != nil {
				return fmt.Errorf("message %d: arguments %s are not an object", i, tc.Function.Arguments)
			}
		}
	}
	var last string
	json.Unmarshal(msgs[len(msgs)-1]["role"], &last)
	if last != "assistant" {
		return fmt.Errorf("the last message is %q, not the assistant's (NeMo RL: assert messages[-1][\"role\"] == \"assistant\")", last)
	}
	var toolsText string
	if err := json.Unmarshal(top["tools"], &toolsText); err != nil {
		return fmt.Errorf("tools %s is not JSON text", top["tools"])
	}
	var tools []any
	if err := json.Unmarshal([]byte(toolsText), &tools); err != nil {
		return fmt.Errorf("tools: json.loads fails: %v", err)
	}
	return nil
}

func keys(m map[string]json.RawMessage) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// The checker refuses what OpenAI's format refuses.
func TestChatFineTuningChecker(t *testing.T) {
	for _, bad := range []string{
		`{"messages": []}`,
		`{"messages": [{"role": "user", "content": "hi"}]}`,
		`{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}], "extra": 1}`,
		`{"messages": [{"role": "developer", "content": "hi"}, {"role": "assistant", "content": "x"}]}`,
		`{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}]}`,
		`{"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "zz", "content": "1"}, {"role": "assistant", "content": "x"}]}`,
		`{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": null}]}`,
	} {
		if checkChatFineTuning([]byte(bad)) == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

func TestSFT(t *testing.T) {
	dir := writeRun(t, 3, baseRun)
	one := 1.0
	for _, tc := range []struct {
		name    string
		opt     export.Options
		keys    []string // "task/repeat/arm" of the rows
		dropped map[string]int
	}{
		{"all", export.Options{}, []string{"0/0/multi", "0/1/multi", "1/0/multi", "0/2/multi", "0/3/multi", "1/1/multi", "1/2/multi", "1/0/single"},
			map[string]int{export.DropFailed: 1, export.DropBadTask: 1}},
		{"min-reward", export.Options{MinReward: &one}, []string{"0/0/multi", "1/0/multi", "0/3/multi", "1/1/multi", "1/2/multi"},
			map[string]int{export.DropMinReward: 3}},
		{"best-of-group", export.Options{BestOfGroup: true}, []string{"0/0/multi", "1/0/multi", "1/0/single"},
			map[string]int{export.DropNotBest: 5}},
		{"best-of-group-pooled", export.Options{BestOfGroup: true, PoolArms: true}, []string{"0/0/multi", "1/0/multi"},
			map[string]int{export.DropNotBest: 6}},
		{"best-of-group-arm", export.Options{BestOfGroup: true, Arm: "single"}, []string{"1/0/single"},
			map[string]int{export.DropArm: 7}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := tc.opt
			opt.Dirs, opt.Format, opt.Output = []string{dir}, export.FormatSFT, filepath.Join(t.TempDir(), "sft.jsonl")
			rep := exportTo(t, opt)
			for k, v := range tc.dropped {
				if rep.Dropped[k] != v {
					t.Errorf("dropped %q: %d, want %d (%v)", k, rep.Dropped[k], v, rep.Dropped)
				}
			}
			data, _ := os.ReadFile(opt.Output)
			lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
			if len(lines) != len(tc.keys) || rep.Rows != len(tc.keys) {
				t.Fatalf("%d lines (report %d), want %d", len(lines), rep.Rows, len(tc.keys))
			}
			for i, line := range lines {
				if err := checkChatTemplate([]byte(line)); err != nil {
					t.Errorf("line %d: %v\n%s", i+1, err, line)
				}
				// Which rollout: the final answer names the task and repeat.
				var row struct{ Messages []struct{ Content string } }
				json.Unmarshal([]byte(line), &row)
				final := row.Messages[len(row.Messages)-1].Content
				var task, repeat int
				fmt.Sscanf(final, "Done: %d (repeat %d).", &task, &repeat)
				if want := tc.keys[i]; !strings.HasPrefix(want, fmt.Sprintf("%d/%d/", task, repeat)) {
					t.Errorf("line %d is task %d repeat %d, want %s", i+1, task, repeat, want)
				}
			}
		})
	}
}

// chatMsg is a message of the chat-template shape.
type chatMsg struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	ToolCalls []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string         `json:"name"`
			Arguments map[string]any `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	ToolCallID       *string `json:"tool_call_id"`
	ReasoningContent *string `json:"reasoning_content"`
}

// sft rows end with the model's answer: a rollout that ended on a tool's answer is cut after
// its last assistant message (its tool call), one whose answer was cut off by the token limit
// or whose tool-call arguments are not JSON is left out (with its reason), and an answer's
// reasoning is kept as reasoning_content.
func TestSFTAnswers(t *testing.T) {
	dir := writeRun(t, 5, []rollout{
		{task: 0, repeat: 0, reward: 1, reasoning: "Counting is easy."}, {task: 1, repeat: 0, reward: 0.5, endsOnTool: true},
		{task: 2, repeat: 0, reward: 0, truncated: true}, {task: 3, repeat: 0, reward: 0, badArgs: true}, {task: 4, repeat: 0, reward: 1},
	})
	out := filepath.Join(t.TempDir(), "sft.jsonl")
	rep := exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatSFT, Output: out})
	if rep.Rows != 3 || rep.Dropped[export.DropTruncated] != 1 || rep.Dropped[export.DropMalformed] != 1 {
		t.Fatalf("rows %d, dropped %v", rep.Rows, rep.Dropped)
	}
	lines := strings.Split(strings.TrimSpace(readFileT(t, out)), "\n")
	for i, line := range lines {
		if err := checkChatTemplate([]byte(line)); err != nil {
			t.Errorf("line %d: %v\n%s", i+1, err, line)
		}
	}
	var rows []struct{ Messages []chatMsg }
	for _, line := range lines {
		var r struct{ Messages []chatMsg }
		json.Unmarshal([]byte(line), &r)
		rows = append(rows, r)
	}
	if m := rows[0].Messages; len(m) != 5 || m[4].ReasoningContent == nil || *m[4].ReasoningContent != "Counting is easy." || m[2].ReasoningContent != nil {
		t.Errorf("task 0: reasoning not kept on its answer: %+v", m)
	}
	if m := rows[1].Messages; len(m) != 3 || m[2].Role != "assistant" || len(m[2].ToolCalls) != 1 || m[2].Content != "" {
		t.Errorf("task 1 (ended on a tool answer): %+v", m)
	}
}

// --layout openai: sft lines pass OpenAI's chat fine-tuning rules (checkChatFineTuning:
// arguments as JSON strings), with weight 0 on an answer cut off by the token limit and 1 on
// the others, and no reasoning_content; a rollout with arguments that are not JSON is left out.
// Preference lines are OpenAI's DPO format: input (messages, tools), preferred_output and
// non_preferred_output. Parquet is refused.
func TestOpenAILayout(t *testing.T) {
	dir := writeRun(t, 4, []rollout{
		{task: 0, repeat: 0, reward: 1, reasoning: "r"}, {task: 1, repeat: 0, reward: 0, truncated: true}, {task: 2, repeat: 0, badArgs: true},
		{task: 3, repeat: 0, reward: 1}, {task: 3, repeat: 1, reward: 0, args: `{"to":9}`},
	})
	out := filepath.Join(t.TempDir(), "sft.jsonl")
	rep := exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatSFT, Layout: export.LayoutOpenAI, Output: out})
	if rep.Rows != 4 || rep.Dropped[export.DropMalformed] != 1 {
		t.Fatalf("rows %d dropped %v", rep.Rows, rep.Dropped)
	}
	for i, line := range strings.Split(strings.TrimSpace(readFileT(t, out)), "\n") {
		if err := checkChatFineTuning([]byte(line)); err != nil {
			t.Errorf("line %d: %v\n%s", i+1, err, line)
		}
		if strings.Contains(line, "reasoning_content") {
			t.Errorf("line %d has reasoning_content", i+1)
		}
		var row struct {
			Messages []struct {
				Role   string `json:"role"`
				Weight *int   `json:"weight"`
			} `json:"messages"`
		}
		json.Unmarshal([]byte(line), &row)
		last := row.Messages[len(row.Messages)-1]
		want := 1
		if i == 1 {
			want = 0 // task 1's final answer was cut off
		}
		if last.Role != "assistant" || last.Weight == nil || *last.Weight != want || row.Messages[2].Weight == nil || *row.Messages[2].Weight != 1 {
			t.Errorf("line %d: weights %+v", i+1, row.Messages)
		}
	}
	pref := filepath.Join(t.TempDir(), "dpo.jsonl")
	exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatPreference, Layout: export.LayoutOpenAI, Output: pref})
	lines := readJSONL[struct {
		Input struct {
			Messages []map[string]any `json:"messages"`
			Tools    []map[string]any `json:"tools"`
		} `json:"input"`
		Preferred    []map[string]any `json:"preferred_output"`
		NonPreferred []map[string]any `json:"non_preferred_output"`
	}](t, pref)
	if len(lines) != 1 || len(lines[0].Input.Messages) != 2 || len(lines[0].Input.Tools) != 1 || len(lines[0].Preferred) != 1 || len(lines[0].NonPreferred) != 1 {
		t.Fatalf("dpo lines %+v", lines)
	}
	if args := lines[0].NonPreferred[0]["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)["arguments"]; args != `{"to":9}` {
		t.Errorf("non-preferred arguments %v, want the JSON string", args)
	}
	_, err := export.Run(context.Background(), export.Options{Dirs: []string{dir}, Format: export.FormatSFT, Layout: export.LayoutOpenAI, Output: filepath.Join(t.TempDir(), "x.parquet")})
	if err == nil || !strings.Contains(err.Error(), "JSONL") {
		t.Errorf("parquet with --layout openai: %v", err)
	}
}

type prefLine struct {
	Prompt         []chatMsg `json:"prompt"`
	Chosen         []chatMsg `json:"chosen"`
	Rejected       []chatMsg `json:"rejected"`
	Tools          string    `json:"tools"`
	TaskIndex      int64     `json:"task_index"`
	TaskID         string    `json:"task_id"`
	ChosenReward   float64   `json:"chosen_reward"`
	RejectedReward float64   `json:"rejected_reward"`
	ChosenRepeat   int64     `json:"chosen_repeat"`
	RejectedRepeat int64     `json:"rejected_repeat"`
	ChosenArm      string    `json:"chosen_arm"`
	RejectedArm    string    `json:"rejected_arm"`
}

func TestPreference(t *testing.T) {
	dir := writeRun(t, 3, baseRun)
	for _, tc := range []struct {
		name   string
		opt    export.Options
		pairs  []string // "task: chosen repeat/arm > rejected repeat/arm"
		groups map[string]int
	}{
		// Pairs are within an arm by default: t1's multi rollouts all reward 1, its single one
		// is alone.
		{"all-arms", export.Options{}, []string{"t0: 0/multi > 1/multi"}, map[string]int{export.DropEqual: 1, export.DropNoPair: 1}},
		// Pooled, t1's multi and single repeat 0 make a pair of the same turns: none.
		{"pool-arms", export.Options{PoolArms: true}, []string{"t0: 0/multi > 1/multi"}, map[string]int{export.DropSameAnswers: 1}},
		{"multi", export.Options{Arm: "multi"}, []string{"t0: 0/multi > 1/multi"}, map[string]int{export.DropEqual: 1}},
		{"margin", export.Options{Arm: "multi", MinMargin: 1.5}, nil, map[string]int{export.DropEqual: 1, export.DropMargin: 1}},
		{"margin-met", export.Options{MinMargin: 1, Arm: "multi"}, []string{"t0: 0/multi > 1/multi"}, nil},
		// With the failed rollout in (reward 0), t0's first lowest reward is still repeat 1's.
		{"include-failed", export.Options{Arm: "multi", IncludeFailed: true}, []string{"t0: 0/multi > 1/multi"}, map[string]int{export.DropEqual: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := tc.opt
			opt.Dirs, opt.Format, opt.Output = []string{dir}, export.FormatPreference, filepath.Join(t.TempDir(), "pref.jsonl")
			rep := exportTo(t, opt)
			for k, v := range tc.groups {
				if rep.GroupsDropped[k] != v {
					t.Errorf("groups dropped %q: %d, want %d (%v)", k, rep.GroupsDropped[k], v, rep.GroupsDropped)
				}
			}
			rows := readJSONL[prefLine](t, opt.Output)
			var got []string
			for _, p := range rows {
				got = append(got, fmt.Sprintf("%s: %d/%s > %d/%s", p.TaskID, p.ChosenRepeat, p.ChosenArm, p.RejectedRepeat, p.RejectedArm))
				if p.ChosenReward <= p.RejectedReward || p.ChosenReward-p.RejectedReward < opt.MinMargin {
					t.Errorf("%s: chosen %v rejected %v", p.TaskID, p.ChosenReward, p.RejectedReward)
				}
				// The rollouts call the tool alike and differ in their final answers: the
				// context is the task's prompt with the shared tool call and output, each side
				// the final answer alone.
				if len(p.Prompt) != 4 || p.Prompt[0].Role != "system" || p.Prompt[1].Role != "user" || p.Prompt[3].Role != "tool" ||
					p.Prompt[2].ToolCalls[0].Function.Arguments["to"] != float64(p.TaskIndex) ||
					len(p.Chosen) != 1 || len(p.Rejected) != 1 || p.Chosen[0].Role != "assistant" || p.Rejected[0].Role != "assistant" ||
					!strings.HasPrefix(p.Tools, `[{"function":{"name":"count"`) {
					t.Errorf("%s: prompt %+v chosen %+v rejected %+v", p.TaskID, p.Prompt, p.Chosen, p.Rejected)
				}
				if !strings.Contains(p.Chosen[0].Content, fmt.Sprintf("repeat %d", p.ChosenRepeat)) {
					t.Errorf("%s: the chosen messages are not rollout %d's: %s", p.TaskID, p.ChosenRepeat, p.Chosen[0].Content)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.pairs) {
				t.Errorf("pairs %q, want %q", got, tc.pairs)
			}
		})
	}
}

// Rollouts that differ in their first tool call: the pair is the prompt and each side's tool
// call alone (TRL's DPO would count the tool's output as the policy's); in NeMo RL's layout the
// same, as context and ranked completions.
func TestPreferenceSplit(t *testing.T) {
	dir := writeRun(t, 1, []rollout{{task: 0, repeat: 0, reward: 1}, {task: 0, repeat: 1, reward: 0, args: `{"to":7}`}})
	out := filepath.Join(t.TempDir(), "pref.jsonl")
	exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatPreference, Output: out})
	rows := readJSONL[prefLine](t, out)
	if len(rows) != 1 {
		t.Fatalf("%d pairs", len(rows))
	}
	p := rows[0]
	if len(p.Prompt) != 2 || len(p.Chosen) != 1 || len(p.Rejected) != 1 || p.Chosen[0].ToolCalls[0].Function.Arguments["to"] != 0.0 ||
		p.Rejected[0].ToolCalls[0].Function.Arguments["to"] != 7.0 {
		t.Errorf("pair %+v", p)
	}
	nrl := filepath.Join(t.TempDir(), "pref-nemo-rl.jsonl")
	exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatPreference, Output: nrl, Layout: export.LayoutNemoRL})
	for _, l := range readJSONL[map[string]json.RawMessage](t, nrl) {
		// NeMo RL's preference_preprocessor: two completions, ranks apart, lists of messages.
		var ctx []chatMsg
		var comps []struct {
			Rank       int       `json:"rank"`
			Completion []chatMsg `json:"completion"`
		}
		if json.Unmarshal(l["context"], &ctx) != nil || json.Unmarshal(l["completions"], &comps) != nil || len(comps) != 2 ||
			comps[0].Rank == comps[1].Rank || len(ctx) != 2 || comps[0].Completion[0].ToolCalls[0].Function.Arguments["to"] != 0.0 {
			t.Errorf("nemo-rl line %s", l)
		}
	}
}

// A failed rollout with no messages that would be a group's rejected (--include-failed) makes
// no pair, rather than one with an empty side; the reason is counted.
func TestPreferenceNoAnswer(t *testing.T) {
	dir := writeRun(t, 1, []rollout{{task: 0, repeat: 0, reward: 1}, {task: 0, repeat: 1, class: "timeout"}})
	out := filepath.Join(t.TempDir(), "pref.jsonl")
	rep := exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatPreference, Output: out, IncludeFailed: true})
	if rep.Rows != 0 || rep.Dropped[export.DropNoAnswer] != 1 {
		t.Errorf("report %+v", rep)
	}
	if data, _ := os.ReadFile(out); len(data) != 0 {
		t.Errorf("wrote %s", data)
	}
}
