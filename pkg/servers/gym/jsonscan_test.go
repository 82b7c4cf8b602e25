package gym

import (
	"bytes"
	"encoding/json"
	"math/big"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// scanSeeds are JSON texts, valid and not, for the scanner's fuzz tests.
var scanSeeds = []string{
	`{}`, ` { } `, `{"a":1}`, `{"a":1,"a":2,"b":[1,{"c":null}]}`, "{\"a\" : [ 1 , 2 ] ,\n\"b\":\t\"x y\" }",
	`{"rew\u0061rd":0.5,"é":"ü","\ud83d\ude00":1,"bad\ud800":2}`, "{\"k\xff\":\"v\xfe\"}", `{"a":"\"\\\/\b\f\n\r\t"}`,
	`{"a":-0.5e+10,"b":0,"c":-0,"d":1E3,"e":12.25}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":-}`, `{"a":1e}`, `{"a":+1}`,
	`{"a":tru}`, `{"a":nul}`, `{"a":true false}`, `{"a":1,}`, `{,}`, `{"a"}`, `{"a":}`, `{"a" 1}`, `{1:2}`, `{'a':1}`,
	`{"a":"x`, `{"a":1`, `{"a":1}}`, `{"a":1} x`, `{"a":1}{}`, "{\"a\":\"\x01\"}", `{"a":"\x"}`, `{"a":"\u12"}`,
	`{"a":"\u12g4"}`, `[]`, `[1,2,[3]]`, ` [ "a" , {"b":1} ] `, `[1,]`, `[,1]`, `"str"`, `"\u00e9"`, `1`, `null`,
	`true`, ``, ` `, "\f{}", `{"a":[[[[[[[[[[]]]]]]]]]]}`, "{\"a\":\"\u2028<>&\"}", `{"a":1}` + "\n",
	`{"a":{"b":{"c":[true,false,null,"x",1.5]}}}`,
	`"a\"b\\c\/d\n\te"`, `{"k\"\\\/\b\f\n\r\t":1,"é\n":"ü\"","\u00e9x\n":2}`, "\"\xff\\n\"", "\"é\\u0041\"", `"{\"count\":1}"`,
	// more members than objectLinearMax, repeated before and after the index is made
	`{"k0":0,"k1":1,"k2":2,"k0":3,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k1":17,"k17":17,"k16":18}`,
}

// deepSeeds are at encoding/json's nesting limit (10000) and past it: too big to fuzz from.
var deepSeeds = []string{
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	`{"a":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`,
	`{"a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`,
	`{"a":` + strings.Repeat(`{"b":`, 9999) + "1" + strings.Repeat("}", 9999) + `}`,
	`{"a":` + strings.Repeat(`{"b":`, 10000) + "1" + strings.Repeat("}", 10000) + `}`,
}

func TestScanDepth(t *testing.T) {
	for _, s := range deepSeeds {
		checkScan(t, []byte(s))
	}
}

// FuzzScanObject holds the one-pass reader to encoding/json: it takes every valid JSON object,
// array or string and nothing else, and reads each as encoding/json does.
func FuzzScanObject(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkScan)
}

