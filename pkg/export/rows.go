package export

import (
	"encoding/json"
	"slices"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/dataset"
)

// Message is a chat message in OpenAI's Chat Completions shape, as training data holds it:
// in Parquet a struct (content null for an assistant message that only calls tools).
type Message struct {
	Role       string     `parquet:"role" json:"role"`
	Content    *string    `parquet:"content,optional" json:"content"`
	ToolCalls  []ToolCall `parquet:"tool_calls,list" json:"tool_calls,omitempty"`
	ToolCallID string     `parquet:"tool_call_id,optional" json:"tool_call_id,omitempty"`
}

// ToolCall is an assistant message's tool call: arguments as a JSON string, as OpenAI writes them.
type ToolCall struct {
	ID       string   `parquet:"id" json:"id"`
	Type     string   `parquet:"type" json:"type"`
	Function Function `parquet:"function" json:"function"`
}

// Function is a tool call's function and arguments.
type Function struct {
	Name      string `parquet:"name" json:"name"`
	Arguments string `parquet:"arguments" json:"arguments"`
}

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
	Usage              agent.Usage `json:"usage"`
	PromptTokenIDs     []int32     `json:"prompt_token_ids"`
	GenerationTokenIDs []int32     `json:"generation_token_ids"`
	GenerationLogProbs []float64   `json:"generation_log_probs"`
}

// messages converts a trajectory's chat messages: text parts joined, tool calls typed
// "function"; when sft is set, a developer message is a system one (OpenAI's fine-tuning
// format knows no developer role).
func messages(in []storedMessage, sft bool) []Message {
	out := make([]Message, len(in))
	for i := range in {
		m := &in[i]
		text := m.text()
		role := m.Role
		if sft && role == openai.ChatMessageRoleDeveloper {
			role = openai.ChatMessageRoleSystem
		}
		msg := Message{Role: role, ToolCallID: m.ToolCallID}
		if text != "" || len(m.ToolCalls) == 0 {
			msg.Content = &text
		}
		if len(m.ToolCalls) > 0 {
			msg.ToolCalls = make([]ToolCall, len(m.ToolCalls))
			for j, tc := range m.ToolCalls {
				msg.ToolCalls[j] = ToolCall{ID: tc.ID, Type: "function", Function: Function{Name: tc.Function.Name, Arguments: tc.Function.Arguments}}
			}
		}
		out[i] = msg
	}
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

// toolsJSON is the row's tools as Chat Completions function tools, in JSON ("[]" for none).
func toolsJSON(task *dataset.Task) (JSONText, error) {
	if task == nil || task.Params == nil || len(task.Params.Tools) == 0 {
		return "[]", nil
	}
	b, err := json.Marshal(agent.ChatTools(task.Params.Tools))
	return JSONText(b), err
}

// promptLen is the number of messages before the model's first answer: the prompt a
// preference pair shares.
func promptLen(msgs []Message) int {
	for i, m := range msgs {
		if m.Role == openai.ChatMessageRoleAssistant {
			return i
		}
	}
	return len(msgs)
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
