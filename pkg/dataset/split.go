package dataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// MaxNesting is how deeply arrays and objects may nest in a row: encoding/json's own limit.
// A deeper row is a bad_task ("nested deeper than 10000 levels"), never a stack overflow.
const MaxNesting = 10000

// syntaxError explains why raw is not one valid JSON value, naming the byte offset (from the
// start of raw) where it goes wrong. It is only called once json.Valid has said no.
func syntaxError(raw []byte) error {
	var v json.RawMessage
	err := json.Unmarshal(raw, &v) // checkValid only: nothing is allocated before the error
	var se *json.SyntaxError
	if !errors.As(err, &se) {
		if err == nil {
			return fmt.Errorf("invalid JSON")
		}
		return err
	}
	off := se.Offset
	if off > 0 {
		off-- // Offset counts the offending byte; name the byte itself, 0-based.
	}
	msg := strings.TrimPrefix(se.Error(), "json: ")
	switch {
	case strings.Contains(msg, "exceeded max depth"):
		return fmt.Errorf("nested deeper than %d levels at byte %d", MaxNesting, off)
	case strings.Contains(msg, "after top-level value"):
		return fmt.Errorf("trailing data after the JSON object at byte %d", off)
	case strings.Contains(msg, "unexpected end of JSON input") || (se.Offset >= int64(len(raw)) && strings.Contains(msg, "invalid character ' '")):
		return fmt.Errorf("the line ends in the middle of a JSON value (unexpected end of JSON input at byte %d)", len(raw))
	}
	return fmt.Errorf("%s at byte %d", msg, off)
}

// splitRow splits a row into its top-level members without copying: each value is a
// sub-slice of raw. It rejects invalid JSON (naming the byte offset), a row that is not an
// object, and duplicate keys, which JSON readers disagree on.
func splitRow(raw []byte) ([]Field, *fieldError) {
	if !json.Valid(raw) {
		return nil, errf("", "invalid JSON: %v", syntaxError(raw))
	}
	i := jsonfast.SkipSpace(raw, 0)
	if raw[i] != '{' {
		return nil, errf("", "not a JSON object: the row is %s", jsonfast.TypeName(raw[i:]))
	}
	fields, dup, err := members(raw[i:])
	if err != nil {
		return nil, errf("", "%v", err)
	}
	if dup != "" {
		return nil, errf(dup, "duplicate key")
	}
	return fields, nil
}

// members splits a valid JSON object (raw starts with '{') into its members, values as
// sub-slices of raw. dup is a key that appears twice.
func members(raw []byte) (fields []Field, dup string, err error) {
	var seen map[string]bool
	i := jsonfast.SkipSpace(raw, 1)
	if raw[i] == '}' {
		return fields, "", nil
	}
	for {
		// raw[i] is the opening quote of a key.
		end := jsonfast.SkipValidString(raw, i)
		key, err := unquote(raw[i:end])
		if err != nil {
			return nil, "", err
		}
		i = jsonfast.SkipSpace(raw, end)
		i = jsonfast.SkipSpace(raw, i+1) // the colon
		vend := jsonfast.SkipValid(raw, i)
		if repeated(fields, &seen, key) {
			return nil, key, nil
		}
		fields = append(fields, Field{Key: key, Value: raw[i:vend:vend]})
		i = jsonfast.SkipSpace(raw, vend)
		if raw[i] == '}' {
			return fields, "", nil
		}
		i = jsonfast.SkipSpace(raw, i+1) // the comma
	}
}

// repeated reports whether key is the key of one of fields (the members so far), and notes
// it in *seen once there are many: a linear search for the first 16 members, a map after.
func repeated(fields []Field, seen *map[string]bool, key string) bool {
	if len(fields) < 16 {
		for _, f := range fields {
			if f.Key == key {
				return true
			}
		}
		return false
	}
	if *seen == nil {
		*seen = make(map[string]bool, 32)
		for _, f := range fields {
			(*seen)[f.Key] = true
		}
	}
	if (*seen)[key] {
		return true
	}
	(*seen)[key] = true
	return false
}

// elements splits a valid JSON array (raw starts with '[') into its elements, as sub-slices.
func elements(raw []byte) []json.RawMessage {
	var elems []json.RawMessage
	i := jsonfast.SkipSpace(raw, 1)
	if raw[i] == ']' {
		return elems
	}
	for {
		end := jsonfast.SkipValid(raw, i)
		elems = append(elems, raw[i:end:end])
		i = jsonfast.SkipSpace(raw, end)
		if raw[i] == ']' {
			return elems
		}
		i = jsonfast.SkipSpace(raw, i+1)
	}
}

// objectFields splits raw, which must be one valid JSON object (as a value of a valid row
// is), into its members; a duplicate key is an error at field.KEY.
func objectFields(raw json.RawMessage, field string) ([]Field, *fieldError) {
	i := jsonfast.SkipSpace(raw, 0)
	fields, dup, err := members(raw[i:])
	if err != nil {
		return nil, errf(field, "%v", err)
	}
	if dup != "" {
		return nil, errf(field+"."+dup, "duplicate key")
	}
	return fields, nil
}

func lookup(fields []Field, key string) json.RawMessage {
	for _, f := range fields {
		if f.Key == key {
			return f.Value
		}
	}
	return nil
}

// unquote is the value of the JSON string s (quotes included), as encoding/json reads it.
func unquote(s []byte) (string, error) {
	if len(s) == 0 || s[0] != '"' {
		return "", json.Unmarshal(s, new(string)) // encoding/json words the error
	}
	if end, flags := jsonfast.ScanString(s, 0); end == len(s) {
		if raw, ok := jsonfast.UnquoteFast(s, 0, end, flags, nil); ok {
			return string(raw), nil
		}
	}
	var k string
	if err := json.Unmarshal(s, &k); err != nil {
		return "", err
	}
	return k, nil
}
