package dataset

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// fastAgrees parses row with parseFast and with parseCareful (the reference). When parseFast
// accepts the row, parseCareful must accept it too, with the same fields, id, agent_ref and
// params. It returns whether parseFast accepted.
func fastAgrees(t *testing.T, row []byte) bool {
	t.Helper()
	fast := &Task{Raw: row}
	if !fast.parseFast() {
		return false
	}
	ref := &Task{Raw: row}
	if err := ref.parseCareful(); err != nil {
		t.Fatalf("parseFast accepts a row parseCareful refuses (%v):\n%q", err, row)
	}
	if !reflect.DeepEqual(fast.Fields, ref.Fields) || fast.ID != ref.ID || !reflect.DeepEqual(fast.AgentRef, ref.AgentRef) ||
		!reflect.DeepEqual(fast.Params, ref.Params) {
		t.Fatalf("parseFast and parseCareful differ on\n%q\nfast: %#v %q %#v\n%#v\ncareful: %#v %q %#v\n%#v", row,
			fast.Fields, fast.ID, fast.AgentRef, fast.Params, ref.Fields, ref.ID, ref.AgentRef, ref.Params)
	}
	return true
}

// Every row of the repository's task files (NeMo Gym's own, the built-in servers' and the
// rollout records) takes the single pass, with the careful parser's result.
func TestParseFastTakesRealRows(t *testing.T) {
	var files []string
	for _, g := range []string{"../../testdata/nemo-gym/*/*.jsonl", "../../data/*.jsonl", "../../testdata/*.jsonl", "../../testdata/*/*.jsonl"} {
		m, _ := filepath.Glob(g)
		files = append(files, m...)
	}
	if len(files) < 6 {
		t.Fatalf("only %d task files", len(files))
	}
	rows := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range bytes.Split(data, []byte("\n")) {
			line = bytes.TrimSpace(line)
			if len(line) == 0 {
				continue
			}
			ref := &Task{Raw: line}
			if ref.parseCareful() != nil {
				continue // a bad row on purpose: parseCareful's
			}
			rows++
			if !fastAgrees(t, line) {
				t.Errorf("%s:%d: a good row does not take the single pass", f, i+1)
			}
		}
	}
	t.Logf("%d rows of %d files", rows, len(files))
	if !fastAgrees(t, []byte(smallRow)) {
		t.Error("the small benchmark row does not take the single pass")
	}
}

