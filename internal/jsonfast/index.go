package jsonfast

// Index-based fast paths over a []byte: each function takes the slice and an index and
// returns the index after what it read (-1, or ok false, when the input is not what it is
// sure encoding/json accepts). They accept only what encoding/json accepts and read it to
// the same result; the caller hands anything else to encoding/json. The checking ones are
// the Scanner's parts (ScanString, ScanNumber, SkipSpace) or its passes (SkipValue,
// AppendCompact).

import (
	"strconv"
	"unicode/utf8"
)

// The flags of ScanString, the Kind bits as an int.
const (
	StrEscaped = int(Escape) // has a backslash escape
	StrHigh    = int(High)   // has bytes >= 0x80
)

// ScanString checks the JSON string that starts at b[i] (a '"') and returns the index after
// its closing quote and its flags (its Kind); end is -1 if it is not a valid JSON string:
// unterminated, with a control character, or with an escape that JSON does not have. Invalid
// UTF-8 is valid here, as it is to encoding/json.
func ScanString(b []byte, i int) (end int, flags int) {
	end, kind := scanString(b, i)
	return end, int(kind)
}

// SkipValue checks the JSON value at b[i] and returns the index after it, -1 if it is not
// valid JSON (or nests deeper than encoding/json's limit, MaxDepth, counting depth levels
// around it).
func SkipValue(b []byte, i, depth int) int {
	s := Scanner{data: b, pos: i, limit: MaxDepth}
	if !s.Value(depth) {
		return -1
	}
	return s.pos
}

// AppendCompact appends the JSON value src (with surrounding space) to dst with the space
// between its tokens left out, as json.Compact does; false (and dst unchanged) if src is
// not one valid JSON value. It is one pass of a Scanner that copies what it reads.
func AppendCompact(dst, src []byte) ([]byte, bool) {
	n := len(dst)
	s := New(src)
	s.SkipSpace()
	s.out, s.copied, s.keep = dst, s.pos, true
	if !s.Value(0) {
		return dst, false
	}
	dst = append(s.out, src[s.copied:s.pos]...)
	s.keep = false
	if s.SkipSpace(); !s.Done() {
		return dst[:n], false
	}
	return dst, true
}

// AppendCompactHTML is AppendCompact with encoding/json's HTML escaping: the bytes json.Marshal
// gives for src as a json.RawMessage, where '<', '>', '&', U+2028 and U+2029 are written as
// \u003c, \u003e, \u0026, \u2028 and \u2029.
func AppendCompactHTML(dst, src []byte) ([]byte, bool) {
	n := len(dst)
	dst, ok := AppendCompact(dst, src)
	if !ok {
		return dst, false
	}
	i := n
	for ; i < len(dst); i++ {
		if c := dst[i]; c == '<' || c == '>' || c == '&' || c == 0xE2 {
			break
		}
	}
	if i == len(dst) {
		return dst, true
	}
	tail := append([]byte(nil), dst[i:]...)
	dst = dst[:i]
	for j := 0; j < len(tail); j++ {
		switch c := tail[j]; {
		case c == '<' || c == '>' || c == '&':
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		case c == 0xE2 && j+2 < len(tail) && tail[j+1] == 0x80 && tail[j+2]&^1 == 0xA8:
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[tail[j+2]&0xF])
			j += 2
		default:
			dst = append(dst, c)
		}
	}
	return dst, true
}

// ParseInt reads the JSON number at b[i] as an int64 of bits bits, as encoding/json decodes
// a number into an integer field: ok is false for a number with a fraction or an exponent
// (an error to encoding/json), one out of range, or no number.
func ParseInt(b []byte, i int, bits int) (v int64, end int, ok bool) {
	end, integer := ScanNumber(b, i)
	if end < 0 || !integer {
		return 0, -1, false
	}
	neg := b[i] == '-'
	j := i
	if neg {
		j++
	}
	if end-j > 19 {
		return 0, -1, false
	}
	var u uint64
	for ; j < end; j++ {
		u = u*10 + uint64(b[j]-'0') // at most 19 digits: no overflow of a uint64
	}
	limit := uint64(1) << (bits - 1)
	if neg {
		if u > limit {
			return 0, -1, false
		}
		return -int64(u), end, true // -(1<<63) wraps to itself
	}
	if u >= limit {
		return 0, -1, false
	}
	return int64(u), end, true
}

// ParseFloat reads the JSON number at b[i] as a float64, like encoding/json (a number out
// of range is not ok).
func ParseFloat(b []byte, i int) (v float64, end int, ok bool) {
	end, integer := ScanNumber(b, i)
	if end < 0 {
		return 0, -1, false
	}
	// Integers of up to 15 digits are exact as float64; -0 is left to ParseFloat.
	if integer && end-i <= 15 {
		neg := b[i] == '-'
		j := i
		if neg {
			j++
		}
		var u int64
		for ; j < end; j++ {
			u = u*10 + int64(b[j]-'0')
		}
		if neg && u != 0 {
			return -float64(u), end, true
		}
		if !neg {
			return float64(u), end, true
		}
	}
	f, err := strconv.ParseFloat(string(b[i:end]), 64)
	if err != nil {
		return 0, -1, false
	}
	return f, end, true
}

// CheckFloat checks the JSON number at b[i] as encoding/json checks one it decodes into a
// float64 (one out of range is an error), without converting it when it need not.
func CheckFloat(b []byte, i int) (end int, ok bool) {
	end, integer := ScanNumber(b, i)
	if end < 0 {
		return -1, false
	}
	if end-i < 300 && (integer || !hasExponent(b[i:end])) {
		return end, true // fewer than 309 digits before any point: in range
	}
	_, end, ok = ParseFloat(b, i)
	return end, ok
}

func hasExponent(num []byte) bool {
	for _, c := range num {
		if c == 'e' || c == 'E' {
			return true
		}
	}
	return false
}

// UnquoteFast returns the text of the JSON string b[i:end] (end and flags from
// ScanString), as encoding/json unquotes it; ok is false for invalid UTF-8, which
// encoding/json replaces: that is left to encoding/json. For a string without escapes, raw
// is the bytes (not a copy); with escapes it is the text, unquoted into scratch.
func UnquoteFast(b []byte, i, end, flags int, scratch []byte) (raw []byte, ok bool) {
	raw = b[i+1 : end-1]
	if flags&StrHigh != 0 && !utf8.Valid(raw) {
		return nil, false
	}
	if flags&StrEscaped == 0 {
		return raw, true
	}
	return AppendUnquoted(scratch[:0], raw), true
}
