package jsonfast

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// seeds are JSON texts, valid and not, for FuzzScan.
var seeds = []string{
	`{}`, ` { } `, `{"a":1}`, `{"a":1,"a":2,"b":[1,{"c":null}]}`, "{\"a\" : [ 1 , 2 ] ,\n\"b\":\t\"x y\" }",
	`{"rew\u0061rd":0.5,"é":"ü","\ud83d\ude00":1,"bad\ud800":2}`, "{\"k\xff\":\"v\xfe\"}", `{"a":"\"\\\/\b\f\n\r\t"}`,
	`{"a":-0.5e+10,"b":0,"c":-0,"d":1E3,"e":12.25}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":-}`, `{"a":1e}`, `{"a":+1}`,
	`{"a":tru}`, `{"a":nul}`, `{"a":true false}`, `{"a":1,}`, `{,}`, `{"a"}`, `{"a":}`, `{"a" 1}`, `{1:2}`, `{'a':1}`,
	`{"a":"x`, `{"a":1`, `{"a":1}}`, `{"a":1} x`, `{"a":1}{}`, "{\"a\":\"\x01\"}", `{"a":"\x"}`, `{"a":"\u12"}`,
	`{"a":"\u12g4"}`, `[]`, `[1,2,[3]]`, ` [ "a" , {"b":1} ] `, `[1,]`, `[,1]`, `[1 2]`, `[}`, `{]`, `"str"`, `"\u00e9"`,
	`1`, `null`, `true`, ``, ` `, "\f{}", `{"a":[[[[[[[[[[]]]]]]]]]]}`, "{\"a\":\"\u2028<>&\"}", `{"a":1}` + "\n",
	`{"a":{"b":{"c":[true,false,null,"x",1.5]}}}`, `"a\"b\\c\/d\n\te"`, "\"\xff\\n\"", "\"é\\u0041\"", `"{\"count\":1}"`,
}

// deepSeeds are at encoding/json's nesting limit and past it: too big to fuzz from.
var deepSeeds = []string{
	strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
	strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
	`{"a":` + strings.Repeat("[", MaxDepth-1) + strings.Repeat("]", MaxDepth-1) + `}`,
	`{"a":` + strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth) + `}`,
	`{"a":` + strings.Repeat(`{"b":`, MaxDepth-1) + "1" + strings.Repeat("}", MaxDepth-1) + `}`,
	`{"a":` + strings.Repeat(`{"b":`, MaxDepth) + "1" + strings.Repeat("}", MaxDepth) + `}`,
}

func TestDepth(t *testing.T) {
	for _, s := range deepSeeds {
		check(t, []byte(s))
	}
}

func TestSeeds(t *testing.T) {
	for _, s := range seeds {
		check(t, []byte(s))
	}
}

// FuzzScan holds the scanner to encoding/json: it takes every valid JSON text and nothing else,
// splits objects and arrays as encoding/json does, and reads strings as encoding/json does.
func FuzzScan(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(check)
}

// trimmed is data without its leading white space.
func trimmed(data []byte) []byte { return bytes.TrimLeft(data, " \t\r\n") }

func check(t *testing.T, data []byte) {
	valid := json.Valid(data)
	if Valid(data) != valid {
		t.Fatalf("Valid(%q) = %v, json.Valid %v", data, !valid, valid)
	}

	// A top-level value: its extent, and whether it has white space in it.
	s := New(data)
	s.SkipSpace()
	start, spaces := s.Pos(), s.Spaces()
	if s.Value(0) && valid {
		v := data[start:s.Pos()]
		if want := bytes.TrimRight(trimmed(data), " \t\r\n"); !bytes.Equal(v, want) {
			t.Fatalf("Value(%q) read %q, want %q", data, v, want)
		}
		var c bytes.Buffer
		_ = json.Compact(&c, v)
		if compact := s.Spaces() == spaces; compact != bytes.Equal(c.Bytes(), v) {
			t.Fatalf("Value(%q): compact %v, json.Compact %q", data, compact, c.Bytes())
		}
	}

	// An object, member by member.
	type member struct {
		k string
		v []byte
	}
	var got []member
	s = New(data)
	s.SkipSpace()
	ok := func() bool {
		empty, ok := s.Begin('{')
		if !ok {
			return false
		}
		for !empty {
			kstart, kend, kind, ok := s.Key()
			if !ok {
				return false
			}
			vstart := s.Pos()
			if !s.Value(1) {
				return false
			}
			got = append(got, member{Unquote(data[kstart:kend], kind), data[vstart:s.Pos()]})
			more, ok := s.More('}')
			if !ok {
				return false
			}
			empty = !more
		}
		s.SkipSpace()
		return s.Done()
	}()
	isObject := valid && bytes.HasPrefix(trimmed(data), []byte("{"))
	if ok != isObject {
		t.Fatalf("object %q: read %v, an object %v", data, ok, isObject)
	}
	if ok {
		var want []member
		dec := json.NewDecoder(bytes.NewReader(data))
		_, _ = dec.Token()
		for dec.More() {
			k, _ := dec.Token()
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatal(err)
			}
			want = append(want, member{k.(string), v})
		}
		if len(got) != len(want) {
			t.Fatalf("object %q: %d members, encoding/json %d", data, len(got), len(want))
		}
		for i := range got {
			if got[i].k != want[i].k || !bytes.Equal(got[i].v, want[i].v) {
				t.Fatalf("object %q member %d = %q: %s, encoding/json %q: %s", data, i, got[i].k, got[i].v, want[i].k, want[i].v)
			}
		}
	}

	// An array, item by item.
	var items []json.RawMessage
	s = New(data)
	s.SkipSpace()
	ok = func() bool {
		empty, ok := s.Begin('[')
		if !ok {
			return false
		}
		for !empty {
			start := s.Pos()
			if !s.Value(1) {
				return false
			}
			items = append(items, data[start:s.Pos()])
			more, ok := s.More(']')
			if !ok {
				return false
			}
			empty = !more
		}
		s.SkipSpace()
		return s.Done()
	}()
	var wantItems []json.RawMessage
	err := json.Unmarshal(data, &wantItems)
	if isArray := err == nil && bytes.HasPrefix(trimmed(data), []byte("[")); ok != isArray {
		t.Fatalf("array %q: read %v, json.Unmarshal %v", data, ok, err)
	}
	if ok {
		if len(items) != len(wantItems) {
			t.Fatalf("array %q = %q, want %q", data, items, wantItems)
		}
		for i := range items {
			if !bytes.Equal(items[i], wantItems[i]) {
				t.Fatalf("array %q[%d] = %s, want %s", data, i, items[i], wantItems[i])
			}
		}
	}

	// A string, and its value.
	s = New(data)
	s.SkipSpace()
	start, kind, ok := s.Str()
	var str string
	if ok {
		end := s.Pos()
		s.SkipSpace()
		ok = s.Done()
		if ok {
			str = Unquote(data[start:end], kind)
			if (kind == 0) != (bytes.IndexByte(data[start+1:end-1], '\\') < 0 && isASCII(data[start:end])) {
				t.Fatalf("Str(%q): kind %v", data, kind)
			}
		}
	}
	var ws string
	err = json.Unmarshal(data, &ws)
	if isString := err == nil && bytes.HasPrefix(trimmed(data), []byte(`"`)); ok != isString || str != ws {
		t.Fatalf("string %q = %q %v, json.Unmarshal %q %v", data, str, ok, ws, err)
	}
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}
