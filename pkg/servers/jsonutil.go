package servers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// field is one member of a JSON object. value is anything encoding/json can write;
// json.RawMessage values are written as they are.
type field struct {
	key   string
	value any
}

// object is a JSON object that keeps its members' order and raw values, so that /verify can echo
// the request's fields as they came.
type object struct {
	fields []field // values are json.RawMessage
	index  map[string]int
}

func (o *object) get(key string) (json.RawMessage, bool) {
	i, ok := o.index[key]
	if !ok {
		return nil, false
	}
	return o.fields[i].value.(json.RawMessage), true
}

// decodeObject parses data as one JSON object. ok is false when data is valid JSON but not an
// object; err is set when data is not valid JSON. A repeated key keeps its first position and its
// last value, like a Python dict built by json.loads.
func decodeObject(data []byte) (obj *object, ok bool, err error) {
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
	obj = &object{index: map[string]int{}}
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
		if i, dup := obj.index[key]; dup {
			obj.fields[i].value = raw
			continue
		}
		obj.index[key] = len(obj.fields)
		obj.fields = append(obj.fields, field{key: key, value: raw})
	}
	if _, err := dec.Token(); err != nil {
		return nil, false, err
	}
	return obj, true, nil
}

// parseBodyObject reads a request body the way FastAPI reads a body model: a missing body, a body
// that is not JSON and a JSON value that is not an object are each a 422.
func parseBodyObject(body []byte) (*object, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || string(trimmed) == "null" {
		return nil, validationErrors{{Type: "missing", Loc: []any{"body"}, Msg: "Field required", Input: nil}}
	}
	obj, ok, err := decodeObject(trimmed)
	if err != nil {
		pos := 0
		if se, isSyn := err.(*json.SyntaxError); isSyn {
			pos = int(se.Offset)
		}
		return nil, validationErrors{{
			Type:  "json_invalid",
			Loc:   []any{"body", pos},
			Msg:   "JSON decode error",
			Input: map[string]any{},
			Ctx:   map[string]any{"error": err.Error()},
		}}
	}
	if !ok {
		return nil, validationErrors{{
			Type:  "model_attributes_type",
			Loc:   []any{"body"},
			Msg:   "Input should be a valid dictionary or object to extract fields from",
			Input: json.RawMessage(trimmed),
		}}
	}
	return obj, nil
}

// marshalFields writes fields as one compact JSON object, without HTML escaping.
func marshalFields(fields []field) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(marshalValue(f.key))
		b.WriteByte(':')
		b.Write(marshalValue(f.value))
	}
	b.WriteByte('}')
	return b.Bytes()
}

func marshalValue(v any) []byte {
	if raw, ok := v.(json.RawMessage); ok {
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err == nil {
			return b.Bytes()
		}
		return raw
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("servers: marshal %T: %v", v, err)) // only our own plain values get here
	}
	return bytes.TrimRight(b.Bytes(), "\n")
}

// pyFloat is a float written the way Python writes one (1.0, not 1).
type pyFloat float64

func (f pyFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil, fmt.Errorf("servers: %v is not valid JSON", v)
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

// decodePython decodes JSON into plain Go values the way Python's json.loads does for the cases
// that matter here: numbers stay exact (json.Number), objects are maps.
func decodePython(data []byte) (any, error) {
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

// jsonErrorMessage is a JSON syntax error in the words of Python's json module, as far as it can
// be told.
func jsonErrorMessage(data []byte, err error) string {
	if len(strings.TrimSpace(string(data))) == 0 {
		return "Expecting value: line 1 column 1 (char 0)"
	}
	if se, ok := err.(*json.SyntaxError); ok {
		return se.Error() + " (offset " + strconv.FormatInt(se.Offset, 10) + ")"
	}
	return err.Error()
}
