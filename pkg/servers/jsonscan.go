package servers

import (
	"encoding/json"
	"unicode/utf8"
)

// A one-pass JSON reader for the request bodies: it checks the syntax and splits an object into
// its members (or an array into its items) in the same pass, where encoding/json took three
// (Valid, then a Decoder's Token and Decode, which scan each value twice more). It accepts
// exactly what encoding/json accepts; anything it does not accept is handed to encoding/json,
// which then decides (and words the error), so a mistake here could only cost speed, never
// change an answer. FuzzScanObject holds it to that against encoding/json.

// scanMaxDepth is encoding/json's nesting limit: a value nested deeper is invalid.
const scanMaxDepth = 10000

type jsonScanner struct {
	data []byte
	i    int
	// spaces counts the white space runs skipped: a value scanned without one is compact.
	spaces int
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (s *jsonScanner) skipSpace() {
	if s.i < len(s.data) && isSpace(s.data[s.i]) {
		s.spaces++
		for s.i++; s.i < len(s.data) && isSpace(s.data[s.i]); s.i++ {
		}
	}
}

// value scans one value at s.i (no white space before it), at nesting depth depth.
func (s *jsonScanner) value(depth int) bool {
	if s.i >= len(s.data) {
		return false
	}
	switch c := s.data[s.i]; c {
	case '{':
		if depth+1 > scanMaxDepth {
			return false
		}
		s.i++
		s.skipSpace()
		if s.i < len(s.data) && s.data[s.i] == '}' {
			s.i++
			return true
		}
		for {
			if _, _, ok := s.str(); !ok {
				return false
			}
			s.skipSpace()
			if s.i >= len(s.data) || s.data[s.i] != ':' {
				return false
			}
			s.i++
			s.skipSpace()
			if !s.value(depth + 1) {
				return false
			}
			s.skipSpace()
			if s.i >= len(s.data) {
				return false
			}
			switch s.data[s.i] {
			case ',':
				s.i++
				s.skipSpace()
			case '}':
				s.i++
				return true
			default:
				return false
			}
		}
	case '[':
		if depth+1 > scanMaxDepth {
			return false
		}
		s.i++
		s.skipSpace()
		if s.i < len(s.data) && s.data[s.i] == ']' {
			s.i++
			return true
		}
		for {
			if !s.value(depth + 1) {
				return false
			}
			s.skipSpace()
			if s.i >= len(s.data) {
				return false
			}
			switch s.data[s.i] {
			case ',':
				s.i++
				s.skipSpace()
			case ']':
				s.i++
				return true
			default:
				return false
			}
		}
	case '"':
		_, _, ok := s.str()
		return ok
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	default:
		return s.number()
	}
}

func (s *jsonScanner) literal(lit string) bool {
	if len(s.data)-s.i < len(lit) || string(s.data[s.i:s.i+len(lit)]) != lit {
		return false
	}
	s.i += len(lit)
	return true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// number scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?.
func (s *jsonScanner) number() bool {
	d, i := s.data, s.i
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		for i++; i < len(d) && isDigit(d[i]); i++ {
		}
	default:
		return false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !isDigit(d[i]) {
			return false
		}
		for i++; i < len(d) && isDigit(d[i]); i++ {
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return false
		}
		for i++; i < len(d) && isDigit(d[i]); i++ {
		}
	}
	s.i = i
	return true
}

// strPlain are the bytes that stand for themselves in a string: not ", \, a control character
// or part of a multi-byte character.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// strKind says what a string holds besides plain ASCII: 0 (nothing: its bytes between the
// quotes are its value) or these bits.
type strKind uint8

const (
	strEscape  strKind = 1 << iota // a \ escape
	strUEscape                     // a \u escape
	strHigh                        // a byte >= 0x80
)

// str scans a string at s.i.
func (s *jsonScanner) str() (start int, kind strKind, ok bool) {
	d, i := s.data, s.i
	if i >= len(d) || d[i] != '"' {
		return 0, 0, false
	}
	start = i
	for i++; i < len(d); i++ {
		for i < len(d) && strPlain[d[i]] {
			i++
		}
		if i >= len(d) {
			break
		}
		switch c := d[i]; {
		case c == '"':
			s.i = i + 1
			return start, kind, true
		case c == '\\':
			kind |= strEscape
			i++
			if i >= len(d) {
				return 0, 0, false
			}
			switch d[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(d)-i <= 4 || !isHex(d[i+1]) || !isHex(d[i+2]) || !isHex(d[i+3]) || !isHex(d[i+4]) {
					return 0, 0, false
				}
				kind |= strUEscape
				i += 4
			default:
				return 0, 0, false
			}
		case c < 0x20:
			return 0, 0, false
		default: // c >= utf8.RuneSelf
			kind |= strHigh
		}
	}
	return 0, 0, false
}

func isHex(c byte) bool {
	return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// unquote is the value of the valid JSON string q (quotes included) of that kind, as
// encoding/json reads it.
func unquote(q []byte, kind strKind) string {
	body := q[1 : len(q)-1]
	switch {
	case kind == 0:
		if len(body) <= maxInterned {
			if s, ok := interned[string(body)]; ok {
				return s
			}
		}
		return string(body)
	case kind&strUEscape != 0 || kind&strHigh != 0 && !utf8.Valid(body):
		// encoding/json decodes \u escapes and surrogate pairs and replaces invalid UTF-8
	case kind&strEscape == 0:
		return string(body)
	default:
		b := make([]byte, 0, len(body))
		for i := 0; i < len(body); i++ {
			c := body[i]
			if c != '\\' {
				b = append(b, c)
				continue
			}
			i++
			switch c = body[i]; c {
			case 'b':
				c = '\b'
			case 'f':
				c = '\f'
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			}
			b = append(b, c) // ", \ and / stand for themselves
		}
		return string(b)
	}
	var s string
	_ = json.Unmarshal(q, &s)
	return s
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
	for k := range responseCreateParamsKeys {
		m[k] = k
	}
	for k := range m {
		if len(k) > maxInterned {
			panic("servers: interned string longer than maxInterned: " + k)
		}
	}
	return m
}()

// scanObject reads data, one JSON object with optional white space around it, into an object.
// false: data is not that (not JSON, or another kind of value); encoding/json is to tell which.
func scanObject(data []byte) (*object, bool) {
	s := jsonScanner{data: data}
	s.skipSpace()
	if s.i >= len(data) || data[s.i] != '{' {
		return nil, false
	}
	s.i++
	s.skipSpace()
	obj := &object{}
	if s.i < len(data) && data[s.i] == '}' {
		s.i++
	} else {
		obj.members = make([]member, 0, 8)
		for {
			start, kind, ok := s.str()
			if !ok {
				return nil, false
			}
			keyEnd := s.i
			s.skipSpace()
			if s.i >= len(data) || data[s.i] != ':' {
				return nil, false
			}
			s.i++
			s.skipSpace()
			vstart, spaces := s.i, s.spaces
			if !s.value(1) {
				return nil, false
			}
			obj.add(unquote(data[start:keyEnd], kind), json.RawMessage(data[vstart:s.i:s.i]), s.spaces == spaces)
			s.skipSpace()
			if s.i >= len(data) {
				return nil, false
			}
			if data[s.i] == '}' {
				s.i++
				break
			}
			if data[s.i] != ',' {
				return nil, false
			}
			s.i++
			s.skipSpace()
		}
	}
	s.skipSpace()
	if s.i != len(data) {
		return nil, false
	}
	obj.buildIndex()
	return obj, true
}

// add appends a member; a repeated key keeps its first position and takes the last value, like
// a Python dict built by json.loads. Objects are small: a linear search beats a map until the
// index is built.
func (o *object) add(key string, raw json.RawMessage, compact bool) {
	if o.index != nil {
		if i, dup := o.index[key]; dup {
			o.members[i].value, o.members[i].compact = raw, compact
			return
		}
		o.index[key] = len(o.members)
		o.members = append(o.members, member{key, raw, compact})
		return
	}
	for i := range o.members {
		if o.members[i].key == key {
			o.members[i].value, o.members[i].compact = raw, compact
			return
		}
	}
	o.members = append(o.members, member{key, raw, compact})
	if len(o.members) > objectLinearMax {
		o.buildIndex()
	}
}

// objectLinearMax is the size up to which an object's keys are looked up without a map.
const objectLinearMax = 16

// buildIndex makes the key index once the object is too big for linear lookups.
func (o *object) buildIndex() {
	if o.index != nil || len(o.members) <= objectLinearMax {
		return
	}
	o.index = make(map[string]int, len(o.members))
	for i, m := range o.members {
		o.index[m.key] = i
	}
}

// scanArray splits data, one JSON array with optional white space around it, into its items.
// false: data is not that.
func scanArray(data []byte) ([]json.RawMessage, bool) {
	s := jsonScanner{data: data}
	s.skipSpace()
	if s.i >= len(data) || data[s.i] != '[' {
		return nil, false
	}
	s.i++
	s.skipSpace()
	items := []json.RawMessage{}
	if s.i < len(data) && data[s.i] == ']' {
		s.i++
	} else {
		for {
			start := s.i
			if !s.value(1) {
				return nil, false
			}
			items = append(items, json.RawMessage(data[start:s.i:s.i]))
			s.skipSpace()
			if s.i >= len(data) {
				return nil, false
			}
			if data[s.i] == ']' {
				s.i++
				break
			}
			if data[s.i] != ',' {
				return nil, false
			}
			s.i++
			s.skipSpace()
		}
	}
	s.skipSpace()
	if s.i != len(data) {
		return nil, false
	}
	return items, true
}

// scanString reads data, one JSON string with optional white space around it, as encoding/json
// reads it into a string. false: data is not that.
func scanString(data []byte) (string, bool) {
	s := jsonScanner{data: data}
	s.skipSpace()
	start, kind, ok := s.str()
	if !ok {
		return "", false
	}
	end := s.i
	s.skipSpace()
	if s.i != len(data) {
		return "", false
	}
	return unquote(data[start:end], kind), true
}

// validJSON reports whether data is one JSON value with optional white space around it. false
// may also mean a value it does not take; encoding/json is to tell.
func validJSON(data []byte) bool {
	s := jsonScanner{data: data}
	s.skipSpace()
	if !s.value(0) {
		return false
	}
	s.skipSpace()
	return s.i == len(data)
}

// appendCompact appends the valid JSON value raw without its insignificant white space, as
// json.Compact writes it (without HTML escaping).
func appendCompact(dst, raw []byte) []byte {
	start := 0
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			// skip the string: to the first quote not escaped
			for i++; i < len(raw); i++ {
				if raw[i] == '\\' {
					i++
				} else if raw[i] == '"' {
					break
				}
			}
		case isSpace(c):
			dst = append(dst, raw[start:i]...)
			start = i + 1
		}
	}
	return append(dst, raw[start:]...)
}

// appendString appends s as a JSON string the way encoding/json writes it without HTML
// escaping; the common plain string is copied as it is.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return append(dst, marshalValue(s)...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
