package servers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// fieldError is one entry of a FastAPI/pydantic 422 body.
type fieldError struct {
	Type  string         `json:"type"`
	Loc   []any          `json:"loc"`
	Msg   string         `json:"msg"`
	Input any            `json:"input"`
	Ctx   map[string]any `json:"ctx,omitempty"`
}

// validationErrors is a 422: every problem found in the request, as pydantic reports them all.
type validationErrors []fieldError

func (v validationErrors) Error() string {
	parts := make([]string, len(v))
	for i, e := range v {
		loc := make([]string, len(e.Loc))
		for j, l := range e.Loc {
			loc[j] = fmt.Sprint(l)
		}
		parts[i] = strings.Join(loc, ".") + ": " + e.Msg
	}
	return fmt.Sprintf("%d validation error(s): %s", len(v), strings.Join(parts, "; "))
}

func (v *validationErrors) add(typ string, loc []any, msg string, input any) {
	*v = append(*v, fieldError{Type: typ, Loc: append([]any(nil), loc...), Msg: msg, Input: input})
}

func at(loc []any, more ...any) []any {
	// A constant capacity lets the compiler keep a loc that does not outlive its caller on the
	// stack (the errors copy theirs): most are built for a check that passes.
	out := make([]any, 0, 8)
	return append(append(out, loc...), more...)
}

// isNull reports whether raw is JSON null.
func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// jsonKind is the first byte class of a raw JSON value: '{', '[', '"', 'n', 't', 'f' or '0'.
func jsonKind(raw json.RawMessage) byte {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return 0
	}
	switch c := raw[0]; c {
	case '{', '[', '"', 'n', 't', 'f':
		return c
	default:
		return '0'
	}
}

// required returns obj[key], adding a "missing" error when it is absent.
func required(obj *object, key string, loc []any, errs *validationErrors) (json.RawMessage, bool) {
	raw, ok := obj.get(key)
	if !ok {
		errs.add("missing", at(loc, key), "Field required", objectInput(obj))
		return nil, false
	}
	return raw, true
}

// objectInput is an object as the "input" of an error: its members in order.
func objectInput(obj *object) json.RawMessage { return marshalMembers(obj.members) }

// laxInt validates raw as pydantic's int in lax mode: an integer, a float without a fractional
// part, an integer string, or a bool.
func laxInt(raw json.RawMessage, loc []any, errs *validationErrors) (*big.Int, bool) {
	switch jsonKind(raw) {
	case '0':
		n, ok := numberToInt(json.Number(bytes.TrimSpace(raw)))
		if !ok {
			errs.add("int_from_float", loc, "Input should be a valid integer, got a number with a fractional part", raw)
		}
		return n, ok
	case '"':
		s, _ := decodeString(raw)
		n, ok := stringToInt(s)
		if !ok {
			errs.add("int_parsing", loc, "Input should be a valid integer, unable to parse string as an integer", raw)
		}
		return n, ok
	case 't':
		return big.NewInt(1), true
	case 'f':
		return big.NewInt(0), true
	}
	errs.add("int_type", loc, "Input should be a valid integer", raw)
	return nil, false
}

// numberToInt converts a JSON number to an integer when it has no fractional part.
func numberToInt(n json.Number) (*big.Int, bool) {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		v, ok := new(big.Int).SetString(s, 10)
		return v, ok
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || f != math.Trunc(f) {
		return nil, false
	}
	v, _ := big.NewFloat(f).Int(nil)
	return v, true
}

// stringToInt parses an integer string the way pydantic's lax int does: surrounding whitespace,
// a sign, and trailing ".0…" are allowed.
func stringToInt(s string) (*big.Int, bool) {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '.'); i >= 0 {
		if strings.Trim(s[i+1:], "0") != "" {
			return nil, false
		}
		s = s[:i]
	}
	digits := strings.TrimLeft(s, "+-")
	if len(s)-len(digits) > 1 || digits == "" || strings.Trim(digits, "0123456789") != "" {
		return nil, false
	}
	v, ok := new(big.Int).SetString(s, 10)
	return v, ok
}

