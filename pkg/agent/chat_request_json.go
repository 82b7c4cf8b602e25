package agent

import (
	"encoding/json"
	"strconv"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// appendChatRequest appends the bytes json.Marshal gives for req (the body go-openai sends),
// written directly: the messages and tools by the trajectory's encoders and by hand, the
// members the runner seldom sets by json.Marshal of that member alone (encoding/json writes a
// member's value as it writes the value alone). ok is false when it does not take req on (a
// message with content parts or a function call, a tool with inline parameters, a number JSON
// has no form for, a value encoding/json refuses): the caller then leaves the request to
// go-openai, for its bytes or its error.
func appendChatRequest(b []byte, req *openai.ChatCompletionRequest) (_ []byte, ok bool) {
	b = append(b, `{"model":`...)
	b = jsonfast.AppendStringHTML(b, req.Model)
	b = append(b, `,"messages":`...)
	if b, ok = appendList(b, req.Messages, appendMessage); !ok {
		return b, false
	}
	b = appendInt(b, `,"max_tokens":`, req.MaxTokens)
	b = appendInt(b, `,"max_completion_tokens":`, req.MaxCompletionTokens)
	if b, ok = appendFloat32(b, `,"temperature":`, req.Temperature); !ok {
		return b, false
	}
	if b, ok = appendFloat32(b, `,"top_p":`, req.TopP); !ok {
		return b, false
	}
	b = appendInt(b, `,"n":`, req.N)
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, req.Stream)
	if len(req.Stop) > 0 {
		b = appendStrings(append(b, `,"stop":`...), req.Stop)
	}
	if b, ok = appendFloat32(b, `,"presence_penalty":`, req.PresencePenalty); !ok {
		return b, false
	}
	if req.ResponseFormat != nil {
		if b, ok = appendMarshal(b, `,"response_format":`, req.ResponseFormat); !ok {
			return b, false
		}
	}
	if req.Seed != nil {
		b = strconv.AppendInt(append(b, `,"seed":`...), int64(*req.Seed), 10)
	}
	if b, ok = appendFloat32(b, `,"frequency_penalty":`, req.FrequencyPenalty); !ok {
		return b, false
	}
	if len(req.LogitBias) > 0 {
		if b, ok = appendMarshal(b, `,"logit_bias":`, req.LogitBias); !ok {
			return b, false
		}
	}
	if req.LogProbs {
		b = append(b, `,"logprobs":true`...)
	}
	b = appendInt(b, `,"top_logprobs":`, req.TopLogProbs)
	b = appendOmitEmpty(b, `,"user":`, req.User)
	if len(req.Functions) > 0 {
		if b, ok = appendMarshal(b, `,"functions":`, req.Functions); !ok {
			return b, false
		}
	}
	if req.FunctionCall != nil {
		if b, ok = appendAny(b, `,"function_call":`, req.FunctionCall); !ok {
			return b, false
		}
	}
	if len(req.Tools) > 0 {
		b = append(b, `,"tools":`...)
		if b, ok = appendList(b, req.Tools, appendTool); !ok {
			return b, false
		}
	}
	if req.ToolChoice != nil {
		if b, ok = appendAny(b, `,"tool_choice":`, req.ToolChoice); !ok {
			return b, false
		}
	}
	if req.StreamOptions != nil {
		if b, ok = appendMarshal(b, `,"stream_options":`, req.StreamOptions); !ok {
			return b, false
		}
	}
	if req.ParallelToolCalls != nil {
		if b, ok = appendAny(b, `,"parallel_tool_calls":`, req.ParallelToolCalls); !ok {
			return b, false
		}
	}
	if req.Store {
		b = append(b, `,"store":true`...)
	}
	b = appendOmitEmpty(b, `,"reasoning_effort":`, req.ReasoningEffort)
	if len(req.Metadata) > 0 {
		if b, ok = appendMarshal(b, `,"metadata":`, req.Metadata); !ok {
			return b, false
		}
	}
	if req.Prediction != nil {
		if b, ok = appendMarshal(b, `,"prediction":`, req.Prediction); !ok {
			return b, false
		}
	}
	if len(req.ChatTemplateKwargs) > 0 {
		if b, ok = appendMarshal(b, `,"chat_template_kwargs":`, req.ChatTemplateKwargs); !ok {
			return b, false
		}
	}
	b = appendOmitEmpty(b, `,"service_tier":`, string(req.ServiceTier))
	b = appendOmitEmpty(b, `,"verbosity":`, req.Verbosity)
	b = appendOmitEmpty(b, `,"safety_identifier":`, req.SafetyIdentifier)
	if len(req.GuidedChoice) > 0 {
		b = appendStrings(append(b, `,"guided_choice":`...), req.GuidedChoice)
	}
	return append(b, '}'), true
}

// appendInt appends key and v unless v is 0: an int field tagged omitempty.
func appendInt(b []byte, key string, v int) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendInt(append(b, key...), int64(v), 10)
}

// appendFloat32 appends key and v unless v is 0: a float32 field tagged omitempty; ok is false
// for NaN and ±Inf.
func appendFloat32(b []byte, key string, v float32) ([]byte, bool) {
	if v == 0 {
		return b, true
	}
	return jsonfast.AppendFloat32(append(b, key...), v)
}

// appendStrings appends a list of strings.
func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonfast.AppendStringHTML(b, s)
	}
	return append(b, ']')
}

// appendMarshal appends key and json.Marshal(v); ok is false when encoding/json refuses v.
func appendMarshal(b []byte, key string, v any) ([]byte, bool) {
	data, err := json.Marshal(v)
	if err != nil {
		return b, false
	}
	return append(append(b, key...), data...), true
}

// appendAny appends key and a value of an interface member: a string, a bool or a
// json.RawMessage directly, anything else by json.Marshal.
func appendAny(b []byte, key string, v any) ([]byte, bool) {
	switch x := v.(type) {
	case string:
		return jsonfast.AppendStringHTML(append(b, key...), x), true
	case bool:
		return strconv.AppendBool(append(b, key...), x), true
	case json.RawMessage:
		if len(x) > 0 {
			n := len(b)
			if b, ok := jsonfast.AppendCompactHTML(append(b, key...), x); ok {
				return b, true
			}
			b = b[:n]
		}
	}
	return appendMarshal(b, key, v)
}

// appendTool encodes a tool as go-openai's MarshalJSON does (a map, so "function" comes before
// "type"), for a tool without inline parameters.
func appendTool(b []byte, t *openai.Tool) ([]byte, bool) {
	if len(t.Parameters) > 0 {
		return b, false
	}
	b = append(b, '{')
	if f := t.Function; f != nil {
		b = append(b, `"function":{"name":`...)
		b = jsonfast.AppendStringHTML(b, f.Name)
		b = appendOmitEmpty(b, `,"description":`, f.Description)
		if f.Strict {
			b = append(b, `,"strict":true`...)
		}
		var ok bool
		if b, ok = appendAny(b, `,"parameters":`, f.Parameters); !ok {
			return b, false
		}
		b = append(b, "},"...)
	}
	b = append(b, `"type":`...)
	b = jsonfast.AppendStringHTML(b, string(t.Type))
	return append(b, '}'), true
}
