// Package wire is what rollout's model client (pkg/agent) and its pool of model endpoints
// (pkg/fleet) agree on about a Chat Completions exchange: the headers rollout adds to it (the
// rollout of a request, the endpoint of an answer) and the token counts an answer's usage may
// hold. It imports no other package of rollout.
package wire

import (
	"fmt"

	openai "github.com/sashabaranov/go-openai"
)

// RolloutIDHeader is the header of every model request that names its rollout (agent.WithRolloutID
// sets it). Servers ignore it; rollout's simulator numbers the retries of a request per
// rollout with it, so that which rollout an injected error hits does not depend on timing.
const RolloutIDHeader = "X-Rollout-Id"

// EndpointHeader names, in a model answer, the endpoint of a pool that gave it (fleet.Pool sets
// it); the agent records it per round.
const EndpointHeader = "X-Rollout-Endpoint"

// ServerRootHeader marks a model request whose path is from the server's root, not from its
// OpenAI base URL: llama-server's /props, /apply-template and /tokenize (value "helper") and
// /completion (value "call"), which the token-in path of --capture-tokens sends. A pool sends
// such a request to the endpoint's base URL without its /v1, to the rollout's endpoint as any
// other of its requests; a helper request is not counted as a model call of the endpoint, nor
// its latency taken as a sample of it. Servers ignore the header.
const ServerRootHeader = "X-Rollout-Server-Root"

// The values of ServerRootHeader.
const (
	ServerRootCall   = "call"
	ServerRootHelper = "helper"
)

// MaxUsageTokens bounds each token count of one answer's usage: 10^9, a thousand times the
// longest context any model serves. A count outside [0, MaxUsageTokens] is not a count.
const MaxUsageTokens = 1_000_000_000

// UsageError is an answer whose usage holds a token count that is negative or over
// MaxUsageTokens. The rollout ends with termination invalid_output (class model_error): its
// token counts would be wrong in every sum (a run's totals, the metrics), so the answer is not
// taken.
type UsageError struct {
	Field string // "prompt_tokens", "completion_tokens", ...
	Value int
}

func (e *UsageError) Error() string {
	return fmt.Sprintf("the answer's usage has %s %d: want 0 to %d", e.Field, e.Value, MaxUsageTokens)
}

// CheckUsage is nil when every token count of u is in [0, MaxUsageTokens], else a *UsageError
// naming the first that is not.
func CheckUsage(u openai.Usage) error {
	fields := []struct {
		name string
		v    int
	}{{"prompt_tokens", u.PromptTokens}, {"completion_tokens", u.CompletionTokens}, {"total_tokens", u.TotalTokens}}
	if d := u.PromptTokensDetails; d != nil {
		fields = append(fields, struct {
			name string
			v    int
		}{"prompt_tokens_details.cached_tokens", d.CachedTokens})
	}
	if d := u.CompletionTokensDetails; d != nil {
		fields = append(fields, struct {
			name string
			v    int
		}{"completion_tokens_details.reasoning_tokens", d.ReasoningTokens})
	}
	for _, f := range fields {
		if f.v < 0 || f.v > MaxUsageTokens {
			return &UsageError{Field: f.name, Value: f.v}
		}
	}
	return nil
}
