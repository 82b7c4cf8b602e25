package plan

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		err  string // substring of the error; "" for a valid plan
	}{
		{"valid", `{"rounds":[[{"name":"find_ids","arguments":{"category":"books"}}],
			[{"name":"fetch","arguments":{"id":{"$ref":"0/ids/0"}}},{"name":"fetch","arguments":{"id":{"$ref":"0/ids/1"}}}],
			[{"name":"submit","arguments":{"values":[{"$ref":"1/value"},{"$ref":"2/value"}]},"optional":true}]],
			"final":{"$ref":"3/message"}}`, ""},
		{"valid without final", `{"rounds":[[{"name":"a","arguments":{}}]]}`, ""},
		{"valid whole-output ref", `{"rounds":[[{"name":"a","arguments":{}}],[{"name":"b","arguments":{"x":{"$ref":"0"}}}]]}`, ""},
		{"valid escaped pointer", `{"rounds":[[{"name":"a","arguments":{}}],[{"name":"b","arguments":{"x":{"$ref":"0/a~1b/c~0d"}}}]]}`, ""},
		{"object with $ref and more keys is not a ref", `{"rounds":[[{"name":"a","arguments":{"x":{"$ref":"9","y":1}}}]]}`, ""},
		{"not JSON", `{"rounds":`, "not a plan"},
		{"not an object", `[1]`, "not a plan"},
		{"trailing data", `{"rounds":[[{"name":"a","arguments":{}}]]} {}`, "not a plan: trailing data"},
		{"missing rounds", `{}`, "rounds: empty"},
		{"empty rounds", `{"rounds":[]}`, "rounds: empty"},
		{"empty round", `{"rounds":[[{"name":"a","arguments":{}}],[]]}`, "rounds[1]: empty round"},
		{"missing name", `{"rounds":[[{"arguments":{}}]]}`, "rounds[0][0].name: missing"},
		{"missing arguments", `{"rounds":[[{"name":"a"}]]}`, "rounds[0][0].arguments: want a JSON object"},
		{"array arguments", `{"rounds":[[{"name":"a","arguments":[1]}]]}`, "rounds[0][0].arguments: want a JSON object"},
		{"string arguments", `{"rounds":[[{"name":"a","arguments":"{}"}]]}`, "rounds[0][0].arguments: want a JSON object"},
		{"null arguments", `{"rounds":[[{"name":"a","arguments":null}]]}`, "rounds[0][0].arguments: want a JSON object"},
		{"ref to same round", `{"rounds":[[{"name":"a","arguments":{}},{"name":"b","arguments":{"x":{"$ref":"0/id"}}}]]}`,
			`rounds[0][1].arguments.x: reference "0/id": call 0 is not in an earlier round`},
		{"ref to later round", `{"rounds":[[{"name":"a","arguments":{}}],[{"name":"b","arguments":{"x":[1,{"$ref":"2"}]}}],[{"name":"c","arguments":{}}]]}`,
			`rounds[1][0].arguments.x[1]: reference "2": call 2 is not in an earlier round`},
		{"ref in final to a missing call", `{"rounds":[[{"name":"a","arguments":{}}]],"final":{"$ref":"1"}}`,
			`final: reference "1": call 1 is not in an earlier round`},
		{"bad ref syntax", `{"rounds":[[{"name":"a","arguments":{}}],[{"name":"b","arguments":{"x":{"$ref":"first/id"}}}]]}`,
			`rounds[1][0].arguments.x: reference "first/id": want CALL or CALL/POINTER`},
		{"negative ref", `{"rounds":[[{"name":"a","arguments":{}}],[{"name":"b","arguments":{"x":{"$ref":"-1"}}}]]}`, "want CALL or CALL/POINTER"},
		{"leading zero ref", `{"rounds":[[{"name":"a","arguments":{}}],[{"name":"b","arguments":{"x":{"$ref":"00"}}}]]}`, "want CALL or CALL/POINTER"},
		{"bad ~ escape", `{"rounds":[[{"name":"a","arguments":{}}],[{"name":"b","arguments":{"x":{"$ref":"0/a~2"}}}]]}`, "bad escape"},
		{"trailing ~", `{"rounds":[[{"name":"a","arguments":{}}],[{"name":"b","arguments":{"x":{"$ref":"0/a~"}}}]]}`, "bad escape"},
		{"unknown field", `{"rounds":[[{"name":"a","arguments":{}}]],"finale":"x"}`, `not a plan: json: unknown field "finale"`},
		{"unknown call field", `{"rounds":[[{"name":"a","args":{}}]]}`, `not a plan: json: unknown field "args"`},
		{"first bad ref in key order", `{"rounds":[[{"name":"a","arguments":{}}],[{"name":"b","arguments":{"z":{"$ref":"7"},"a":{"$ref":"8"}}}]]}`,
			`rounds[1][0].arguments.a: reference "8"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse(json.RawMessage(tt.raw))
			if tt.err == "" {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if len(p.Rounds) == 0 {
					t.Fatal("no rounds")
				}
				return
			}
			if err == nil {
				t.Fatalf("Parse accepted %s", tt.raw)
			}
			if !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("error %q, want it to contain %q", err, tt.err)
			}
		})
	}
}

func TestPlanCounts(t *testing.T) {
	p, err := Parse(json.RawMessage(`{"rounds":[[{"name":"a","arguments":{}}],[{"name":"b","arguments":{}},{"name":"c","arguments":{}}],[{"name":"d","arguments":{}}]]}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.NumCalls() != 4 {
		t.Errorf("NumCalls = %d", p.NumCalls())
	}
	var names []string
	for _, c := range p.Calls() {
		names = append(names, c.Name)
	}
	if strings.Join(names, "") != "abcd" {
		t.Errorf("Calls = %v", names)
	}
	for r, want := range []int{0, 1, 3, 4, 4} {
		if got := p.First(r); got != want {
			t.Errorf("First(%d) = %d, want %d", r, got, want)
		}
	}
}

func TestParseRefRoundTrip(t *testing.T) {
	tests := []struct {
		in   string
		want Ref
	}{
		{"0", Ref{Call: 0}},
		{"12", Ref{Call: 12}},
		{"3/ids/0", Ref{Call: 3, Pointer: []string{"ids", "0"}}},
		{"1/", Ref{Call: 1, Pointer: []string{""}}},
		{"1/a~1b", Ref{Call: 1, Pointer: []string{"a/b"}}},
		{"1/a~0b", Ref{Call: 1, Pointer: []string{"a~b"}}},
		{"1/~01", Ref{Call: 1, Pointer: []string{"~1"}}},
		{"1/~10", Ref{Call: 1, Pointer: []string{"/0"}}},
		{"2/x//y", Ref{Call: 2, Pointer: []string{"x", "", "y"}}},
	}
	for _, tt := range tests {
		got, err := ParseRef(tt.in)
		if err != nil {
			t.Errorf("ParseRef(%q): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseRef(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
		if s := got.String(); s != tt.in {
			t.Errorf("ParseRef(%q).String() = %q", tt.in, s)
		}
	}
	for _, bad := range []string{"", "x", "-1", "+1", "01", " 1", "1 ", "1/~", "1/~2", "1/a~", "1/~~01", "1/a/~x"} {
		if r, err := ParseRef(bad); err == nil {
			t.Errorf("ParseRef(%q) = %#v, want an error", bad, r)
		}
	}
	// String escapes what ParseRef unescapes.
	r := Ref{Call: 4, Pointer: []string{"a/b~c", "~1"}}
	back, err := ParseRef(r.String())
	if err != nil || !reflect.DeepEqual(back, r) {
		t.Errorf("round trip of %#v via %q: %#v, %v", r, r.String(), back, err)
	}
}

// outputsOf serves decoded outputs from a map of call index to output text.
func outputsOf(texts map[int]string) Outputs {
	return func(call int) (any, bool) {
		s, ok := texts[call]
		if !ok {
			return nil, false
		}
		return DecodeOutput(s), true
	}
}

func TestResolve(t *testing.T) {
	outs := outputsOf(map[int]string{
		0: `{"ids":[17,42],"meta":{"a/b":"slash","m~n":"tilde","deep":{"list":[{"v":1.5}]}},"big":12345678901234567890}`,
		1: `plain text, not JSON`,
		2: `{"value":"<b>&"}`,
	})
	tests := []struct {
		name    string
		raw     string
		want    string
		missing []string
	}{
		{"no refs", `{"a":1,"b":[true,null]}`, `{"a":1,"b":[true,null]}`, nil},
		{"whole output", `{"x":{"$ref":"1"}}`, `{"x":"plain text, not JSON"}`, nil},
		{"pointer into array", `{"id":{"$ref":"0/ids/1"}}`, `{"id":42}`, nil},
		{"array of refs", `{"ids":[{"$ref":"0/ids/0"},{"$ref":"0/ids/1"},3]}`, `{"ids":[17,42,3]}`, nil},
		{"nested refs", `{"outer":{"inner":[{"k":{"$ref":"0/meta/deep/list/0/v"}}]}}`, `{"outer":{"inner":[{"k":1.5}]}}`, nil},
		{"object value", `{"d":{"$ref":"0/meta/deep"}}`, `{"d":{"list":[{"v":1.5}]}}`, nil},
		{"big number kept exactly", `{"n":{"$ref":"0/big"}}`, `{"n":12345678901234567890}`, nil},
		{"no HTML escaping", `{"v":{"$ref":"2/value"}}`, `{"v":"<b>&"}`, nil},
		{"missing call", `{"a":{"$ref":"5/x"},"b":1}`, `{"a":null,"b":1}`, []string{"5/x"}},
		{"missing key", `{"a":{"$ref":"0/nope"}}`, `{"a":null}`, []string{"0/nope"}},
		{"index out of range", `{"a":{"$ref":"0/ids/2"}}`, `{"a":null}`, []string{"0/ids/2"}},
		{"pointer into text", `{"a":{"$ref":"1/x"}}`, `{"a":null}`, []string{"1/x"}},
		{"missing listed in key order", `{"z":{"$ref":"9"},"a":[{"$ref":"8"},{"$ref":"0/ids/0"}]}`, `{"a":[null,17],"z":null}`, []string{"8", "9"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, missing, err := Resolve(json.RawMessage(tt.raw), outs)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("Resolve = %s, want %s", got, tt.want)
			}
			if !reflect.DeepEqual(missing, tt.missing) {
				t.Errorf("missing = %q, want %q", missing, tt.missing)
			}
		})
	}
	if _, _, err := Resolve(json.RawMessage(`{"a":`), outs); err == nil {
		t.Error("Resolve of bad JSON: no error")
	}
}

func TestLookup(t *testing.T) {
	outs := outputsOf(map[int]string{0: `{"a/b":1,"m~n":2,"~1":3,"":{"":4},"list":["x","y"]}`})
	tests := []struct {
		ref  string
		want any
		ok   bool
	}{
		{"0/a~1b", json.Number("1"), true},
		{"0/m~0n", json.Number("2"), true},
		{"0/~01", json.Number("3"), true},
		{"0//", json.Number("4"), true},
		{"0/list/1", "y", true},
		{"0/list/01", nil, false},
		{"0/list/-1", nil, false},
		{"0/list/x", nil, false},
		{"0/a/b", nil, false},
		{"0/list/0/deeper", nil, false},
		{"1", nil, false},
		{"bad", nil, false},
	}
	for _, tt := range tests {
		got, ok := Lookup(tt.ref, outs)
		if ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Lookup(%q) = %#v, %v; want %#v, %v", tt.ref, got, ok, tt.want, tt.ok)
		}
	}
	whole, ok := Lookup("0", outs)
	if m, isMap := whole.(map[string]any); !ok || !isMap || len(m) != 5 {
		t.Errorf("Lookup(\"0\") = %#v, %v", whole, ok)
	}
}

func TestFinalText(t *testing.T) {
	outs := outputsOf(map[int]string{0: `{"message":"accepted","n":2,"tag":"<ok>"}`})
	tests := []struct {
		name    string
		final   string // "" for a plan without "final"
		want    string
		missing []string
	}{
		{"missing final", "", "Done.", nil},
		{"null final", `null`, "Done.", nil},
		{"string", `"Submitted."`, "Submitted.", nil},
		{"ref to a string", `{"$ref":"0/message"}`, "accepted", nil},
		{"ref to a number", `{"$ref":"0/n"}`, "2", nil},
		{"object", `{"answer":{"$ref":"0/n"},"tag":{"$ref":"0/tag"}}`, `{"answer":2,"tag":"<ok>"}`, nil},
		{"array", `[{"$ref":"0/message"},"x"]`, `["accepted","x"]`, nil},
		{"unresolved ref", `{"$ref":"0/nope"}`, "null", []string{"0/nope"}},
		{"object with unresolved ref", `{"a":{"$ref":"0/nope"}}`, `{"a":null}`, []string{"0/nope"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw := `{"rounds":[[{"name":"a","arguments":{}}]]}`
			if tt.final != "" {
				raw = `{"rounds":[[{"name":"a","arguments":{}}]],"final":` + tt.final + `}`
			}
			p, err := Parse(json.RawMessage(raw))
			if err != nil {
				t.Fatal(err)
			}
			got, missing, err := p.FinalText(outs)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("FinalText = %q, want %q", got, tt.want)
			}
			if !reflect.DeepEqual(missing, tt.missing) {
				t.Errorf("missing = %q, want %q", missing, tt.missing)
			}
		})
	}
}

func TestDecodeOutput(t *testing.T) {
	tests := []struct {
		in   string
		want any
	}{
		{`{"a":1}`, map[string]any{"a": json.Number("1")}},
		{` [1, "x"] `, []any{json.Number("1"), "x"}},
		{`"quoted"`, "quoted"},
		{`42`, json.Number("42")},
		{`plain`, "plain"},
		{``, ""},
		{`{"a":1}]`, `{"a":1}]`},
		{`{"a":1} {"b":2}`, `{"a":1} {"b":2}`},
		{`{"a":1`, `{"a":1`},
	}
	for _, tt := range tests {
		if got := DecodeOutput(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("DecodeOutput(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
	}
}
