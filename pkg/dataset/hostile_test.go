package dataset

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// Hostile input: every malformed row is a bad_task with FILE:LINE and a specific message, the
// rows after it still read, and nothing panics or takes memory out of proportion.

// repeatReader yields n copies of c without holding them in memory.
type repeatReader struct {
	c     byte
	n     int64
	block []byte
}

func (r *repeatReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.EOF
	}
	if r.block == nil {
		r.block = bytes.Repeat([]byte{r.c}, 64<<10)
	}
	k := copy(p[:min(int64(len(p)), r.n)], r.block)
	r.n -= int64(k)
	return k, nil
}

// allocated runs fn and returns the bytes it allocated on the heap.
func allocated(fn func()) uint64 {
	runtime.GC()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

const okRow = `{"responses_create_params":{"input":"ok"}}`

// A 50 MB line over the cap is a bad_task naming FILE:LINE and the cap, the next row reads,
// and the long line is skipped as it streams by, never held: the reader allocates a few MB.
func TestHostileLineOverCapIsSkippedNotHeld(t *testing.T) {
	const size = 50 << 20
	in := io.MultiReader(strings.NewReader(`{"responses_create_params":{"input":"`), &repeatReader{c: 'x', n: size},
		strings.NewReader(`"}}`+"\n"+okRow+"\n"))
	r, _ := NewReader(in, "big.jsonl")
	r.MaxLineBytes = 1 << 20
	var tasks []*Task
	alloc := allocated(func() { tasks = readAll(t, r) })
	if len(tasks) != 2 {
		t.Fatalf("%d tasks, want 2", len(tasks))
	}
	if tasks[0].Err == nil || !strings.HasPrefix(tasks[0].Err.Error(), "big.jsonl:1: line longer than 1048576 bytes") || tasks[0].Raw != nil {
		t.Fatalf("long line: %v (raw %d bytes)", tasks[0].Err, len(tasks[0].Raw))
	}
	if tasks[1].Err != nil || tasks[1].Line != 2 || tasks[1].Index != 1 || tasks[1].Params.Input[0].Content != "ok" {
		t.Fatalf("row after the long line: %+v", tasks[1])
	}
	if alloc > 8<<20 {
		t.Fatalf("reading a skipped 50 MB line allocated %d MB", alloc>>20)
	}
}

// A real 50 MB line under the default 64 MiB cap reads, whole and byte-for-byte, and the
// fields are not copied: the reader allocates about 3 times the line (the growing line
// buffer), not 10 times as encoding/json's Decoder did.
func TestHostileLineUnderDefaultCapReads(t *testing.T) {
	if testing.Short() {
		t.Skip("50 MB line")
	}
	const size = 50 << 20
	head := `{"id":"big","responses_create_params":{"input":"hi"},"ground_truth":"`
	in := io.MultiReader(strings.NewReader(head), &repeatReader{c: 'x', n: size}, strings.NewReader(`"}`+"\n"+okRow+"\n"))
	r, _ := NewReader(in, "big.jsonl")
	var tasks []*Task
	alloc := allocated(func() { tasks = readAll(t, r) })
	if len(tasks) != 2 || tasks[0].Err != nil || tasks[1].Err != nil {
		t.Fatalf("tasks %d: %v", len(tasks), tasks[0].Err)
	}
	gt := tasks[0].Field("ground_truth")
	if len(tasks[0].Raw) != len(head)+size+2 || len(gt) != size+2 || gt[1] != 'x' || tasks[0].ID != "big" {
		t.Fatalf("raw %d bytes, ground_truth %d bytes", len(tasks[0].Raw), len(gt))
	}
	if alloc > 3*size {
		t.Fatalf("reading a 50 MB line allocated %d MB", alloc>>20)
	}
	if tasks[1].Line != 2 || tasks[1].Index != 1 {
		t.Fatalf("next row: line %d index %d", tasks[1].Line, tasks[1].Index)
	}
}

// An 8 MB prompt is read too: a big input is a real row, not an attack.
func TestHostileBigPromptReads(t *testing.T) {
	const size = 8 << 20
	in := io.MultiReader(strings.NewReader(`{"responses_create_params":{"input":[{"role":"user","content":"`), &repeatReader{c: 'y', n: size},
		strings.NewReader(`"}]}}`))
	r, _ := NewReader(in, "big.jsonl")
	tasks := readAll(t, r)
	if len(tasks) != 1 || tasks[0].Err != nil || len(tasks[0].Params.Input[0].Content) != size {
		t.Fatalf("tasks %d err %v", len(tasks), tasks[0].Err)
	}
}

func readString(t *testing.T, in string) []*Task {
	t.Helper()
	r, err := NewReader(strings.NewReader(in), "mem")
	if err != nil {
		t.Fatal(err)
	}
	return readAll(t, r)
}

// Invalid UTF-8 anywhere in a row (a value, a key, a later line) is named by its byte offset
// in that line.
func TestHostileInvalidUTF8(t *testing.T) {
	cases := []struct{ row, want string }{
		{"{\"responses_create_params\":{\"input\":\"\xc3\"}}", "mem:2: invalid UTF-8 at byte 37"},
		{"{\"\xff\":1,\"responses_create_params\":{\"input\":\"x\"}}", "mem:2: invalid UTF-8 at byte 2"},
		{"{\"responses_create_params\":{\"input\":\"x\"}}\xed\xa0\x80", "mem:2: invalid UTF-8 at byte 41"}, // a surrogate
		{"\xef\xbb", "mem:2: invalid UTF-8 at byte 0"},
	}
	for _, c := range cases {
		tasks := readString(t, okRow+"\n"+c.row+"\n"+okRow)
		if len(tasks) != 3 || tasks[0].Err != nil || tasks[2].Err != nil || tasks[2].Line != 3 {
			t.Fatalf("%q: %d tasks", c.row, len(tasks))
		}
		if tasks[1].Err == nil || tasks[1].Err.Error() != c.want {
			t.Errorf("%q: error %v, want %q", c.row, tasks[1].Err, c.want)
		}
	}
}

// 100,000 nested arrays (or objects) in a field: no stack overflow, a clear error with the
// byte offset where the limit is crossed, and the next row reads. Nesting within the limit
// is accepted.
func TestHostileDeepNesting(t *testing.T) {
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	deepObj := strings.Repeat(`{"a":`, 100000) + "1" + strings.Repeat("}", 100000)
	rows := map[string]string{
		"unknown field": `{"responses_create_params":{"input":"x"},"deep":` + deep + `}`,
		"input":         `{"responses_create_params":{"input":` + deep + `}}`,
		"parameters":    `{"responses_create_params":{"input":"x","tools":[{"type":"function","name":"f","parameters":` + deepObj + `}]}}`,
		"unbalanced":    `{"responses_create_params":{"input":"x"},"deep":` + strings.Repeat("[", 100000),
	}
	for name, row := range rows {
		t.Run(name, func(t *testing.T) {
			tasks := readString(t, row+"\n"+okRow)
			if len(tasks) != 2 || tasks[1].Err != nil {
				t.Fatalf("%d tasks", len(tasks))
			}
			err := tasks[0].Err
			if err == nil || !strings.HasPrefix(err.Error(), "mem:1: invalid JSON: nested deeper than 10000 levels at byte ") {
				t.Fatalf("error %v", err)
			}
		})
	}
	ok := `{"responses_create_params":{"input":"x"},"deep":` + strings.Repeat("[", 9000) + strings.Repeat("]", 9000) + `}`
	tasks := readString(t, ok)
	if tasks[0].Err != nil || len(tasks[0].Field("deep")) != 18000 {
		t.Fatalf("9000 levels: %v", tasks[0].Err)
	}
}

// A wrong JSON type in every field of responses_create_params (and of its items and tools)
// is a bad_task naming the exact field path and both types.
func TestHostileWrongTypes(t *testing.T) {
	const msg = `{"role":"user","content":"x"}`
	const tool = `{"type":"function","name":"f"}`
	rcpWith := func(member string) string { return `{"responses_create_params":{` + member + `}}` }
	withInput := func(items string) string { return rcpWith(`"input":[` + items + `]`) }
	withTool := func(tools string) string { return rcpWith(`"input":"x","tools":[` + tools + `]`) }
	big := `"` + strings.Repeat("z", 10000) + `"`
	cases := []struct{ row, want string }{
		{`{"responses_create_params":[]}`, `responses_create_params: is an array, want an object`},
		{`{"responses_create_params":7}`, `responses_create_params: is a number, want an object`},
		{rcpWith(`"input":true`), `responses_create_params.input: is a boolean, want a string or a list of messages`},
		{rcpWith(`"input":{}`), `responses_create_params.input: is an object, want a string or a list of messages`},
		{rcpWith(`"input":3`), `responses_create_params.input: is a number, want a string or a list of messages`},
		{withInput(`"hi"`), `responses_create_params.input[0]: is a string, want an object`},
		{withInput(msg + `,[1]`), `responses_create_params.input[1]: is an array, want an object`},
		{withInput(`{"role":["user"],"content":"x"}`), `responses_create_params.input[0].role: is a JSON array, want a string`},
		{withInput(`{"role":` + big + `,"content":"x"}`), `responses_create_params.input[0].role: is "zzzz`},
		{withInput(`{"type":7,"role":"user","content":"x"}`), `responses_create_params.input[0].type: is a JSON number, want a string`},
		{withInput(`{"role":"user","content":7}`), `responses_create_params.input[0].content: is a number, want a string or a list of text parts`},
		{withInput(`{"role":"user","content":{"text":"x"}}`), `responses_create_params.input[0].content: is an object, want a string or a list of text parts`},
		{withInput(`{"role":"user","content":["x"]}`), `responses_create_params.input[0].content[0]: is a string, want a text part`},
		{withInput(`{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":5}]}`), `responses_create_params.input[0].content[1].text: is a JSON number, want a string`},
		{withInput(`{"role":"user","content":[{"type":1,"text":"a"}]}`), `responses_create_params.input[0].content[0].type: is a JSON number, want a string`},
		{withInput(`{"type":"function_call","name":5,"call_id":"c","arguments":"{}"}`), `responses_create_params.input[0].name: is a JSON number, want a string`},
		{withInput(`{"type":"function_call","name":"f","call_id":false,"arguments":"{}"}`), `responses_create_params.input[0].call_id: is a JSON bool, want a string`},
		{withInput(`{"type":"function_call","name":"f","call_id":"c","arguments":[]}`), `responses_create_params.input[0].arguments: is an array, want a JSON string`},
		{withInput(`{"type":"function_call_output","call_id":"c","output":{}}`), `responses_create_params.input[0].output: is an object, want a string`},
		{rcpWith(`"input":"x","instructions":["a"]`), `responses_create_params.instructions: is an array, want a string`},
		{rcpWith(`"input":"x","instructions":1`), `responses_create_params.instructions: is a number, want a string`},
		{rcpWith(`"input":"x","tools":{}`), `responses_create_params.tools: is an object, want a list of function tools`},
		{rcpWith(`"input":"x","tools":"f"`), `responses_create_params.tools: is a string, want a list of function tools`},
		{withTool(`"f"`), `responses_create_params.tools[0]: is a string, want an object`},
		{withTool(tool + `,null`), `responses_create_params.tools[1]: is null, want an object`},
		{withTool(`{"type":1,"name":"f"}`), `responses_create_params.tools[0].type: is a JSON number, want a string`},
		{withTool(`{"type":"function","name":["f"]}`), `responses_create_params.tools[0].name: is a JSON array, want a string`},
		{withTool(`{"type":"function","name":"f","description":{}}`), `responses_create_params.tools[0].description: is a JSON object, want a string`},
		{withTool(`{"type":"function","name":"f","parameters":"object"}`), `responses_create_params.tools[0].parameters: is a string, want a JSON Schema object`},
		{withTool(`{"type":"function","name":"f","parameters":[]}`), `responses_create_params.tools[0].parameters: is an array, want a JSON Schema object`},
		{withTool(`{"type":"function","name":"f","strict":"yes"}`), `responses_create_params.tools[0].strict: is a JSON string, want a boolean`},
		{rcpWith(`"input":"x","temperature":"hot"`), `responses_create_params.temperature: is a string, want a number`},
		{rcpWith(`"input":"x","temperature":true`), `responses_create_params.temperature: is a boolean, want a number`},
		{rcpWith(`"input":"x","temperature":1e999`), `responses_create_params.temperature: is 1e999, want a number in [0, 2]`},
		{rcpWith(`"input":"x","top_p":[]`), `responses_create_params.top_p: is an array, want a number`},
		{rcpWith(`"input":"x","top_p":-0.5`), `responses_create_params.top_p: is -0.5, want a number in [0, 1]`},
		{rcpWith(`"input":"x","max_output_tokens":"100"`), `responses_create_params.max_output_tokens: is a string, want a positive integer`},
		{rcpWith(`"input":"x","max_output_tokens":1.5`), `responses_create_params.max_output_tokens: is 1.5, want a positive integer`},
		{rcpWith(`"input":"x","max_output_tokens":1e30`), `responses_create_params.max_output_tokens: is 1e30, want a positive integer`},
		{rcpWith(`"input":"x","max_output_tokens":0`), `responses_create_params.max_output_tokens: is 0, want a positive integer`},
		{rcpWith(`"input":"x","parallel_tool_calls":"false"`), `responses_create_params.parallel_tool_calls: is a string, want a boolean`},
		{rcpWith(`"input":"x","parallel_tool_calls":0`), `responses_create_params.parallel_tool_calls: is a number, want a boolean`},
		{rcpWith(`"input":"x","tool_choice":1`), `responses_create_params.tool_choice: is a number, want auto, none, required`},
		{rcpWith(`"input":"x","tool_choice":["auto"]`), `responses_create_params.tool_choice: is an array, want auto, none, required`},
		{rcpWith(`"input":"x","tool_choice":{"type":"function"}`), `responses_create_params.tool_choice: want auto, none, required`},
		{rcpWith(`"input":"x","input":"y"`), `responses_create_params.input: duplicate key`},
		{`{"id":true,"responses_create_params":{"input":"x"}}`, `id: is a boolean, want a string or a number`},
		{`{"agent_ref":"x","responses_create_params":{"input":"x"}}`, `agent_ref: is a string, want {"type":..., "name":...}`},
		{`{"agent_ref":{"name":5},"responses_create_params":{"input":"x"}}`, `agent_ref.name: is a JSON number, want a string`},
	}
	for _, c := range cases {
		tasks := readString(t, c.row+"\n"+okRow)
		if len(tasks) != 2 || tasks[1].Err != nil {
			t.Fatalf("%s: %d tasks", c.row, len(tasks))
		}
		err := tasks[0].Err
		if err == nil {
			t.Errorf("%s: accepted", c.row)
			continue
		}
		if got := err.Error(); !strings.HasPrefix(got, "mem:1: "+c.want) {
			t.Errorf("%.80s:\n got %.200s\nwant %s", c.row, got, c.want)
		}
		if len(err.Error()) > 400 {
			t.Errorf("%.80s: error of %d bytes", c.row, len(err.Error()))
		}
	}
}

// gzipped compresses s.
func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return b.Bytes()
}

