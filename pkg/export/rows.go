package export

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/internal/jsonfast"
	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/dataset"
)

// Message is a chat message as training data holds it, with the same members in every
// message (datasets keeps a list of messages as one struct type only when every message has
// the same keys): role, content (a string, "" for an assistant message that only calls tools:
// Qwen3's chat template fails on null), tool_calls ([] for none), tool_call_id and
// reasoning_content (null for none). A is the type of a tool call's arguments: ArgsText (a
// JSON string, OpenAI's shape) or JSONText (the object itself, for chat templates).
type Message[A any] struct {
	Role             string        `parquet:"role" json:"role"`
	Content          string        `parquet:"content" json:"content"`
	ToolCalls        []ToolCall[A] `parquet:"tool_calls,list" json:"tool_calls"`
	ToolCallID       *string       `parquet:"tool_call_id,optional" json:"tool_call_id"`
	ReasoningContent *string       `parquet:"reasoning_content,optional" json:"reasoning_content"`
}

// ToolCall is an assistant message's tool call.
type ToolCall[A any] struct {
	ID       string      `parquet:"id" json:"id"`
	Type     string      `parquet:"type" json:"type"`
	Function Function[A] `parquet:"function" json:"function"`
}

// Function is a tool call's function and arguments.
type Function[A any] struct {
	Name      string `parquet:"name" json:"name"`
	Arguments A      `parquet:"arguments" json:"arguments"`
}

// ArgsText is a tool call's arguments as the JSON string OpenAI writes ("{\"a\":1}").
type ArgsText string

// OpenAIMessage is a message in OpenAI's shape (arguments as JSON strings); ChatMessage one in
// the shape HF chat templates render (arguments as objects: Qwen2.5's template writes
// arguments | tojson, which double-encodes a string).
type (
	OpenAIMessage = Message[ArgsText]
	ChatMessage   = Message[JSONText]
)

// Call is one model call's tokens (--capture-tokens), NeMo Gym's names: lists of int32 and
// float32 in Parquet.
type Call struct {
	PromptTokenIDs     []int32   `parquet:"prompt_token_ids,list" json:"prompt_token_ids"`
	GenerationTokenIDs []int32   `parquet:"generation_token_ids,list" json:"generation_token_ids"`
	GenerationLogProbs []float32 `parquet:"generation_log_probs,list" json:"generation_log_probs"`
}

// JSONText is JSON kept as text: a string column in Parquet, the JSON value itself in JSONL.
type JSONText string

// MarshalJSON writes the text as the JSON it is (null when empty).
func (j JSONText) MarshalJSON() ([]byte, error) {
	if j == "" {
		return []byte("null"), nil
	}
	return []byte(j), nil
}

// storedTrajectory is what an export reads of a trajectory line's "trajectory".
type storedTrajectory struct {
	Messages    []storedMessage   `json:"messages"`
	Rounds      []storedRound     `json:"rounds"`
	Usage       agent.Usage       `json:"usage"`
	Termination agent.Termination `json:"termination"`
}

