package gym

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// Field is one member of a JSON object. value is anything encoding/json can write;
// json.RawMessage values are written as they are.
type Field struct {
	Key   string
	Value any
}

// Object is a JSON Object that keeps its members' order and raw values, so that /verify can echo
// the request's fields as they came.
type Object struct {
	Members []Member
	// index finds a member by key once there are more than objectLinearMax of them (nil until
	// then: a few comparisons are cheaper than a map).
	index map[string]int
}

// Member is one Member of an object: its key and its value as written.
type Member struct {
	Key   string
	Value json.RawMessage
	// compact: value is valid JSON without white space outside its strings, so it is written
	// as it is (json.Compact would not change it).
	compact bool
}

func (o *Object) Get(key string) (json.RawMessage, bool) {
	if o.index != nil {
		i, ok := o.index[key]
		if !ok {
			return nil, false
		}
		return o.Members[i].Value, true
	}
	for _, m := range o.Members {
		if m.Key == key {
			return m.Value, true
		}
	}
	return nil, false
}

// DecodeObject parses data as one JSON object. ok is false when data is valid JSON but not an
// object; err is set when data is not valid JSON. A repeated key keeps its first position and its
// last value, like a Python dict built by json.loads. The values are data's own bytes (not
// copies, with no spare capacity).
func DecodeObject(data []byte) (obj *Object, ok bool, err error) {
	if obj, ok := scanObject(data); ok {
		return obj, true, nil
	}
	return decodeObjectSlow(data)
}

// decodeObjectSlow is DecodeObject by encoding/json alone: for what scanObject does not take
// (invalid JSON, whose error it words, and values that are not objects).
func decodeObjectSlow(data []byte) (obj *Object, ok bool, err error) {
	if !json.Valid(data) {
		var v any
		err = json.Unmarshal(data, &v)
		if err == nil {
			err = fmt.Errorf("invalid JSON")
		}
		return nil, false, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, false, err
	}
	if d, isDelim := tok.(json.Delim); !isDelim || d != '{' {
		return nil, false, nil
	}
	obj = &Object{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false, err
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false, err
		}
		obj.add(key, raw, false)
	}
	obj.buildIndex()
	if _, err := dec.Token(); err != nil {
		return nil, false, err
	}
	return obj, true, nil
}

// ParseBody reads a request body the way FastAPI reads a body model: a missing body, a body
// that is not JSON and a JSON value that is not an object are each a 422.
func ParseBody(body []byte) (*Object, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return nil, ValidationErrors{{Type: "missing", Loc: []any{"body"}, Msg: "Field required", Input: nil}}
	}
	obj, ok, err := DecodeObject(trimmed)
	if err != nil {
		pos := 0
		if se, isSyn := err.(*json.SyntaxError); isSyn {
			pos = int(se.Offset)
		}
		return nil, ValidationErrors{{
			Type:  "json_invalid",
			Loc:   []any{"body", pos},
			Msg:   "JSON decode error",
			Input: map[string]any{},
			Ctx:   map[string]any{"error": err.Error()},
		}}
	}
	if !ok {
		return nil, ValidationErrors{{
			Type:  "model_attributes_type",
			Loc:   []any{"body"},
			Msg:   "Input should be a valid dictionary or object to extract fields from",
			Input: json.RawMessage(trimmed),
		}}
	}
	return obj, nil
}

// MarshalFields writes fields as one compact JSON object, without HTML escaping.
func MarshalFields(fields []Field) []byte {
	n := 2
	for _, f := range fields {
		n += len(f.Key) + 4
		if raw, ok := f.Value.(json.RawMessage); ok {
			n += len(raw)
		} else {
			n += 8
		}
	}
	return appendFields(make([]byte, 0, n), fields)
}

// appendFields appends fields as one compact JSON object, without HTML escaping.
func appendFields(b []byte, fields []Field) []byte {
	b = append(b, '{')
	for i, f := range fields {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonfast.AppendString(b, f.Key)
		b = append(b, ':')
		b = appendValue(b, f.Value)
	}
	return append(b, '}')
}

