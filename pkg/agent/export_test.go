package agent

import (
	"encoding/json"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/dataset"
)

// Internals for the benchmarks of the external test package.
var (
	NewRound       = newRound
	HistoryMessage = historyMessage
)

// MultiRequest is the request of every round of a multi-step rollout, without its messages.
func (c *Config) MultiRequest(p *dataset.Params, seed int64) openai.ChatCompletionRequest {
	return c.multiRequest(p, seed)
}

// PlainJSON is encoding/json's encoding of t by reflection, without its MarshalJSON method.
func PlainJSON(t *Trajectory) ([]byte, error) { return json.Marshal((*plainTrajectory)(t)) }

// AppendChatRequest is the direct encoder of a chat request (json.Marshal's bytes).
var AppendChatRequest = appendChatRequest

// RequestSizeHint is the size the model client's buffer for a request's encoding starts at.
var RequestSizeHint = requestSizeHint

// ZeroSampling is the request-body rewrite that sends a temperature or top_p of 0 as a literal 0.
var ZeroSampling = zeroSampling

// DecodeAnswer is the direct decoder of a chat completion answer.
var DecodeAnswer = decodeAnswer

// PlainResponseJSON is encoding/json's encoding of r by reflection, without its MarshalJSON
// method.
func PlainResponseJSON(r *Response) ([]byte, error) { return json.Marshal((*plainResponse)(r)) }
