package jsonfast

import (
	"bytes"
	"encoding/json"
	"fmt"
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

	// The Scanner's passes: SkipValue, and AppendCompact against json.Compact.
	i := SkipSpace(data, 0)
	if end := SkipValue(data, i, 0); (end >= 0 && SkipSpace(data, end) == len(data)) != valid {
		t.Fatalf("SkipValue(%q) = %d, json.Valid %v", data, end, valid)
	}
	var compact bytes.Buffer
	cerr := json.Compact(&compact, data)
	if out, ok := AppendCompact([]byte("pre"), data); ok != (cerr == nil) || ok && string(out) != "pre"+compact.String() || !ok && string(out) != "pre" {
		t.Fatalf("AppendCompact(%q) = %q %v, json.Compact %q %v", data, out, ok, compact.Bytes(), cerr)
	}
	html, herr := json.Marshal(json.RawMessage(data))
	if out, ok := AppendCompactHTML([]byte("pre"), data); ok != (herr == nil) || ok && string(out) != "pre"+string(html) || !ok && string(out) != "pre" {
		t.Fatalf("AppendCompactHTML(%q) = %q %v, json.Marshal %q %v", data, out, ok, html, herr)
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

	// The same object through Members, which stops when member says so.
	s = New(data)
	s.SkipSpace()
	var viaMembers []member
	ok = s.Members(func(kstart, kend int, kind Kind) bool {
		vstart := s.Pos()
		if !s.Value(1) {
			return false
		}
		viaMembers = append(viaMembers, member{Unquote(data[kstart:kend], kind), s.Since(vstart)})
		return true
	})
	if s.SkipSpace(); (ok && s.Done()) != isObject || ok && isObject && len(viaMembers) != len(got) {
		t.Fatalf("Members(%q) = %v, %d members, want %v, %d", data, ok, len(viaMembers), isObject, len(got))
	}
	for i := range viaMembers {
		if isObject && (viaMembers[i].k != got[i].k || !bytes.Equal(viaMembers[i].v, got[i].v)) {
			t.Fatalf("Members(%q) member %d = %q: %s, want %q: %s", data, i, viaMembers[i].k, viaMembers[i].v, got[i].k, got[i].v)
		}
	}
	s = New(data)
	s.SkipSpace()
	var values []member
	ok = s.MemberValues(func(k []byte, kind Kind, v []byte, compact bool) {
		var c bytes.Buffer
		_ = json.Compact(&c, v)
		if compact != bytes.Equal(c.Bytes(), v) {
			t.Fatalf("MemberValues(%q): %s compact %v, json.Compact %s", data, v, compact, c.Bytes())
		}
		values = append(values, member{Unquote(k, kind), v})
	})
	if (ok && s.AtEnd()) != isObject || isObject && fmt.Sprint(values) != fmt.Sprint(got) {
		t.Fatalf("MemberValues(%q) = %v %q, want %v %q", data, ok, values, isObject, got)
	}
	if isObject && len(got) > 0 {
		s = New(data)
		s.SkipSpace()
		calls := 0
		if s.Members(func(int, int, Kind) bool { calls++; return false }) || calls != 1 {
			t.Fatalf("Members(%q) went on after its member said stop: %d calls", data, calls)
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

	// The same array through Items.
	s = New(data)
	s.SkipSpace()
	var viaItems [][]byte
	okItems := s.Items(func() bool {
		start := s.Pos()
		viaItems = append(viaItems, nil)
		if !s.Value(1) {
			return false
		}
		viaItems[len(viaItems)-1] = s.Since(start)
		return true
	})
	if s.SkipSpace(); (okItems && s.Done()) != ok || ok && len(viaItems) != len(items) {
		t.Fatalf("Items(%q) = %v, %d items, want %v, %d", data, okItems, len(viaItems), ok, len(items))
	}
	for i := range items {
		if !bytes.Equal(viaItems[i], items[i]) {
			t.Fatalf("Items(%q)[%d] = %s, want %s", data, i, viaItems[i], items[i])
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

// TestLimit: a Scanner of NewLimit takes nesting to its limit and no deeper; New's is
// encoding/json's.
func TestLimit(t *testing.T) {
	for _, c := range []struct {
		limit, depth int
		want         bool
	}{{3, 3, true}, {3, 4, false}, {1, 1, true}, {1, 2, false}, {MaxDepth + 5, MaxDepth, true}, {MaxDepth + 5, MaxDepth + 1, false}} {
		data := []byte(strings.Repeat(`{"a":[`, c.depth/2) + strings.Repeat("[", c.depth%2) + "1" +
			strings.Repeat("]", c.depth%2) + strings.Repeat("]}", c.depth/2))
		s := NewLimit(data, c.limit)
		if got := s.Value(0) && s.Done(); got != c.want {
			t.Errorf("limit %d, depth %d: %v, want %v", c.limit, c.depth, got, c.want)
		}
	}
}

// TestKinds: a string's Kind says exactly what it holds, whatever follows it; Kinds gathers
// those of all the strings read, object keys included.
func TestKinds(t *testing.T) {
	for _, c := range []struct {
		data  string
		kind  Kind // of the first string
		kinds Kind // of the whole value
	}{
		{`"ab"`, 0, 0},
		{`"ab"` + "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 0, 0}, // bytes >= 0x80 in the same eight, past the quote
		{`"abcdefghij"é`, 0, 0},
		{`"aé"`, High, High},
		{`"abcdefghé"`, High, High}, // in the second eight bytes
		{`"a\n"`, Escape, Escape},
		{`"a\u00e9"`, Escape | UEscape, Escape | UEscape},
		{`["a",{"é":1},"\t"]`, 0, High | Escape},
	} {
		b := []byte(c.data)
		if b[0] == '"' {
			if end, flags := ScanString(b, 0); end < 0 || Kind(flags) != c.kind {
				t.Errorf("ScanString(%q) = %d, %b, want kind %b", c.data, end, flags, c.kind)
			}
		}
		s := New(b)
		if !s.Value(0) || s.Kinds() != c.kinds {
			t.Errorf("Value(%q): Kinds %b, want %b", c.data, s.Kinds(), c.kinds)
		}
	}
}

// TestSincePeek: Since is what was read from a position, Peek the byte next.
func TestSincePeek(t *testing.T) {
	s := New([]byte(`{"a": [1, 2]} `))
	if s.Peek() != '{' {
		t.Fatalf("Peek %q", s.Peek())
	}
	s.Begin('{')
	s.Key()
	start := s.Pos()
	if !s.Value(1) || string(s.Since(start)) != "[1, 2]" || cap(s.Since(start)) != len("[1, 2]") {
		t.Fatalf("Since %q", s.Since(start))
	}
	s.More('}')
	s.SkipSpace()
	if !s.Done() || s.Peek() != 0 {
		t.Fatalf("at the end: Done %v, Peek %q", s.Done(), s.Peek())
	}
}

func TestTypeName(t *testing.T) {
	for _, c := range []struct{ v, want string }{
		{`{"a":1}`, "an object"}, {" [1]", "an array"}, {`"x"`, "a string"}, {"true", "a boolean"},
		{"\tfalse ", "a boolean"}, {"null", "null"}, {"-1.5", "a number"}, {"0", "a number"}, {"", "empty"}, {" \n", "empty"},
	} {
		if got := TypeName([]byte(c.v)); got != c.want {
			t.Errorf("TypeName(%q) = %q, want %q", c.v, got, c.want)
		}
	}
}
