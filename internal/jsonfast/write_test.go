package jsonfast

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"unicode/utf8"
)

// tricky are strings whose encoding differs from their bytes in every way encoding/json has.
var tricky = []string{
	"",
	"plain ascii text, long enough for the eight-byte loop",
	`"quoted" and back\slash`,
	"\x00\x01\x07\b\t\n\v\f\r\x0e\x1b\x1f\x7f",
	"<script>alert('x&y')</script>",
	"a\u2028b\u2029c \u2027\u202a",
	"\xff", "\xc3", "\xe2\x80", "abc\xffdef\xfe", "\xed\xa0\x80", // invalid UTF-8, a UTF-8 surrogate
	"héllo wörld ✓ 日本語 🎉",
	"12345678\"2345678\\2345678<2345678\n",
	"1234567é", "1234567\u2028", "1234567\xff",
	strings.Repeat("x", 7) + "&", strings.Repeat("y", 64) + "\x00" + strings.Repeat("z", 9),
	string(utf8.RuneError), "\ufeff", "/ is not escaped",
}

func encoderBytes(t *testing.T, s string, html bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(html)
	if err := enc.Encode(s); err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range tricky {
		want := encoderBytes(t, s, false)
		if got := AppendString([]byte("prefix"), s); string(got) != "prefix"+string(want) {
			t.Errorf("AppendString(%q) = %s, encoding/json %s", s, got[len("prefix"):], want)
		}
		wantHTML, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := AppendStringHTML(nil, s); !bytes.Equal(got, wantHTML) {
			t.Errorf("AppendStringHTML(%q) = %s, json.Marshal %s", s, got, wantHTML)
		}
	}
}

func TestAppendUnquotedMatchesEncodingJSON(t *testing.T) {
	quoted := []string{
		`""`, `"plain"`, `"\"\\\/\b\f\n\r\t"`, `"\u0000\u001f\u0041\u00e9\u2028"`,
		`"\uD83C\uDF89"`, `"\ud83c\udf89 lower"`, // a surrogate pair
		`"\uD83C"`, `"\uDF89"`, `"\uD83Cx"`, `"\uD83C\u0041"`, `"\uD83C\uD83C\uDF89"`, // lone surrogates
		`"\uD83C\n"`, `"x\uDBFF\uDFFFy"`, `"héllo \u65e5本"`, `"<&>"`,
	}
	for _, s := range tricky { // what the encoder writes, read back
		quoted = append(quoted, string(encoderBytes(t, s, true)))
	}
	for _, q := range quoted {
		var want string
		if err := json.Unmarshal([]byte(q), &want); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		raw := []byte(q[1 : len(q)-1])
		if !utf8.Valid(raw) {
			continue // the caller's to rule out
		}
		if got := AppendUnquoted([]byte("p"), raw); string(got) != "p"+want {
			t.Errorf("AppendUnquoted(%s) = %q, encoding/json %q", q, got[1:], want)
		}
	}
}

func TestHex4(t *testing.T) {
	for in, want := range map[string]rune{
		"0000": 0, "ffff": 0xffff, "FFFF": 0xffff, "aB9c": 0xab9c, "12345": 0x1234,
		"123": -1, "": -1, "12g4": -1, "-123": -1,
	} {
		if got := Hex4([]byte(in)); got != want {
			t.Errorf("Hex4(%q) = %#x, want %#x", in, got, want)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range tricky {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := AppendString(nil, s), encoderBytes(t, s, false); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q) = %s, encoding/json %s", s, got, want)
		}
		want, _ := json.Marshal(s)
		if got := AppendStringHTML(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendStringHTML(%q) = %s, json.Marshal %s", s, got, want)
		}
		if utf8.ValidString(s) {
			if got := AppendUnquoted(nil, want[1:len(want)-1]); string(got) != s {
				t.Fatalf("AppendUnquoted(%s) = %q, want %q", want, got, s)
			}
		}
	})
}

// AppendFloat writes a float64 as encoding/json does, and refuses what it refuses.
func TestAppendFloat(t *testing.T) {
	for _, f := range []float64{0, math.Copysign(0, -1), 1, -1.5, 0.1, 1e-6, 9.99e-7, 1e-9, 1e20, 1e21, -1.2345e-300,
		math.MaxFloat64, math.SmallestNonzeroFloat64, 123456789.125, 3.0e-5} {
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := AppendFloat([]byte("x"), f); !ok || string(got) != "x"+string(want) {
			t.Errorf("%v: %q (ok %v), want %q", f, got, ok, want)
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, err := json.Marshal(f); err == nil {
			t.Fatalf("encoding/json took %v", f)
		}
		if got, ok := AppendFloat([]byte("x"), f); ok || string(got) != "x" {
			t.Errorf("%v: %q (ok %v), want refused", f, got, ok)
		}
	}
}

// AppendFloat32 writes a float32 as encoding/json does (its own cut-over to exponents and
// its shortest digits for 32 bits), and refuses what it refuses.
func TestAppendFloat32(t *testing.T) {
	for _, f := range []float32{0, float32(math.Copysign(0, -1)), 1, -1.5, 0.1, 0.7, 1e-6, 9.99e-7, 1e-9, 1e20, 1e21,
		math.MaxFloat32, math.SmallestNonzeroFloat32, 16777217, 3.0e-5, 0.95} {
		want, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := AppendFloat32([]byte("x"), f); !ok || string(got) != "x"+string(want) {
			t.Errorf("%v: %q (ok %v), want %q", f, got, ok, want)
		}
	}
	for _, f := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		if _, err := json.Marshal(f); err == nil {
			t.Fatalf("encoding/json took %v", f)
		}
		if got, ok := AppendFloat32([]byte("x"), f); ok || string(got) != "x" {
			t.Errorf("%v: %q (ok %v), want refused", f, got, ok)
		}
	}
}

// TestMarshal checks Marshal against json.Marshal: the same bytes but for HTML escaping,
// no newline, and json.Marshal's errors.
func TestMarshal(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"html", map[string]any{"a": "<b>&</b>", "n": 1.5}, `{"a":"<b>&</b>","n":1.5}`},
		{"string", "x\u2028y\x01", `"x\u2028y\u0001"`},
		{"nil", nil, `null`},
		{"raw", json.RawMessage(` { "k" : [1, 2] } `), `{"k":[1,2]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Marshal(tc.v)
			if err != nil || string(got) != tc.want {
				t.Fatalf("Marshal = %s, %v; want %s", got, err, tc.want)
			}
			std, err := json.Marshal(tc.v)
			unescaped := strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(string(std))
			if err != nil || unescaped != string(got) {
				t.Errorf("Marshal = %s, json.Marshal = %s (%v)", got, std, err)
			}
		})
	}
	for _, v := range []any{math.NaN(), make(chan int), map[string]any{"f": math.Inf(1)}} {
		if got, err := Marshal(v); err == nil {
			t.Errorf("Marshal(%T) = %s, want json.Marshal's error", v, got)
		}
	}
}