// A gzip file cut short: the rows before the cut read, then a reading error names the file
// and the line and says the stream is truncated. A corrupt checksum is named too.
func TestHostileTruncatedGzip(t *testing.T) {
	var rows strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&rows, `{"id":%d,"responses_create_params":{"input":"row %d %s"}}`+"\n", i, i, strings.Repeat("abc", i%50))
	}
	gz := gzipped(t, rows.String())
	path := filepath.Join(t.TempDir(), "tasks.jsonl.gz")
	if err := os.WriteFile(path, gz[:len(gz)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := 0
	for {
		task, err := r.Next()
		if err == io.EOF {
			t.Fatal("a truncated gzip file read to a clean EOF")
		}
		if err != nil {
			want := fmt.Sprintf("%s:%d: the gzip stream is truncated", path, n+1)
			if !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("error %q, want prefix %q", err, want)
			}
			break
		}
		if task.Err != nil {
			t.Fatalf("row %d before the cut: %v", n, task.Err)
		}
		n++
	}
	if n < 100 || n >= 2000 {
		t.Fatalf("%d rows before the cut", n)
	}

	// A flipped byte of the trailer's CRC-32: the row reads, then the end of the stream fails.
	bad := bytes.Clone(gzipped(t, okRow+"\n"))
	bad[len(bad)-5] ^= 0xff
	r, err = NewReader(bytes.NewReader(bad), "bad.gz")
	if err != nil {
		t.Fatal(err)
	}
	if task, err := r.Next(); err != nil || task.Err != nil {
		t.Fatalf("the row before the trailer: %v %v", err, task)
	}
	_, err = r.Next()
	if err == nil || !strings.HasPrefix(err.Error(), "bad.gz:2: corrupt gzip stream: gzip: invalid checksum") {
		t.Fatalf("corrupt checksum: %v", err)
	}
}

