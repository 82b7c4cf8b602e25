package record

// A small JSON reader for the lines this package writes, so that reading a journal does not
// cost an encoding/json decode per record (the resume scan, Finalize and the evaluation read
// 10^6 of them). Every function here is a fast path: it accepts only what it is sure
// encoding/json accepts, and reads it to the same result; anything else (an escape it does
// not unquote, an unknown or repeated key, a number it does not parse, invalid JSON, …)
// makes it report false, and the caller decodes the line with encoding/json, which gives
// the result, or the error, it always gave.

import (
	"time"
	"unsafe"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

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
	seen    uint64 // the fields the last line record read had
	names   map[string]string
	last    [96]string // by slot: the string last read there, which the next record often repeats
	scratch []byte
}

// Slots of Decoder.last: a field's own (its number), or 8 per list or map, by position.
const (
	slotToolNames  = 64
	slotRewardKeys = 72
	slotFieldKeys  = 80
	slotFieldVals  = 88
	noIntern       = -1
)

func slotAt(base, pos int) int { return base + min(pos, 7) }

// The interned strings: at most this many, of at most this many bytes.
const (
	maxInterned    = 4096
	maxInternedLen = 64
)

// A record's fields fit the decoder: a bit each in its seen set, and below the list and map
// slots of Decoder.last (a name's slot is its field's number).
var _ [slotToolNames - numRecordFields]struct{}

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
		if jsonfast.HasLiteral(b, i, "null") {
			return "", i + 4
		}
		return "", -1
	}
	if i >= len(b) || b[i] != '"' {
		return "", -1
	}
	end, flags := jsonfast.ScanString(b, i)
	if end < 0 {
		return "", -1
	}
	if !store {
		return "", end // checked; invalid UTF-8 is no error to encoding/json
	}
	raw, ok := jsonfast.UnquoteFast(b, i, end, flags, d.scratch)
	if !ok {
		return "", -1
	}
	if flags&jsonfast.StrEscaped != 0 {
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
	ok := d.record(b, &r, false) && d.seen&requiredSeen == requiredSeen
	return Key{Task: r.TaskIndex, Rollout: r.RolloutIndex, Arm: r.Arm}, ok
}

// record reads b into r: every field when full, else the key's.
func (d *Decoder) record(b []byte, r *Record, full bool) bool {
	i := jsonfast.SkipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = jsonfast.SkipSpace(b, i+1)
	d.seen = 0
	if i < len(b) && b[i] == '}' {
		return jsonfast.SkipSpace(b, i+1) == len(b)
	}
	var seen uint64
	defer func() { d.seen = seen }()
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
			if kend, flags = jsonfast.ScanString(b, i); kend < 0 || flags != 0 {
				return false
			}
			f = fieldOfKey(b[i+1 : kend-1])
		}
		if f < 0 || seen&(1<<f) != 0 {
			return false // unknown (maybe in another case) or repeated: encoding/json decides
		}
		expect = (f + 1) % numRecordFields
		seen |= 1 << f
		i = jsonfast.SkipSpace(b, kend)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		if i = jsonfast.SkipSpace(b, i+1); i >= len(b) {
			return false
		}
		if i = d.field(b, i, f, r, full); i < 0 {
			return false
		}
		i = jsonfast.SkipSpace(b, i)
		if i >= len(b) {
			return false
		}
		if b[i] == '}' {
			return jsonfast.SkipSpace(b, i+1) == len(b)
		}
		if b[i] != ',' {
			return false
		}
		i = jsonfast.SkipSpace(b, i+1)
	}
}

// field reads the value of field f at b[i] into r and returns the index after it, -1 if
// the fast path cannot. null leaves the field alone, as it does with encoding/json (r is
// the zero Record, so maps and lists stay nil). Only the key's fields are kept when not
// full, but every value is checked.
func (d *Decoder) field(b []byte, i, f int, r *Record, full bool) int {
	if jsonfast.HasLiteral(b, i, "null") {
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
		if n, end, ok = jsonfast.ParseInt(b, i, 64); !ok {
			return -1
		}
		*(*int64)(p) = n
	case kindInt32:
		if n, end, ok = jsonfast.ParseInt(b, i, 32); !ok {
			return -1
		}
		*(*int32)(p) = int32(n)
	case kindFloat:
		if !full {
			if end, ok = jsonfast.CheckFloat(b, i); !ok {
				return -1
			}
			break
		}
		if x, end, ok = jsonfast.ParseFloat(b, i); !ok {
			return -1
		}
		*(*float64)(p) = x
	case kindBool:
		switch {
		case jsonfast.HasLiteral(b, i, "true"):
			*(*bool)(p), end = true, i+4
		case jsonfast.HasLiteral(b, i, "false"):
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
		if end, _ = jsonfast.ScanString(b, i); end < 0 {
			return -1
		}
		var t time.Time
		if t.UnmarshalJSON(b[i:end]) != nil {
			return -1
		}
		*(*time.Time)(p) = t
	case kindStrings:
		return d.toolNames(b, i, (*[]string)(p), full)
	case kindInt64s:
		return int64s(b, i, (*[]int64)(p), full)
	case kindFloatMap, kindStringMap:
		return d.object(b, i, fd.kind, p, full)
	}
	return end
}

// int64s reads a JSON array of integers (a null element is left to encoding/json).
func int64s(b []byte, i int, dst *[]int64, full bool) int {
	if b[i] != '[' {
		return -1
	}
	i = jsonfast.SkipSpace(b, i+1)
	xs := []int64{} // "[]" is an empty, non-nil list, as encoding/json makes it
	if i < len(b) && b[i] == ']' {
		if full {
			*dst = xs
		}
		return i + 1
	}
	for {
		x, end, ok := jsonfast.ParseInt(b, i, 64)
		if !ok {
			return -1
		}
		if full {
			xs = append(xs, x)
		}
		if i = jsonfast.SkipSpace(b, end); i >= len(b) {
			return -1
		}
		if b[i] == ']' {
			if full {
				*dst = xs
			}
			return i + 1
		}
		if b[i] != ',' {
			return -1
		}
		i = jsonfast.SkipSpace(b, i+1)
	}
}

// toolNames reads a JSON array of strings.
func (d *Decoder) toolNames(b []byte, i int, dst *[]string, full bool) int {
	if b[i] != '[' {
		return -1
	}
	i = jsonfast.SkipSpace(b, i+1)
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
		i = jsonfast.SkipSpace(b, end)
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
		i = jsonfast.SkipSpace(b, i+1)
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
	i = jsonfast.SkipSpace(b, i+1)
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
		i = jsonfast.SkipSpace(b, end)
		if i >= len(b) || b[i] != ':' {
			return -1
		}
		i = jsonfast.SkipSpace(b, i+1)
		if i >= len(b) {
			return -1
		}
		if kind == kindFloatMap {
			if b[i] == 'n' { // null: encoding/json stores a zero; left to it
				return -1
			}
			if !full {
				end, ok := jsonfast.CheckFloat(b, i)
				if !ok {
					return -1
				}
				i = end
			} else {
				x, end, ok := jsonfast.ParseFloat(b, i)
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
		i = jsonfast.SkipSpace(b, i)
		if i >= len(b) {
			return -1
		}
		if b[i] == '}' {
			return i + 1
		}
		if b[i] != ',' {
			return -1
		}
		i = jsonfast.SkipSpace(b, i+1)
	}
}