// Rows that exercise what parseFast reads itself: escapes of every kind in values (surrogate
// pairs, lone surrogates, \u0000), content parts, function calls and their outputs, reasoning
// items, null members, numbers at the edges, tool_choice forms, white space everywhere.
var fastRows = []string{
	okRow,
	` { "id" : "a\"b\\c\/d\b\f\n\r\t\u00e9\ud83d\ude00\ud800x\udc00\ud800\u0041" , "responses_create_params" : { "input" : "\u0000" } } `,
	`{"id":-0.5e+10,"responses_create_params":{"input":[{"role":"user","content":[{"type":"input_text","text":"a"},{"type":"text","text":"\u00e9"},{"type":"output_text","text":"c","annotations":[]}]}]}}`,
	`{"id":null,"agent_ref":null,"responses_create_params":{"input":[{"type":null,"role":"assistant","content":"x","name":null,"call_id":null}],"tools":null,"instructions":null,"temperature":null,"top_p":null,"max_output_tokens":null,"parallel_tool_calls":null,"tool_choice":null}}`,
	`{"agent_ref":{"type":"t","name":"n","extra":[1,{"a":null}]},"responses_create_params":{"input":"x"}}`,
	`{"agent_ref":{"name":"n","type":null},"responses_create_params":{"input":"x"}}`,
	`{"responses_create_params":{"input":[{"type":"function_call","name":"f","call_id":"c","arguments":"{\"a\":1}","id":"fc_1","status":"completed"},{"type":"function_call_output","call_id":"c","output":"ok"},{"type":"reasoning","summary":[{"type":"summary_text","text":"hm"}],"content":[{"type":"reasoning_text","text":"t"}]}]}}`,
	`{"responses_create_params":{"input":[{"type":"function_call","name":"f","call_id":"c","arguments":null},{"type":"function_call_output","call_id":"c","output":null,"content":7}]}}`,
	`{"responses_create_params":{"input":[{"type":"reasoning"}]}}`,
	`{"responses_create_params":{"input":"x","temperature":2,"top_p":0,"max_output_tokens":9223372036854775807,"parallel_tool_calls":false,"tool_choice":"required"}}`,
	`{"responses_create_params":{"input":"x","temperature":2.0000001}}`,
	`{"responses_create_params":{"input":"x","temperature":1E0,"top_p":1e-400,"max_output_tokens":1e2}}`,
	`{"responses_create_params":{"input":"x","max_output_tokens":-1}}`,
	`{"responses_create_params":{"input":"x","tool_choice":{"type":"function","name":"f","extra":{}}}}`,
	`{"responses_create_params":{"input":"x","tool_choice":{"type":"function","name":""}}}`,
	`{"responses_create_params":{"input":"x","tool_choice":"\u0061uto"}}`,
	`{"responses_create_params":{"input":"x","tools":[]}}`,
	`{"responses_create_params":{"input":"x","tools":[{"type":"function","name":"f","parameters":null,"strict":null,"description":null},{"type":"function","name":"g","parameters":{ "type" : "object" },"strict":false,"function":{"name":"g"}}]}}`,
	`{"responses_create_params":{"input":"x","tools":[{"type":"function","name":"f"},{"type":"function","name":"f"}]}}`,
	`{"responses_create_params":{"input":"x","tools":[{"type":"function","name":"f","parameters":[]}]}}`,
	`{"responses_create_params":{"input":"x","Input":"y","model":"m","metadata":{"a":"b"}}}`,
	`{"responses_create_params":{"input":[{"role":"user","content":"x","Role":"system"}]}}`,
	`{"responses_create_params":{"input":[{"role":"user","content":"x","rolE":"system"}]}}`,
	`{"responses_create_params":{"input":[{"role":"user","content":"x","\u0072ole":"system"}]}}`,
	`{"responses_create_params":{"input":[{"role":"user","content":"x","role":"system"}]}}`,
	`{"responses_create_params":{"input":[{"role":"user","content":"x","ſtrict":1}]}}`,
	`{"responses_create_params":{"input":"x","tools":[{"type":"function","name":"f","ſtrict":"x"}]}}`,
	`{"responses_create_params":{"input":"x","tools":[{"type":"function","name":"f","STRICT":true}]}}`,
	`{"responses_create_params":{"input":[]}}`,
	`{"responses_create_params":{"input":"x"},"responses_create_params":{"input":"y"}}`,
	`{"responses_create_params":{"input":"x","input":"y"}}`,
	`{"responses_create_params":{"input":"x"}}` + "\n",
	`{"responses_create_params":{"input":"x"}} x`,
	`{"responses_create_params":{"input":"x\u"}}`,
	`{"responses_create_params":{"input":"x\x"}}`,
	"{\"responses_create_params\":{\"input\":\"x\x01\"}}",
	"{\"responses_create_params\":{\"input\":\"x\x7f\xc3\xa9\"}}",
	"{\"responses_create_params\":{\"input\":\"x\xc3\"}}",
	"{\"responses_create_params\":{\"input\":\"x\"},\"n\":[\"\xc3\"]}",                                                                    // invalid UTF-8 in a skipped value
	"{\"responses_create_params\":{\"input\":\"x\"},\"n\":{\"k\xff\":1}}",                                                                 // in a skipped key
	"{\"responses_create_params\":{\"input\":\"x\",\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"description\":\"\xed\xa0\x80\"}]}}", // a surrogate
	"{\"responses_create_params\":{\"input\":\"x\"},\"n\":[\"\xc3\xa9\",{\"\xe2\x82\xac\":1}]}",                                           // valid UTF-8 there
	`{"responses_create_params":{"input":"x"},"n":[01]}`,
	`{"responses_create_params":{"input":"x"},"n":[1.]}`,
	`{"responses_create_params":{"input":"x"},"n":[-]}`,
	`{"responses_create_params":{"input":"x"},"n":[1e]}`,
	`{"responses_create_params":{"input":"x"},"n":[tru]}`,
	`{"responses_create_params":{"input":"x"},"n":[1,]}`,
	`{"responses_create_params":{"input":"x"},"n":{"a":1,}}`,
	`{"responses_create_params":{"input":"x"},"n":{"a" 1}}`,
	`{"responses_create_params":{"input":"x"},"n":{"a":1]}`,
	`{"responses_create_params":{"input":"x"},"n":[[[[]]],{},[{}],{"":{"":[]}}]}`,
	`{"responses_create_params":{"input":"x"},"id":true}`,
	`{"responses_create_params":{"input":"x"},"agent_ref":{"name":""}}`,
	`{"responses_create_params":{"input":"x"},"agent_ref":{"Name":"n"}}`,
	`[]`,
	`{}`,
	``,
}