// storedMessage is a chat message of a trajectory, as go-openai wrote it, decoded without its
// UnmarshalJSON (which reads each message twice more): content is a string, or a list of
// parts (MultiContent) whose texts text joins.
type storedMessage struct {
	Role      string `json:"role"`
	Content   any    `json:"content"`
	ToolCalls []struct {
		ID       string `json:"id"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
	ToolCallID string `json:"tool_call_id"`
	// ReasoningContent is the model's reasoning of an assistant message.
	ReasoningContent string `json:"reasoning_content"`
}

// text is the message's content as text.
func (m *storedMessage) text() string {
	switch c := m.Content.(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, p := range c {
			if part, ok := p.(map[string]any); ok {
				if t, ok := part["text"].(string); ok {
					b.WriteString(t)
				}
			}
		}
		return b.String()
	}
	return ""
}

type storedRound struct {
	FinishReason       string      `json:"finish_reason"`
	Reasoning          string      `json:"reasoning"`
	Usage              agent.Usage `json:"usage"`
	PromptTokenIDs     []int32     `json:"prompt_token_ids"`
	GenerationTokenIDs []int32     `json:"generation_token_ids"`
	GenerationLogProbs []float64   `json:"generation_log_probs"`
}

// messages converts a trajectory's chat messages: text parts joined, tool calls typed
// "function", arguments by args; when sft is set, a developer message is a system one
// (OpenAI's fine-tuning format and the chat templates know no developer role). reasoning is
// each round's reasoning, put on the assistant messages from index prompt on, in order, when
// there are as many of them as rounds. ok is false when args refused a tool call's arguments.
func messages[A any](in []storedMessage, sft bool, args func(string) (A, bool), prompt int, reasoning []string) (out []Message[A], ok bool) {
	out = make([]Message[A], len(in))
	answers := 0
	for i := prompt; i < len(in); i++ {
		if in[i].Role == openai.ChatMessageRoleAssistant {
			answers++
		}
	}
	k := 0
	ok = true
	for i := range in {
		m := &in[i]
		role := m.Role
		if sft && role == openai.ChatMessageRoleDeveloper {
			role = openai.ChatMessageRoleSystem
		}
		msg := Message[A]{Role: role, Content: m.text(), ToolCalls: []ToolCall[A]{}}
		if m.ToolCallID != "" {
			id := m.ToolCallID
			msg.ToolCallID = &id
		}
		if i >= prompt && role == openai.ChatMessageRoleAssistant {
			if answers == len(reasoning) && reasoning[k] != "" {
				r := reasoning[k]
				msg.ReasoningContent = &r
			}
			k++
		}
		for _, tc := range m.ToolCalls {
			a, good := args(tc.Function.Arguments)
			ok = ok && good
			msg.ToolCalls = append(msg.ToolCalls, ToolCall[A]{ID: tc.ID, Type: "function", Function: Function[A]{Name: tc.Function.Name, Arguments: a}})
		}
		out[i] = msg
	}
	return out, ok
}

// argsText keeps arguments as the JSON string they are.
func argsText(s string) (ArgsText, bool) { return ArgsText(s), true }

// argsObject gives arguments as the JSON object they hold, or false (and the text as a JSON
// string) when they hold none: the model's malformed or cut-off arguments.
func argsObject(s string) (JSONText, bool) {
	var obj map[string]json.RawMessage
	var b bytes.Buffer
	if json.Unmarshal([]byte(s), &obj) != nil || obj == nil || json.Compact(&b, []byte(s)) != nil {
		return JSONText(jsonfast.AppendString(nil, s)), false
	}
	return JSONText(b.String()), true
}

// openaiMessages is messages in OpenAI's shape.
func openaiMessages(in []storedMessage, sft bool, prompt int, reasoning []string) []OpenAIMessage {
	out, _ := messages(in, sft, argsText, prompt, reasoning)
	return out
}

// calls is the trajectory's per-call tokens, or nil when no call has any.
func calls(rounds []storedRound) []Call {
	any := false
	for i := range rounds {
		if rounds[i].GenerationTokenIDs != nil || rounds[i].PromptTokenIDs != nil {
			any = true
			break
		}
	}
	if !any {
		return nil
	}
	out := make([]Call, len(rounds))
	for i := range rounds {
		r := &rounds[i]
		lp := make([]float32, len(r.GenerationLogProbs))
		for j, v := range r.GenerationLogProbs {
			lp[j] = float32(v)
		}
		out[i] = Call{PromptTokenIDs: nonNil(r.PromptTokenIDs), GenerationTokenIDs: nonNil(r.GenerationTokenIDs), GenerationLogProbs: lp}
	}
	return out
}

func nonNil(v []int32) []int32 {
	if v == nil {
		return []int32{}
	}
	return v
}

// toolsJSON is the row's tools as Chat Completions function tools, in JSON ("[]" for none:
// TRL json.loads a tools string, and "" fails).
func toolsJSON(task *dataset.Task) (string, error) {
	if task == nil || task.Params == nil || len(task.Params.Tools) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal(agent.ChatTools(task.Params.Tools))
	return string(b), err
}

// promptLen is the number of messages before the model's first answer: the prompt a
// preference pair shares.
func promptLen(msgs []storedMessage) int {
	for i := range msgs {
		if msgs[i].Role == openai.ChatMessageRoleAssistant {
			return i
		}
	}
	return len(msgs)
}

// reasonings is each round's reasoning.
func reasonings(rounds []storedRound) []string {
	out := make([]string, len(rounds))
	for i := range rounds {
		out[i] = rounds[i].Reasoning
	}
	return out
}

// contiguous reports whether every model call with generated ids has prompt ids that begin
// with the prompt and generated ids of the call before it that had generated ids, as NeMo
// RL's nemo_gym postprocessing asserts; calls without generated ids are skipped, as it skips
// them, and so is a trajectory without token ids.
func contiguous(rounds []storedRound) bool {
	var seen []int32
	for i := range rounds {
		r := &rounds[i]
		if len(r.GenerationTokenIDs) == 0 {
			continue
		}
		if len(r.PromptTokenIDs) < len(seen) || !slices.Equal(r.PromptTokenIDs[:len(seen)], seen) {
			return false
		}
		seen = append(append(seen[:0:0], r.PromptTokenIDs...), r.GenerationTokenIDs...)
	}
	return true
}
