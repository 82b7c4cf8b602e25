package dataset

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readAll(t *testing.T, r *Reader) []*Task {
	t.Helper()
	var tasks []*Task
	for {
		task, err := r.Next()
		if err == io.EOF {
			return tasks
		}
		if err != nil {
			t.Fatal(err)
		}
		tasks = append(tasks, task)
	}
}

// Every NeMo Gym file, tasks and rollout records alike, reads without error.
func TestReadsNemoGymPeerData(t *testing.T) {
	files, err := filepath.Glob("../../testdata/nemo-gym/*/*.jsonl")
	if err != nil || len(files) != 6 {
		t.Fatalf("want 6 peer files, got %d (%v)", len(files), err)
	}
	for _, f := range files {
		r, err := Open(f)
		if err != nil {
			t.Fatal(err)
		}
		tasks := readAll(t, r)
		r.Close()
		if len(tasks) != 5 {
			t.Errorf("%s: %d tasks, want 5", f, len(tasks))
		}
		for _, task := range tasks {
			if task.Err != nil {
				t.Errorf("%s: %v", f, task.Err)
				continue
			}
			if len(task.Params.Input) == 0 || len(task.Params.Tools) == 0 {
				t.Errorf("%s:%d: no input or tools parsed", f, task.Line)
			}
		}
	}
}

// The row is kept byte-for-byte, unknown fields included, in order.
func TestKeepsUnknownFieldsByteForByte(t *testing.T) {
	row := `{"id": 7, "responses_create_params": {"input": "hi"}, "expected_synonym_values": [711,  407], "ground_truth": {"a": 1.50}}`
	r, _ := NewReader(strings.NewReader(row+"\n"), "mem")
	tasks := readAll(t, r)
	if len(tasks) != 1 || tasks[0].Err != nil {
		t.Fatalf("got %+v", tasks)
	}
	task := tasks[0]
	if string(task.Raw) != row {
		t.Errorf("raw changed:\n%s", task.Raw)
	}
	if task.ID != "7" {
		t.Errorf("id = %q", task.ID)
	}
	if got := string(task.Field("expected_synonym_values")); got != "[711,  407]" {
		t.Errorf("expected_synonym_values = %s", got)
	}
	body := task.AppendObject(nil, []string{"response"}, Field{Key: "response", Value: json.RawMessage(`{"x":1}`)})
	want := `{"id":7,"responses_create_params":{"input": "hi"},"expected_synonym_values":[711,  407],"ground_truth":{"a": 1.50},"response":{"x":1}}`
	if string(body) != want {
		t.Errorf("AppendObject:\n got %s\nwant %s", body, want)
	}
	// A row that already has a response (a NeMo Gym rollout record read as
	// a task) gets it replaced, not duplicated.
	r, _ = NewReader(strings.NewReader(`{"responses_create_params":{"input":"x"},"response":{"old":1},"reward":1}`), "mem")
	task = readAll(t, r)[0]
	body = task.AppendObject(nil, []string{"response"}, Field{Key: "response", Value: json.RawMessage(`{}`)})
	if string(body) != `{"responses_create_params":{"input":"x"},"reward":1,"response":{}}` {
		t.Errorf("AppendObject replacing response: %s", body)
	}
}