// NUL bytes, inside a string, between tokens, alone on a line or after the object: a bad_task
// naming the byte, and the next row reads.
func TestHostileNULByte(t *testing.T) {
	cases := []struct{ row, want string }{
		{"{\"responses_create_params\":{\"input\":\"a\x00b\"}}", `mem:1: invalid JSON: invalid character '\x00' in string literal at byte 38`},
		{"{\"responses_create_params\":\x00{\"input\":\"x\"}}", `mem:1: invalid JSON: invalid character '\x00' looking for beginning of value at byte 27`},
		{"{\"responses_create_params\":{\"input\":\"x\"}}\x00", `mem:1: invalid JSON: trailing data after the JSON object at byte 41`},
		{"\x00", `mem:1: invalid JSON: invalid character '\x00' looking for beginning of value at byte 0`},
		{"\x00\x00\x00\x00", `mem:1: invalid JSON: invalid character '\x00' looking for beginning of value at byte 0`},
		{"{\"a\x00\":1}", `mem:1: invalid JSON: invalid character '\x00' in string literal at byte 3`},
	}
	for _, c := range cases {
		tasks := readString(t, c.row+"\n"+okRow+"\n")
		if len(tasks) != 2 || tasks[1].Err != nil || tasks[1].Line != 2 {
			t.Fatalf("%q: %d tasks", c.row, len(tasks))
		}
		if tasks[0].Err == nil || tasks[0].Err.Error() != c.want {
			t.Errorf("%q: error %v\nwant %s", c.row, tasks[0].Err, c.want)
		}
	}
}

