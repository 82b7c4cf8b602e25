package dataset

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// Params is the parsed responses_create_params of a row: an OpenAI
// Responses API request without the model. Only what the runner needs is
// parsed; the raw object is kept for /verify.
type Params struct {
	Input             []Item
	Instructions      string
	Tools             []Tool
	Temperature       *float64
	TopP              *float64
	MaxOutputTokens   *int
	ParallelToolCalls *bool
	// ToolChoice is the raw tool_choice ("auto", "none", "required" or
	// {"type":"function","name":...}); nil when absent or null.
	ToolChoice json.RawMessage
	// ToolsRaw is the tools list exactly as read (nil when absent or null),
	// echoed in the response object sent to /verify.
	ToolsRaw json.RawMessage
	// Raw is responses_create_params exactly as read.
	Raw json.RawMessage
}

// Item kinds of a Responses input list.
const (
	ItemMessage            = "message"
	ItemFunctionCall       = "function_call"
	ItemFunctionCallOutput = "function_call_output"
)

// Item is one element of a Responses input: a message, a function call or a
// function call's output.
type Item struct {
	Type      string
	Role      string // messages: system, developer, user, assistant
	Content   string // messages: the text (content parts joined)
	Name      string // function_call
	Arguments string // function_call: a JSON string
	CallID    string // function_call, function_call_output
	Output    string // function_call_output
}

// Tool is one flat function tool of a Responses request.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage // nil when absent
	Strict      *bool
}

type rawParams struct {
	Input             json.RawMessage `json:"input"`
	Instructions      json.RawMessage `json:"instructions"`
	Tools             json.RawMessage `json:"tools"`
	Temperature       json.RawMessage `json:"temperature"`
	TopP              json.RawMessage `json:"top_p"`
	MaxOutputTokens   json.RawMessage `json:"max_output_tokens"`
	ParallelToolCalls json.RawMessage `json:"parallel_tool_calls"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
}

// fieldError is a validation failure at a field path, turned into a
// RowError by the reader.
type fieldError struct {
	field string
	msg   string
}

func (e *fieldError) Error() string { return e.field + ": " + e.msg }

func errf(field, format string, args ...any) *fieldError {
	return &fieldError{field: field, msg: fmt.Sprintf(format, args...)}
}

const rcp = "responses_create_params"

// ParseParams validates and parses a responses_create_params object.
func ParseParams(raw json.RawMessage) (*Params, error) {
	if !isNull(raw) && jsonfast.TypeName(raw) == "an object" && !json.Valid(raw) {
		return nil, errf(rcp, "%v", syntaxError(raw))
	}
	return parseParams(raw)
}

// parseParams parses responses_create_params, which is valid JSON (a member of a valid row).
// Its members are looked up by their exact names (encoding/json would also take "Input"), and
// a duplicate member is an error.
func parseParams(raw json.RawMessage) (*Params, error) {
	if isNull(raw) {
		return nil, errf(rcp, "missing: every row needs responses_create_params")
	}
	if jsonfast.TypeName(raw) != "an object" {
		return nil, errf(rcp, "is %s, want an object", jsonfast.TypeName(raw))
	}
	fields, ferr := objectFields(raw, rcp)
	if ferr != nil {
		return nil, ferr
	}
	rp := rawParams{
		Input:             lookup(fields, "input"),
		Instructions:      lookup(fields, "instructions"),
		Tools:             lookup(fields, "tools"),
		Temperature:       lookup(fields, "temperature"),
		TopP:              lookup(fields, "top_p"),
		MaxOutputTokens:   lookup(fields, "max_output_tokens"),
		ParallelToolCalls: lookup(fields, "parallel_tool_calls"),
		ToolChoice:        lookup(fields, "tool_choice"),
	}
	p := &Params{Raw: raw}
	var err error
	if p.Input, err = parseInput(rp.Input); err != nil {
		return nil, err
	}
	if !isNull(rp.Instructions) {
		if jsonfast.TypeName(rp.Instructions) != "a string" || json.Unmarshal(rp.Instructions, &p.Instructions) != nil {
			return nil, errf(rcp+".instructions", "is %s, want a string", jsonfast.TypeName(rp.Instructions))
		}
	}
	if p.Tools, err = parseTools(rp.Tools); err != nil {
		return nil, err
	}
	if !isNull(rp.Tools) {
		p.ToolsRaw = rp.Tools
	}
	if p.Temperature, err = optNumber(rp.Temperature, "temperature", 0, 2); err != nil {
		return nil, err
	}
	if p.TopP, err = optNumber(rp.TopP, "top_p", 0, 1); err != nil {
		return nil, err
	}
	if !isNull(rp.MaxOutputTokens) {
		var n int
		if jsonfast.TypeName(rp.MaxOutputTokens) != "a number" {
			return nil, errf(rcp+".max_output_tokens", "is %s, want a positive integer", jsonfast.TypeName(rp.MaxOutputTokens))
		}
		if err := json.Unmarshal(rp.MaxOutputTokens, &n); err != nil || n <= 0 {
			return nil, errf(rcp+".max_output_tokens", "is %s, want a positive integer", clip(rp.MaxOutputTokens))
		}
		p.MaxOutputTokens = &n
	}
	if !isNull(rp.ParallelToolCalls) {
		var b bool
		if jsonfast.TypeName(rp.ParallelToolCalls) != "a boolean" || json.Unmarshal(rp.ParallelToolCalls, &b) != nil {
			return nil, errf(rcp+".parallel_tool_calls", "is %s, want a boolean", jsonfast.TypeName(rp.ParallelToolCalls))
		}
		p.ParallelToolCalls = &b
	}
	if !isNull(rp.ToolChoice) {
		if err := checkToolChoice(rp.ToolChoice); err != nil {
			return nil, err
		}
		p.ToolChoice = rp.ToolChoice
	}
	return p, nil
}

// clip shortens a raw value for an error message.
func clip(raw []byte) string {
	const max = 60
	if len(raw) <= max {
		return string(raw)
	}
	return strings.ToValidUTF8(string(raw[:max]), "") + "…"
}

func optNumber(raw json.RawMessage, name string, lo, hi float64) (*float64, error) {
	if isNull(raw) {
		return nil, nil
	}
	var f float64
	if jsonfast.TypeName(raw) != "a number" {
		return nil, errf(rcp+"."+name, "is %s, want a number", jsonfast.TypeName(raw))
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return nil, errf(rcp+"."+name, "is %s, want a number in [%g, %g]", clip(raw), lo, hi)
	}
	if f < lo || f > hi {
		return nil, errf(rcp+"."+name, "is %g, want a number in [%g, %g]", f, lo, hi)
	}
	return &f, nil
}

func checkToolChoice(raw json.RawMessage) error {
	const field = rcp + ".tool_choice"
	var s string
	switch jsonfast.TypeName(raw) {
	case "a string", "an object":
	default:
		return errf(field, "is %s, want auto, none, required or {\"type\":\"function\",\"name\":...}", jsonfast.TypeName(raw))
	}
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto", "none", "required":
			return nil
		}
		return errf(field, "is %q, want auto, none, required or {\"type\":\"function\",\"name\":...}", clip([]byte(s)))
	}
	var obj struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil || obj.Type != "function" || obj.Name == "" {
		return errf(field, "want auto, none, required or {\"type\":\"function\",\"name\":...}")
	}
	return nil
}

var roles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true}

type rawItem struct {
	Type      *string         `json:"type"`
	Role      *string         `json:"role"`
	Content   json.RawMessage `json:"content"`
	Name      *string         `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	CallID    *string         `json:"call_id"`
	Output    json.RawMessage `json:"output"`
}