func TestRowErrors(t *testing.T) {
	tests := []struct {
		name, row, want string
	}{
		{"not json", `{"responses_create_params": `, `mem:1: invalid JSON: the line ends in the middle of a JSON value`},
		{"array", `[1,2]`, `mem:1: not a JSON object: the row is an array`},
		{"missing params", `{"id": 1}`, `mem:1: responses_create_params: missing`},
		{"params not object", `{"responses_create_params": "x"}`, `mem:1: responses_create_params: is a string, want an object`},
		{"missing input", `{"responses_create_params": {"tools": []}}`, `mem:1: responses_create_params.input: missing`},
		{"input number", `{"responses_create_params": {"input": 3}}`, `mem:1: responses_create_params.input: is a number`},
		{"bad role", `{"responses_create_params": {"input": [{"role": "robot", "content": "x"}]}}`, `mem:1: responses_create_params.input[0].role: is "robot"`},
		{"role type", `{"responses_create_params": {"input": [{"role": 5, "content": "x"}]}}`, `mem:1: responses_create_params.input[0].role: is a JSON number, want a string`},
		{"no content", `{"responses_create_params": {"input": [{"role": "user"}]}}`, `mem:1: responses_create_params.input[0].content: missing`},
		{"image part", `{"responses_create_params": {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}}`, `input[0].content[0].type: is "input_image"`},
		{"fc args object", `{"responses_create_params": {"input": [{"type": "function_call", "name": "f", "call_id": "c", "arguments": {}}]}}`, `input[0].arguments: is an object, want a JSON string`},
		{"nested tool", `{"responses_create_params": {"input": "x", "tools": [{"type": "function", "function": {"name": "f"}}]}}`, `tools[0].name: missing: tools are flat`},
		{"tool type", `{"responses_create_params": {"input": "x", "tools": [{"type": "web_search", "name": "f"}]}}`, `tools[0].type: is "web_search", want "function"`},
		{"dup tool", `{"responses_create_params": {"input": "x", "tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "f"}]}}`, `tools[1].name: duplicate tool name "f"`},
		{"temperature", `{"responses_create_params": {"input": "x", "temperature": "hot"}}`, `temperature: is a string, want a number`},
		{"temperature range", `{"responses_create_params": {"input": "x", "temperature": 9}}`, `temperature: is 9, want a number in [0, 2]`},
		{"tool choice", `{"responses_create_params": {"input": "x", "tool_choice": "sometimes"}}`, `tool_choice: is "sometimes"`},
		{"dup key", `{"id": 1, "id": 2, "responses_create_params": {"input": "x"}}`, `id: duplicate key`},
		{"agent_ref", `{"agent_ref": {"type": "x"}, "responses_create_params": {"input": "x"}}`, `agent_ref.name: missing`},
		{"trailing", `{"responses_create_params": {"input": "x"}} {}`, `trailing data`},
		{"invalid utf8", "{\"responses_create_params\": {\"input\": \"a\xff\"}}", `invalid UTF-8 at byte 40`},
		{"id type", `{"id": [1], "responses_create_params": {"input": "x"}}`, `mem:1: id: is an array`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := NewReader(strings.NewReader(tc.row), "mem")
			tasks := readAll(t, r)
			if len(tasks) != 1 {
				t.Fatalf("%d tasks", len(tasks))
			}
			if tasks[0].Err == nil {
				t.Fatalf("no error for %s", tc.row)
			}
			if got := tasks[0].Err.Error(); !strings.Contains(got, tc.want) {
				t.Errorf("error %q does not contain %q", got, tc.want)
			}
		})
	}
}

func TestParsesResponsesInput(t *testing.T) {
	row := `{"responses_create_params": {"instructions": "be brief", "temperature": 0, "parallel_tool_calls": false, "tool_choice": {"type": "function", "name": "f"},
	 "input": [{"role": "developer", "content": "sys"}, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
	 {"type": "reasoning", "summary": []},
	 {"type": "function_call", "name": "f", "arguments": "{\"x\":1}", "call_id": "c1"}, {"type": "function_call_output", "call_id": "c1", "output": "42"}],
	 "tools": [{"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": true}]}}`
	row = strings.ReplaceAll(row, "\n", " ")
	r, _ := NewReader(strings.NewReader(row), "mem")
	task := readAll(t, r)[0]
	if task.Err != nil {
		t.Fatal(task.Err)
	}
	p := task.Params
	want := []Item{
		{Type: ItemMessage, Role: "developer", Content: "sys"},
		{Type: ItemMessage, Role: "user", Content: "ab"},
		{Type: ItemFunctionCall, Name: "f", Arguments: `{"x":1}`, CallID: "c1"},
		{Type: ItemFunctionCallOutput, CallID: "c1", Output: "42"},
	}
	if len(p.Input) != len(want) {
		t.Fatalf("input = %+v", p.Input)
	}
	for i := range want {
		if p.Input[i] != want[i] {
			t.Errorf("input[%d] = %+v, want %+v", i, p.Input[i], want[i])
		}
	}
	if p.Instructions != "be brief" || p.Temperature == nil || *p.Temperature != 0 || p.ParallelToolCalls == nil || *p.ParallelToolCalls {
		t.Errorf("params = %+v", p)
	}
	if len(p.Tools) != 1 || p.Tools[0].Name != "f" || string(p.Tools[0].Parameters) != `{"type": "object"}` || !*p.Tools[0].Strict {
		t.Errorf("tools = %+v", p.Tools)
	}
	if string(p.ToolChoice) != `{"type": "function", "name": "f"}` {
		t.Errorf("tool_choice = %s", p.ToolChoice)
	}
}

