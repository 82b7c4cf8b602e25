package record

// Writing the journal's and the trajectories file's lines without encoding/json's reflection:
// the same bytes as a json.Encoder with SetEscapeHTML(false) writes (a test checks), at a
// fraction of the cost and without allocations. Values encoding/json refuses (a NaN reward, a
// time out of its years) are left to encoding/json, for its error.

import (
	"strconv"
	"time"
	"unsafe"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// AppendJSON appends r as one JSON line (with its newline), the bytes json.Encoder
// (HTML escaping off) writes for it; ok is false, and dst unchanged, for a record it
// cannot write (a NaN or infinite number, a time outside the years 0 to 9999): encoding/json
// then gives its error.
func AppendJSON(dst []byte, r *Record, keys []string) (out []byte, _ []string, ok bool) {
	n := len(dst)
	dst = append(dst, '{')
	for f := range recordFields {
		fd := &recordFields[f]
		p := at(r, fd.off)
		if fd.omitEmpty && empty(fd.kind, p) {
			continue
		}
		if f == 0 {
			dst = append(dst, fd.member[1:]...)
		} else {
			dst = append(dst, fd.member...)
		}
		switch fd.kind {
		case kindInt64:
			dst = strconv.AppendInt(dst, *(*int64)(p), 10)
		case kindInt32:
			dst = strconv.AppendInt(dst, int64(*(*int32)(p)), 10)
		case kindFloat:
			if dst, ok = jsonfast.AppendFloat(dst, *(*float64)(p)); !ok {
				return dst[:n], keys, false
			}
		case kindBool:
			dst = strconv.AppendBool(dst, *(*bool)(p))
		case kindString, kindName:
			dst = jsonfast.AppendString(dst, *(*string)(p))
		case kindTime:
			dst = append(dst, '"')
			t, err := (*time.Time)(p).AppendText(dst)
			if err != nil {
				return dst[:n], keys, false
			}
			dst = append(t, '"')
		case kindInt64s:
			xs := *(*[]int64)(p)
			if xs == nil {
				dst = append(dst, "null"...)
				break
			}
			dst = append(dst, '[')
			for i, x := range xs {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = strconv.AppendInt(dst, x, 10)
			}
			dst = append(dst, ']')
		case kindStrings:
			names := *(*[]string)(p)
			if names == nil {
				dst = append(dst, "null"...)
				break
			}
			dst = append(dst, '[')
			for i, name := range names {
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = jsonfast.AppendString(dst, name)
			}
			dst = append(dst, ']')
		case kindFloatMap:
			if dst, keys, ok = appendMap(dst, keys, *(*map[string]float64)(p), jsonfast.AppendFloat); !ok {
				return dst[:n], keys, false
			}
		case kindStringMap:
			dst, keys, _ = appendMap(dst, keys, *(*map[string]string)(p), appendStringOK)
		}
	}
	clear(keys)
	return append(dst, '}', '\n'), keys[:0], true
}

// empty reports whether the field of kind k at p is empty as omitempty means it: an empty
// string, list or map, a zero number or false.
func empty(k fieldKind, p unsafe.Pointer) bool {
	switch k {
	case kindInt64:
		return *(*int64)(p) == 0
	case kindInt32:
		return *(*int32)(p) == 0
	case kindFloat:
		return *(*float64)(p) == 0
	case kindBool:
		return !*(*bool)(p)
	case kindString, kindName:
		return *(*string)(p) == ""
	case kindStrings:
		return len(*(*[]string)(p)) == 0
	case kindInt64s:
		return len(*(*[]int64)(p)) == 0
	case kindFloatMap:
		return len(*(*map[string]float64)(p)) == 0
	case kindStringMap:
		return len(*(*map[string]string)(p)) == 0
	}
	return false // a struct (time.Time) is never empty to encoding/json
}

// appendMap appends m as a JSON object, its keys sorted (in keys' storage), each value
// appended by val; ok is false if val refuses a value.
func appendMap[V any](dst []byte, keys []string, m map[string]V, val func([]byte, V) ([]byte, bool)) (_ []byte, _ []string, ok bool) {
	if m == nil {
		return append(dst, "null"...), keys, true
	}
	keys = keys[:0]
	for k := range m {
		keys = append(keys, k)
	}
	sortKeys(keys)
	dst = append(dst, '{')
	for i, k := range keys {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonfast.AppendString(dst, k)
		dst = append(dst, ':')
		if dst, ok = val(dst, m[k]); !ok {
			return dst, keys, false
		}
	}
	return append(dst, '}'), keys, true
}

func appendStringOK(dst []byte, s string) ([]byte, bool) { return jsonfast.AppendString(dst, s), true }

// sortKeys sorts the keys of a map, which has a few: an insertion sort.
func sortKeys(ks []string) {
	for i := 1; i < len(ks); i++ {
		for j := i; j > 0 && ks[j] < ks[j-1]; j-- {
			ks[j], ks[j-1] = ks[j-1], ks[j]
		}
	}
}