// checkScan holds the one-pass reader to encoding/json on data.
func checkScan(t *testing.T, data []byte) {
	valid := json.Valid(data)
	if jsonfast.Valid(data) != valid {
		t.Fatalf("jsonfast.Valid(%q) = %v, json.Valid %v", data, !valid, valid)
	}

	obj, ok := scanObject(data)
	slow, slowOK, slowErr := decodeObjectSlow(data)
	if ok != (slowErr == nil && slowOK) {
		t.Fatalf("scanObject(%q) ok %v; encoding/json: ok %v err %v", data, ok, slowOK, slowErr)
	}
	if ok {
		if len(obj.Members) != len(slow.Members) {
			t.Fatalf("scanObject(%q): %d members, encoding/json %d", data, len(obj.Members), len(slow.Members))
		}
		for i, m := range obj.Members {
			g := slow.Members[i]
			if m.Key != g.Key || !bytes.Equal(m.Value, g.Value) {
				t.Fatalf("scanObject(%q) member %d = %q: %s, encoding/json %q: %s", data, i, m.Key, m.Value, g.Key, g.Value)
			}
			if v, ok := obj.Get(m.Key); !ok || !bytes.Equal(v, g.Value) {
				t.Fatalf("scanObject(%q).get(%q) = %s %v", data, m.Key, v, ok)
			}
		}
		// The echo writes the object as encoding/json's compaction does.
		if got, want := marshalMembers(obj.Members), oldMarshalMembers(slow.Members); !bytes.Equal(got, want) {
			t.Fatalf("marshalMembers(%q) = %s, want %s", data, got, want)
		}
	}

	items, ok := scanArray(data)
	var want []json.RawMessage
	err := json.Unmarshal(data, &want)
	if ok != (err == nil && bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("["))) {
		t.Fatalf("scanArray(%q) ok %v, json.Unmarshal %v", data, ok, err)
	}
	if ok {
		if len(items) != len(want) || (items == nil) != (want == nil) {
			t.Fatalf("scanArray(%q) = %q, want %q", data, items, want)
		}
		for i := range items {
			if !bytes.Equal(items[i], want[i]) {
				t.Fatalf("scanArray(%q)[%d] = %s, want %s", data, i, items[i], want[i])
			}
		}
	}

	s, ok := scanString(data)
	var ws string
	err = json.Unmarshal(data, &ws)
	isString := err == nil && bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte(`"`))
	if ok != isString || s != ws {
		t.Fatalf("scanString(%q) = %q %v, json.Unmarshal %q %v", data, s, ok, ws, err)
	}
	if s, ok := decodeString(data); ok != (err == nil) || s != ws {
		t.Fatalf("decodeString(%q) = %q %v, json.Unmarshal %q %v", data, s, ok, ws, err)
	}
	if got, want := jsonfast.AppendString(nil, string(data)), MarshalValue(string(data)); !bytes.Equal(got, want) {
		t.Fatalf("jsonfast.AppendString(%q) = %s, want %s", data, got, want)
	}
	if valid {
		var c bytes.Buffer
		_ = json.Compact(&c, data)
		if got, ok := jsonfast.AppendCompact(nil, data); ok && !bytes.Equal(got, c.Bytes()) {
			t.Fatalf("jsonfast.AppendCompact(%q) = %s, want %s", data, got, c.Bytes())
		}
	}
	if got, want := appendValue(nil, json.RawMessage(data)), MarshalValue(json.RawMessage(data)); !bytes.Equal(got, want) {
		t.Fatalf("appendValue(%q) = %s, want %s", data, got, want)
	}
}

// oldMarshalMembers is how an object's members were written: encoding/json for every key and
// value.
func oldMarshalMembers(members []Member) []byte {
	fields := make([]Field, len(members))
	for i, m := range members {
		fields[i] = Field{m.Key, m.Value}
	}
	return oldMarshalFields(fields)
}

// oldMarshalFields is MarshalFields as it was: encoding/json for every key and value.
func oldMarshalFields(fields []Field) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(MarshalValue(f.Key))
		b.WriteByte(':')
		b.Write(MarshalValue(f.Value))
	}
	b.WriteByte('}')
	return b.Bytes()
}

// The values written without encoding/json are written as encoding/json writes them.
func TestAppendValue(t *testing.T) {
	huge, _ := new(big.Int).SetString("-12345678901234567890123", 10)
	for _, v := range []any{
		true, false, 0, -7, 1 << 40, int64(-1 << 62), PyFloat(0), PyFloat(1), PyFloat(0.5), PyFloat(1e21), PyFloat(-2.5e-7),
		big.NewInt(0), big.NewInt(-3), huge, (*big.Int)(nil), "", "plain", "é<>&\u2028\x01\"\\\x7f\xff", json.RawMessage(` [1, 2] `),
		json.RawMessage(nil), json.RawMessage(`{"a":`), 1.5, []string{"x"}, map[string]any{"b": 1, "a": "<"},
	} {
		if got, want := appendValue(nil, v), MarshalValue(v); !bytes.Equal(got, want) {
			t.Errorf("appendValue(%#v) = %s, want %s", v, got, want)
		}
	}
	fields := []Field{{"reward", PyFloat(1)}, {"a\nb", "x"}, {"count", big.NewInt(2)}, {"raw", json.RawMessage(`{ "k" : "v w" }`)}}
	if got, want := MarshalFields(fields), oldMarshalFields(fields); !bytes.Equal(got, want) {
		t.Errorf("marshalFields = %s, want %s", got, want)
	}
}
