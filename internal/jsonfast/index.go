package jsonfast

// Index-based fast paths over a []byte: each function takes the slice and an index and
// returns the index after what it read (-1, or ok false, when the input is not what it is
// sure encoding/json accepts). They accept only what encoding/json accepts and read it to
// the same result; the caller hands anything else to encoding/json.

import (
	"encoding/binary"
	"math/bits"
	"strconv"
	"unicode/utf8"
)

// maxFastDepth bounds the nesting the fast paths follow (encoding/json's limit is 10000; a
// deeper line goes to encoding/json).
const maxFastDepth = 1000

func SkipSpace(b []byte, i int) int {
	for i < len(b) {
		if c := b[i]; c > ' ' || !IsSpace(c) {
			return i // one comparison for the usual byte: not space
		}
		i++
	}
	return i
}

// String flags.
const (
	StrEscaped = 1 << iota // has a backslash escape
	StrHigh                // has bytes >= 0x80
)

// ScanString checks the JSON string that starts at b[i] (a '"') and returns the index after
// its closing quote and its flags; end is -1 if it is not a valid JSON string: unterminated,
// with a control character, or with an escape that JSON does not have. Invalid UTF-8 is
// valid here, as it is to encoding/json.
func ScanString(b []byte, i int) (end int, flags int) {
	i++
	for {
		// Eight bytes at a time, to the first quote, backslash or control character. The
		// lowest byte flagged in special is always one of those (the false positives of the
		// arithmetic are above a true one). Bytes >= 0x80 past it may set StrHigh, which
		// only costs a check of the UTF-8.
		for i+8 <= len(b) {
			x := binary.LittleEndian.Uint64(b[i:])
			special := quoteStops(x)
			if x&highs != 0 {
				flags |= StrHigh
			}
			if special != 0 {
				i += bits.TrailingZeros64(special) >> 3
				break
			}
			i += 8
		}
		if i >= len(b) {
			return -1, 0
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1, flags
		case c == '\\':
			flags |= StrEscaped
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
				i += 6
			default:
				return -1, 0
			}
		case c < 0x20:
			return -1, 0
		default:
			if c >= 0x80 {
				flags |= StrHigh
			}
			i++
		}
	}
}

// ScanNumber checks the JSON number at b[i] and returns the index after it (-1 if there is
// none), and whether it is an integer (no fraction, no exponent).
func ScanNumber(b []byte, i int) (end int, integer bool) {
	start := i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && '1' <= b[i] && b[i] <= '9':
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
	default:
		return -1, false
	}
	integer = true
	if i < len(b) && b[i] == '.' {
		integer = false
		i++
		d := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == d {
			return -1, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		integer = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		d := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i == d {
			return -1, false
		}
	}
	if i == start {
		return -1, false
	}
	return i, integer
}

func HasLiteral(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}

// SkipValue checks the JSON value at b[i] and returns the index after it, -1 if it is not
// valid JSON (or nests deeper than maxFastDepth).
func SkipValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; c {
	case '"':
		end, _ := ScanString(b, i)
		return end
	case '{', '[':
		if depth >= maxFastDepth {
			return -1
		}
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		i = SkipSpace(b, i+1)
		if i < len(b) && b[i] == closing {
			return i + 1
		}
		for {
			if c == '{' {
				if i >= len(b) || b[i] != '"' {
					return -1
				}
				if i, _ = ScanString(b, i); i < 0 {
					return -1
				}
				i = SkipSpace(b, i)
				if i >= len(b) || b[i] != ':' {
					return -1
				}
				i = SkipSpace(b, i+1)
			}
			if i = SkipValue(b, i, depth+1); i < 0 {
				return -1
			}
			i = SkipSpace(b, i)
			if i >= len(b) {
				return -1
			}
			if b[i] == closing {
				return i + 1
			}
			if b[i] != ',' {
				return -1
			}
			i = SkipSpace(b, i+1)
		}
	case 't':
		if HasLiteral(b, i, "true") {
			return i + 4
		}
	case 'f':
		if HasLiteral(b, i, "false") {
			return i + 5
		}
	case 'n':
		if HasLiteral(b, i, "null") {
			return i + 4
		}
	default:
		end, _ := ScanNumber(b, i)
		return end
	}
	return -1
}

// AppendCompact appends the JSON value src (with surrounding space) to dst with the space
// between its tokens left out, as json.Compact does; false (and dst unchanged) if src is
// not one valid JSON value.
func AppendCompact(dst, src []byte) ([]byte, bool) {
	n := len(dst)
	i := SkipSpace(src, 0)
	dst, i = appendCompactValue(dst, src, i, 0)
	if i < 0 || SkipSpace(src, i) != len(src) {
		return dst[:n], false
	}
	return dst, true
}

func appendCompactValue(dst, src []byte, i, depth int) ([]byte, int) {
	if i >= len(src) {
		return dst, -1
	}
	c := src[i]
	if c != '{' && c != '[' {
		end := SkipValue(src, i, depth)
		if end < 0 {
			return dst, -1
		}
		return append(dst, src[i:end]...), end
	}
	if depth >= maxFastDepth {
		return dst, -1
	}
	closing := byte('}')
	if c == '[' {
		closing = ']'
	}
	dst = append(dst, c)
	i = SkipSpace(src, i+1)
	if i < len(src) && src[i] == closing {
		return append(dst, closing), i + 1
	}
	for {
		if c == '{' {
			if i >= len(src) || src[i] != '"' {
				return dst, -1
			}
			end, _ := ScanString(src, i)
			if end < 0 {
				return dst, -1
			}
			dst = append(dst, src[i:end]...)
			i = SkipSpace(src, end)
			if i >= len(src) || src[i] != ':' {
				return dst, -1
			}
			dst = append(dst, ':')
			i = SkipSpace(src, i+1)
		}
		if dst, i = appendCompactValue(dst, src, i, depth+1); i < 0 {
			return dst, -1
		}
		i = SkipSpace(src, i)
		if i >= len(src) {
			return dst, -1
		}
		if src[i] == closing {
			return append(dst, closing), i + 1
		}
		if src[i] != ',' {
			return dst, -1
		}
		dst = append(dst, ',')
		i = SkipSpace(src, i+1)
	}
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