// A UTF-8 byte order mark at the start of the file (plain or gzip) is not part of the first
// row; anywhere else it is invalid JSON.
func TestHostileByteOrderMark(t *testing.T) {
	const bom = "\xef\xbb\xbf"
	for name, in := range map[string][]byte{
		"plain": []byte(bom + okRow + "\n" + okRow),
		"gzip":  gzipped(t, bom+okRow+"\n"+okRow),
	} {
		r, err := NewReader(bytes.NewReader(in), "bom")
		if err != nil {
			t.Fatal(err)
		}
		tasks := readAll(t, r)
		if len(tasks) != 2 || tasks[0].Err != nil || tasks[1].Err != nil || string(tasks[0].Raw) != okRow {
			t.Fatalf("%s: %d tasks, first %v", name, len(tasks), tasks[0].Err)
		}
	}
	tasks := readString(t, okRow+"\n"+bom+okRow)
	if tasks[1].Err == nil || !strings.Contains(tasks[1].Err.Error(), "mem:2: invalid JSON: invalid character 'ï'") {
		t.Fatalf("a BOM on line 2: %v", tasks[1].Err)
	}
}

// Keys are compared after unescaping: "\u0069d" is "id", so it is a duplicate of id; and
// members with escapes in keys and strings are split right.
func TestHostileEscapedKeys(t *testing.T) {
	tasks := readString(t, `{"id":1,"\u0069d":2,"responses_create_params":{"input":"x"}}`)
	if tasks[0].Err == nil || tasks[0].Err.Error() != "mem:1: id: duplicate key" {
		t.Fatalf("escaped duplicate: %v", tasks[0].Err)
	}
	tasks = readString(t, `{"a\"b":"}\"]","responses_create_params":{"input":"\"}"}, "z" : [ "]" , {"}":"{"} ] }`)
	if tasks[0].Err != nil {
		t.Fatal(tasks[0].Err)
	}
	f := tasks[0].Fields
	if len(f) != 3 || f[0].Key != `a"b` || string(f[0].Value) != `"}\"]"` || f[2].Key != "z" || string(f[2].Value) != `[ "]" , {"}":"{"} ]` ||
		tasks[0].Params.Input[0].Content != `"}` {
		t.Fatalf("fields %q", f)
	}
}