func TestGzipStdinBlankLinesAndIndexes(t *testing.T) {
	rows := "\n" + `{"responses_create_params":{"input":"a"}}` + "\n\n  \n" + `not json` + "\n" + `{"responses_create_params":{"input":"c"}}`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(rows))
	zw.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "tasks.jsonl.gz")
	os.WriteFile(path, gz.Bytes(), 0o644)

	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tasks := readAll(t, r)
	if len(tasks) != 3 {
		t.Fatalf("%d tasks", len(tasks))
	}
	wantLines := []int{2, 5, 6}
	for i, task := range tasks {
		if task.Index != i || task.Line != wantLines[i] {
			t.Errorf("task %d: index %d line %d, want line %d", i, task.Index, task.Line, wantLines[i])
		}
	}
	if tasks[1].Err == nil || !strings.HasPrefix(tasks[1].Err.Error(), path+":5: ") {
		t.Errorf("bad row error = %v", tasks[1].Err)
	}
	if n, err := Count(path); err != nil || n != 3 {
		t.Errorf("Count = %d, %v", n, err)
	}
}

func TestLongLineIsSkippedNotFatal(t *testing.T) {
	long := `{"responses_create_params":{"input":"` + strings.Repeat("x", 5000) + `"}}`
	in := long + "\n" + `{"responses_create_params":{"input":"ok"}}` + "\n"
	r, _ := NewReader(strings.NewReader(in), "mem")
	r.MaxLineBytes = 1000
	tasks := readAll(t, r)
	if len(tasks) != 2 {
		t.Fatalf("%d tasks", len(tasks))
	}
	if tasks[0].Err == nil || !strings.Contains(tasks[0].Err.Error(), "mem:1: line longer than 1000 bytes") {
		t.Errorf("long line: %v", tasks[0].Err)
	}
	if tasks[1].Err != nil || tasks[1].Line != 2 || tasks[1].Params.Input[0].Content != "ok" {
		t.Errorf("row after long line: %+v", tasks[1])
	}
}

func TestEachRepeatsAndLimit(t *testing.T) {
	in := `{"id":"a","responses_create_params":{"input":"a"}}
{"id":"b","responses_create_params":{"input":"b"}}
{"id":"c","responses_create_params":{"input":"c"}}`
	r, _ := NewReader(strings.NewReader(in), "mem")
	var got []string
	err := Each(r, Options{Limit: 2, Repeats: 3}, func(t *Task, k int) error {
		got = append(got, t.ID+string(rune('0'+k)))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, " ") != "a0 a1 a2 b0 b1 b2" {
		t.Errorf("got %v", got)
	}
}

func TestValidateCollectsErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t.jsonl")
	os.WriteFile(path, []byte(`{"responses_create_params":{"input":"a"}}
{"responses_create_params":{}}
{}
`), 0o644)
	errs, n, err := Validate(path, 0)
	if err != nil || n != 3 || len(errs) != 2 {
		t.Fatalf("Validate = %v, %d, %v", errs, n, err)
	}
	msg := FormatRowErrors(errs)
	want := path + ":2: responses_create_params.input: missing: want a string or a list of messages\n" +
		path + ":3: responses_create_params: missing: every row needs responses_create_params"
	if msg != want {
		t.Errorf("got\n%s\nwant\n%s", msg, want)
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open(filepath.Join(t.TempDir(), "nope.jsonl")); err == nil || !strings.Contains(err.Error(), "nope.jsonl") {
		t.Errorf("missing file: %v", err)
	}
	if _, err := Open(t.TempDir()); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("directory: %v", err)
	}
	// A file with gzip magic but a corrupt stream fails with its name.
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.gz")
	os.WriteFile(path, []byte{0x1f, 0x8b, 0, 0, 0}, 0o644)
	r, err := Open(path)
	if err == nil {
		_, err = r.Next()
	}
	if err == nil || !strings.Contains(err.Error(), "bad.gz") {
		t.Errorf("corrupt gzip: %v", err)
	}
}
