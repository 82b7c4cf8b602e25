package gym

import (
	"encoding/json"

	"github.com/rollout-dev/rollout/internal/jsonfast"
	"github.com/rollout-dev/rollout/pkg/dataset"
)

// The request bodies are read with a one-pass JSON scanner (internal/jsonfast): it checks the
// syntax and splits an object into its members (or an array into its items) in the same pass,
// where encoding/json took three (Valid, then a Decoder's Token and Decode, which scan each
// value twice more). It accepts exactly what encoding/json accepts; anything it does not accept
// is handed to encoding/json, which then decides (and words the error), so a mistake here could
// only cost speed, never change an answer. FuzzScanObject holds it to that against
// encoding/json.

// unquote is the value of the valid JSON string q (quotes included) of that kind, as
// encoding/json reads it; an interned string without a copy where it can.
func unquote(q []byte, kind jsonfast.Kind) string {
	if kind == 0 {
		body := q[1 : len(q)-1]
		if len(body) <= maxInterned {
			if s, ok := interned[string(body)]; ok {
				return s
			}
		}
		return string(body)
	}
	return jsonfast.Unquote(q, kind)
}

// maxInterned is the length of the longest interned string.
const maxInterned = 32

// interned are the keys and string values the protocol's bodies repeat (the Responses API
// object, the task rows' own fields): unquote returns them without allocating a copy.
var interned = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{
		// the Responses API object and its output items
		"id", "created_at", "model", "object", "output", "parallel_tool_calls", "tool_choice", "tools", "status",
		"error", "incomplete_details", "instructions", "temperature", "top_p", "max_output_tokens", "usage",
		"input_tokens", "input_tokens_details", "cached_tokens", "output_tokens", "output_tokens_details",
		"reasoning_tokens", "total_tokens", "type", "call_id", "name", "arguments", "role", "content", "text",
		"annotations", "summary", "reason", "response", "function_call", "function_call_output", "message",
		"output_text", "summary_text", "reasoning", "assistant", "user", "system", "developer", "completed",
		"incomplete", "auto", "none", "required", "function",
		// the counter servers' tools
		"increment_counter", "decrement_counter", "get_counter_value", "reset_counter",
		// tools and their JSON schemas
		"description", "parameters", "strict", "properties", "additionalProperties", "items", "enum", "default",
		"integer", "number", "string", "boolean", "array",
		// task rows
		"responses_create_params", "input", "agent_ref", "responses_api_agents", "expected_count", "initial_count",
		"reference_plan", "rounds", "final", "count", "ground_truth", "category", "metadata",
	} {
		m[s] = s
	}
	for k := range dataset.ResponsesKeys {
		m[k] = k
	}
	for k := range m {
		if len(k) > maxInterned {
			panic("gym: interned string longer than maxInterned: " + k)
		}
	}
	return m
}()

// scanObject reads data, one JSON object with optional white space around it, into an object.
// false: data is not that (not JSON, or another kind of value); encoding/json is to tell which.
func scanObject(data []byte) (*Object, bool) {
	s := jsonfast.New(data)
	s.SkipSpace()
	obj := &Object{}
	if !s.MemberValues(func(key []byte, kind jsonfast.Kind, value []byte, compact bool) {
		if obj.Members == nil {
			obj.Members = make([]Member, 0, 8)
		}
		obj.add(unquote(key, kind), json.RawMessage(value), compact)
	}) || !s.AtEnd() {
		return nil, false
	}
	obj.buildIndex()
	return obj, true
}

// add appends a member; a repeated key keeps its first position and takes the last value, like
// a Python dict built by json.loads. Objects are small: a linear search beats a map until the
// index is built.
func (o *Object) add(key string, raw json.RawMessage, compact bool) {
	if o.index != nil {
		if i, dup := o.index[key]; dup {
			o.Members[i].Value, o.Members[i].compact = raw, compact
			return
		}
		o.index[key] = len(o.Members)
		o.Members = append(o.Members, Member{key, raw, compact})
		return
	}
	for i := range o.Members {
		if o.Members[i].Key == key {
			o.Members[i].Value, o.Members[i].compact = raw, compact
			return
		}
	}
	o.Members = append(o.Members, Member{key, raw, compact})
	if len(o.Members) > objectLinearMax {
		o.buildIndex()
	}
}

// objectLinearMax is the size up to which an object's keys are looked up without a map.
const objectLinearMax = 16

// buildIndex makes the key index once the object is too big for linear lookups.
func (o *Object) buildIndex() {
	if o.index != nil || len(o.Members) <= objectLinearMax {
		return
	}
	o.index = make(map[string]int, len(o.Members))
	for i, m := range o.Members {
		o.index[m.Key] = i
	}
}

// scanArray splits data, one JSON array with optional white space around it, into its items.
// false: data is not that.
func scanArray(data []byte) ([]json.RawMessage, bool) {
	s := jsonfast.New(data)
	s.SkipSpace()
	items := make([]json.RawMessage, 0, 2) // the first append is in the closure: no stack buffer for it
	if !s.Items(func() bool {
		start := s.Pos()
		if !s.Value(1) {
			return false
		}
		items = append(items, json.RawMessage(s.Since(start)))
		return true
	}) || !s.AtEnd() {
		return nil, false
	}
	return items, true
}

// scanString reads data, one JSON string with optional white space around it, as encoding/json
// reads it into a string. false: data is not that.
func scanString(data []byte) (string, bool) {
	s := jsonfast.New(data)
	s.SkipSpace()
	start, kind, ok := s.Str()
	if !ok {
		return "", false
	}
	end := s.Pos()
	if !s.AtEnd() {
		return "", false
	}
	return unquote(data[start:end], kind), true
}
