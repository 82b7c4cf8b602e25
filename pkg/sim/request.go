package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// chatRequest is the part of a Chat Completions request the simulator reads.
type chatRequest struct {
	Model             string          `json:"model"`
	Messages          []chatMessage   `json:"messages"`
	Tools             []chatTool      `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
	Seed              *int64          `json:"seed"`
	Stream            *bool           `json:"stream"`
	N                 *int            `json:"n"`
	// Token capture (tokens.go): OpenAI's logprobs, vLLM's return_token_ids and
	// return_tokens_as_token_ids.
	Logprobs               bool `json:"logprobs"`
	ReturnTokenIDs         bool `json:"return_token_ids"`
	ReturnTokensAsTokenIDs bool `json:"return_tokens_as_token_ids"`
	// The completion's bound, counted against Options.ContextLimit.
	MaxTokens     *int `json:"max_tokens"`
	MaxCompletion *int `json:"max_completion_tokens"`

	choice string // auto, none, required or function
	forced string // the tool of tool_choice {"type":"function",...}
}

type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	ToolCalls  []wireToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
	// An earlier call's tokens on the assistant message it produced, as NeMo Gym sends them
	// (tokens.go, splicedPrompt).
	PromptTokenIDs     []int32 `json:"prompt_token_ids"`
	GenerationTokenIDs []int32 `json:"generation_token_ids"`

	text string // the content's text
}

// wireToolCall is a tool call as Chat Completions writes it, in requests and in answers.
type wireToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type chatTool struct {
	Type     string `json:"type"`
	Function *struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"function"`
}

// requestError is a 400: the parameter at fault and why.
type requestError struct{ param, msg string }

func badParam(param, format string, args ...any) *requestError {
	return &requestError{param: param, msg: fmt.Sprintf(format, args...)}
}

var chatRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true, "tool": true}

// parseRequest decodes and checks a request (see the package documentation, Requests).
func parseRequest(body []byte) (*chatRequest, *requestError) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, badParam("", "the request body must be a JSON object")
	}
	var req chatRequest
	if err := json.Unmarshal(trimmed, &req); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, badParam(te.Field, "%s: is a JSON %s, want %s", te.Field, te.Value, te.Type)
		}
		return nil, badParam("", "the request body is not valid JSON: %v", err)
	}
	if req.Stream != nil && *req.Stream {
		return nil, badParam("stream", "the simulator does not stream; leave stream out or false")
	}
	if req.N != nil && *req.N != 1 {
		return nil, badParam("n", "the simulator answers one choice; n must be 1, got %d", *req.N)
	}
	if len(req.Messages) == 0 {
		return nil, badParam("messages", "messages: want a non-empty list")
	}
	pending := map[string]bool{} // tool calls of the last assistant message not yet answered
	for i := range req.Messages {
		m := &req.Messages[i]
		at := fmt.Sprintf("messages[%d]", i)
		if !chatRoles[m.Role] {
			return nil, badParam(at+".role", "%s.role: is %q, want system, developer, user, assistant or tool", at, m.Role)
		}
		text, err := contentText(m.Content, at+".content")
		if err != nil {
			return nil, err
		}
		m.text = text
		if m.Role != "tool" && len(pending) > 0 {
			return nil, badParam("messages", "%s: an assistant message with tool_calls must be followed by tool messages answering each tool_call_id (not answered: %s)", at, strings.Join(sortedSet(pending), ", "))
		}
		switch m.Role {
		case "tool":
			if m.ToolCallID == "" {
				return nil, badParam(at+".tool_call_id", "%s.tool_call_id: missing", at)
			}
			if !pending[m.ToolCallID] {
				return nil, badParam(at+".tool_call_id", "%s.tool_call_id: %q answers no tool call of the assistant message before it", at, m.ToolCallID)
			}
			delete(pending, m.ToolCallID)
		case "assistant":
			for j, tc := range m.ToolCalls {
				tat := fmt.Sprintf("%s.tool_calls[%d]", at, j)
				if tc.ID == "" {
					return nil, badParam(tat+".id", "%s.id: missing", tat)
				}
				if tc.Type != "" && tc.Type != "function" {
					return nil, badParam(tat+".type", "%s.type: is %q, want function", tat, tc.Type)
				}
				if tc.Function.Name == "" {
					return nil, badParam(tat+".function.name", "%s.function.name: missing", tat)
				}
				if pending[tc.ID] {
					return nil, badParam(tat+".id", "%s.id: %q used twice", tat, tc.ID)
				}
				pending[tc.ID] = true
			}
		default:
			if len(m.ToolCalls) > 0 {
				return nil, badParam(at+".tool_calls", "%s.tool_calls: only assistant messages make tool calls", at)
			}
		}
	}
	if len(pending) > 0 {
		return nil, badParam("messages", "messages: the last assistant message's tool calls are not all answered (%s)", strings.Join(sortedSet(pending), ", "))
	}
	for i, t := range req.Tools {
		at := fmt.Sprintf("tools[%d]", i)
		if t.Type != "function" {
			return nil, badParam(at+".type", "%s.type: is %q, want function", at, t.Type)
		}
		if t.Function == nil || t.Function.Name == "" {
			return nil, badParam(at+".function.name", "%s.function.name: missing", at)
		}
		if p := bytes.TrimSpace(t.Function.Parameters); len(p) > 0 && string(p) != "null" && p[0] != '{' {
			return nil, badParam(at+".function.parameters", "%s.function.parameters: want a JSON Schema object", at)
		}
	}
	if err := req.parseToolChoice(); err != nil {
		return nil, err
	}
	return &req, nil
}

