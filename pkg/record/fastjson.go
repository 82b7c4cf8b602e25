package record

// A small JSON reader for the lines this package writes, so that reading a journal does not
// cost an encoding/json decode per record (the resume scan, Finalize and the evaluation read
// 10^6 of them). Every function here is a fast path: it accepts only what it is sure
// encoding/json accepts, and reads it to the same result; anything else (an escape it does
// not unquote, an unknown or repeated key, a number it does not parse, invalid JSON, …)
// makes it report false, and the caller decodes the line with encoding/json, which gives
// the result, or the error, it always gave.

import (
	"encoding/binary"
	"math/bits"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// maxJSONDepth bounds the nesting the fast paths follow (encoding/json's limit is 10000; a
// deeper line goes to encoding/json).
const maxJSONDepth = 1000

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(b []byte, i int) int {
	for i < len(b) {
		if c := b[i]; c > ' ' || !isSpace(c) {
			return i // one comparison for the usual byte: not space
		}
		i++
	}
	return i
}

// String flags.
const (
	strEscaped = 1 << iota // has a backslash escape
	strHigh                // has bytes >= 0x80
)

const (
	lsb = 0x0101010101010101
	msb = 0x8080808080808080
)

// scanString checks the JSON string that starts at b[i] (a '"') and returns the index after
// its closing quote and its flags; end is -1 if it is not a valid JSON string: unterminated,
// with a control character, or with an escape that JSON does not have. Invalid UTF-8 is
// valid here, as it is to encoding/json.
func scanString(b []byte, i int) (end int, flags int) {
	i++
	for {
		// Eight bytes at a time, to the first quote, backslash or control character. The
		// lowest byte flagged in special is always one of those (the false positives of the
		// arithmetic are above a true one). Bytes >= 0x80 past it may set strHigh, which
		// only costs a check of the UTF-8.
		for i+8 <= len(b) {
			x := binary.LittleEndian.Uint64(b[i:])
			q := x ^ ('"' * lsb)
			s := x ^ ('\\' * lsb)
			special := (((q - lsb) &^ q) | ((s - lsb) &^ s) | ((x - 0x20*lsb) &^ x)) & msb
			if x&msb != 0 {
				flags |= strHigh
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
			flags |= strEscaped
			if i+1 >= len(b) {
				return -1, 0
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if jsonfast.Hex4(b[i+2:]) < 0 {
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
				flags |= strHigh
			}
			i++
		}
	}
}

// scanNumber checks the JSON number at b[i] and returns the index after it (-1 if there is
// none), and whether it is an integer (no fraction, no exponent).
func scanNumber(b []byte, i int) (end int, integer bool) {
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

func hasLiteral(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}

// skipValue checks the JSON value at b[i] and returns the index after it, -1 if it is not
// valid JSON (or nests deeper than maxJSONDepth).
func skipValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch c := b[i]; c {
	case '"':
		end, _ := scanString(b, i)
		return end
	case '{', '[':
		if depth >= maxJSONDepth {
			return -1
		}
		closing := byte('}')
		if c == '[' {
			closing = ']'
		}
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == closing {
			return i + 1
		}
		for {
			if c == '{' {
				if i >= len(b) || b[i] != '"' {
					return -1
				}
				if i, _ = scanString(b, i); i < 0 {
					return -1
				}
				i = skipSpace(b, i)
				if i >= len(b) || b[i] != ':' {
					return -1
				}
				i = skipSpace(b, i+1)
			}
			if i = skipValue(b, i, depth+1); i < 0 {
				return -1
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return -1
			}
			if b[i] == closing {
				return i + 1
			}
			if b[i] != ',' {
				return -1
			}
			i = skipSpace(b, i+1)
		}
	case 't':
		if hasLiteral(b, i, "true") {
			return i + 4
		}
	case 'f':
		if hasLiteral(b, i, "false") {
			return i + 5
		}
	case 'n':
		if hasLiteral(b, i, "null") {
			return i + 4
		}
	default:
		end, _ := scanNumber(b, i)
		return end
	}
	return -1
}

// AppendCompact appends the JSON value src (with surrounding space) to dst with the space
// between its tokens left out, as json.Compact does; false (and dst unchanged) if src is
// not one valid JSON value.
func AppendCompact(dst, src []byte) ([]byte, bool) {
	n := len(dst)
	i := skipSpace(src, 0)
	dst, i = appendCompactValue(dst, src, i, 0)
	if i < 0 || skipSpace(src, i) != len(src) {
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
		end := skipValue(src, i, depth)
		if end < 0 {
			return dst, -1
		}
		return append(dst, src[i:end]...), end
	}
	if depth >= maxJSONDepth {
		return dst, -1
	}
	closing := byte('}')
	if c == '[' {
		closing = ']'
	}
	dst = append(dst, c)
	i = skipSpace(src, i+1)
	if i < len(src) && src[i] == closing {
		return append(dst, closing), i + 1
	}
	for {
		if c == '{' {
			if i >= len(src) || src[i] != '"' {
				return dst, -1
			}
			end, _ := scanString(src, i)
			if end < 0 {
				return dst, -1
			}
			dst = append(dst, src[i:end]...)
			i = skipSpace(src, end)
			if i >= len(src) || src[i] != ':' {
				return dst, -1
			}
			dst = append(dst, ':')
			i = skipSpace(src, i+1)
		}
		if dst, i = appendCompactValue(dst, src, i, depth+1); i < 0 {
			return dst, -1
		}
		i = skipSpace(src, i)
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
		i = skipSpace(src, i+1)
	}
}

// parseInt reads the JSON number at b[i] as an int64 of bits bits, as encoding/json decodes
// a number into an integer field: ok is false for a number with a fraction or an exponent
// (an error to encoding/json), one out of range, or no number.
func parseInt(b []byte, i int, bits int) (v int64, end int, ok bool) {
	end, integer := scanNumber(b, i)
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

// parseFloat reads the JSON number at b[i] as a float64, like encoding/json (a number out
// of range is not ok).
func parseFloat(b []byte, i int) (v float64, end int, ok bool) {
	end, integer := scanNumber(b, i)
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

// checkFloat checks the JSON number at b[i] as encoding/json checks one it decodes into a
// float64 (one out of range is an error), without converting it when it need not.
func checkFloat(b []byte, i int) (end int, ok bool) {
	end, integer := scanNumber(b, i)
	if end < 0 {
		return -1, false
	}
	if end-i < 300 && (integer || !hasExponent(b[i:end])) {
		return end, true // fewer than 309 digits before any point: in range
	}
	_, end, ok = parseFloat(b, i)
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

// unquoteFast returns the text of the JSON string b[i:end] (end and flags from
// scanString), as encoding/json unquotes it; ok is false for invalid UTF-8, which
// encoding/json replaces: that is left to encoding/json. For a string without escapes, raw
// is the bytes (not a copy); with escapes it is the text, unquoted into scratch.
func unquoteFast(b []byte, i, end, flags int, scratch []byte) (raw []byte, ok bool) {
	raw = b[i+1 : end-1]
	if flags&strHigh != 0 && !utf8.Valid(raw) {
		return nil, false
	}
	if flags&strEscaped == 0 {
		return raw, true
	}
	return jsonfast.AppendUnquoted(scratch[:0], raw), true
}

// fieldOfKey is the field of a JSON key of Record, -1 for any other key (a key that only
// differs in case, which encoding/json would also match, is one of those: the slow path
// decides).
func fieldOfKey(key []byte) int {
	if f, ok := recordFieldByName[string(key)]; ok {
		return f
	}
	return -1
}

// Decoder decodes journal lines into records (Decode, and its fast path decode) or keys (Key). It interns
// the short strings that repeat from record to record (arms, models, classes, tool names, map
// keys and task fields), so that a record costs few allocations. It is not safe for
// concurrent use.
type Decoder struct {
	names   map[string]string
	last    [64]string // by slot: the string last read there, which the next record often repeats
	scratch []byte
}

// Slots of Decoder.last: a field's own (its number), or 8 per list or map, by position.
const (
	slotToolNames  = 32
	slotRewardKeys = 40
	slotFieldKeys  = 48
	slotFieldVals  = 56
	noIntern       = -1
)

func slotAt(base, pos int) int { return base + min(pos, 7) }

// The interned strings: at most this many, of at most this many bytes.
const (
	maxInterned    = 4096
	maxInternedLen = 64
)

// emptyNames is the empty, non-nil tool_names that "[]" decodes to.
var emptyNames = []string{}

// internAt is intern, first trying the string last read in the slot.
func (d *Decoder) internAt(slot int, b []byte) string {
	if s := d.last[slot]; s == string(b) {
		return s
	}
	s := d.Intern(b)
	d.last[slot] = s
	return s
}

func (d *Decoder) Intern(b []byte) string {
	if s, ok := d.names[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(b) <= maxInternedLen && len(d.names) < maxInterned {
		if d.names == nil {
			d.names = make(map[string]string)
		}
		d.names[s] = s
	}
	return s
}

// str reads the JSON string at b[i] (interned through slot, or copied for noIntern), or null (ok, and s empty, as
// encoding/json leaves a string field alone on null); end is -1 when the fast path cannot
// read it.
func (d *Decoder) str(b []byte, i int, slot int, store bool) (s string, end int) {
	if i < len(b) && b[i] == 'n' {
		if hasLiteral(b, i, "null") {
			return "", i + 4
		}
		return "", -1
	}
	if i >= len(b) || b[i] != '"' {
		return "", -1
	}
	end, flags := scanString(b, i)
	if end < 0 {
		return "", -1
	}
	if !store {
		return "", end // checked; invalid UTF-8 is no error to encoding/json
	}
	raw, ok := unquoteFast(b, i, end, flags, d.scratch)
	if !ok {
		return "", -1
	}
	if flags&strEscaped != 0 {
		d.scratch = raw[:0]
	}
	if slot != noIntern {
		return d.internAt(slot, raw), end
	}
	return string(raw), end
}

// decode reads the journal line b into r, which must be the zero Record, and reports whether
// it could. When it could not, r holds garbage and the line must go to encoding/json.
func (d *Decoder) decode(b []byte, r *Record) bool {
	return d.record(b, r, true)
}

// Key reads only the key of the journal line b (the other fields are checked, as
// encoding/json would check them, but not kept), and reports whether it could.
func (d *Decoder) Key(b []byte) (Key, bool) {
	var r Record
	ok := d.record(b, &r, false)
	return Key{Task: r.TaskIndex, Rollout: r.RolloutIndex, Arm: r.Arm}, ok
}

// record reads b into r: every field when full, else the key's.
func (d *Decoder) record(b []byte, r *Record, full bool) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return skipSpace(b, i+1) == len(b)
	}
	var seen uint32
	expect := 0 // the field the Sink writes next
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		var f, kend int
		if k := recordFields[expect].key; len(b)-i >= len(k) && string(b[i:i+len(k)]) == k {
			f, kend = expect, i+len(k) // the usual order: no need to scan the key
		} else {
			var flags int
			if kend, flags = scanString(b, i); kend < 0 || flags != 0 {
				return false
			}
			f = fieldOfKey(b[i+1 : kend-1])
		}
		if f < 0 || seen&(1<<f) != 0 {
			return false // unknown (maybe in another case) or repeated: encoding/json decides
		}
		expect = (f + 1) % numRecordFields
		seen |= 1 << f
		i = skipSpace(b, kend)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		if i = skipSpace(b, i+1); i >= len(b) {
			return false
		}
		if i = d.field(b, i, f, r, full); i < 0 {
			return false
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return false
		}
		if b[i] == '}' {
			return skipSpace(b, i+1) == len(b)
		}
		if b[i] != ',' {
			return false
		}
		i = skipSpace(b, i+1)
	}
}

// field reads the value of field f at b[i] into r and returns the index after it, -1 if
// the fast path cannot. null leaves the field alone, as it does with encoding/json (r is
// the zero Record, so maps and lists stay nil). Only the key's fields are kept when not
// full, but every value is checked.
func (d *Decoder) field(b []byte, i, f int, r *Record, full bool) int {
	if hasLiteral(b, i, "null") {
		return i + 4
	}
	var (
		end int
		ok  bool
		n   int64
		x   float64
		s   string
	)
	fd := &recordFields[f]
	p := at(r, fd.off)
	switch fd.kind {
	case kindInt64:
		if n, end, ok = parseInt(b, i, 64); !ok {
			return -1
		}
		*(*int64)(p) = n
	case kindInt32:
		if n, end, ok = parseInt(b, i, 32); !ok {
			return -1
		}
		*(*int32)(p) = int32(n)
	case kindFloat:
		if !full {
			if end, ok = checkFloat(b, i); !ok {
				return -1
			}
			break
		}
		if x, end, ok = parseFloat(b, i); !ok {
			return -1
		}
		*(*float64)(p) = x
	case kindBool:
		switch {
		case hasLiteral(b, i, "true"):
			*(*bool)(p), end = true, i+4
		case hasLiteral(b, i, "false"):
			end = i + 5
		default:
			return -1
		}
	case kindString:
		if s, end = d.str(b, i, noIntern, full); end < 0 {
			return -1
		}
		*(*string)(p) = s
	case kindName:
		if s, end = d.str(b, i, f, full || f == rfArm); end < 0 {
			return -1
		}
		*(*string)(p) = s
	case kindTime:
		// What encoding/json does: hand the value's bytes to UnmarshalJSON.
		if b[i] != '"' {
			return -1
		}
		if end, _ = scanString(b, i); end < 0 {
			return -1
		}
		var t time.Time
		if t.UnmarshalJSON(b[i:end]) != nil {
			return -1
		}
		*(*time.Time)(p) = t
	case kindStrings:
		return d.toolNames(b, i, (*[]string)(p), full)
	case kindFloatMap, kindStringMap:
		return d.object(b, i, fd.kind, p, full)
	}
	return end
}

// toolNames reads a JSON array of strings.
func (d *Decoder) toolNames(b []byte, i int, dst *[]string, full bool) int {
	if b[i] != '[' {
		return -1
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		if full {
			*dst = emptyNames
		}
		return i + 1
	}
	var names []string
	if full {
		names = make([]string, 0, 4)
	}
	for pos := 0; ; pos++ {
		if i >= len(b) || b[i] != '"' { // a null element is left to encoding/json
			return -1
		}
		s, end := d.str(b, i, slotAt(slotToolNames, pos), full)
		if end < 0 {
			return -1
		}
		if full {
			names = append(names, s)
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return -1
		}
		if b[i] == ']' {
			*dst = names
			return i + 1
		}
		if b[i] != ',' {
			return -1
		}
		i = skipSpace(b, i+1)
	}
}

// object reads a map field at p: reward_components (string to number, kindFloatMap) or
// task_fields (string to string, kindStringMap).
func (d *Decoder) object(b []byte, i int, kind fieldKind, p unsafe.Pointer, full bool) int {
	if b[i] != '{' {
		return -1
	}
	var (
		rc map[string]float64
		tf map[string]string
	)
	if full {
		if kind == kindFloatMap {
			rc = make(map[string]float64, 4)
			*(*map[string]float64)(p) = rc
		} else {
			tf = make(map[string]string, 4)
			*(*map[string]string)(p) = tf
		}
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	keySlot := slotRewardKeys
	if kind == kindStringMap {
		keySlot = slotFieldKeys
	}
	for pos := 0; ; pos++ {
		if i >= len(b) || b[i] != '"' {
			return -1
		}
		k, end := d.str(b, i, slotAt(keySlot, pos), full)
		if end < 0 {
			return -1
		}
		i = skipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return -1
		}
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return -1
		}
		if kind == kindFloatMap {
			if b[i] == 'n' { // null: encoding/json stores a zero; left to it
				return -1
			}
			if !full {
				end, ok := checkFloat(b, i)
				if !ok {
					return -1
				}
				i = end
			} else {
				x, end, ok := parseFloat(b, i)
				if !ok {
					return -1
				}
				rc[k] = x
				i = end
			}
		} else {
			if b[i] != '"' {
				return -1
			}
			v, end := d.str(b, i, slotAt(slotFieldVals, pos), full)
			if end < 0 {
				return -1
			}
			if full {
				tf[k] = v
			}
			i = end
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return -1
		}
		if b[i] == '}' {
			return i + 1
		}
		if b[i] != ',' {
			return -1
		}
		i = skipSpace(b, i+1)
	}
}

// LineKeys reads the int64 members named a and b, and the string member named c if c is
// not empty (its bytes, in line), of the JSON object that is the whole of line, checking the whole line as
// encoding/json does when it decodes it into a struct of those three fields: every other
// member is skipped (checked, not read). ok is false when the fast path cannot be sure:
// invalid JSON, a member repeated or named like a wanted one in another case, a value of
// another type. A wanted member that is absent or null is left zero; has says which were
// present and not null.
func LineKeys(line []byte, a, b, c string) (ka, kb int64, kc []byte, has int, ok bool) {
	i := skipSpace(line, 0)
	if i >= len(line) || line[i] != '{' {
		return
	}
	i = skipSpace(line, i+1)
	if i < len(line) && line[i] == '}' {
		return 0, 0, nil, 0, skipSpace(line, i+1) == len(line)
	}
	seen := 0
	for {
		if i >= len(line) || line[i] != '"' {
			return
		}
		kend, flags := scanString(line, i)
		if kend < 0 || flags&strEscaped != 0 {
			return
		}
		key := line[i+1 : kend-1]
		which := 0
		switch {
		case string(key) == a:
			which = 1
		case string(key) == b:
			which = 2
		case c != "" && string(key) == c:
			which = 4
		case equalFoldASCII(key, a) || equalFoldASCII(key, b) || c != "" && equalFoldASCII(key, c):
			return // encoding/json matches keys regardless of case
		case flags&strHigh != 0:
			return // a non-ASCII key might fold to a wanted one
		}
		if seen&which != 0 {
			return
		}
		seen |= which
		i = skipSpace(line, kend)
		if i >= len(line) || line[i] != ':' {
			return
		}
		i = skipSpace(line, i+1)
		if which != 0 && hasLiteral(line, i, "null") {
			i += 4
		} else {
			switch which {
			case 0:
				i = skipValue(line, i, 1)
			case 1, 2:
				var n int64
				var okn bool
				if n, i, okn = parseInt(line, i, 64); !okn {
					return
				}
				if which == 1 {
					ka = n
				} else {
					kb = n
				}
				has |= which
			case 4:
				if i >= len(line) || line[i] != '"' {
					return
				}
				end, flags := scanString(line, i)
				if end < 0 || flags != 0 {
					return // escapes or non-ASCII: left to encoding/json
				}
				kc = line[i+1 : end-1]
				i = end
				has |= which
			}
			if i < 0 {
				return
			}
		}
		i = skipSpace(line, i)
		if i >= len(line) {
			return
		}
		if line[i] == '}' {
			return ka, kb, kc, has, skipSpace(line, i+1) == len(line)
		}
		if line[i] != ',' {
			return
		}
		i = skipSpace(line, i+1)
	}
}

// equalFoldASCII reports whether key equals name (ASCII, lower case) regardless of case.
func equalFoldASCII(key []byte, name string) bool {
	if len(key) != len(name) {
		return false
	}
	for i, c := range key {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != name[i] {
			return false
		}
	}
	return true
}