// decodeString reads raw as encoding/json reads a JSON string into a string; false when that
// fails.
func decodeString(raw json.RawMessage) (string, bool) {
	if s, ok := scanString(raw); ok {
		return s, true
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err == nil
}

// laxString validates raw as pydantic's str: only a JSON string.
func laxString(raw json.RawMessage, loc []any, errs *validationErrors) (string, bool) {
	if jsonKind(raw) != '"' {
		errs.add("string_type", loc, "Input should be a valid string", raw)
		return "", false
	}
	s, _ := decodeString(raw)
	return s, true
}

// laxList validates raw as a list and returns its items.
func laxList(raw json.RawMessage, loc []any, errs *validationErrors) ([]json.RawMessage, bool) {
	if jsonKind(raw) != '[' {
		errs.add("list_type", loc, "Input should be a valid list", raw)
		return nil, false
	}
	items, ok := scanArray(raw)
	if !ok {
		_ = json.Unmarshal(raw, &items)
	}
	return items, true
}

func laxIntList(raw json.RawMessage, loc []any, errs *validationErrors) ([]*big.Int, bool) {
	items, ok := laxList(raw, loc, errs)
	if !ok {
		return nil, false
	}
	out := make([]*big.Int, len(items))
	for i, item := range items {
		n, ok2 := laxInt(item, at(loc, i), errs)
		ok = ok && ok2
		out[i] = n
	}
	return out, ok
}

func laxStringList(raw json.RawMessage, loc []any, errs *validationErrors) ([]string, bool) {
	items, ok := laxList(raw, loc, errs)
	if !ok {
		return nil, false
	}
	out := make([]string, len(items))
	for i, item := range items {
		s, ok2 := laxString(item, at(loc, i), errs)
		ok = ok && ok2
		out[i] = s
	}
	return out, ok
}

// laxBool validates raw as pydantic's bool in lax mode.
func laxBool(raw json.RawMessage, loc []any, errs *validationErrors) bool {
	switch jsonKind(raw) {
	case 't', 'f':
		return true
	case '0':
		if s := string(bytes.TrimSpace(raw)); s == "0" || s == "1" || s == "0.0" || s == "1.0" {
			return true
		}
	case '"':
		s, _ := decodeString(raw)
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "0", "off", "f", "false", "n", "no", "1", "on", "t", "true", "y", "yes":
			return true
		}
		errs.add("bool_parsing", loc, "Input should be a valid boolean, unable to interpret input", raw)
		return false
	}
	errs.add("bool_type", loc, "Input should be a valid boolean", raw)
	return false
}

// laxFloat validates raw as pydantic's float in lax mode.
func laxFloat(raw json.RawMessage, loc []any, errs *validationErrors) bool {
	switch jsonKind(raw) {
	case '0', 't', 'f':
		return true
	case '"':
		s, _ := decodeString(raw)
		if _, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
			return true
		}
		errs.add("float_parsing", loc, "Input should be a valid number, unable to parse string as a number", raw)
		return false
	}
	errs.add("float_type", loc, "Input should be a valid number", raw)
	return false
}

// asObject validates raw as a pydantic model (a JSON object) and parses it.
func asObject(raw json.RawMessage, loc []any, errs *validationErrors) (*object, bool) {
	if jsonKind(raw) == '{' {
		if obj, ok, err := decodeObject(bytes.TrimSpace(raw)); err == nil && ok {
			return obj, true
		}
	}
	errs.add("model_attributes_type", loc, "Input should be a valid dictionary or object to extract fields from", raw)
	return nil, false
}

// responseCreateParamsKeys are the fields of NeMo Gym's NeMoGymResponseCreateParamsNonStreaming
// (nemo_gym/openai_utils.py), a pydantic model with extra="forbid": any other key is a 422.
// It is the union of the releases read: the first 23 come from the OpenAI ResponseCreateParams
// copy of every release; the rest were added later "to mirror the SDK request schema".
var responseCreateParamsKeys = map[string]bool{
	"background": true, "include": true, "input": true, "instructions": true,
	"max_output_tokens": true, "max_tool_calls": true, "metadata": true, "model": true,
	"parallel_tool_calls": true, "previous_response_id": true, "prompt": true, "reasoning": true,
	"service_tier": true, "store": true, "temperature": true, "text": true, "tool_choice": true,
	"tools": true, "top_logprobs": true, "top_p": true, "truncation": true, "user": true,
	"stream": true,
	// later additions
	"context_management": true, "conversation": true, "moderation": true, "prompt_cache_key": true,
	"prompt_cache_retention": true, "safety_identifier": true, "stream_options": true,
}

