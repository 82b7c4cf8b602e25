package agent

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/dataset"
)

// ChatMessages converts a row's Responses-style instructions and input to
// Chat Completions messages. The developer role becomes system, which every
// chat template knows; consecutive function_call items become one assistant
// message with tool calls; function_call_output items become tool messages.
func ChatMessages(p *dataset.Params) []openai.ChatCompletionMessage {
	msgs := make([]openai.ChatCompletionMessage, 0, len(p.Input)+1)
	if p.Instructions != "" {
		msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: p.Instructions})
	}
	for _, it := range p.Input {
		switch it.Type {
		case dataset.ItemMessage:
			role := it.Role
			if role == "developer" {
				role = openai.ChatMessageRoleSystem
			}
			msgs = append(msgs, openai.ChatCompletionMessage{Role: role, Content: it.Content})
		case dataset.ItemFunctionCall:
			tc := openai.ToolCall{ID: it.CallID, Type: openai.ToolTypeFunction,
				Function: openai.FunctionCall{Name: it.Name, Arguments: it.Arguments}}
			// Attach to the assistant message just before when it is the
			// same turn (text then calls, or several calls).
			if n := len(msgs); n > 0 && msgs[n-1].Role == openai.ChatMessageRoleAssistant {
				msgs[n-1].ToolCalls = append(msgs[n-1].ToolCalls, tc)
				continue
			}
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, ToolCalls: []openai.ToolCall{tc}})
		case dataset.ItemFunctionCallOutput:
			msgs = append(msgs, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: it.CallID, Content: it.Output})
		}
	}
	return msgs
}

// emptyParameters is what a tool without parameters is offered with; some
// servers reject a function whose parameters are null.
var emptyParameters = json.RawMessage(`{"type":"object","properties":{}}`)

// ChatTools converts flat Responses function tools to Chat Completions tools.
func ChatTools(tools []dataset.Tool) []openai.Tool {
	if len(tools) == 0 {
		return nil
	}
	out := make([]openai.Tool, len(tools))
	for i, t := range tools {
		params := t.Parameters
		if params == nil {
			params = emptyParameters
		}
		out[i] = openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: t.Name, Description: t.Description, Parameters: params, Strict: t.Strict != nil && *t.Strict,
		}}
	}
	return out
}

// ChatToolChoice converts a Responses tool_choice ("auto", "none",
// "required", or {"type":"function","name":N}) to its Chat Completions
// form. It returns nil when raw is nil.
func ChatToolChoice(raw json.RawMessage) any {
	if raw == nil {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var obj struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Name != "" {
		return openai.ToolChoice{Type: openai.ToolTypeFunction, Function: openai.ToolFunction{Name: obj.Name}}
	}
	return nil
}

// Response is the OpenAI Responses API object that /verify receives: the
// rollout as the Responses API would have returned it. Its fields are the
// ones NeMo Gym requires (id, created_at, model, object, output,
// parallel_tool_calls, tool_choice, tools) plus standard ones.
type Response struct {
	ID                string            `json:"id"`
	CreatedAt         float64           `json:"created_at"`
	Model             string            `json:"model"`
	Object            string            `json:"object"`
	Output            []OutputItem      `json:"output"`
	ParallelToolCalls bool              `json:"parallel_tool_calls"`
	ToolChoice        json.RawMessage   `json:"tool_choice"`
	Tools             json.RawMessage   `json:"tools"`
	Status            string            `json:"status"`
	Error             any               `json:"error"`
	IncompleteDetails *IncompleteReason `json:"incomplete_details"`
	Instructions      *string           `json:"instructions"`
	Temperature       *float64          `json:"temperature"`
	TopP              *float64          `json:"top_p"`
	MaxOutputTokens   *int              `json:"max_output_tokens"`
	Usage             ResponseUsage     `json:"usage"`
}

// IncompleteReason says why a response is incomplete.
type IncompleteReason struct {
	Reason string `json:"reason"`
}

// OutputItem is one item of a Response's output: a function_call, a
// function_call_output or an assistant message.
type OutputItem struct {
	Type      string        `json:"type"`
	ID        string        `json:"id,omitempty"`
	Status    string        `json:"status,omitempty"`
	Role      string        `json:"role,omitempty"`
	Content   []OutputText  `json:"content,omitempty"`
	CallID    string        `json:"call_id,omitempty"`
	Name      string        `json:"name,omitempty"`
	Arguments *string       `json:"arguments,omitempty"`
	Output    *string       `json:"output,omitempty"`
	Summary   []SummaryText `json:"summary,omitempty"`
}

// OutputText is a text part of an assistant message.
type OutputText struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations []any  `json:"annotations"`
}

