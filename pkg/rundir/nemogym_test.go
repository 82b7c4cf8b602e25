package rundir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/record/recordtest"
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
			want: `{"reward":1.0,"response":{"id":"r1","output":[]},"x":"<&>","n":1e3,"_ng_task_index":3,"_ng_rollout_index":2,"_ng_arm":"multi"}`,
		},
		{
			name:   "empty object",
			verify: `{}`,
			task:   0, rollout: 0,
			want: `{"_ng_task_index":0,"_ng_rollout_index":0,"_ng_arm":"multi"}`,
		},
		{
			name:   "pretty-printed answer is compacted",
			verify: "{\n  \"reward\": 0,\n  \"text\": \"a  b\\n\"\n}\n",
			task:   1, rollout: 4,
			want: `{"reward":0,"text":"a  b\n","_ng_task_index":1,"_ng_rollout_index":4,"_ng_arm":"multi"}`,
		},
		{
			name:   "existing keys replaced",
			verify: `{"_ng_task_index":99,"reward":1,"_ng_rollout_index":98,"_ng_arm":"x","z":{"_ng_task_index":5}}`,
			task:   7, rollout: 1,
			want: `{"reward":1,"z":{"_ng_task_index":5},"_ng_task_index":7,"_ng_rollout_index":1,"_ng_arm":"multi"}`,
		},
		{
			name:   "only existing keys",
			verify: `{"_ng_rollout_index":1,"_ng_task_index":2}`,
			task:   5, rollout: 6,
			want: `{"_ng_task_index":5,"_ng_rollout_index":6,"_ng_arm":"multi"}`,
		},
		{
			name:   "escaped existing key replaced",
			verify: `{"_ng_task\u005findex":1,"a":2}`,
			task:   4, rollout: 0,
			want: `{"a":2,"_ng_task_index":4,"_ng_rollout_index":0,"_ng_arm":"multi"}`,
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
			err = w.Write(&record.Result{
				Record: record.Record{TaskIndex: tt.task, RolloutIndex: tt.rollout, Arm: "multi"},
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
	recs := recordtest.Fixture(10)
	path := filepath.Join(t.TempDir(), "rollouts.jsonl")
	w, err := NewNemoGymWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	var wantSkipped int
	var wantKeys [][2]int64
	var wantIdx []int
	for i, r := range recs {
		res := &record.Result{Record: r}
		switch {
		case r.FailureClass != record.FailNone:
			wantSkipped++ // no verify answer
		case i%4 == 0:
			res.Verify = json.RawMessage{} // empty counts as none
			wantSkipped++
		default:
			res.Verify = json.RawMessage(`{"reward":` + itoa(int64(r.Reward*4)) + `}`)
			wantKeys = append(wantKeys, [2]int64{r.TaskIndex, r.RolloutIndex})
			wantIdx = append(wantIdx, i)
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
		if len(l) != 4 || l["_ng_arm"] != recs[wantIdx[i]].Arm {
			t.Errorf("line %d: keys %v, want reward, the two index keys and the arm %q", i, l, recs[wantIdx[i]].Arm)
		}
		if l["_ng_task_index"] != json.Number(itoa(wantKeys[i][0])) || l["_ng_rollout_index"] != json.Number(itoa(wantKeys[i][1])) {
			t.Errorf("line %d: got %v, want task %d rollout %d", i, l, wantKeys[i][0], wantKeys[i][1])
		}
	}
}

// NeMo Gym lines are keyed by arm as well: after a crash and a compaction, each of three arms
// keeps its line of every rollout with a record, and WriteNemoGym makes the --jsonl-out file
// from them alone (a line of a rollout without a record, and a line that is not the run's, go).
func TestNemoGymThreeArmsCompactAndWrite(t *testing.T) {
	dir := t.TempDir()
	side := filepath.Join(dir, NemoGymFile)
	s, err := OpenSink(dir, SinkOptions{NemoGym: side})
	if err != nil {
		t.Fatal(err)
	}
	arms := []string{"single", "multi", "workflow"}
	for task := range int64(3) {
		for _, arm := range arms {
			r := result(task, 0, "", 1)
			r.Record.Arm = arm
			r.Verify = json.RawMessage(`{"reward":1,"arm_seen":"` + arm + `"}`)
			if err := s.Write(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The crash: task 3's line of arm single is on disk, its record is not; a line without an
	// arm (written by someone else) is there too.
	f, err := os.OpenFile(side, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"reward":1,"_ng_task_index":3,"_ng_rollout_index":0,"_ng_arm":"single"}` + "\n")
	f.WriteString(`{"reward":0,"_ng_task_index":0,"_ng_rollout_index":0}` + "\n")
	f.Close()

	done, err := Compact(dir, side, nil)
	if err != nil || done.Len() != 9 {
		t.Fatalf("Compact: %d done, %v", done.Len(), err)
	}
	if got := fileLines(t, side); len(got) != 9 {
		t.Fatalf("after Compact the NeMo Gym lines are %d, want 9 (3 tasks × 3 arms):\n%s", len(got), strings.Join(got, "\n"))
	}

	dest := filepath.Join(t.TempDir(), "rollouts.jsonl")
	os.WriteFile(dest, []byte("an older file\n"), 0o644)
	n, err := WriteNemoGym(dir, dest)
	if err != nil || n != 9 {
		t.Fatalf("WriteNemoGym: %d lines, %v", n, err)
	}
	seen := map[string]int{}
	for _, l := range readLines(t, dest) {
		arm, _ := l["_ng_arm"].(string)
		if l["arm_seen"] != arm {
			t.Errorf("line %v: its arm key is not the arm that wrote it", l)
		}
		seen[fmt.Sprintf("%v/%v/%s", l["_ng_task_index"], l["_ng_rollout_index"], arm)]++
	}
	for task := range 3 {
		for _, arm := range arms {
			if k := fmt.Sprintf("%d/0/%s", task, arm); seen[k] != 1 {
				t.Errorf("%s: %d lines, want 1", k, seen[k])
			}
		}
	}
	if _, err := os.Stat(dest + ".tmp"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s.tmp left behind: %v", dest, err)
	}

	// A run where no rollout had a verify answer: an empty file, not an error.
	empty := t.TempDir()
	if n, err := WriteNemoGym(empty, dest); err != nil || n != 0 || len(fileLines(t, dest)) != 0 {
		t.Errorf("empty run: %d lines, %v", n, err)
	}
	// A directory that cannot be written to is an error naming the file.
	if _, err := WriteNemoGym(dir, filepath.Join(dir, "missing", "x.jsonl")); err == nil || !strings.Contains(err.Error(), "x.jsonl") {
		t.Errorf("unwritable destination: %v", err)
	}
}