func TestParseFastAgrees(t *testing.T) {
	accepted := 0
	for _, row := range fastRows {
		if fastAgrees(t, []byte(row)) {
			accepted++
		}
	}
	if accepted < 15 {
		t.Errorf("parseFast took only %d of the rows", accepted)
	}
	deep := `{"responses_create_params":{"input":"x"},"d":` + strings.Repeat("[", maxFastDepth+5) + strings.Repeat("]", maxFastDepth+5) + `}`
	if fastAgrees(t, []byte(deep)) {
		t.Error("parseFast followed nesting deeper than maxFastDepth")
	}
	many := `{"responses_create_params":{"input":"x"` + strings.Repeat(`,"k":1`, 40) + `}}`
	fastAgrees(t, []byte(many))
}

// FuzzParseFast: on any row, the single pass never accepts what the careful parser refuses,
// and when it accepts it gives the same task. The seeds are the rows above and the real rows.
func FuzzParseFast(f *testing.F) {
	for _, row := range fastRows {
		f.Add([]byte(row))
	}
	f.Add([]byte(smallRow))
	// The lines of FuzzReader's corpus.
	corpus, _ := filepath.Glob("testdata/fuzz/FuzzReader/*")
	for _, name := range corpus {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		_, v, _ := strings.Cut(string(data), "\n")
		v = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(v), "[]byte("), ")")
		file, err := strconv.Unquote(v)
		if err != nil {
			f.Fatalf("%s: %v", name, err)
		}
		for _, line := range strings.Split(file, "\n") {
			f.Add([]byte(strings.TrimSpace(line)))
		}
	}
	f.Fuzz(func(t *testing.T, row []byte) {
		fastAgrees(t, row)
	})
}

// repeated finds a key among the fields so far, by a linear search up to 16 fields and by
// the map past them, whichever way the key came before.
func TestRepeated(t *testing.T) {
	for _, n := range []int{0, 1, 15, 16, 17, 40} {
		var fields []Field
		var seen map[string]bool
		for i := range n {
			k := fmt.Sprint("k", i)
			if repeated(fields, &seen, k) {
				t.Fatalf("%d fields: %s reported repeated the first time", n, k)
			}
			fields = append(fields, Field{Key: k})
		}
		for i := range n {
			if k := fmt.Sprint("k", i); !repeated(fields, &seen, k) {
				t.Errorf("%d fields: %s not found", n, k)
			}
		}
		if repeated(fields, &seen, "new") {
			t.Errorf("%d fields: a new key reported repeated", n)
		}
	}
}
