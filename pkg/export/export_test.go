package export_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/rollout-dev/rollout/pkg/export"
	"github.com/rollout-dev/rollout/pkg/record"
)

type msg struct {
	Role      string `json:"role"`
	Content   string `json:"content"`
	ToolCalls []struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	ToolCallID       *string `json:"tool_call_id"`
	ReasoningContent *string `json:"reasoning_content"`
}

// component is a reward component of an rl row.
type component struct {
	Name  string  `json:"name" parquet:"name"`
	Value float64 `json:"value" parquet:"value"`
}

// componentOf is the value of the component named name (NaN when none).
func componentOf(cs []component, name string) float64 {
	for _, c := range cs {
		if c.Name == name {
			return c.Value
		}
	}
	return math.NaN()
}

type call struct {
	PromptTokenIDs     []int32   `json:"prompt_token_ids"`
	GenerationTokenIDs []int32   `json:"generation_token_ids"`
	GenerationLogProbs []float32 `json:"generation_log_probs"`
}

// rlLine is an rl row as JSON: every member named (unknown ones fail the decoding).
type rlLine struct {
	Run              string      `json:"run"`
	TaskIndex        int64       `json:"task_index"`
	TaskID           string      `json:"task_id"`
	GroupID          string      `json:"group_id"`
	Repeat           int64       `json:"repeat"`
	Arm              string      `json:"arm"`
	Reward           float64     `json:"reward"`
	RewardComponents []component `json:"reward_components"`
	Advantage        float64     `json:"advantage"`
	RewardMinusMean  float64     `json:"reward_minus_mean"`
	GroupSize        int64       `json:"group_size"`
	GroupMean        float64     `json:"group_mean"`
	GroupStd         float64     `json:"group_std"`
	Termination      string      `json:"termination"`
	FailureClass     string      `json:"failure_class"`
	Messages         []msg       `json:"messages"`
	Tools            string      `json:"tools"`
	Calls            []call      `json:"calls"`
	InputIDs         []int32     `json:"input_ids"`
	LossMask         []int32     `json:"loss_mask"`
}

// baseRun: task 0 rewards 1, 0, 0.5, 1 and a failed rollout; task 1 all 1 (a uniform group),
// plus one rollout of another arm; task 2 a bad row. Task 0 repeat 0 has tokens.
var baseRun = []rollout{
	{task: 0, repeat: 0, reward: 1, tokens: true}, {task: 0, repeat: 1, reward: 0, parts: true}, {task: 1, repeat: 0, reward: 1},
	{task: 0, repeat: 2, reward: 0.5}, {task: 0, repeat: 3, reward: 1}, {task: 0, repeat: 4, class: record.FailModelUnavailable},
	{task: 1, repeat: 1, reward: 1}, {task: 1, repeat: 2, reward: 1}, {task: 2, repeat: 0, class: record.FailBadTask},
	{task: 1, repeat: 0, arm: "single", reward: 0},
}

// advantages computes, apart from the package, each reward's (r − mean) / (sample std + ε)
// and r − mean, two passes over the rewards.
func advantages(rewards []float64) (norm, plain []float64) {
	mean := 0.0
	for _, r := range rewards {
		mean += r
	}
	mean /= float64(len(rewards))
	ss := 0.0
	for _, r := range rewards {
		ss += (r - mean) * (r - mean)
	}
	std := 0.0
	if len(rewards) > 1 {
		std = math.Sqrt(ss / float64(len(rewards)-1))
	}
	for _, r := range rewards {
		norm = append(norm, (r-mean)/(std+export.Epsilon))
		plain = append(plain, r-mean)
	}
	return norm, plain
}

