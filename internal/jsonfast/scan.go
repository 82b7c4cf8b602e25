package jsonfast

// The one-pass scanner: it checks the syntax of a value and finds the
// extent of its parts (an object's keys and values, an array's items, a string's escapes) in
// the same pass, without decoding anything it is not asked to. It accepts exactly what
// encoding/json accepts, up to encoding/json's nesting limit; its callers hand anything it
// does not accept to encoding/json, which then decides and words the error.

import (
	"encoding/json"
	"unicode/utf8"
)

// MaxDepth is encoding/json's nesting limit: a value nested deeper is invalid.
const MaxDepth = 10000

// IsSpace reports whether c is JSON white space.
func IsSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// IsDigit reports whether c is an ASCII decimal digit.
func IsDigit(c byte) bool { return '0' <= c && c <= '9' }

func isHex(c byte) bool { return IsDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }

// A Scanner reads JSON text from a position in its data onwards. Its methods return false when
// the text at the position is not what they read; the position is then unspecified.
type Scanner struct {
	data []byte
	pos  int
	// spaces counts the white space runs skipped: a value scanned without one is compact.
	spaces int
}

// New is a Scanner at the start of data.
func New(data []byte) Scanner { return Scanner{data: data} }

// Pos is the position: the index in the data of the next byte to read.
func (s *Scanner) Pos() int { return s.pos }

// Done reports whether the whole of the data has been read.
func (s *Scanner) Done() bool { return s.pos == len(s.data) }

// Spaces is the number of white space runs skipped so far: a value read between two equal
// counts has no white space in it.
func (s *Scanner) Spaces() int { return s.spaces }

// SkipSpace skips the white space at the position, if any.
func (s *Scanner) SkipSpace() {
	if s.pos < len(s.data) && IsSpace(s.data[s.pos]) {
		s.spaces++
		for s.pos++; s.pos < len(s.data) && IsSpace(s.data[s.pos]); s.pos++ {
		}
	}
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

// Value reads one value at the position (no white space before it), nested depth deep: 0
// for a top-level value, 1 for a member or an item of a top-level object or array.
func (s *Scanner) Value(depth int) bool {
	if s.pos >= len(s.data) {
		return false
	}
	// The loops are written out (not Begin, Key and More): this is the hot path.
	switch s.data[s.pos] {
	case '{':
		if depth+1 > MaxDepth {
			return false
		}
		s.pos++
		s.SkipSpace()
		if s.pos < len(s.data) && s.data[s.pos] == '}' {
			s.pos++
			return true
		}
		for {
			if _, _, ok := s.Str(); !ok {
				return false
			}
			s.SkipSpace()
			if s.pos >= len(s.data) || s.data[s.pos] != ':' {
				return false
			}
			s.pos++
			s.SkipSpace()
			if !s.Value(depth + 1) {
				return false
			}
			s.SkipSpace()
			if s.pos >= len(s.data) {
				return false
			}
			switch s.data[s.pos] {
			case ',':
				s.pos++
				s.SkipSpace()
			case '}':
				s.pos++
				return true
			default:
				return false
			}
		}
	case '[':
		if depth+1 > MaxDepth {
			return false
		}
		s.pos++
		s.SkipSpace()
		if s.pos < len(s.data) && s.data[s.pos] == ']' {
			s.pos++
			return true
		}
		for {
			if !s.Value(depth + 1) {
				return false
			}
			s.SkipSpace()
			if s.pos >= len(s.data) {
				return false
			}
			switch s.data[s.pos] {
			case ',':
				s.pos++
				s.SkipSpace()
			case ']':
				s.pos++
				return true
			default:
				return false
			}
		}
	case '"':
		_, _, ok := s.Str()
		return ok
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	}
	return s.number()
}

func (s *Scanner) literal(lit string) bool {
	if len(s.data)-s.pos < len(lit) || string(s.data[s.pos:s.pos+len(lit)]) != lit {
		return false
	}
	s.pos += len(lit)
	return true
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *Scanner) number() bool {
	d, i := s.data, s.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		for i++; i < len(d) && IsDigit(d[i]); i++ {
		}
	default:
		return false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !IsDigit(d[i]) {
			return false
		}
		for i++; i < len(d) && IsDigit(d[i]); i++ {
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !IsDigit(d[i]) {
			return false
		}
		for i++; i < len(d) && IsDigit(d[i]); i++ {
		}
	}
	s.pos = i
	return true
}

// strPlain are the bytes that stand for themselves in a string: not ", \, a control character
// or part of a multi-byte character.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

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
	d, i := s.data, s.pos
	if i >= len(d) || d[i] != '"' {
		return 0, 0, false
	}
	start = i
	for i++; i < len(d); i++ {
		for i < len(d) && strPlain[d[i]] {
			i++
		}
		if i >= len(d) {
			break
		}
		switch c := d[i]; {
		case c == '"':
			s.pos = i + 1
			return start, kind, true
		case c == '\\':
			kind |= Escape
			i++
			if i >= len(d) {
				return 0, 0, false
			}
			switch d[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(d)-i <= 4 || !isHex(d[i+1]) || !isHex(d[i+2]) || !isHex(d[i+3]) || !isHex(d[i+4]) {
					return 0, 0, false
				}
				kind |= UEscape
				i += 4
			default:
				return 0, 0, false
			}
		case c < 0x20:
			return 0, 0, false
		default: // c >= utf8.RuneSelf
			kind |= High
		}
	}
	return 0, 0, false
}

// Unquote is the value of the valid JSON string q (quotes included) of that kind, as
// encoding/json reads it.
func Unquote(q []byte, kind Kind) string {
	body := q[1 : len(q)-1]
	switch {
	case kind&UEscape != 0 || kind&High != 0 && !utf8.Valid(body):
		// encoding/json decodes \u escapes and surrogate pairs and replaces invalid UTF-8
	case kind&Escape == 0:
		return string(body)
	default:
		b := make([]byte, 0, len(body))
		for i := 0; i < len(body); i++ {
			c := body[i]
			if c != '\\' {
				b = append(b, c)
				continue
			}
			i++
			switch c = body[i]; c {
			case 'b':
				c = '\b'
			case 'f':
				c = '\f'
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			}
			b = append(b, c) // ", \ and / stand for themselves
		}
		return string(b)
	}
	var s string
	_ = json.Unmarshal(q, &s)
	return s
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