// A row with very many top-level keys is read in linear time (duplicates are found with a map).
func TestHostileManyKeys(t *testing.T) {
	var b strings.Builder
	b.WriteString(`{"responses_create_params":{"input":"x"}`)
	for i := range 50000 {
		fmt.Fprintf(&b, `,"k%d":%d`, i, i)
	}
	b.WriteString(`,"k5":0}`)
	tasks := readString(t, b.String())
	if tasks[0].Err == nil || tasks[0].Err.Error() != "mem:1: k5: duplicate key" {
		t.Fatalf("%v", tasks[0].Err)
	}
}

// Keys with control characters and quotes (escaped in the row) are written back as JSON, so
// that the body sent to /verify is valid JSON.
func TestAppendObjectEscapesKeys(t *testing.T) {
	row := `{"a\u0001b":1,"q\"\\\u2028\u00e9<":2,"responses_create_params":{"input":"x"}}`
	tasks := readString(t, row)
	if tasks[0].Err != nil {
		t.Fatal(tasks[0].Err)
	}
	body := tasks[0].AppendObject(nil, nil)
	var got, want map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatalf("AppendObject wrote invalid JSON: %v\n%s", err, body)
	}
	json.Unmarshal([]byte(row), &want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// A row cut short (a file truncated mid-line, a line split by a bad export) says so, wherever
// the cut falls; the byte offsets of other syntax errors are right.
func TestHostileTruncatedRow(t *testing.T) {
	full := `{"id":"x","responses_create_params":{"input":[{"role":"user","content":"hi"}],"temperature":0.5,"parallel_tool_calls":true}}`
	for n := 1; n < len(full); n++ {
		tasks := readString(t, full[:n]+"\n"+okRow)
		if len(tasks) != 2 || tasks[1].Err != nil {
			t.Fatalf("cut at %d: %d tasks", n, len(tasks))
		}
		want := "mem:1: invalid JSON: the line ends in the middle of a JSON value"
		if tasks[0].Err == nil || !strings.HasPrefix(tasks[0].Err.Error(), want) {
			t.Fatalf("cut at %d (%q): %v", n, full[:n], tasks[0].Err)
		}
	}
	tasks := readString(t, `{"responses_create_params":{"input":"x"},"a":tx}`)
	if want := `mem:1: invalid JSON: invalid character 'x' in literal true (expecting 'r') at byte 46`; tasks[0].Err == nil || tasks[0].Err.Error() != want {
		t.Fatalf("got %v, want %s", tasks[0].Err, want)
	}
}
