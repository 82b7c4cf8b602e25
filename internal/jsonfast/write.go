package jsonfast

// Encoding strings and floats and decoding strings: appending a string exactly as
// encoding/json encodes it, and unquoting a string's content exactly as encoding/json
// decodes it.

import (
	"bytes"
	"encoding/json"
	"math"
	"math/bits"
	"strconv"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// StringStops marks, in the high bit of each byte, the bytes of x (eight bytes of a string,
// little-endian) that a JSON string scan must stop at: '"', '\\', control characters
// (< 0x20) and non-ASCII bytes (>= 0x80). The lowest mark is always exact (the arithmetic
// may set false marks only above a true one), so bits.TrailingZeros64(m)>>3 is the index of
// the first such byte, and a zero result means none of the eight is one.
func StringStops(x uint64) uint64 { return quoteStops(x) | x&highs }

// quoteStops is StringStops without the non-ASCII bytes: it marks '"', '\\' and control
// characters, the bytes a scan that only checks a string must stop at (ScanString).
func quoteStops(x uint64) uint64 {
	q := x ^ (ones * '"')
	bs := x ^ (ones * '\\')
	return (((q - ones) &^ q) | ((bs - ones) &^ bs) | ((x - ones*0x20) &^ x)) & highs
}

// htmlStops is StringStops for '<', '>' and '&', which encoding/json escapes by default.
func htmlStops(x uint64) uint64 {
	lt := x ^ (ones * '<')
	gt := x ^ (ones * '>')
	amp := x ^ (ones * '&')
	return (((lt - ones) &^ lt) | ((gt - ones) &^ gt) | ((amp - ones) &^ amp)) & highs
}

// load64 is s[i:i+8] as a little-endian number.
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// AppendString appends s to dst as a JSON string, byte for byte as a json.Encoder with
// SetEscapeHTML(false) writes it: short escapes for \b \f \n \r \t \" \\, \u00XX for the
// other control characters, \ufffd for each byte of invalid UTF-8, and U+2028 and U+2029
// escaped as \u2028 and \u2029. All other bytes are copied as they are.
func AppendString(dst []byte, s string) []byte {
	return appendString(dst, s, false)
}

// AppendStringHTML is AppendString with encoding/json's default HTML escaping: the same
// bytes as json.Marshal gives for s, where '<', '>' and '&' are also written as \u003c,
// \u003e and \u0026.
func AppendStringHTML(dst []byte, s string) []byte {
	return appendString(dst, s, true)
}

func appendString(b []byte, s string, html bool) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		// Eight bytes at a time to the first byte that may need an escape.
		for i+8 <= len(s) {
			x := load64(s, i)
			m := StringStops(x)
			if html {
				m |= htmlStops(x)
			}
			if m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		if i >= len(s) {
			break
		}
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && (!html || c != '<' && c != '>' && c != '&') {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// Hex4 is the value of the four hex digits (either case) that b starts with, or -1 if b is
// shorter or does not start with four.
func Hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

// AppendUnquoted appends the text of raw, the content of a JSON string without its quotes,
// as encoding/json unquotes it: escapes decoded, a \u surrogate pair joined into its rune and
// any other \u surrogate written as U+FFFD. The escapes in raw must be valid JSON escapes (a
// scan has checked them); bytes that are not escapes are copied as they are, so invalid UTF-8
// (which encoding/json replaces) is the caller's to rule out.
func AppendUnquoted(dst, raw []byte) []byte {
	for len(raw) > 0 {
		j := bytes.IndexByte(raw, '\\')
		if j < 0 {
			return append(dst, raw...)
		}
		dst = append(dst, raw[:j]...)
		raw = raw[j:]
		switch c := raw[1]; c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := Hex4(raw[2:])
			raw = raw[6:]
			if utf16.IsSurrogate(r) {
				r1 := rune(-1)
				if len(raw) >= 6 && raw[0] == '\\' && raw[1] == 'u' {
					r1 = Hex4(raw[2:])
				}
				if dec := utf16.DecodeRune(r, r1); dec != unicode.ReplacementChar {
					raw = raw[6:]
					dst = utf8.AppendRune(dst, dec)
					continue
				}
				r = unicode.ReplacementChar
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, c)
		}
		raw = raw[2:]
	}
	return dst
}

// AppendFloat appends f as encoding/json writes a float64 (ok false for NaN and ±Inf,
// which it refuses).
func AppendFloat(dst []byte, f float64) ([]byte, bool) {
	return appendFloat(dst, f, 64)
}

// AppendFloat32 appends f as encoding/json writes a float32 (ok false for NaN and ±Inf).
func AppendFloat32(dst []byte, f float32) ([]byte, bool) {
	return appendFloat(dst, float64(f), 32)
}

func appendFloat(dst []byte, f float64, bits int) ([]byte, bool) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return dst, false
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (bits == 64 && (abs < 1e-6 || abs >= 1e21) || bits == 32 && (float32(abs) < 1e-6 || float32(abs) >= 1e21)) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, bits)
	if format == 'e' {
		// clean up e-09 to e-9
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, true
}

// Marshal is json.Marshal without HTML escaping ("<", ">" and "&" stay as they are): the
// bytes a json.Encoder with SetEscapeHTML(false) writes, without its newline.
func Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