func (req *chatRequest) parseToolChoice() *requestError {
	raw := bytes.TrimSpace(req.ToolChoice)
	req.choice = "auto"
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if len(req.Tools) == 0 {
		return badParam("tool_choice", "tool_choice is only allowed when tools are specified")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		switch s {
		case "auto", "none", "required":
			req.choice = s
			return nil
		}
		return badParam("tool_choice", "tool_choice: is %q, want none, auto, required or {\"type\":\"function\",\"function\":{\"name\":...}}", s)
	}
	var obj struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &obj) != nil || obj.Type != "function" || obj.Function.Name == "" {
		return badParam("tool_choice", "tool_choice: want none, auto, required or {\"type\":\"function\",\"function\":{\"name\":...}}")
	}
	for _, t := range req.Tools {
		if t.Function.Name == obj.Function.Name {
			req.choice, req.forced = "function", obj.Function.Name
			return nil
		}
	}
	return badParam("tool_choice", "tool_choice: no tool is named %q", obj.Function.Name)
}

// contentText is a message content's text: a string, null, or a list of parts whose text parts
// (text, input_text, output_text) are joined with "" (other parts, e.g. images, are skipped).
func contentText(raw json.RawMessage, at string) (string, *requestError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", badParam(at, "%s: %v", at, err)
		}
		return s, nil
	case '[':
	default:
		return "", badParam(at, "%s: want a string or a list of content parts", at)
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badParam(at, "%s: want a list of content parts: %v", at, err)
	}
	var b strings.Builder
	for i, p := range parts {
		switch p.Type {
		case "text", "input_text", "output_text":
			if p.Text == nil {
				return "", badParam(fmt.Sprintf("%s[%d].text", at, i), "%s[%d].text: missing", at, i)
			}
			b.WriteString(*p.Text)
		case "":
			return "", badParam(fmt.Sprintf("%s[%d].type", at, i), "%s[%d].type: missing", at, i)
		}
	}
	return b.String(), nil
}

func sortedSet(m map[string]bool) []string {
	return slices.Sorted(maps.Keys(m))
}

// conversation is the request's first user message and its prompt key (the system and user
// messages before the first assistant or tool message; see taskPrompt).
func (req *chatRequest) conversation() (firstUser, prompt string) {
	var b strings.Builder
	open, found := true, false
	for _, m := range req.Messages {
		if m.Role == "assistant" || m.Role == "tool" {
			open = false
			continue
		}
		if m.Role == "user" && !found {
			firstUser, found = m.text, true
		}
		if open {
			promptAdd(&b, m.Role, m.text)
		}
	}
	return firstUser, b.String()
}

// round is the number of assistant messages with tool calls.
func (req *chatRequest) round() int {
	n := 0
	for _, m := range req.Messages {
		if m.Role == "assistant" && len(m.ToolCalls) > 0 {
			n++
		}
	}
	return n
}

// toolOutputs maps tool_call_id to the tool message's text.
func (req *chatRequest) toolOutputs() map[string]string {
	out := map[string]string{}
	for _, m := range req.Messages {
		if m.Role == "tool" {
			out[m.ToolCallID] = m.text
		}
	}
	return out
}

// offered is the tools the answer may call, in request order: none with tool_choice "none",
// the one named by a function tool_choice, else all.
func (req *chatRequest) offered() []*chatTool {
	if req.choice == "none" {
		return nil
	}
	var out []*chatTool
	for i := range req.Tools {
		t := &req.Tools[i]
		if req.choice == "function" && t.Function.Name != req.forced {
			continue
		}
		out = append(out, t)
	}
	return out
}

// promptBytes is the size of the request's messages: texts and tool calls.
func (req *chatRequest) promptBytes() int {
	n := 0
	for _, m := range req.Messages {
		n += len(m.text)
		for _, tc := range m.ToolCalls {
			n += len(tc.Function.Name) + len(tc.Function.Arguments)
		}
	}
	return n
}
