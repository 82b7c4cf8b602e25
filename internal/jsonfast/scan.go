package jsonfast

// The one-pass scanner: it checks the syntax of a value and finds the
// extent of its parts (an object's keys and values, an array's items, a string's escapes) in
// the same pass, without decoding anything it is not asked to. It accepts exactly what
// encoding/json accepts, up to encoding/json's nesting limit; its callers hand anything it
// does not accept to encoding/json, which then decides and words the error.

import (
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"unicode/utf8"
)

// MaxDepth is encoding/json's nesting limit: a value nested deeper is invalid.
const MaxDepth = 10000

// IsSpace reports whether c is JSON white space.
func IsSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// IsDigit reports whether c is an ASCII decimal digit.
func IsDigit(c byte) bool { return '0' <= c && c <= '9' }

// A Scanner reads JSON text from a position in its data onwards. Its methods return false when
// the text at the position is not what they read; the position is then unspecified. It is the
// one validating scanner: the index helpers (ScanString, ScanNumber, SkipSpace, SkipValue,
// AppendCompact) are its parts or are built on it.
type Scanner struct {
	data []byte
	pos  int
	// spaces counts the white space runs skipped: a value scanned without one is compact.
	spaces int
	// kinds is what the strings read so far hold, together (see Kind).
	kinds Kind
	// limit is the deepest nesting Value follows.
	limit int
	// out, when keep is set, receives the data read with its white space left out
	// (AppendCompact), up to copied: the white space runs skipped are cut as they come.
	out    []byte
	copied int
	keep   bool
}

// New is a Scanner at the start of data that follows nesting to encoding/json's limit.
func New(data []byte) Scanner { return Scanner{data: data, limit: MaxDepth} }

// NewLimit is a Scanner at the start of data that takes no value nested deeper than maxDepth
// (below MaxDepth: a caller whose careful path has a lower limit).
func NewLimit(data []byte, maxDepth int) Scanner {
	return Scanner{data: data, limit: min(maxDepth, MaxDepth)}
}

// Pos is the position: the index in the data of the next byte to read.
func (s *Scanner) Pos() int { return s.pos }

// Since is the data read from start (an earlier position) to the position, with no room to
// append into.
func (s *Scanner) Since(start int) []byte { return s.data[start:s.pos:s.pos] }

