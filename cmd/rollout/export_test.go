package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/export"
)

// keysOf is the sorted keys of a JSON object.
func keysOf(t *testing.T, raw json.RawMessage) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not an object: %v: %.200s", err, raw)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// missing is the keys of want that got lacks.
func missing(want, got []string) []string {
	var out []string
	for _, k := range want {
		if !slices.Contains(got, k) {
			out = append(out, k)
		}
	}
	return out
}

func jsonLines(t *testing.T, path string) []map[string]json.RawMessage {
	t.Helper()
	var out []map[string]json.RawMessage
	for i, line := range strings.Split(strings.TrimSpace(readFile(t, path)), "\n") {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%s:%d: %v", path, i+1, err)
		}
		out = append(out, m)
	}
	return out
}

// rollout's run of NeMo Gym's example tasks (the model calls NeMo Gym recorded, replayed),
// exported as nemo-gym, has the shape of NeMo Gym's own rollout files (testdata/nemo-gym,
// copied from NeMo Gym): every member NeMo Gym writes at the top, in the response and in each
// output item and content part is there; the output items are of the same types in the same
// order; the rewards and responses_create_params are NeMo Gym's. The one exception, said in
// the README: without --jsonl-out, verify answer members that are neither numbers nor booleans
// (parsed_synonym_values) are not kept in the records, so not exported.
func TestExportNemoGymShape(t *testing.T) {
	t.Run("records", func(t *testing.T) { nemoGymShape(t, false) })
	t.Run("jsonl-out", func(t *testing.T) { nemoGymShape(t, true) })
}

// nemoGymShape checks the export of a run of NeMo Gym's examples; with jsonlOut the run kept
// its verify answers (--jsonl-out), and every member of NeMo Gym's lines must be there.
func nemoGymShape(t *testing.T, jsonlOut bool) {
	dir := t.TempDir()
	args := append([]string{"run", "--input", examples, "--out", dir, "--model-url", "replay:" + exampleRollouts, "--quiet"}, builtinServers...)
	if jsonlOut {
		args = append(args, "--jsonl-out", filepath.Join(t.TempDir(), "ng-run.jsonl"))
	}
	if r := runCLI(t, context.Background(), nil, args...); r.code != 0 {
		t.Fatalf("run: exit %d\n%s", r.code, r.stderr)
	}
	out := filepath.Join(t.TempDir(), "ng.jsonl")
	r := runCLI(t, context.Background(), nil, "export", dir, "--format", "nemo-gym", "-o", out)
	if r.code != 0 || !strings.Contains(r.stderr, "15 rows (nemo-gym) from 15 records") {
		t.Fatalf("export: exit %d\n%s", r.code, r.stderr)
	}
	ours := jsonLines(t, out)
	var theirs []map[string]json.RawMessage
	for _, s := range []string{"example_multi_step", "example_session_state_mgmt", "example_single_tool_call"} {
		theirs = append(theirs, jsonLines(t, filepath.Join("../../testdata/nemo-gym", s, "example_rollouts.jsonl"))...)
	}
	if len(ours) != len(theirs) {
		t.Fatalf("%d lines, NeMo Gym's %d", len(ours), len(theirs))
	}
	// NeMo Gym's line of each of ours: the one with the same last input message.
	input := func(line map[string]json.RawMessage) string {
		var rcp struct{ Input []struct{ Content any } }
		json.Unmarshal(line["responses_create_params"], &rcp)
		return fmt.Sprint(rcp.Input[len(rcp.Input)-1].Content)
	}
	rows := jsonLines(t, examples)
	for i := range ours {
		o := ours[i]
		var n map[string]json.RawMessage
		for _, c := range theirs {
			if input(c) == input(o) {
				n = c
			}
		}
		if n == nil {
			t.Fatalf("line %d: no NeMo Gym line has its conversation", i)
		}
		var task int
		json.Unmarshal(o["_ng_task_index"], &task)
		var topKeys []string
		for k, v := range n {
			if !jsonlOut && (v[0] == '[' || v[0] == '"' || v[0] == '{' && k != "response" && k != "responses_create_params") {
				continue // not a number or boolean: not in the record
			}
			topKeys = append(topKeys, k)
		}
		sort.Strings(topKeys)
		if m := missing(topKeys, keysOf(t, mustMarshal(o))); len(m) > 0 {
			t.Errorf("line %d lacks NeMo Gym's %v", i, m)
		}
		var or, nr float64
		json.Unmarshal(o["reward"], &or)
		json.Unmarshal(n["reward"], &nr)
		if or != nr {
			t.Errorf("line %d: reward %v, NeMo Gym's %v", i, or, nr)
		}
		// responses_create_params is the task row's (NeMo Gym writes it with its defaults filled in).
		if !sameJSON(t, o["responses_create_params"], rows[task]["responses_create_params"]) {
			t.Errorf("line %d: responses_create_params is not the row's", i)
		}
		if m := missing(keysOf(t, n["response"]), keysOf(t, o["response"])); len(m) > 0 {
			t.Errorf("line %d: response lacks %v", i, m)
		}
		var oResp, nResp struct{ Output []json.RawMessage }
		json.Unmarshal(o["response"], &oResp)
		json.Unmarshal(n["response"], &nResp)
		if len(oResp.Output) != len(nResp.Output) {
			t.Errorf("line %d: %d output items, NeMo Gym's %d", i, len(oResp.Output), len(nResp.Output))
			continue
		}
		for j := range oResp.Output {
			var oi, ni struct {
				Type    string
				Content []json.RawMessage
			}
			json.Unmarshal(oResp.Output[j], &oi)
			json.Unmarshal(nResp.Output[j], &ni)
			if oi.Type != ni.Type {
				t.Errorf("line %d item %d: %s, NeMo Gym's %s", i, j, oi.Type, ni.Type)
			}
			if m := missing(keysOf(t, nResp.Output[j]), keysOf(t, oResp.Output[j])); len(m) > 0 {
				t.Errorf("line %d item %d (%s) lacks %v", i, j, oi.Type, m)
			}
			for k := range min(len(oi.Content), len(ni.Content)) {
				if m := missing(keysOf(t, ni.Content[k]), keysOf(t, oi.Content[k])); len(m) > 0 {
					t.Errorf("line %d item %d content %d lacks %v", i, j, k, m)
				}
			}
		}
	}
}

func mustMarshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func sameJSON(t *testing.T, a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return fmt.Sprint(x) == fmt.Sprint(y)
}

// make run's extraction job with --capture-tokens, then each export: every format writes,
// the nemo-gym lines carry each model call's tokens on one output item (ids and log-probs of
// the same length, prompt ids), one item per model call; usage errors exit 2.
const qwen25 = "../../pkg/export/testdata/templates/Qwen-Qwen2.5-7B-Instruct.jinja"

func TestExportCapturedRun(t *testing.T) {
	dir, _ := capturedRun(t, 8, 3)
	out := t.TempDir()
	for _, f := range []string{"rl", "sft", "preference", "nemo-gym"} {
		for _, ext := range []string{".jsonl", ".parquet"} {
			path := filepath.Join(out, f+ext)
			r := runCLI(t, context.Background(), nil, "export", dir, "--format", f, "-o", path)
			if r.code != 0 || !strings.Contains(r.stderr, "rollout export: "+path) {
				t.Fatalf("export %s: exit %d\n%s", path, r.code, r.stderr)
			}
			if st, err := os.Stat(path); err != nil || st.Size() == 0 {
				t.Fatalf("%s: %v", path, err)
			}
		}
	}
	// The text layout: every row has the simulator's token ids (they are contiguous), and the
	// mask is the rl export's.
	text := filepath.Join(out, "text.jsonl")
	r := runCLI(t, context.Background(), nil, "export", dir, "--format", "sft", "--layout", "text", "--chat-template", qwen25, "-o", text)
	rows := jsonLines(t, text)
	if r.code != 0 || strings.Contains(r.stderr, export.DropNoTokens) || len(rows) == 0 {
		t.Fatalf("export --layout text: exit %d\n%s", r.code, r.stderr)
	}
	masks := map[string]bool{}
	for _, line := range jsonLines(t, filepath.Join(out, "rl.jsonl")) {
		masks[string(line["input_ids"])+string(line["loss_mask"])] = true
	}
	for i, line := range rows {
		if !masks[string(line["input_ids"])+string(line["assistant_masks"])] || !strings.Contains(string(line["text"]), "<|im_start|>assistant") {
			t.Errorf("text row %d: its ids and mask are no rl row's: %.200s", i, line["input_ids"])
		}
	}

	calls := len(trajectoryRounds(t, dir))
	// Every item with generation ids has log-probs of the same length, and there are as
	// many such items as model calls.
	items := 0
	for _, line := range jsonLines(t, filepath.Join(out, "nemo-gym.jsonl")) {
		var resp struct {
			Output []struct {
				Type     string    `json:"type"`
				Prompt   []int32   `json:"prompt_token_ids"`
				Gen      []int32   `json:"generation_token_ids"`
				LogProbs []float64 `json:"generation_log_probs"`
			} `json:"output"`
		}
		json.Unmarshal(line["response"], &resp)
		for _, it := range resp.Output {
			if it.Gen == nil {
				continue
			}
			items++
			if it.Type == "function_call_output" || len(it.Gen) != len(it.LogProbs) || len(it.Prompt) == 0 {
				t.Errorf("item %s: %d ids %d log-probs %d prompt ids", it.Type, len(it.Gen), len(it.LogProbs), len(it.Prompt))
			}
		}
	}
	if items != calls {
		t.Errorf("%d output items with tokens, %d model calls", items, calls)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"export", "--format", "rl", "-o", "x.parquet"}, "which run directory"},
		{[]string{"export", dir, "-o", "x.parquet"}, "--format is required"},
		{[]string{"export", dir, "--format", "rl"}, "-o FILE is required"},
		{[]string{"export", dir, "--format", "dpo", "-o", "x.parquet"}, `--format "dpo"`},
		{[]string{"export", dir, "--format", "rl", "-o", "x.csv"}, `unknown extension ".csv"`},
		{[]string{"export", dir, "--format", "sft", "--layout", "text", "-o", "x.jsonl"}, "give it with --chat-template FILE"},
		{[]string{"export", dir, "--format", "sft", "--layout", "text", "--chat-template", "nope.jinja", "-o", "x.jsonl"}, "--chat-template: open nope.jinja"},
		{[]string{"export", dir, "--format", "rl", "--chat-template", qwen25, "-o", "x.jsonl"}, "--chat-template is for --format sft --layout text"},
		{[]string{"export", dir, "--format", "sft", "--layout", "verl", "-o", "x.parquet"}, "give it with --chat-template FILE"},
		{[]string{"export", dir, "--format", "rl", "--layout", "verl", "--chat-template", qwen25, "-o", "x.parquet"}, "--layout verl is a layout of --format sft"},
	} {
		r := runCLI(t, context.Background(), nil, tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, exitUsage, tc.want)
		}
	}
	r = runCLI(t, context.Background(), nil, "export", t.TempDir(), "--format", "rl", "-o", filepath.Join(out, "y.parquet"))
	if r.code != 1 || !strings.Contains(r.stderr, "not a run directory") {
		t.Errorf("not a run: exit %d %q", r.code, r.stderr)
	}
}
