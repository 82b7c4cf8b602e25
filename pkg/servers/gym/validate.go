package gym

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"

	"github.com/rollout-dev/rollout/pkg/dataset"
)

// FieldError is one entry of a FastAPI/pydantic 422 body.
type FieldError struct {
	Type  string         `json:"type"`
	Loc   []any          `json:"loc"`
	Msg   string         `json:"msg"`
	Input any            `json:"input"`
	Ctx   map[string]any `json:"ctx,omitempty"`
}

// ValidationErrors is a 422: every problem found in the request, as pydantic reports them all.
type ValidationErrors []FieldError

func (v ValidationErrors) Error() string {
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

func (v *ValidationErrors) Add(typ string, loc []any, msg string, input any) {
	*v = append(*v, FieldError{Type: typ, Loc: append([]any(nil), loc...), Msg: msg, Input: input})
}

func At(loc []any, more ...any) []any {
	// A constant capacity lets the compiler keep a loc that does not outlive its caller on the
	// stack (the errors copy theirs): most are built for a check that passes.
	out := make([]any, 0, 8)
	return append(append(out, loc...), more...)
}

// IsNull reports whether raw is JSON null.
func IsNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// JSONKind is the first byte class of a raw JSON value: '{', '[', '"', 'n', 't', 'f' or '0'.
func JSONKind(raw json.RawMessage) byte {
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

// Required returns obj[key], adding a "missing" error when it is absent.
func Required(obj *Object, key string, loc []any, errs *ValidationErrors) (json.RawMessage, bool) {
	raw, ok := obj.Get(key)
	if !ok {
		errs.Add("missing", At(loc, key), "Field required", ObjectInput(obj))
		return nil, false
	}
	return raw, true
}

// RequiredAs is Required then a lax validator (LaxInt, LaxString, LaxIntList, …) of the value
// at loc+key: obj[key] as T, or what the validator returns on an error (T's zero value when key
// is missing), the "missing" or validation error added to errs.
func RequiredAs[T any](obj *Object, key string, loc []any, errs *ValidationErrors, lax func(json.RawMessage, []any, *ValidationErrors) (T, bool)) T {
	raw, ok := Required(obj, key, loc, errs)
	if !ok {
		var zero T
		return zero
	}
	v, _ := lax(raw, At(loc, key), errs)
	return v
}

// Args reads the body of a tool call: its object (ParseBody), which check validates, adding an
// error per missing or invalid argument. The error is ParseBody's, or the ValidationErrors check
// added (a 422).
func Args(body []byte, check func(args *Object, errs *ValidationErrors)) (*Object, error) {
	args, err := ParseBody(body)
	if err != nil {
		return nil, err
	}
	var errs ValidationErrors
	check(args, &errs)
	if len(errs) > 0 {
		return nil, errs
	}
	return args, nil
}

// Arg reads the body of a tool call that takes one required argument, key: Args with the key
// member validated by lax (RequiredAs).
func Arg[T any](body []byte, key string, lax func(json.RawMessage, []any, *ValidationErrors) (T, bool)) (T, error) {
	var v T
	_, err := Args(body, func(args *Object, errs *ValidationErrors) {
		v = RequiredAs(args, key, []any{"body"}, errs, lax)
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}

// ObjectInput is an object as the "input" of an error: its members in order.
func ObjectInput(obj *Object) json.RawMessage { return marshalMembers(obj.Members) }

// LaxInt validates raw as pydantic's int in lax mode: an integer, a float without a fractional
// part, an integer string, or a bool.
func LaxInt(raw json.RawMessage, loc []any, errs *ValidationErrors) (*big.Int, bool) {
	switch JSONKind(raw) {
	case '0':
		n, ok := numberToInt(json.Number(bytes.TrimSpace(raw)))
		if !ok {
			errs.Add("int_from_float", loc, "Input should be a valid integer, got a number with a fractional part", raw)
		}
		return n, ok
	case '"':
		s, _ := decodeString(raw)
		n, ok := stringToInt(s)
		if !ok {
			errs.Add("int_parsing", loc, "Input should be a valid integer, unable to parse string as an integer", raw)
		}
		return n, ok
	case 't':
		return big.NewInt(1), true
	case 'f':
		return big.NewInt(0), true
	}
	errs.Add("int_type", loc, "Input should be a valid integer", raw)
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

// LaxString validates raw as pydantic's str: only a JSON string.
func LaxString(raw json.RawMessage, loc []any, errs *ValidationErrors) (string, bool) {
	if JSONKind(raw) != '"' {
		errs.Add("string_type", loc, "Input should be a valid string", raw)
		return "", false
	}
	s, _ := decodeString(raw)
	return s, true
}

// LaxList validates raw as a list and returns its items.
func LaxList(raw json.RawMessage, loc []any, errs *ValidationErrors) ([]json.RawMessage, bool) {
	if JSONKind(raw) != '[' {
		errs.Add("list_type", loc, "Input should be a valid list", raw)
		return nil, false
	}
	items, ok := scanArray(raw)
	if !ok {
		_ = json.Unmarshal(raw, &items)
	}
	return items, true
}

func LaxIntList(raw json.RawMessage, loc []any, errs *ValidationErrors) ([]*big.Int, bool) {
	items, ok := LaxList(raw, loc, errs)
	if !ok {
		return nil, false
	}
	out := make([]*big.Int, len(items))
	for i, item := range items {
		n, ok2 := LaxInt(item, At(loc, i), errs)
		ok = ok && ok2
		out[i] = n
	}
	return out, ok
}

func LaxStringList(raw json.RawMessage, loc []any, errs *ValidationErrors) ([]string, bool) {
	items, ok := LaxList(raw, loc, errs)
	if !ok {
		return nil, false
	}
	out := make([]string, len(items))
	for i, item := range items {
		s, ok2 := LaxString(item, At(loc, i), errs)
		ok = ok && ok2
		out[i] = s
	}
	return out, ok
}

// LaxBool validates raw as pydantic's bool in lax mode.
func LaxBool(raw json.RawMessage, loc []any, errs *ValidationErrors) bool {
	switch JSONKind(raw) {
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
		errs.Add("bool_parsing", loc, "Input should be a valid boolean, unable to interpret input", raw)
		return false
	}
	errs.Add("bool_type", loc, "Input should be a valid boolean", raw)
	return false
}

// LaxFloat validates raw as pydantic's float in lax mode.
func LaxFloat(raw json.RawMessage, loc []any, errs *ValidationErrors) bool {
	switch JSONKind(raw) {
	case '0', 't', 'f':
		return true
	case '"':
		s, _ := decodeString(raw)
		if _, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
			return true
		}
		errs.Add("float_parsing", loc, "Input should be a valid number, unable to parse string as a number", raw)
		return false
	}
	errs.Add("float_type", loc, "Input should be a valid number", raw)
	return false
}

// AsObject validates raw as a pydantic model (a JSON object) and parses it.
func AsObject(raw json.RawMessage, loc []any, errs *ValidationErrors) (*Object, bool) {
	if JSONKind(raw) == '{' {
		if obj, ok, err := DecodeObject(bytes.TrimSpace(raw)); err == nil && ok {
			return obj, true
		}
	}
	errs.Add("model_attributes_type", loc, "Input should be a valid dictionary or object to extract fields from", raw)
	return nil, false
}

// validateRunRequest checks "responses_create_params" as BaseRunRequest does.
func validateRunRequest(req *Object, errs *ValidationErrors) {
	loc := []any{"body", "responses_create_params"}
	raw, ok := Required(req, "responses_create_params", []any{"body"}, errs)
	if !ok {
		return
	}
	params, ok := AsObject(raw, loc, errs)
	if !ok {
		return
	}
	for _, m := range params.Members {
		if !dataset.ResponsesKeys[m.Key] { // extra="forbid"
			errs.Add("extra_forbidden", At(loc, m.Key), "Extra inputs are not permitted", m.Value)
		}
	}
	if input, ok := Required(params, "input", loc, errs); ok {
		if k := JSONKind(input); k != '"' && k != '[' {
			errs.Add("string_type", At(loc, "input", "str"), "Input should be a valid string", input)
			errs.Add("list_type", At(loc, "input", "list"), "Input should be a valid list", input)
		}
	}
	// Older NeMo Gym releases wrote null for every unset key (the example rollouts do), so null
	// is accepted wherever a value is optional in practice.
	if tools, ok := params.Get("tools"); ok && !IsNull(tools) {
		LaxList(tools, At(loc, "tools"), errs)
	}
	if p, ok := params.Get("parallel_tool_calls"); ok && !IsNull(p) {
		LaxBool(p, At(loc, "parallel_tool_calls"), errs)
	}
	if s, ok := params.Get("stream"); ok && !IsNull(s) && JSONKind(s) != 'f' {
		*errs = append(*errs, FieldError{Type: "literal_error", Loc: At(loc, "stream"),
			Msg: "Input should be False", Input: s, Ctx: map[string]any{"expected": "False"}})
	}
}

// OutputItem is one item of response.output.
type OutputItem struct {
	Type      string
	Name      string
	Arguments string
	CallID    string
}

// validateVerifyRequest checks a /verify body as BaseVerifyRequest does and returns the parsed
// response.output (nil when it is not valid).
func validateVerifyRequest(req *Object, errs *ValidationErrors) []OutputItem {
	validateRunRequest(req, errs)

	loc := []any{"body", "response"}
	raw, ok := Required(req, "response", []any{"body"}, errs)
	if !ok {
		return nil
	}
	resp, ok := AsObject(raw, loc, errs)
	if !ok {
		return nil
	}
	if v, ok := Required(resp, "id", loc, errs); ok {
		LaxString(v, At(loc, "id"), errs)
	}
	if v, ok := Required(resp, "created_at", loc, errs); ok {
		LaxFloat(v, At(loc, "created_at"), errs)
	}
	if v, ok := Required(resp, "model", loc, errs); ok {
		LaxString(v, At(loc, "model"), errs)
	}
	if v, ok := Required(resp, "object", loc, errs); ok {
		if s, ok := decodeString(v); JSONKind(v) != '"' || !ok || s != "response" {
			*errs = append(*errs, FieldError{Type: "literal_error", Loc: At(loc, "object"),
				Msg: "Input should be 'response'", Input: v, Ctx: map[string]any{"expected": "'response'"}})
		}
	}
	if v, ok := Required(resp, "parallel_tool_calls", loc, errs); ok {
		LaxBool(v, At(loc, "parallel_tool_calls"), errs)
	}
	if v, ok := Required(resp, "tool_choice", loc, errs); ok {
		if k := JSONKind(v); k != '"' && k != '{' {
			errs.Add("union_tag_invalid", At(loc, "tool_choice"), "Input should be a tool choice string or object", v)
		}
	}
	if v, ok := Required(resp, "tools", loc, errs); ok {
		LaxList(v, At(loc, "tools"), errs)
	}
	v, ok := Required(resp, "output", loc, errs)
	if !ok {
		return nil
	}
	items, ok := LaxList(v, At(loc, "output"), errs)
	if !ok {
		return nil
	}
	out := make([]OutputItem, 0, len(items))
	for i, itemRaw := range items {
		iloc := At(loc, "output", i)
		item, ok := AsObject(itemRaw, iloc, errs)
		if !ok {
			continue
		}
		typeRaw, ok := item.Get("type")
		if !ok {
			errs.Add("value_error", iloc, "Value error, Responses API output items must include a type discriminator", itemRaw)
			continue
		}
		var it OutputItem
		if it.Type, ok = LaxString(typeRaw, At(iloc, "type"), errs); !ok {
			continue
		}
		if it.Type == "function_call" {
			if r, ok := Required(item, "name", iloc, errs); ok {
				it.Name, _ = LaxString(r, At(iloc, "name"), errs)
			}
			if r, ok := Required(item, "arguments", iloc, errs); ok {
				it.Arguments, _ = LaxString(r, At(iloc, "arguments"), errs)
			}
			if r, ok := Required(item, "call_id", iloc, errs); ok {
				it.CallID, _ = LaxString(r, At(iloc, "call_id"), errs)
			}
		}
		out = append(out, it)
	}
	return out
}

// NormalizeToolName strips this server's MCP namespace ("mcp__<server>__") from a tool-call name,
// as NeMo Gym's normalize_tool_name does for servers exposed over MCP.
func NormalizeToolName(name, server string) string {
	if !strings.HasPrefix(name, "mcp__") {
		return name
	}
	return strings.TrimPrefix(name, "mcp__"+server+"__")
}
