package rundir

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/record/recordtest"
)

// readLines parses every line of a JSONL file into a map.
func readLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Errorf("%s does not end in a newline", path)
	}
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("line %d %q: %v", len(out)+1, sc.Text(), err)
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func mustJSON(t *testing.T, s string) any {
	t.Helper()
	var v any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return v
}

func TestTrajectoryWriter(t *testing.T) {
	recs := recordtest.Fixture(4)
	results := []*record.Result{
		{Record: recs[0], Trajectory: json.RawMessage(`{"messages":[{"role":"user","content":"a <b> & c"}],"rounds":[]}`)},
		{Record: recs[1], Trajectory: nil},
		{Record: recs[2], Trajectory: json.RawMessage("{\n  \"messages\": [\n    {\"role\": \"assistant\"}\n  ]\n}\n")},
		{Record: recs[3], Trajectory: json.RawMessage(`[1,2,3]`)},
	}
	path := filepath.Join(t.TempDir(), "trajectories.jsonl")
	w, err := NewTrajectoryWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		if err := w.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, path)
	if len(lines) != len(results) {
		t.Fatalf("got %d lines, want %d", len(lines), len(results))
	}
	for i, r := range results {
		want := map[string]any{
			"task_index":    json.Number(itoa(r.Record.TaskIndex)),
			"rollout_index": json.Number(itoa(r.Record.RolloutIndex)),
			"arm":           r.Record.Arm,
			"task_id":       r.Record.TaskID,
			"reward":        json.Number(strconv.FormatFloat(r.Record.Reward, 'f', -1, 64)),
			"has_reward":    r.Record.HasReward,
			"termination":   r.Record.Termination,
			"failure_class": string(r.Record.FailureClass),
			"trajectory":    nil,
		}
		if r.Trajectory != nil {
			want["trajectory"] = mustJSON(t, string(r.Trajectory))
		}
		if !reflect.DeepEqual(lines[i], want) {
			t.Errorf("line %d:\n got %v\nwant %v", i, lines[i], want)
		}
	}
	// HTML characters are kept as they are, not escaped.
	data, _ := os.ReadFile(path)
	if !bytes.Contains(data, []byte(`"a <b> & c"`)) {
		t.Errorf("HTML characters were escaped: %s", data)
	}

	// Reopening appends.
	w, err = NewTrajectoryWriter(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(results[0]); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := len(readLines(t, path)); got != len(results)+1 {
		t.Errorf("after reopening: %d lines, want %d", got, len(results)+1)
	}
}

func TestTrajectoryWriterFailures(t *testing.T) {
	t.Run("invalid trajectory", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "t.jsonl")
		w, err := NewTrajectoryWriter(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(&record.Result{Trajectory: json.RawMessage(`{"messages":[`)}); err == nil {
			t.Error("no error for invalid JSON")
		}
		ok := &record.Result{Record: record.Record{TaskIndex: 7}, Trajectory: json.RawMessage(`{}`)}
		if err := w.Write(ok); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		lines := readLines(t, path)
		if len(lines) != 1 || lines[0]["task_index"] != json.Number("7") {
			t.Errorf("a failed write left output behind: %v", lines)
		}
		if err := w.Write(ok); err == nil {
			t.Error("Write after Close: no error")
		}
		if err := w.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
	t.Run("missing directory", func(t *testing.T) {
		if _, err := NewTrajectoryWriter(filepath.Join(t.TempDir(), "no", "t.jsonl")); err == nil {
			t.Error("no error")
		}
	})
}

func TestJSONLTornLine(t *testing.T) {
	tests := []struct {
		name, before, want string
	}{
		{"empty", "", ""},
		{"complete", "{\"a\":1}\n", "{\"a\":1}\n"},
		{"torn tail", "{\"a\":1}\n{\"b\":", "{\"a\":1}\n"},
		{"only a torn line", "{\"b\":", ""},
		{"long torn tail", "{\"a\":1}\n{\"b\":\"" + strings.Repeat("x", 200_000), "{\"a\":1}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.jsonl")
			if err := os.WriteFile(path, []byte(tt.before), 0o644); err != nil {
				t.Fatal(err)
			}
			w, err := NewNemoGymWriter(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Write(&record.Result{Verify: json.RawMessage(`{"reward":1}`)}); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			got, _ := os.ReadFile(path)
			want := tt.want + `{"reward":1,"_ng_task_index":0,"_ng_rollout_index":0,"_ng_arm":""}` + "\n"
			if string(got) != want {
				t.Errorf("got %q, want %q", trunc(string(got)), trunc(want))
			}
		})
	}
}

func trunc(s string) string {
	if len(s) > 200 {
		return s[:100] + "..." + s[len(s)-100:]
	}
	return s
}

func itoa(i int64) string {
	b, _ := json.Marshal(i)
	return string(b)
}