func parseInput(raw json.RawMessage) ([]Item, error) {
	const field = rcp + ".input"
	if isNull(raw) {
		return nil, errf(field, "missing: want a string or a list of messages")
	}
	switch jsonfast.TypeName(raw) {
	case "a string":
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, errf(field, "%v", err)
		}
		return []Item{{Type: ItemMessage, Role: "user", Content: s}}, nil
	case "an array":
	default:
		return nil, errf(field, "is %s, want a string or a list of messages", jsonfast.TypeName(raw))
	}
	elems := elements(raw)
	if len(elems) == 0 {
		return nil, errf(field, "is an empty list")
	}
	items := make([]Item, 0, len(elems))
	for i, e := range elems {
		f := fmt.Sprintf("%s[%d]", field, i)
		if jsonfast.TypeName(e) != "an object" {
			return nil, errf(f, "is %s, want an object", jsonfast.TypeName(e))
		}
		var ri rawItem
		if err := json.Unmarshal(e, &ri); err != nil {
			return nil, typeErr(f, err)
		}
		typ := ItemMessage
		if ri.Type != nil {
			typ = *ri.Type
		}
		switch typ {
		case ItemMessage:
			if ri.Role == nil {
				return nil, errf(f+".role", "missing")
			}
			if !roles[*ri.Role] {
				return nil, errf(f+".role", "is %q, want system, developer, user or assistant", clip([]byte(*ri.Role)))
			}
			text, err := contentText(ri.Content, f+".content")
			if err != nil {
				return nil, err
			}
			items = append(items, Item{Type: ItemMessage, Role: *ri.Role, Content: text})
		case ItemFunctionCall:
			if ri.Name == nil || *ri.Name == "" {
				return nil, errf(f+".name", "missing")
			}
			if ri.CallID == nil || *ri.CallID == "" {
				return nil, errf(f+".call_id", "missing")
			}
			var args string
			if err := json.Unmarshal(ri.Arguments, &args); err != nil {
				return nil, errf(f+".arguments", "is %s, want a JSON string", jsonfast.TypeName(ri.Arguments))
			}
			items = append(items, Item{Type: typ, Name: *ri.Name, CallID: *ri.CallID, Arguments: args})
		case ItemFunctionCallOutput:
			if ri.CallID == nil || *ri.CallID == "" {
				return nil, errf(f+".call_id", "missing")
			}
			var out string
			if err := json.Unmarshal(ri.Output, &out); err != nil {
				return nil, errf(f+".output", "is %s, want a string", jsonfast.TypeName(ri.Output))
			}
			items = append(items, Item{Type: typ, CallID: *ri.CallID, Output: out})
		case "reasoning":
			// Reasoning items of earlier turns carry nothing a chat model
			// can take back; they are left out.
		default:
			return nil, errf(f+".type", "is %q, want message, function_call or function_call_output", clip([]byte(typ)))
		}
	}
	return items, nil
}

