package export_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/rollout-dev/rollout/pkg/export"
)

// A nemo-gym line: the row's responses_create_params, the response's output items in order
// (the call, its output, the answer) with each model call's tokens on its last item, the
// reward and the numeric components at the top, and rollout's keys.
func TestNemoGymRow(t *testing.T) {
	dir := writeRun(t, 1, []rollout{{task: 0, repeat: 0, reward: 1, tokens: true}, {task: 0, repeat: 1, reward: 0}})
	out := filepath.Join(t.TempDir(), "ng.jsonl")
	rep := exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatNemoGym, Output: out})
	if rep.Rows != 2 {
		t.Fatalf("%d rows", rep.Rows)
	}
	type item struct {
		Type      string    `json:"type"`
		CallID    string    `json:"call_id"`
		Arguments string    `json:"arguments"`
		Output    string    `json:"output"`
		Prompt    []int32   `json:"prompt_token_ids"`
		Gen       []int32   `json:"generation_token_ids"`
		LogProbs  []float64 `json:"generation_log_probs"`
		Content   []struct {
			Text string `json:"text"`
		} `json:"content"`
	}
	type line struct {
		RCP      json.RawMessage `json:"responses_create_params"`
		Reward   float64         `json:"reward"`
		Accuracy float64         `json:"accuracy"`
		Steps    float64         `json:"steps"`
		Task     int             `json:"_ng_task_index"`
		Rollout  int             `json:"_ng_rollout_index"`
		Arm      string          `json:"_ng_arm"`
		Response struct {
			CreatedAt float64 `json:"created_at"`
			Output    []item  `json:"output"`
		} `json:"response"`
	}
	var lines []line
	for _, raw := range readJSONL[json.RawMessage](t, out) {
		var l line
		if err := json.Unmarshal(raw, &l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	for i, l := range lines {
		var rcp struct {
			Input []struct{ Role, Content string }
		}
		if json.Unmarshal(l.RCP, &rcp) != nil || len(rcp.Input) != 2 || rcp.Input[1].Content != "Count to 0." {
			t.Errorf("line %d: responses_create_params %s", i, l.RCP)
		}
		if l.Reward != float64(1-i) || l.Accuracy != l.Reward || l.Steps != 2 || l.Task != 0 || l.Rollout != i || l.Arm != "multi" || l.Response.CreatedAt != 0 {
			t.Errorf("line %d: %+v", i, l)
		}
		types := []string{}
		for _, it := range l.Response.Output {
			types = append(types, it.Type)
		}
		if !slices.Equal(types, []string{"function_call", "function_call_output", "message"}) {
			t.Fatalf("line %d: items %v", i, types)
		}
		fc, fco, msg := l.Response.Output[0], l.Response.Output[1], l.Response.Output[2]
		if fc.CallID != "call_1" || fc.Arguments != `{"to":0}` || fco.CallID != "call_1" || fco.Output != "1..0" || msg.Content[0].Text != "Done: 0 (repeat "+string(rune('0'+i))+")." {
			t.Errorf("line %d: items %+v", i, l.Response.Output)
		}
		if fco.Gen != nil {
			t.Errorf("line %d: tokens on a tool output", i)
		}
		if i == 0 && (!slices.Equal(fc.Gen, []int32{10, 0}) || !slices.Equal(fc.Prompt, []int32{1, 2, 3}) || !slices.Equal(fc.LogProbs, []float64{-0.5, -0.25}) ||
			!slices.Equal(msg.Gen, []int32{99}) || !slices.Equal(msg.Prompt, []int32{1, 2, 3, 10, 0})) {
			t.Errorf("line 0: tokens %+v", l.Response.Output)
		}
		if i == 1 && (fc.Gen != nil || msg.Gen != nil) {
			t.Errorf("line 1 has tokens it never had")
		}
	}
}

// --include-failed with a failed rollout whose trajectory has no messages: no line for it
// (no model answer to write), the others as usual.
func TestNemoGymIncludeFailed(t *testing.T) {
	dir := writeRun(t, 3, baseRun)
	out := filepath.Join(t.TempDir(), "ng.jsonl")
	rep := exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatNemoGym, Output: out, IncludeFailed: true})
	if rep.Rows != 8 || rep.Dropped[export.DropNoAnswer] != 1 || rep.Dropped[export.DropBadTask] != 1 {
		t.Errorf("report %+v", rep)
	}
	if n := len(readJSONL[json.RawMessage](t, out)); n != 8 {
		t.Errorf("%d lines, want 8", n)
	}
}

// nemoGymProfile is what NeMo Gym's reward profiling (nemo_gym/reward_profile.py) and rollout
// collection (rollout_collection.py) require of rollout lines: each keyed by
// (_ng_task_index, _ng_rollout_index) once ("Duplicate result row for rollout key"), and each
// with agent_ref.name (its per-agent metrics read result["agent_ref"]["name"]). It returns
// the agent names and how many lines each has.
func nemoGymProfile(t *testing.T, path string) map[string]int {
	t.Helper()
	seen := map[[2]int64]bool{}
	agents := map[string]int{}
	for i, l := range readJSONL[map[string]json.RawMessage](t, path) {
		var task, rollout int64
		if json.Unmarshal(l["_ng_task_index"], &task) != nil || json.Unmarshal(l["_ng_rollout_index"], &rollout) != nil {
			t.Fatalf("line %d: no _ng_task_index/_ng_rollout_index", i+1)
		}
		k := [2]int64{task, rollout}
		if seen[k] {
			t.Fatalf("line %d: Duplicate result row for rollout key (%d, %d)", i+1, task, rollout)
		}
		seen[k] = true
		var ref struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(l["agent_ref"], &ref); err != nil || ref.Name == "" {
			t.Fatalf("line %d: agent_ref %s: NeMo Gym's aggregation reads agent_ref.name", i+1, l["agent_ref"])
		}
		agents[ref.Name]++
	}
	return agents
}

// A run of two arms exported as nemo-gym passes NeMo Gym's reward profiling: every line has
// agent_ref (the row's name, with the arm when the export has several), and the arms' lines
// have different rollout keys; rollout's own repeat stays in _rollout_repeat.
func TestNemoGymArmsApart(t *testing.T) {
	dir := writeRun(t, 3, baseRun)
	out := filepath.Join(t.TempDir(), "ng.jsonl")
	exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatNemoGym, Output: out})
	agents := nemoGymProfile(t, out)
	if len(agents) != 2 || agents["multi"] != 7 || agents["single"] != 1 {
		t.Errorf("agents %v, want multi 7 and single 1", agents)
	}
	out1 := filepath.Join(t.TempDir(), "ng1.jsonl")
	exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatNemoGym, Output: out1, Arm: "multi"})
	for i, l := range readJSONL[map[string]json.RawMessage](t, out1) {
		if string(l["_ng_rollout_index"]) != string(l["_rollout_repeat"]) {
			t.Errorf("line %d: one arm, yet _ng_rollout_index %s is not the repeat %s", i+1, l["_ng_rollout_index"], l["_rollout_repeat"])
		}
	}
}
