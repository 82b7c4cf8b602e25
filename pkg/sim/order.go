package sim

import (
	"bytes"
	"encoding/json"

	"github.com/rollout-dev/rollout/pkg/dataset"
)

// inSchemaOrder rewrites a call's arguments (a JSON object) with each object's keys in the
// order of its schema's properties, as a model under llama-server's tool-call grammar writes
// them; keys the schema does not name follow in their own order. Nested objects follow their
// property's schema, array items the items schema. Arguments that are not valid JSON, or a
// schema that cannot be read, leave args as they are.
func inSchemaOrder(args string, schema json.RawMessage) string {
	if len(schema) == 0 {
		return args
	}
	var b bytes.Buffer
	if !writeOrdered(&b, json.RawMessage(args), schema) {
		return args
	}
	return b.String()
}

// writeOrdered writes v to b, its objects' keys in schema's order; false if v is not valid.
func writeOrdered(b *bytes.Buffer, v, schema json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	if len(v) == 0 {
		return false
	}
	switch v[0] {
	case '{':
		keys, vals, ok := objectMembers(v)
		if !ok {
			return false
		}
		props, propSchemas := schemaProperties(schema)
		order := make([]string, 0, len(keys))
		for _, k := range props {
			if _, ok := vals[k]; ok {
				order = append(order, k)
			}
		}
		for _, k := range keys {
			if _, ok := propSchemas[k]; !ok {
				order = append(order, k)
			}
		}
		b.WriteByte('{')
		for i, k := range order {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteByte(':')
			if !writeOrdered(b, vals[k], propSchemas[k]) {
				return false
			}
		}
		b.WriteByte('}')
	case '[':
		var items []json.RawMessage
		if json.Unmarshal(v, &items) != nil {
			return false
		}
		var s struct {
			Items json.RawMessage `json:"items"`
		}
		json.Unmarshal(schema, &s)
		b.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				b.WriteByte(',')
			}
			if !writeOrdered(b, it, s.Items) {
				return false
			}
		}
		b.WriteByte(']')
	default:
		if !json.Valid(v) {
			return false
		}
		return json.Compact(b, v) == nil
	}
	return true
}

// objectMembers reads a JSON object's keys in order and its values; a repeated key keeps its
// last value at its first place.
func objectMembers(v json.RawMessage) (keys []string, vals map[string]json.RawMessage, ok bool) {
	fields, ok, err := dataset.SplitObject(v)
	if err != nil || !ok {
		return nil, nil, false
	}
	vals = make(map[string]json.RawMessage, len(fields))
	for _, f := range fields {
		if _, seen := vals[f.Key]; !seen {
			keys = append(keys, f.Key)
		}
		vals[f.Key] = f.Value
	}
	return keys, vals, true
}

// schemaProperties is an object schema's property names in the order written and their schemas.
func schemaProperties(schema json.RawMessage) ([]string, map[string]json.RawMessage) {
	var s struct {
		Properties json.RawMessage `json:"properties"`
	}
	if json.Unmarshal(schema, &s) != nil || len(s.Properties) == 0 {
		return nil, nil
	}
	keys, vals, ok := objectMembers(s.Properties)
	if !ok {
		return nil, nil
	}
	return keys, vals
}