// appendValue appends MarshalValue(v), writing the common kinds without encoding/json.
func appendValue(b []byte, v any) []byte {
	switch x := v.(type) {
	case json.RawMessage:
		return appendRaw(b, x)
	case bool:
		return strconv.AppendBool(b, x)
	case int:
		return strconv.AppendInt(b, int64(x), 10)
	case int64:
		return strconv.AppendInt(b, x, 10)
	case *big.Int:
		if x == nil {
			return append(b, "null"...)
		}
		return x.Append(b, 10)
	case PyFloat:
		if f, err := x.MarshalJSON(); err == nil {
			return append(b, f...)
		}
	case string:
		return jsonfast.AppendString(b, x)
	}
	return append(b, MarshalValue(v)...)
}

// appendRaw appends MarshalValue(raw): raw compacted, or raw as it is when it is not valid JSON.
func appendRaw(b []byte, raw json.RawMessage) []byte {
	if out, ok := jsonfast.AppendCompact(b, raw); ok {
		return out
	}
	return append(b, MarshalValue(raw)...)
}

// marshalMembers writes members as one compact JSON object, as MarshalFields writes them.
func marshalMembers(members []Member) []byte {
	n := 2
	for _, m := range members {
		n += len(m.Key) + 4 + len(m.Value)
	}
	b := append(make([]byte, 0, n), '{')
	for i, m := range members {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonfast.AppendString(b, m.Key)
		b = append(b, ':')
		b = m.appendValue(b)
	}
	return append(b, '}')
}

// appendValue appends the member's value as MarshalValue writes it.
func (m *Member) appendValue(b []byte) []byte {
	if m.compact {
		return append(b, m.Value...)
	}
	return appendRaw(b, m.Value)
}

func MarshalValue(v any) []byte {
	if raw, ok := v.(json.RawMessage); ok {
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err == nil {
			return b.Bytes()
		}
		return raw
	}
	b, err := jsonfast.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("gym: marshal %T: %v", v, err)) // only our own plain values get here
	}
	return b
}

// PyFloat is a float written the way Python writes one (1.0, not 1).
type PyFloat float64

func (f PyFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil, fmt.Errorf("gym: %v is not valid JSON", v)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if !bytes.ContainsAny(b, ".eE") {
		b = append(b, '.', '0')
	}
	return b, nil
}

// pythonJSON rewrites compact JSON the way Python's json.dumps writes it by default: ", " and
// ": " between items, and every non-ASCII character escaped as \uXXXX. The tool outputs recorded
// in NeMo Gym's example rollouts are written this way (e.g. {"synonym_value": 711}), and a tool's
// body is exactly the text the model sees.
func pythonJSON(compact []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(compact) + len(compact)/8)
	inString, escaped := false, false
	for i := 0; i < len(compact); {
		c := compact[i]
		if inString {
			if c >= utf8.RuneSelf {
				r, size := utf8.DecodeRune(compact[i:])
				if r >= 0x10000 {
					r -= 0x10000
					fmt.Fprintf(&b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
				} else {
					fmt.Fprintf(&b, `\u%04x`, r)
				}
				i += size
				escaped = false
				continue
			}
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			b.WriteByte(c)
			i++
			continue
		}
		b.WriteByte(c)
		switch c {
		case '"':
			inString = true
		case ',', ':':
			b.WriteByte(' ')
		}
		i++
	}
	return b.Bytes()
}

// DecodePython decodes JSON into plain Go values the way Python's json.loads does for the cases
// that matter here: numbers stay exact (json.Number), objects are maps.
func DecodePython(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("Extra data")
	}
	return v, nil
}

// JSONErrorMessage is a JSON syntax error in the words of Python's json module, as far as it can
// be told.
func JSONErrorMessage(data []byte, err error) string {
	if len(strings.TrimSpace(string(data))) == 0 {
		return "Expecting value: line 1 column 1 (char 0)"
	}
	if se, ok := err.(*json.SyntaxError); ok {
		return se.Error() + " (offset " + strconv.FormatInt(se.Offset, 10) + ")"
	}
	return err.Error()
}
