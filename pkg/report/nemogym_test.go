package report

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestNemoGymSplice(t *testing.T) {
	tests := []struct {
		name             string
		verify           string
		task, rollout    int64
		want             string // the exact line, without the newline
		wantErrSubstring string
	}{
		{
			name:   "keys appended, bytes kept",
			verify: `{"reward":1.0,"response":{"id":"r1","output":[]},"x":"<&>","n":1e3}`,
			task:   3, rollout: 2,
			want: `{"reward":1.0,"response":{"id":"r1","output":[]},"x":"<&>","n":1e3,"_ng_task_index":3,"_ng_rollout_index":2}`,
		},
		{
			name:   "empty object",
			verify: `{}`,
			task:   0, rollout: 0,
			want: `{"_ng_task_index":0,"_ng_rollout_index":0}`,
		},
		{
			name:   "pretty-printed answer is compacted",
			verify: "{\n  \"reward\": 0,\n  \"text\": \"a  b\\n\"\n}\n",
			task:   1, rollout: 4,
			want: `{"reward":0,"text":"a  b\n","_ng_task_index":1,"_ng_rollout_index":4}`,
		},
		{
			name:   "existing keys replaced",
			verify: `{"_ng_task_index":99,"reward":1,"_ng_rollout_index":98,"z":{"_ng_task_index":5}}`,
			task:   7, rollout: 1,
			want: `{"reward":1,"z":{"_ng_task_index":5},"_ng_task_index":7,"_ng_rollout_index":1}`,
		},
		{
			name:   "only existing keys",
			verify: `{"_ng_rollout_index":1,"_ng_task_index":2}`,
			task:   5, rollout: 6,
			want: `{"_ng_task_index":5,"_ng_rollout_index":6}`,
		},
		{
			name:   "escaped existing key replaced",
			verify: `{"_ng_task\u005findex":1,"a":2}`,
			task:   4, rollout: 0,
			want: `{"a":2,"_ng_task_index":4,"_ng_rollout_index":0}`,
		},
		{name: "array", verify: `[{"reward":1}]`, wantErrSubstring: "not a JSON object"},
		{name: "null", verify: `null`, wantErrSubstring: "not a JSON object"},
		{name: "number", verify: `1`, wantErrSubstring: "not a JSON object"},
		{name: "string", verify: `"{}"`, wantErrSubstring: "not a JSON object"},
		{name: "invalid", verify: `{"reward":`, wantErrSubstring: "not valid JSON"},
		{name: "two objects", verify: `{} {}`, wantErrSubstring: "JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "rollouts.jsonl")
			w, err := NewNemoGymWriter(path)
			if err != nil {
				t.Fatal(err)
			}
			err = w.Write(&Result{
				Record: Record{TaskIndex: tt.task, RolloutIndex: tt.rollout},
				Verify: json.RawMessage(tt.verify),
			})
			if cerr := w.Close(); cerr != nil {
				t.Fatal(cerr)
			}
			data, rerr := os.ReadFile(path)
			if rerr != nil {
				t.Fatal(rerr)
			}
			if tt.wantErrSubstring != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErrSubstring) {
					t.Fatalf("error: got %v, want one containing %q", err, tt.wantErrSubstring)
				}
				if len(data) != 0 {
					t.Errorf("a failed write left output behind: %q", data)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := string(data); got != tt.want+"\n" {
				t.Errorf("line:\n got %s\nwant %s", got, tt.want)
			}
			if !json.Valid(data) {
				t.Errorf("output is not valid JSON: %s", data)
			}
		})
	}
}

func TestNemoGymWriterSkipsFailed(t *testing.T) {
	recs := fixtureRecords(10)
	path := filepath.Join(t.TempDir(), "rollouts.jsonl")
	w, err := NewNemoGymWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	var wantSkipped int
	var wantKeys [][2]int64
	for i, r := range recs {
		res := &Result{Record: r}
		switch {
		case r.FailureClass != FailNone:
			wantSkipped++ // no verify answer
		case i%4 == 0:
			res.Verify = json.RawMessage{} // empty counts as none
			wantSkipped++
		default:
			res.Verify = json.RawMessage(`{"reward":` + itoa(int64(r.Reward*4)) + `}`)
			wantKeys = append(wantKeys, [2]int64{r.TaskIndex, r.RolloutIndex})
		}
		if err := w.Write(res); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := w.Skipped(); got != wantSkipped {
		t.Errorf("Skipped: got %d, want %d", got, wantSkipped)
	}
	lines := readLines(t, path)
	if len(lines) != len(wantKeys) {
		t.Fatalf("got %d lines, want %d", len(lines), len(wantKeys))
	}
	for i, l := range lines {
		if len(l) != 3 {
			t.Errorf("line %d: keys %v, want reward and the two index keys", i, l)
		}
		if l["_ng_task_index"] != json.Number(itoa(wantKeys[i][0])) || l["_ng_rollout_index"] != json.Number(itoa(wantKeys[i][1])) {
			t.Errorf("line %d: got %v, want task %d rollout %d", i, l, wantKeys[i][0], wantKeys[i][1])
		}
	}
}
