package dataset

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"
)

// FuzzReader reads arbitrary bytes as a JSONL file (plain or, by its magic bytes, gzip). It
// must never panic; every task it returns has File and Line set, Index counts up from 0 and
// Line goes up; a task either parses (its fields are valid JSON, and the row rebuilt from them
// means what the line means) or has Err at its own FILE:LINE; invalid JSON is never accepted.
// The seed corpus is in testdata/fuzz/FuzzReader.
func FuzzReader(f *testing.F) {
	f.Add([]byte(okRow + "\n" + okRow))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := NewReader(bytes.NewReader(data), "fuzz")
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz: ") {
				t.Fatalf("open error without the name: %v", err)
			}
			return
		}
		r.MaxLineBytes = 16 << 10
		lastLine := 0
		for i := 0; ; i++ {
			task, err := r.Next()
			if err == io.EOF {
				return
			}
			if err != nil {
				if task != nil || !strings.HasPrefix(err.Error(), "fuzz:") {
					t.Fatalf("reading error %v (task %v)", err, task)
				}
				return
			}
			if task.Index != i || task.File != "fuzz" || task.Line <= lastLine {
				t.Fatalf("task %d: index %d file %q line %d after line %d", i, task.Index, task.File, task.Line, lastLine)
			}
			lastLine = task.Line
			if task.Err != nil {
				e := task.Err
				if e.File != "fuzz" || e.Line != task.Line || e.Msg == "" || !strings.HasPrefix(e.Error(), "fuzz:") {
					t.Fatalf("row error %+v at line %d", e, task.Line)
				}
				continue
			}
			checkParsed(t, task)
		}
	})
}

func checkParsed(t *testing.T, task *Task) {
	t.Helper()
	if task.Params == nil || len(task.Params.Input) == 0 {
		t.Fatalf("line %d parsed without params or input", task.Line)
	}
	var whole map[string]any
	if err := json.Unmarshal(task.Raw, &whole); err != nil {
		t.Fatalf("line %d accepted, but encoding/json says: %v\n%q", task.Line, err, task.Raw)
	}
	if len(whole) != len(task.Fields) {
		t.Fatalf("line %d: %d fields, encoding/json sees %d", task.Line, len(task.Fields), len(whole))
	}
	for _, fl := range task.Fields {
		if !json.Valid(fl.Value) {
			t.Fatalf("line %d: field %q is not valid JSON: %q", task.Line, fl.Key, fl.Value)
		}
	}
	var rebuilt map[string]any
	if err := json.Unmarshal(task.AppendObject(nil, nil), &rebuilt); err != nil || !reflect.DeepEqual(whole, rebuilt) {
		t.Fatalf("line %d: the row rebuilt from its fields differs (%v)", task.Line, err)
	}
	for _, tool := range task.Params.Tools {
		if tool.Name == "" || (tool.Parameters != nil && !json.Valid(tool.Parameters)) {
			t.Fatalf("line %d: tool %+v", task.Line, tool)
		}
	}
}
