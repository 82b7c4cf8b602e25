package export

import (
	"context"
	"encoding/json"
	"strings"

	openai "github.com/sashabaranov/go-openai"
)

// LayoutOpenAI is OpenAI's fine-tuning formats (--layout openai, JSONL only): sft rows as its
// chat fine-tuning reads them, preference rows as its DPO fine-tuning reads them.
const LayoutOpenAI = "openai"

// OpenAIFTMessage is a message as OpenAI's fine-tuning files hold it: tool-call arguments as
// the JSON strings the model wrote, members left out when empty (its validator knows no
// reasoning_content), and on an assistant message of an sft row its weight: 0 for a turn that
// is no training target (an answer cut off by the token limit).
type OpenAIFTMessage struct {
	Role       string               `json:"role"`
	Content    string               `json:"content"`
	ToolCalls  []ToolCall[ArgsText] `json:"tool_calls,omitempty"`
	ToolCallID string               `json:"tool_call_id,omitempty"`
	Weight     *int                 `json:"weight,omitempty"`
}

// OpenAISFTRow is a line of OpenAI's chat fine-tuning format.
type OpenAISFTRow struct {
	Messages []OpenAIFTMessage `json:"messages"`
	Tools    JSONText          `json:"tools,omitempty"`
}

// OpenAIDPORow is a line of OpenAI's DPO fine-tuning format.
type OpenAIDPORow struct {
	Input struct {
		Messages []OpenAIFTMessage `json:"messages"`
		Tools    JSONText          `json:"tools,omitempty"`
	} `json:"input"`
	PreferredOutput    []OpenAIFTMessage `json:"preferred_output"`
	NonPreferredOutput []OpenAIFTMessage `json:"non_preferred_output"`
}

// openaiFT converts chat-template messages to OpenAI's shape (arguments back to text).
func openaiFT(msgs []ChatMessage) []OpenAIFTMessage {
	out := make([]OpenAIFTMessage, len(msgs))
	for i, m := range msgs {
		o := OpenAIFTMessage{Role: m.Role, Content: m.Content}
		if m.ToolCallID != nil {
			o.ToolCallID = *m.ToolCallID
		}
		for _, tc := range m.ToolCalls {
			args := string(tc.Function.Arguments)
			if strings.HasPrefix(args, `"`) {
				args = unquote(args)
			}
			o.ToolCalls = append(o.ToolCalls, ToolCall[ArgsText]{ID: tc.ID, Type: tc.Type, Function: Function[ArgsText]{Name: tc.Function.Name, Arguments: ArgsText(args)}})
		}
		out[i] = o
	}
	return out
}

// openaiSFTRow is a rollout as OpenAI's chat fine-tuning reads it: every message up to and with
// the last assistant one, each assistant message weighted (0 for a turn cut off by the token
// limit); a rollout with tool-call arguments that are not JSON is left out.
func (e *exporter) openaiSFTRow(ro *rollout) (*OpenAISFTRow, string, error) {
	if e.opt.BestOfGroup && ro.dir != ro.g.bestDir {
		return nil, DropNotBest, nil
	}
	tr := ro.traj
	prompt := promptLen(tr.Messages)
	if prompt == len(tr.Messages) {
		return nil, DropNoAnswer, nil
	}
	msgs, ok := messages(tr.Messages, true, argsObject, prompt, nil)
	if !ok {
		return nil, DropMalformed, nil // OpenAI's validator refuses arguments that are not JSON, weighted or not
	}
	answers := 0
	for i := prompt; i < len(msgs); i++ {
		if msgs[i].Role == openai.ChatMessageRoleAssistant {
			answers++
		}
	}
	out := openaiFT(msgs)
	k := 0
	last := 0
	for i := range out {
		if out[i].Role != openai.ChatMessageRoleAssistant || i < prompt {
			continue
		}
		w := 1
		if answers == len(tr.Rounds) && tr.Rounds[k].FinishReason == "length" {
			w = 0
		}
		out[i].Weight = &w
		k++
		last = i
	}
	tools, err := toolsJSON(ro.task)
	if err != nil {
		return nil, "", err
	}
	row := &OpenAISFTRow{Messages: out[:last+1]}
	if tools != "[]" {
		row.Tools = JSONText(tools)
	}
	return row, "", nil
}

// openaiSFT writes the sft rows in OpenAI's layout.
func (e *exporter) openaiSFT(ctx context.Context) error {
	return runRows(ctx, e, e.openaiSFTRow)
}

// unquote is the string a JSON string literal holds (the arguments argsObject could not
// parse, kept as text).
func unquote(s string) string {
	var out string
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return s
	}
	return out
}