// Peek is the byte at the position, 0 at the end of the data.
func (s *Scanner) Peek() byte {
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// AtEnd skips the white space at the position and reports whether the data ends there.
func (s *Scanner) AtEnd() bool {
	s.SkipSpace()
	return s.Done()
}

// Done reports whether the whole of the data has been read.
func (s *Scanner) Done() bool { return s.pos == len(s.data) }

// Spaces is the number of white space runs skipped so far: a value read between two equal
// counts has no white space in it.
func (s *Scanner) Spaces() int { return s.spaces }

// Kinds is what the strings read so far hold, together: High when any had a byte >= 0x80.
func (s *Scanner) Kinds() Kind { return s.kinds }

// SkipSpace skips the white space at the position, if any.
func (s *Scanner) SkipSpace() { s.pos = s.space(s.data, s.pos) }

// SkipSpace returns the index of the first byte at or after b[i] that is not white space.
func SkipSpace(b []byte, i int) int {
	for i < len(b) {
		if c := b[i]; c > ' ' || !IsSpace(c) {
			return i // one comparison for the usual byte: not space
		}
		i++
	}
	return i
}

// Begin reads the opening delimiter open ('{' or '[') at the position and the white space
// after it; empty reports that the closing delimiter came next and was read too. ok is false
// when the position does not hold open.
func (s *Scanner) Begin(open byte) (empty, ok bool) {
	if s.pos >= len(s.data) || s.data[s.pos] != open {
		return false, false
	}
	s.pos++
	s.SkipSpace()
	// '}' and ']' are two after '{' and '['
	if s.pos < len(s.data) && s.data[s.pos] == open+2 {
		s.pos++
		return true, true
	}
	return false, true
}

// Key reads an object member's key at the position, the colon after it and the white space
// around the colon, leaving the position at the member's value. The key as written, quotes
// included, is data[start:end]; kind says what it holds (see Str).
func (s *Scanner) Key() (start, end int, kind Kind, ok bool) {
	start, kind, ok = s.Str()
	if !ok {
		return 0, 0, 0, false
	}
	end = s.pos
	s.SkipSpace()
	if s.pos >= len(s.data) || s.data[s.pos] != ':' {
		return 0, 0, 0, false
	}
	s.pos++
	s.SkipSpace()
	return start, end, kind, true
}

// More reads the white space and the separator after an object member or an array item:
// more is true after a comma (and the white space after it), false after the closing
// delimiter end ('}' or ']'); ok is false on anything else.
func (s *Scanner) More(end byte) (more, ok bool) {
	s.SkipSpace()
	if s.pos >= len(s.data) {
		return false, false
	}
	switch s.data[s.pos] {
	case ',':
		s.pos++
		s.SkipSpace()
		return true, true
	case end:
		s.pos++
		return false, true
	}
	return false, false
}

// Members reads the object at the position (no white space before it), member by member:
// member is called with the position at the member's value and the member's key as written,
// data[start:end] (quotes included), of that kind (see Str). It must read the value; false
// from it stops Members, which then returns false, as it does when the object is not valid.
func (s *Scanner) Members(member func(start, end int, kind Kind) bool) bool {
	empty, ok := s.Begin('{')
	for ok && !empty {
		var start, end int
		var kind Kind
		if start, end, kind, ok = s.Key(); !ok || !member(start, end, kind) {
			return false
		}
		empty, ok = s.more('}')
	}
	return ok
}

// MemberValues is Members that reads the values too, for a top-level object (its values
// nested one deep): member gets each member's key as written (quotes included), of that
// kind, and its value, with compact true when the value has no white space in it.
func (s *Scanner) MemberValues(member func(key []byte, kind Kind, value []byte, compact bool)) bool {
	return s.Members(func(start, end int, kind Kind) bool {
		vstart, spaces := s.pos, s.spaces
		if !s.Value(1) {
			return false
		}
		member(s.data[start:end], kind, s.Since(vstart), s.spaces == spaces)
		return true
	})
}

// Items reads the array at the position (no white space before it), item by item: item is
// called with the position at each item, and must read it; false from it stops Items, which
// then returns false, as it does when the array is not valid.
func (s *Scanner) Items(item func() bool) bool {
	empty, ok := s.Begin('[')
	for ok && !empty {
		if !item() {
			return false
		}
		empty, ok = s.more(']')
	}
	return ok
}

// more is More, saying whether the end came (done).
func (s *Scanner) more(end byte) (done, ok bool) {
	more, ok := s.More(end)
	return !more, ok
}

// Value reads one value at the position (no white space before it), nested depth deep: 0
// for a top-level value, 1 for a member or an item of a top-level object or array.
func (s *Scanner) Value(depth int) bool {
	i := s.value(s.data, s.pos, depth)
	if i < 0 {
		return false
	}
	s.pos = i
	return true
}

// value reads the value at d[i] (d is the data) and returns the index after it, -1 if it is
// not one. It is Value with Begin, Key, More and Str written out and the position in a
// variable: the hot path.
func (s *Scanner) value(d []byte, i, depth int) int {
	if i >= len(d) {
		return -1
	}
	switch c := d[i]; c {
	case '{', '[':
		if depth >= s.limit {
			return -1
		}
		if i = s.space(d, i+1); i < len(d) && d[i] == c+2 { // '}' and ']' are two after '{' and '['
			return i + 1
		}
		// An object's members and an array's items, in one loop: an object's have a key first.
		for {
			if c == '{' {
				if i >= len(d) || d[i] != '"' {
					return -1
				}
				end, kind := scanString(d, i)
				if end < 0 {
					return -1
				}
				s.kinds |= kind
				if i = s.space(d, end); i >= len(d) || d[i] != ':' {
					return -1
				}
				i = s.space(d, i+1)
			}
			if i = s.value(d, i, depth+1); i < 0 {
				return -1
			}
			if i = s.space(d, i); i >= len(d) {
				return -1
			}
			switch d[i] {
			case ',':
				i = s.space(d, i+1)
			case c + 2:
				return i + 1
			default:
				return -1
			}
		}
	case '"':
		end, kind := scanString(d, i)
		s.kinds |= kind
		return end
	case 't':
		if HasLiteral(d, i, "true") {
			return i + 4
		}
		return -1
	case 'f':
		if HasLiteral(d, i, "false") {
			return i + 5
		}
		return -1
	case 'n':
		if HasLiteral(d, i, "null") {
			return i + 4
		}
		return -1
	}
	end, _ := ScanNumber(d, i)
	return end
}

// space is the index after the white space at d[i] (d is the data), counted in spaces.
func (s *Scanner) space(d []byte, i int) int {
	if i < len(d) && d[i] <= ' ' { // inlined: the usual byte is not space
		return s.spaceRun(i)
	}
	return i
}

// spaceRun is the rest of space, kept out of line so that space inlines.
//
//go:noinline
func (s *Scanner) spaceRun(i int) int {
	j := SkipSpace(s.data, i)
	if j == i {
		return i
	}
	s.spaces++
	if s.keep {
		s.out = append(s.out, s.data[s.copied:i]...)
		s.copied = j
	}
	return j
}

// Literal reads lit (true, false or null) at the position.
func (s *Scanner) Literal(lit string) bool {
	if !HasLiteral(s.data, s.pos, lit) {
		return false
	}
	s.pos += len(lit)
	return true
}

// HasLiteral reports whether b[i:] starts with lit.
func HasLiteral(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}

// ScanNumber checks the JSON number at b[i] and returns the index after it (-1 if there is
// none), and whether it is an integer (no fraction, no exponent).
func ScanNumber(b []byte, i int) (end int, integer bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		i = digits(b, i) // at least this one
	default:
		return -1, false
	}
	integer = true
	if i < len(b) && b[i] == '.' {
		integer = false
		if i = digits(b, i+1); i < 0 {
			return -1, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		integer = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i = digits(b, i); i < 0 {
			return -1, false
		}
	}
	return i, integer
}

// digits returns the index after the digits at b[i], -1 if there are none.
func digits(b []byte, i int) int {
	start := i
	for i < len(b) && IsDigit(b[i]) {
		i++
	}
	if i == start {
		return -1
	}
	return i
}

// Kind says what a string holds besides plain ASCII: 0 (nothing: its bytes between the quotes
// are its value) or these bits.
type Kind uint8

const (
	Escape  Kind = 1 << iota // a \ escape
	UEscape                  // a \u escape
	High                     // a byte >= 0x80
)

// Str reads a string at the position (no white space before it). The string as written,
// quotes included, is data[start:Pos()].
func (s *Scanner) Str() (start int, kind Kind, ok bool) {
	if s.pos >= len(s.data) || s.data[s.pos] != '"' {
		return 0, 0, false
	}
	end, kind := scanString(s.data, s.pos)
	if end < 0 {
		return 0, 0, false
	}
	start, s.pos = s.pos, end
	s.kinds |= kind
	return start, kind, true
}

// scanString checks the JSON string that starts at b[i] (a '"') and returns the index after
// its closing quote and what it holds; end is -1 if it is not a valid JSON string:
// unterminated, with a control character, or with an escape that JSON does not have. Invalid
// UTF-8 is valid here, as it is to encoding/json.
func scanString(b []byte, i int) (end int, kind Kind) {
	i++
	for {
		// Eight bytes at a time, to the first quote, backslash or control character. The
		// lowest byte flagged in stops is always one of those (the false positives of the
		// arithmetic are above a true one); bytes >= 0x80 count below it only.
		for i+8 <= len(b) {
			x := binary.LittleEndian.Uint64(b[i:])
			if stops := quoteStops(x); stops != 0 {
				if x&highs&(stops&-stops-1) != 0 { // the bytes below the lowest stop
					kind |= High
				}
				i += bits.TrailingZeros64(stops) >> 3
				break
			}
			if x&highs != 0 {
				kind |= High
			}
			i += 8
		}
		if i >= len(b) {
			return -1, 0
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, kind
		case c == '\\':
			kind |= Escape
			if i+1 >= len(b) {
				return -1, 0
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if Hex4(b[i+2:]) < 0 {
					return -1, 0
				}
				kind |= UEscape
				i += 6
			default:
				return -1, 0
			}
		case c < 0x20:
			return -1, 0
		default:
			if c >= utf8.RuneSelf {
				kind |= High
			}
			i++
		}
	}
}

// Unquote is the value of the valid JSON string q (quotes included) of that kind, as
// encoding/json reads it.
func Unquote(q []byte, kind Kind) string {
	body := q[1 : len(q)-1]
	switch {
	case kind&High != 0 && !utf8.Valid(body):
		var s string
		_ = json.Unmarshal(q, &s) // invalid UTF-8, which encoding/json replaces
		return s
	case kind&Escape == 0:
		return string(body)
	}
	return string(AppendUnquoted(make([]byte, 0, len(body)), body))
}

// TypeName names the JSON type of a valid value (white space around it allowed), for error
// messages: "an object", "an array", "a string", "a boolean", "null" or "a number"; "empty"
// when there is no value.
func TypeName(v []byte) string {
	if i := SkipSpace(v, 0); i < len(v) {
		switch v[i] {
		case '{':
			return "an object"
		case '[':
			return "an array"
		case '"':
			return "a string"
		case 't', 'f':
			return "a boolean"
		case 'n':
			return "null"
		}
		return "a number"
	}
	return "empty"
}

// Valid reports whether data is one JSON value with optional white space around it. false
// may also mean a value it does not take; encoding/json is to tell.
func Valid(data []byte) bool {
	s := New(data)
	s.SkipSpace()
	if !s.Value(0) {
		return false
	}
	s.SkipSpace()
	return s.Done()
}
