package agent

import (
	"context"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/internal/redact"
)

// RedactModel wraps m so that none of secrets ever comes out of it: an endpoint that echoes the
// Authorization header, in an error message or in its answer, cannot make rollout write the key
// into a record, a trajectory, the NeMo Gym JSONL or a verify request. Each secret is replaced
// by redact.Placeholder in the text of the errors and in the answers' content, reasoning and tool calls.
func RedactModel(m Model, secrets ...string) Model {
	r := redact.Replacer(secrets)
	if r == nil {
		return m
	}
	return redactingModel{m: m, r: r}
}

type redactingModel struct {
	m Model
	r *strings.Replacer
}

func (m redactingModel) CreateChatCompletion(ctx context.Context, req openai.ChatCompletionRequest) (openai.ChatCompletionResponse, error) {
	resp, err := m.m.CreateChatCompletion(ctx, req)
	if err != nil {
		// Always wrapped: the record's message is also written from the error's parts (the
		// endpoint's message, type and code), which redactedError.redact cleans too.
		err = redactedError{msg: m.r.Replace(err.Error()), err: err, r: m.r}
	}
	resp.ID, resp.Model, resp.Object = m.r.Replace(resp.ID), m.r.Replace(resp.Model), m.r.Replace(resp.Object)
	resp.SystemFingerprint = m.r.Replace(resp.SystemFingerprint)
	for i := range resp.Choices {
		resp.Choices[i].FinishReason = openai.FinishReason(m.r.Replace(string(resp.Choices[i].FinishReason)))
		msg := &resp.Choices[i].Message
		msg.Content = m.r.Replace(msg.Content)
		msg.ReasoningContent = m.r.Replace(msg.ReasoningContent)
		msg.Refusal = m.r.Replace(msg.Refusal)
		for j := range msg.MultiContent {
			msg.MultiContent[j].Text = m.r.Replace(msg.MultiContent[j].Text)
		}
		for j := range msg.ToolCalls {
			tc := &msg.ToolCalls[j]
			tc.ID = m.r.Replace(tc.ID)
			tc.Function.Name = m.r.Replace(tc.Function.Name)
			tc.Function.Arguments = m.r.Replace(tc.Function.Arguments)
		}
	}
	return resp, err
}

// redactedError is err with its text redacted; errors.As still finds the API error (for its
// status and parts), and any text written from those parts goes through redact.
type redactedError struct {
	msg string
	err error
	r   *strings.Replacer
}

func (e redactedError) Error() string { return e.msg }
func (e redactedError) Unwrap() error { return e.err }

// redact is text with the secrets replaced.
func (e redactedError) redact(text string) string { return e.r.Replace(text) }