// SummaryText is a part of a reasoning item's summary.
type SummaryText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// ResponseUsage is token usage in Responses API form.
type ResponseUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

// BuildResponse turns a trajectory into the Responses object for /verify:
// per round, any assistant text, then its function_call items, then their
// function_call_output items; the final answer as an assistant message.
func BuildResponse(id string, createdAt float64, model string, p *dataset.Params, tr *Trajectory) *Response {
	r := &Response{
		ID: id, CreatedAt: createdAt, Model: model, Object: "response",
		ParallelToolCalls: true, ToolChoice: json.RawMessage(`"auto"`), Tools: json.RawMessage(`[]`),
		Status: "completed", Temperature: p.Temperature, TopP: p.TopP, MaxOutputTokens: p.MaxOutputTokens,
	}
	if p.ParallelToolCalls != nil {
		r.ParallelToolCalls = *p.ParallelToolCalls
	}
	if p.ToolChoice != nil {
		r.ToolChoice = p.ToolChoice
	}
	if p.ToolsRaw != nil {
		r.Tools = p.ToolsRaw
	}
	if p.Instructions != "" {
		r.Instructions = &p.Instructions
	}
	r.Output = make([]OutputItem, 0, 3*len(tr.Rounds))
	seq := 0
	nextID := func(prefix string) string {
		seq++
		return prefix + strings.TrimPrefix(id, "resp_") + "_" + strconv.Itoa(seq)
	}
	for _, rd := range tr.Rounds {
		if rd.Reasoning != "" {
			r.Output = append(r.Output, OutputItem{Type: "reasoning", ID: nextID("rs_"),
				Summary: []SummaryText{{Type: "summary_text", Text: rd.Reasoning}}})
		}
		if rd.Content != "" || len(rd.ToolCalls) == 0 {
			r.Output = append(r.Output, OutputItem{Type: "message", ID: nextID("msg_"), Role: "assistant", Status: "completed",
				Content: []OutputText{{Type: "output_text", Text: rd.Content, Annotations: []any{}}}})
		}
		for i := range rd.ToolCalls {
			tc := &rd.ToolCalls[i]
			r.Output = append(r.Output, OutputItem{Type: "function_call", ID: nextID("fc_"), Status: "completed",
				CallID: tc.CallID, Name: tc.Name, Arguments: &tc.Arguments})
		}
		for i := range rd.ToolCalls {
			tc := &rd.ToolCalls[i]
			r.Output = append(r.Output, OutputItem{Type: "function_call_output", CallID: tc.CallID, Output: &tc.Output})
		}
	}
	// The Responses API knows only two reasons for an incomplete response,
	// and strict readers accept no other; the termination is in the record.
	if n := len(tr.Rounds); n > 0 && tr.Rounds[n-1].FinishReason == string(openai.FinishReasonLength) {
		r.Status = "incomplete"
		r.IncompleteDetails = &IncompleteReason{Reason: "max_output_tokens"}
	}
	u := tr.Usage
	r.Usage.InputTokens = u.PromptTokens
	r.Usage.InputTokensDetails.CachedTokens = u.CachedTokens
	r.Usage.OutputTokens = u.CompletionTokens
	r.Usage.OutputTokensDetails.ReasoningTokens = u.ReasoningTokens
	r.Usage.TotalTokens = u.PromptTokens + u.CompletionTokens
	return r
}

// callID returns the model's id for a tool call, or a generated one when
// the endpoint gave none (some llama.cpp versions).
func callID(id string, round, i int) string {
	if id != "" {
		return id
	}
	return fmt.Sprintf("call_%d_%d", round, i)
}