// contentText joins the text of a message content: a string, or a list of
// parts {type: input_text|output_text|text, text}.
func contentText(raw json.RawMessage, field string) (string, error) {
	if isNull(raw) {
		return "", errf(field, "missing")
	}
	switch jsonfast.TypeName(raw) {
	case "a string":
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	case "an array":
	default:
		return "", errf(field, "is %s, want a string or a list of text parts", jsonfast.TypeName(raw))
	}
	var b strings.Builder
	for i, e := range elements(raw) {
		pf := fmt.Sprintf("%s[%d]", field, i)
		if jsonfast.TypeName(e) != "an object" {
			return "", errf(pf, "is %s, want a text part {\"type\": \"input_text\", \"text\": ...}", jsonfast.TypeName(e))
		}
		var p struct {
			Type *string `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(e, &p); err != nil {
			return "", typeErr(pf, err)
		}
		if p.Type == nil {
			return "", errf(pf+".type", "missing")
		}
		switch *p.Type {
		case "input_text", "output_text", "text":
		default:
			return "", errf(pf+".type", "is %q; only text parts (input_text, output_text) are supported", clip([]byte(*p.Type)))
		}
		if p.Text == nil {
			return "", errf(pf+".text", "missing")
		}
		b.WriteString(*p.Text)
	}
	return b.String(), nil
}

type rawTool struct {
	Type        *string         `json:"type"`
	Name        *string         `json:"name"`
	Description *string         `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      *bool           `json:"strict"`
	Function    json.RawMessage `json:"function"`
}

func parseTools(raw json.RawMessage) ([]Tool, error) {
	const field = rcp + ".tools"
	if isNull(raw) {
		return nil, nil
	}
	if jsonfast.TypeName(raw) != "an array" {
		return nil, errf(field, "is %s, want a list of function tools", jsonfast.TypeName(raw))
	}
	elems := elements(raw)
	tools := make([]Tool, 0, len(elems))
	seen := make(map[string]bool, len(elems))
	for i, e := range elems {
		f := fmt.Sprintf("%s[%d]", field, i)
		if jsonfast.TypeName(e) != "an object" {
			return nil, errf(f, "is %s, want an object", jsonfast.TypeName(e))
		}
		var rt rawTool
		if err := json.Unmarshal(e, &rt); err != nil {
			return nil, typeErr(f, err)
		}
		if rt.Type == nil || *rt.Type != "function" {
			t := "missing"
			if rt.Type != nil {
				t = fmt.Sprintf("%q", clip([]byte(*rt.Type)))
			}
			return nil, errf(f+".type", "is %s, want \"function\"", t)
		}
		if rt.Name == nil || *rt.Name == "" {
			if len(rt.Function) > 0 {
				return nil, errf(f+".name", "missing: tools are flat in the Responses API ({type, name, parameters}), not nested under \"function\"")
			}
			return nil, errf(f+".name", "missing")
		}
		if seen[*rt.Name] {
			return nil, errf(f+".name", "duplicate tool name %q", clip([]byte(*rt.Name)))
		}
		seen[*rt.Name] = true
		t := Tool{Name: *rt.Name, Strict: rt.Strict}
		if rt.Description != nil {
			t.Description = *rt.Description
		}
		if !isNull(rt.Parameters) {
			if jsonfast.TypeName(rt.Parameters) != "an object" {
				return nil, errf(f+".parameters", "is %s, want a JSON Schema object", jsonfast.TypeName(rt.Parameters))
			}
			t.Parameters = rt.Parameters
		}
		tools = append(tools, t)
	}
	return tools, nil
}

// typeErr turns encoding/json's type errors ("json: cannot unmarshal number
// into Go struct field rawItem.role of type string") into a field error
// naming the full path.
func typeErr(field string, err error) *fieldError {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		f := field
		if te.Field != "" {
			f += "." + te.Field
		}
		return errf(f, "is a JSON %s, want %s", te.Value, goTypeName(te.Type.String()))
	}
	return errf(field, "%v", err)
}

func goTypeName(t string) string {
	t = strings.TrimPrefix(t, "*")
	switch t {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	}
	if strings.HasPrefix(t, "[]") {
		return "a list"
	}
	return t
}