func exportTo(t *testing.T, opt export.Options) *export.Report {
	t.Helper()
	rep, err := export.Run(context.Background(), opt)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestRL(t *testing.T) {
	dir := writeRun(t, 3, baseRun)
	type want struct {
		rows    int
		dropped map[string]int
		groups  map[string][]float64 // task id → rewards of the rows, in journal order
	}
	for _, tc := range []struct {
		name string
		opt  export.Options
		want want
	}{
		{"default", export.Options{Arm: "multi"}, want{7, map[string]int{export.DropFailed: 1, export.DropBadTask: 1, export.DropArm: 1},
			map[string][]float64{"t0/multi": {1, 0, 0.5, 1}, "t1/multi": {1, 1, 1}}}},
		{"drop-uniform", export.Options{Arm: "multi", DropUniformGroups: true}, want{4, map[string]int{export.DropFailed: 1, export.DropBadTask: 1, export.DropArm: 1, export.DropUniform: 3},
			map[string][]float64{"t0/multi": {1, 0, 0.5, 1}}}},
		{"include-failed", export.Options{Arm: "multi", IncludeFailed: true}, want{8, map[string]int{export.DropBadTask: 1, export.DropArm: 1},
			map[string][]float64{"t0/multi": {1, 0, 0.5, 1, 0}, "t1/multi": {1, 1, 1}}}},
		// Groups are (task, arm): the single arm's rollout of t1 is a group of its own.
		{"all-arms", export.Options{}, want{8, map[string]int{export.DropFailed: 1, export.DropBadTask: 1},
			map[string][]float64{"t0/multi": {1, 0, 0.5, 1}, "t1/multi": {1, 1, 1}, "t1/single": {0}}}},
		{"pool-arms", export.Options{PoolArms: true}, want{8, map[string]int{export.DropFailed: 1, export.DropBadTask: 1},
			map[string][]float64{"t0": {1, 0, 0.5, 1}, "t1": {1, 1, 1, 0}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := tc.opt
			opt.Dirs, opt.Format, opt.Output = []string{dir}, export.FormatRL, filepath.Join(t.TempDir(), "rl.jsonl")
			rep := exportTo(t, opt)
			if rep.Rows != tc.want.rows || rep.Kept != tc.want.rows || rep.Read != len(baseRun) {
				t.Errorf("rows %d kept %d read %d, want %d, %d, %d", rep.Rows, rep.Kept, rep.Read, tc.want.rows, tc.want.rows, len(baseRun))
			}
			for k, v := range tc.want.dropped {
				if rep.Dropped[k] != v {
					t.Errorf("dropped %q: %d, want %d (%v)", k, rep.Dropped[k], v, rep.Dropped)
				}
			}
			if uniform := rep.GroupsDropped[export.DropUniform]; uniform != min(tc.want.dropped[export.DropUniform], 1) {
				t.Errorf("uniform groups dropped: %d", uniform)
			}
			var printed strings.Builder
			rep.Print(&printed)
			for k, v := range tc.want.dropped {
				if line := fmt.Sprintf("  dropped %d: %s\n", v, k); !strings.Contains(printed.String(), line) {
					t.Errorf("report lacks %q:\n%s", line, printed.String())
				}
			}
			rows := readJSONL[rlLine](t, opt.Output)
			byGroup := map[string][]rlLine{}
			for _, r := range rows {
				byGroup[r.GroupID] = append(byGroup[r.GroupID], r)
			}
			for g, rewards := range tc.want.groups {
				got := byGroup[g]
				norm, plain := advantages(rewards)
				if len(got) != len(rewards) {
					t.Fatalf("group %s: %d rows, want %d", g, len(got), len(rewards))
				}
				for i, r := range got {
					if r.Reward != rewards[i] || math.Abs(r.Advantage-norm[i]) > 1e-9 || math.Abs(r.RewardMinusMean-plain[i]) > 1e-12 || int(r.GroupSize) != len(rewards) {
						t.Errorf("group %s row %d: reward %v advantage %v (want %v) r-mean %v (want %v) size %d",
							g, i, r.Reward, r.Advantage, norm[i], r.RewardMinusMean, plain[i], r.GroupSize)
					}
				}
			}
			for _, r := range rows {
				var tools []map[string]any
				if err := json.Unmarshal([]byte(r.Tools), &tools); err != nil {
					t.Errorf("tools %q: %v", r.Tools, err)
				}
				if r.FailureClass == "" && (len(r.Messages) != 5 || r.Messages[1].Content != fmt.Sprintf("Count to %d.", r.TaskIndex) || r.Messages[2].Content != "" || r.Messages[2].ToolCalls[0].Function.Arguments == "" ||
					r.Messages[3].ToolCallID == nil || *r.Messages[3].ToolCallID != "call_1" || r.Messages[2].ToolCallID != nil || len(tools) != 1 || tools[0]["type"] != "function") {
					t.Errorf("task %d repeat %d: messages %+v tools %v", r.TaskIndex, r.Repeat, r.Messages, r.Tools)
				}
				tokens := r.TaskIndex == 0 && r.Repeat == 0
				// The sequence: the last call's prompt (1 2 3 10 0) and generation (99); the
				// mask on what each call generated (10 0, then 99).
				if tokens != (len(r.InputIDs) > 0) || tokens && (!slices.Equal(r.InputIDs, []int32{1, 2, 3, 10, 0, 99}) || !slices.Equal(r.LossMask, []int32{0, 0, 0, 1, 1, 1})) {
					t.Errorf("task %d repeat %d: input_ids %v loss_mask %v", r.TaskIndex, r.Repeat, r.InputIDs, r.LossMask)
				}
				if tokens != (len(r.Calls) == 2) || tokens && (!slices.Equal(r.Calls[0].GenerationTokenIDs, []int32{10, 0}) ||
					!slices.Equal(r.Calls[1].PromptTokenIDs, []int32{1, 2, 3, 10, 0}) || !slices.Equal(r.Calls[1].GenerationLogProbs, []float32{-1.5})) {
					t.Errorf("task %d repeat %d: calls %+v", r.TaskIndex, r.Repeat, r.Calls)
				}
				if r.FailureClass == "" && (componentOf(r.RewardComponents, "accuracy") != r.Reward || len(r.RewardComponents) != 2 || r.RewardComponents[0].Name != "accuracy" || r.RewardComponents[1].Name != "steps") {
					t.Errorf("components %v", r.RewardComponents)
				}
			}
		})
	}
}

// The Parquet file read back with parquet-go's generic reader: the schema's nested columns
// are lists of structs and of int32/float32, and the values are the JSONL export's.
func TestRLParquet(t *testing.T) {
	dir := writeRun(t, 3, baseRun)
	out := t.TempDir()
	pq, js := filepath.Join(out, "rl.parquet"), filepath.Join(out, "rl.jsonl")
	exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatRL, Output: pq})
	exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatRL, Output: js})

	f, err := os.Open(pq)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	schema := pf.Schema().String()
	for _, want := range []string{
		"repeated group list {", // LIST-annotated columns
		"required int32 element (INT(32,true))", "required float element",
		"required binary content (STRING)", "optional binary tool_call_id (STRING)",
	} {
		if !strings.Contains(schema, want) {
			t.Errorf("schema lacks %q:\n%s", want, schema)
		}
	}
	type pqMsg struct {
		Role      string `parquet:"role"`
		Content   string `parquet:"content"`
		ToolCalls []struct {
			ID       string `parquet:"id"`
			Function struct {
				Name      string `parquet:"name"`
				Arguments string `parquet:"arguments"`
			} `parquet:"function"`
		} `parquet:"tool_calls,list"`
	}
	type pqRow struct {
		TaskID           string      `parquet:"task_id"`
		Repeat           int64       `parquet:"repeat"`
		Arm              string      `parquet:"arm"`
		Advantage        float64     `parquet:"advantage"`
		RewardComponents []component `parquet:"reward_components,list"`
		Messages         []pqMsg     `parquet:"messages,list"`
		Tools            string      `parquet:"tools"`
		Calls            []struct {
			Prompt []int32   `parquet:"prompt_token_ids,list"`
			Gen    []int32   `parquet:"generation_token_ids,list"`
			LP     []float32 `parquet:"generation_log_probs,list"`
		} `parquet:"calls,list"`
	}
	rows := make([]pqRow, pf.NumRows())
	r := parquet.NewGenericReader[pqRow](pf)
	if n, err := r.Read(rows); n != len(rows) || (err != nil && n != len(rows)) {
		t.Fatalf("read %d of %d rows: %v", n, len(rows), err)
	}
	want := readJSONL[rlLine](t, js)
	if len(rows) != len(want) || len(rows) != 8 {
		t.Fatalf("%d Parquet rows, %d JSONL rows", len(rows), len(want))
	}
	for i, got := range rows {
		w := want[i]
		if got.TaskID != w.TaskID || got.Repeat != w.Repeat || got.Arm != w.Arm || got.Advantage != w.Advantage || componentOf(got.RewardComponents, "accuracy") != componentOf(w.RewardComponents, "accuracy") {
			t.Errorf("row %d: %+v, JSONL %+v", i, got, w)
		}
		if len(got.Messages) != len(w.Messages) || len(got.Calls) != len(w.Calls) {
			t.Fatalf("row %d: %d messages %d calls, JSONL %d %d", i, len(got.Messages), len(got.Calls), len(w.Messages), len(w.Calls))
		}
		for j, m := range got.Messages {
			if m.Role != w.Messages[j].Role || m.Content != w.Messages[j].Content || len(m.ToolCalls) != len(w.Messages[j].ToolCalls) {
				t.Errorf("row %d message %d: %+v, JSONL %+v", i, j, m, w.Messages[j])
			}
		}
		for j, c := range got.Calls {
			if !slices.Equal(c.Prompt, w.Calls[j].PromptTokenIDs) || !slices.Equal(c.Gen, w.Calls[j].GenerationTokenIDs) || !slices.Equal(c.LP, w.Calls[j].GenerationLogProbs) {
				t.Errorf("row %d call %d: %+v, JSONL %+v", i, j, c, w.Calls[j])
			}
		}
		var tools []map[string]any
		if err := json.Unmarshal([]byte(got.Tools), &tools); err != nil || len(tools) != 1 {
			t.Errorf("row %d: tools %q (%v)", i, got.Tools, err)
		}
	}
}