// validateRunRequest checks "responses_create_params" as BaseRunRequest does.
func validateRunRequest(req *object, errs *validationErrors) {
	loc := []any{"body", "responses_create_params"}
	raw, ok := required(req, "responses_create_params", []any{"body"}, errs)
	if !ok {
		return
	}
	params, ok := asObject(raw, loc, errs)
	if !ok {
		return
	}
	for _, m := range params.members {
		if !responseCreateParamsKeys[m.key] {
			errs.add("extra_forbidden", at(loc, m.key), "Extra inputs are not permitted", m.value)
		}
	}
	if input, ok := required(params, "input", loc, errs); ok {
		if k := jsonKind(input); k != '"' && k != '[' {
			errs.add("string_type", at(loc, "input", "str"), "Input should be a valid string", input)
			errs.add("list_type", at(loc, "input", "list"), "Input should be a valid list", input)
		}
	}
	// Older NeMo Gym releases wrote null for every unset key (the example rollouts do), so null
	// is accepted wherever a value is optional in practice.
	if tools, ok := params.get("tools"); ok && !isNull(tools) {
		laxList(tools, at(loc, "tools"), errs)
	}
	if p, ok := params.get("parallel_tool_calls"); ok && !isNull(p) {
		laxBool(p, at(loc, "parallel_tool_calls"), errs)
	}
	if s, ok := params.get("stream"); ok && !isNull(s) && jsonKind(s) != 'f' {
		*errs = append(*errs, fieldError{Type: "literal_error", Loc: at(loc, "stream"),
			Msg: "Input should be False", Input: s, Ctx: map[string]any{"expected": "False"}})
	}
}

// outputItem is one item of response.output.
type outputItem struct {
	Type      string
	Name      string
	Arguments string
	CallID    string
}

// validateVerifyRequest checks a /verify body as BaseVerifyRequest does and returns the parsed
// response.output (nil when it is not valid).
func validateVerifyRequest(req *object, errs *validationErrors) []outputItem {
	validateRunRequest(req, errs)

	loc := []any{"body", "response"}
	raw, ok := required(req, "response", []any{"body"}, errs)
	if !ok {
		return nil
	}
	resp, ok := asObject(raw, loc, errs)
	if !ok {
		return nil
	}
	if v, ok := required(resp, "id", loc, errs); ok {
		laxString(v, at(loc, "id"), errs)
	}
	if v, ok := required(resp, "created_at", loc, errs); ok {
		laxFloat(v, at(loc, "created_at"), errs)
	}
	if v, ok := required(resp, "model", loc, errs); ok {
		laxString(v, at(loc, "model"), errs)
	}
	if v, ok := required(resp, "object", loc, errs); ok {
		if s, ok := decodeString(v); jsonKind(v) != '"' || !ok || s != "response" {
			*errs = append(*errs, fieldError{Type: "literal_error", Loc: at(loc, "object"),
				Msg: "Input should be 'response'", Input: v, Ctx: map[string]any{"expected": "'response'"}})
		}
	}
	if v, ok := required(resp, "parallel_tool_calls", loc, errs); ok {
		laxBool(v, at(loc, "parallel_tool_calls"), errs)
	}
	if v, ok := required(resp, "tool_choice", loc, errs); ok {
		if k := jsonKind(v); k != '"' && k != '{' {
			errs.add("union_tag_invalid", at(loc, "tool_choice"), "Input should be a tool choice string or object", v)
		}
	}
	if v, ok := required(resp, "tools", loc, errs); ok {
		laxList(v, at(loc, "tools"), errs)
	}
	v, ok := required(resp, "output", loc, errs)
	if !ok {
		return nil
	}
	items, ok := laxList(v, at(loc, "output"), errs)
	if !ok {
		return nil
	}
	out := make([]outputItem, 0, len(items))
	for i, itemRaw := range items {
		iloc := at(loc, "output", i)
		item, ok := asObject(itemRaw, iloc, errs)
		if !ok {
			continue
		}
		typeRaw, ok := item.get("type")
		if !ok {
			errs.add("value_error", iloc, "Value error, Responses API output items must include a type discriminator", itemRaw)
			continue
		}
		var it outputItem
		if it.Type, ok = laxString(typeRaw, at(iloc, "type"), errs); !ok {
			continue
		}
		if it.Type == "function_call" {
			if r, ok := required(item, "name", iloc, errs); ok {
				it.Name, _ = laxString(r, at(iloc, "name"), errs)
			}
			if r, ok := required(item, "arguments", iloc, errs); ok {
				it.Arguments, _ = laxString(r, at(iloc, "arguments"), errs)
			}
			if r, ok := required(item, "call_id", iloc, errs); ok {
				it.CallID, _ = laxString(r, at(iloc, "call_id"), errs)
			}
		}
		out = append(out, it)
	}
	return out
}
