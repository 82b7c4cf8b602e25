package agent

import (
	"encoding/json"
	"strconv"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// plainTrajectory is Trajectory without its MarshalJSON method: encoding/json's encoding by
// reflection, the reference that MarshalJSON gives byte for byte.
type plainTrajectory Trajectory

// MarshalJSON encodes the trajectory exactly as encoding/json encodes its fields (the same
// bytes as before it had this method), in one pass without reflection: the runner marshals
// one trajectory per rollout, and encoding/json spent most of that time in go-openai's
// per-message MarshalJSON and in compacting what it returned. Calling it directly (rather
// than through json.Marshal, which compacts a Marshaler's output once more) is the fast way.
func (t *Trajectory) MarshalJSON() ([]byte, error) {
	return t.AppendJSON(make([]byte, 0, t.sizeHint()))
}

// AppendJSON appends MarshalJSON's encoding of the trajectory to dst.
func (t *Trajectory) AppendJSON(dst []byte) ([]byte, error) {
	if b, ok := t.appendJSON(dst); ok {
		return b, nil
	}
	// What the fast encoder does not take on (messages with content parts or a
	// function_call, numbers JSON has no form for, a step record): encoding/json's way,
	// for its bytes or its error.
	b, err := json.Marshal((*plainTrajectory)(t))
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// sizeHint is about the size of the encoding, so that it is written into one buffer.
func (t *Trajectory) sizeHint() int {
	n := 256 + len(t.Error) + messagesSize(t.Messages)
	for i := range t.Rounds {
		n += 160 + len(t.Rounds[i].FinishReason) + len(t.Rounds[i].Reasoning) + 8*len(t.Rounds[i].PromptTokenIDs) + 8*len(t.Rounds[i].GenerationTokenIDs) + 24*len(t.Rounds[i].GenerationLogProbs) + len(t.Rounds[i].TokenNote)
		for j := range t.Rounds[i].ToolCalls {
			n += 96 + len(t.Rounds[i].ToolCalls[j].CallID) + len(t.Rounds[i].ToolCalls[j].Name)
		}
	}
	return n + n/16 // escapes
}

// messagesSize is about the size of the messages' encoding.
func messagesSize(msgs []openai.ChatCompletionMessage) int {
	n := 0
	for i := range msgs {
		m := &msgs[i]
		n += 64 + len(m.Content) + len(m.ReasoningContent) + len(m.ToolCallID)
		for j := range m.ToolCalls {
			n += 64 + len(m.ToolCalls[j].ID) + len(m.ToolCalls[j].Function.Name) + len(m.ToolCalls[j].Function.Arguments)
		}
	}
	return n
}

// appendJSON is the fast encoder; ok is false when it cannot take the trajectory on.
func (t *Trajectory) appendJSON(b []byte) (_ []byte, ok bool) {
	b = append(b, `{"messages":`...)
	if b, ok = appendList(b, t.Messages, appendMessage); !ok {
		return b, false
	}
	b = append(b, `,"rounds":`...)
	if b, ok = appendList(b, t.Rounds, appendRound); !ok {
		return b, false
	}
	b = append(b, `,"usage":`...)
	b = appendUsage(b, &t.Usage)
	b = append(b, `,"termination":`...)
	b = jsonfast.AppendStringHTML(b, string(t.Termination))
	b = appendOmitEmpty(b, `,"failure_class":`, string(t.FailureClass))
	b = appendOmitEmpty(b, `,"error":`, t.Error)
	if len(t.Steps) > 0 || t.Context != nil {
		return b, false // the workflow policy's or a context strategy's record: encoding/json's
	}
	if t.InvalidAnswers != 0 {
		b = append(b, `,"invalid_answers":`...)
		b = strconv.AppendInt(b, int64(t.InvalidAnswers), 10)
	}
	return append(b, '}'), true
}

// appendList encodes xs as encoding/json encodes a slice (null when nil), each element by
// appendOne; ok is false as soon as appendOne's is.
func appendList[T any](b []byte, xs []T, appendOne func([]byte, *T) ([]byte, bool)) (_ []byte, ok bool) {
	if xs == nil {
		return append(b, "null"...), true
	}
	b = append(b, '[')
	for i := range xs {
		if i > 0 {
			b = append(b, ',')
		}
		if b, ok = appendOne(b, &xs[i]); !ok {
			return b, false
		}
	}
	return append(b, ']'), true
}

// appendMessage encodes a chat message as go-openai's MarshalJSON does, for a message of
// text and tool calls.
func appendMessage(b []byte, m *openai.ChatCompletionMessage) ([]byte, bool) {
	if m.MultiContent != nil || m.FunctionCall != nil {
		return b, false
	}
	b = append(b, `{"role":`...)
	b = jsonfast.AppendStringHTML(b, m.Role)
	b = appendOmitEmpty(b, `,"content":`, m.Content)
	b = appendOmitEmpty(b, `,"refusal":`, m.Refusal)
	b = appendOmitEmpty(b, `,"name":`, m.Name)
	b = appendOmitEmpty(b, `,"reasoning_content":`, m.ReasoningContent)
	if len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":`...)
		b, _ = appendList(b, m.ToolCalls, appendToolCall)
	}
	b = appendOmitEmpty(b, `,"tool_call_id":`, m.ToolCallID)
	return append(b, '}'), true
}

// appendOmitEmpty appends key (`,"name":`) and the string v, unless v is empty: a string
// field tagged omitempty.
func appendOmitEmpty(b []byte, key, v string) []byte {
	if v == "" {
		return b
	}
	return jsonfast.AppendStringHTML(append(b, key...), v)
}

// appendToolCall encodes a tool call of a chat message as go-openai's MarshalJSON does.
func appendToolCall(b []byte, tc *openai.ToolCall) ([]byte, bool) {
	b = append(b, '{')
	if tc.Index != nil {
		b = append(b, `"index":`...)
		b = strconv.AppendInt(b, int64(*tc.Index), 10)
		b = append(b, ',')
	}
	if tc.ID != "" {
		b = append(b, `"id":`...)
		b = jsonfast.AppendStringHTML(b, tc.ID)
		b = append(b, ',')
	}
	b = append(b, `"type":`...)
	b = jsonfast.AppendStringHTML(b, string(tc.Type))
	b = append(b, `,"function":{`...)
	if tc.Function.Name != "" {
		b = append(b, `"name":`...)
		b = jsonfast.AppendStringHTML(b, tc.Function.Name)
	}
	if tc.Function.Arguments != "" {
		if tc.Function.Name != "" {
			b = append(b, ',')
		}
		b = append(b, `"arguments":`...)
		b = jsonfast.AppendStringHTML(b, tc.Function.Arguments)
	}
	return append(b, "}}"...), true
}

func appendRound(b []byte, r *Round) ([]byte, bool) {
	var ok bool
	b = append(b, `{"index":`...)
	b = strconv.AppendInt(b, int64(r.Index), 10)
	b = append(b, `,"model_latency_ms":`...)
	if b, ok = jsonfast.AppendFloat(b, r.ModelLatencyMs); !ok {
		return b, false
	}
	b = append(b, `,"usage":`...)
	b = appendUsage(b, &r.Usage)
	b = append(b, `,"finish_reason":`...)
	b = jsonfast.AppendStringHTML(b, r.FinishReason)
	if r.Reasoning != "" {
		b = append(b, `,"reasoning":`...)
		b = jsonfast.AppendStringHTML(b, r.Reasoning)
	}
	if len(r.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":`...)
		if b, ok = appendList(b, r.ToolCalls, appendRoundCall); !ok {
			return b, false
		}
	}
	if r.Endpoint != "" {
		b = append(b, `,"endpoint":`...)
		b = jsonfast.AppendStringHTML(b, r.Endpoint)
	}
	if b, ok = appendTokens(b, r); !ok {
		return b, false
	}
	return append(b, '}'), true
}

// appendRoundCall encodes a tool call of a round.
func appendRoundCall(b []byte, c *ToolCall) ([]byte, bool) {
	b = append(b, `{"call_id":`...)
	b = jsonfast.AppendStringHTML(b, c.CallID)
	b = append(b, `,"name":`...)
	b = jsonfast.AppendStringHTML(b, c.Name)
	if c.Status != 0 {
		b = append(b, `,"status":`...)
		b = strconv.AppendInt(b, int64(c.Status), 10)
	}
	if c.Failed {
		b = append(b, `,"failed":true`...)
	}
	if c.Unreachable {
		b = append(b, `,"unreachable":true`...)
	}
	if c.TimedOut {
		b = append(b, `,"timed_out":true`...)
	}
	b = append(b, `,"latency_ms":`...)
	var ok bool
	if b, ok = jsonfast.AppendFloat(b, c.LatencyMs); !ok {
		return b, false
	}
	if c.OriginalBytes != 0 {
		b = append(b, `,"original_bytes":`...)
		b = strconv.AppendInt(b, c.OriginalBytes, 10)
	}
	return append(b, '}'), true
}

// appendTokens appends a round's token members (tokens.go), each when not empty.
func appendTokens(b []byte, r *Round) ([]byte, bool) {
	ints := func(b []byte, key string, v []int32) []byte {
		if len(v) == 0 {
			return b
		}
		b = append(b, key...)
		for i, x := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(x), 10)
		}
		return append(b, ']')
	}
	b = ints(b, `,"prompt_token_ids":[`, r.PromptTokenIDs)
	b = ints(b, `,"generation_token_ids":[`, r.GenerationTokenIDs)
	if len(r.GenerationLogProbs) > 0 {
		b = append(b, `,"generation_log_probs":[`...)
		for i, x := range r.GenerationLogProbs {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = jsonfast.AppendFloat(b, x); !ok {
				return b, false
			}
		}
		b = append(b, ']')
	}
	if r.TokenNote != "" {
		b = append(b, `,"token_note":`...)
		b = jsonfast.AppendStringHTML(b, r.TokenNote)
	}
	return b, true
}

func appendUsage(b []byte, u *Usage) []byte {
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(u.PromptTokens), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(u.CompletionTokens), 10)
	if u.CachedTokens != 0 {
		b = append(b, `,"cached_tokens":`...)
		b = strconv.AppendInt(b, int64(u.CachedTokens), 10)
	}
	if u.ReasoningTokens != 0 {
		b = append(b, `,"reasoning_tokens":`...)
		b = strconv.AppendInt(b, int64(u.ReasoningTokens), 10)
	}
	return append(b, '}')
}
