package rundir

import (
	"encoding/json"
	"testing"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// jsonfast.LineKeys reads the keys of trajectory and NeMo Gym lines as encoding/json reads them into
// the structs Compact used, or leaves the line to encoding/json.
func TestLineKeys(t *testing.T) {
	type keys struct {
		Task    int64  `json:"task_index"`
		Rollout int64  `json:"rollout_index"`
		Arm     string `json:"arm"`
	}
	for _, tt := range []struct {
		line string
		fast bool
	}{
		{`{"task_index":4,"rollout_index":1,"arm":"multi","task_id":"t","trajectory":{"task_index":7,"arm":"x"}}`, true},
		{`{"trajectory":"\"task_index\":7","arm":"single","rollout_index":0,"task_index":2}`, true},
		{` { "task_index" : 4 , "arm" : "a" } `, true},
		{`{"task_index":4,"rollout_index":1,"arm":"multi","trajectory":null}`, true},
		{`{"task_index":null,"arm":null}`, true},
		{`{}`, true},
		{`{"task_index":4,"task_index":5}`, false},
		{`{"TASK_INDEX":4}`, false},
		{`{"arm":"a\"b"}`, false},
		{`{"arm":"é"}`, false},
		{`{"task_index":4.5}`, false},
		{`{"task_index":"4"}`, false},
		{`{"task_index":4,"trajectory":[1,2}`, false},
		{`{"task_index":4,"rollout_index":1,"arm":"multi","trajectory":{"a":1}`, false},
		{`{"task_index":4} x`, false},
		{"{\"\xff\":1,\"task_index\":4}", false},
		{`[1]`, false},
	} {
		var want keys
		werr := json.Unmarshal([]byte(tt.line), &want)
		task, rollout, arm, _, ok := jsonfast.LineKeys([]byte(tt.line), "task_index", "rollout_index", "arm")
		if tt.fast && !ok {
			t.Errorf("%s: refused", tt.line)
		}
		if ok && (werr != nil || task != want.Task || rollout != want.Rollout || string(arm) != want.Arm) {
			t.Errorf("%s: got %d %d %q, want %+v (err %v)", tt.line, task, rollout, arm, want, werr)
		}
	}
	// NeMo Gym: both keys at the end, after the verify answer; absent or null is no key.
	for _, tt := range []struct {
		line string
		has  int
	}{
		{`{"reward":1,"response":{"_ng_task_index":9},"_ng_task_index":3,"_ng_rollout_index":0}`, 3},
		{`{"reward":1,"_ng_task_index":3}`, 1},
		{`{"reward":1,"_ng_task_index":3,"_ng_rollout_index":null}`, 1},
	} {
		task, rollout, _, has, ok := jsonfast.LineKeys([]byte(tt.line), ngTaskIndexKey, ngRolloutIndexKey, "")
		if !ok || has != tt.has || task != 3 || (has == 3 && rollout != 0) {
			t.Errorf("%s: %d %d has %d ok %v", tt.line, task, rollout, has, ok)
		}
	}
}
