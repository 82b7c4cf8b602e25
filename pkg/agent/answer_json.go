package agent

import (
	"strconv"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// decodeAnswer decodes a chat completion answer as go-openai's json.Decoder does, in one pass
// without reflection and with a shallow stack, for an answer of the shape servers send: one
// object of the members go-openai knows (and any others, skipped), strings, integers, nulls.
// It returns false, having set nothing in resp, when it is not sure to read the answer as
// encoding/json does: a member of another type, a key that only encoding/json's case-folding
// would match or that is given twice, a message whose content is not a string, log
// probabilities, content filter results, anything after the object. The caller then
// decodes the answer with encoding/json, for its result or its error.
func decodeAnswer(data []byte, resp *openai.ChatCompletionResponse) bool {
	d := answerDecoder{s: jsonfast.New(data), data: data}
	d.s.SkipSpace()
	var r openai.ChatCompletionResponse
	if !d.object(topNames, func(k int) bool {
		switch k {
		case 0:
			return d.str(&r.ID)
		case 1:
			return d.str(&r.Object)
		case 2:
			return d.int64(&r.Created)
		case 3:
			return d.str(&r.Model)
		case 4:
			return d.choices(&r.Choices)
		case 5:
			return d.usage(&r.Usage)
		case 6:
			return d.str(&r.SystemFingerprint)
		case 7:
			return d.null()
		case 8:
			return d.str((*string)(&r.ServiceTier))
		}
		return false
	}) || !d.s.AtEnd() {
		return false
	}
	h := resp.Header()
	*resp = r
	resp.SetHeader(h)
	return true
}

// The member names of each object, as encoding/json matches them; a name's index is its case
// in the object's member function.
var (
	topNames      = []string{"id", "object", "created", "model", "choices", "usage", "system_fingerprint", "prompt_filter_results", "service_tier"}
	choiceNames   = []string{"index", "message", "finish_reason", "logprobs", "content_filter_results"}
	messageNames  = []string{"role", "content", "refusal", "name", "reasoning_content", "function_call", "tool_calls", "tool_call_id", "multicontent"}
	callNames     = []string{"index", "id", "type", "function"}
	functionNames = []string{"name", "arguments"}
	filterNames   = []string{"hate", "self_harm", "sexual", "violence", "jailbreak", "profanity"}
	severityNames = []string{"filtered", "severity"}
	detectedNames = []string{"filtered", "detected"}
	usageNames    = []string{"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details", "completion_tokens_details"}
	promptNames   = []string{"audio_tokens", "cached_tokens"}
	outputNames   = []string{"audio_tokens", "reasoning_tokens", "accepted_prediction_tokens", "rejected_prediction_tokens"}
)

// valueDepth is at least the depth of any value the decoder reads (a tool call's function's
// member is 5 deep), for the nesting limit of the values it skips: more is only more careful.
const valueDepth = 8

type answerDecoder struct {
	s    jsonfast.Scanner
	data []byte
}

// object reads an object at the position, calling member with the index in names of each
// member whose key is one of them (it must read the value) and skipping the others. It
// returns false for a key with an escape or a byte outside ASCII, one that matches a name only
// regardless of case, one given twice, and when member does.
func (d *answerDecoder) object(names []string, member func(k int) bool) bool {
	var seen uint32
	return d.s.Members(func(start, end int, kind jsonfast.Kind) bool {
		if kind != 0 {
			return false
		}
		key := d.data[start+1 : end-1]
		for i, n := range names {
			if string(key) == n {
				if seen&(1<<i) != 0 {
					return false
				}
				seen |= 1 << i
				return member(i)
			}
			if jsonfast.EqualFoldASCII(key, n) {
				return false
			}
		}
		return d.s.Value(valueDepth)
	})
}

// null reads a null.
func (d *answerDecoder) null() bool { return d.s.Literal("null") }

// str reads a string into dst; a null leaves dst as it is.
func (d *answerDecoder) str(dst *string) bool {
	if d.s.Peek() == 'n' {
		return d.null()
	}
	start, kind, ok := d.s.Str()
	if ok {
		*dst = jsonfast.Unquote(d.s.Since(start), kind)
	}
	return ok
}

// int64 reads an integer into dst as encoding/json reads it into an int64; a null leaves dst
// as it is.
func (d *answerDecoder) int64(dst *int64) bool { return d.integer(dst, 64) }

// int reads an integer into dst as encoding/json reads it into an int, of strconv.IntSize
// bits: a number out of its range is not read.
func (d *answerDecoder) int(dst *int) bool {
	v := int64(*dst)
	if !d.integer(&v, strconv.IntSize) {
		return false
	}
	*dst = int(v)
	return true
}

// integer reads an integer of bits bits into dst; a null leaves dst as it is.
func (d *answerDecoder) integer(dst *int64, bits int) bool {
	if d.s.Peek() == 'n' {
		return d.null()
	}
	start := d.s.Pos()
	if !d.s.Value(valueDepth) {
		return false
	}
	v, end, ok := jsonfast.ParseInt(d.data, start, bits)
	if !ok || end != d.s.Pos() {
		return false
	}
	*dst = v
	return true
}

// list reads an array at the position into *dst as encoding/json reads it into a slice: null
// leaves it nil, [] makes it empty, item reads each element into its place.
func list[T any](d *answerDecoder, dst *[]T, item func(*T) bool) bool {
	if d.s.Peek() == 'n' {
		return d.null()
	}
	out := []T{}
	if !d.s.Items(func() bool {
		out = append(out, *new(T))
		return item(&out[len(out)-1])
	}) {
		return false
	}
	*dst = out
	return true
}

func (d *answerDecoder) choices(dst *[]openai.ChatCompletionChoice) bool {
	return list(d, dst, func(c *openai.ChatCompletionChoice) bool {
		if d.s.Peek() == 'n' {
			return d.null()
		}
		return d.object(choiceNames, func(k int) bool {
			switch k {
			case 0:
				return d.int(&c.Index)
			case 1:
				return d.message(&c.Message)
			case 2:
				return d.str((*string)(&c.FinishReason))
			case 3:
				return d.null()
			case 4:
				return d.filters(&c.ContentFilterResults)
			}
			return false
		})
	})
}

// filters reads Azure's content filter results.
func (d *answerDecoder) filters(f *openai.ContentFilterResults) bool {
	if d.s.Peek() == 'n' {
		return d.null()
	}
	return d.object(filterNames, func(k int) bool {
		switch k {
		case 0:
			return d.severity(&f.Hate.Filtered, &f.Hate.Severity)
		case 1:
			return d.severity(&f.SelfHarm.Filtered, &f.SelfHarm.Severity)
		case 2:
			return d.severity(&f.Sexual.Filtered, &f.Sexual.Severity)
		case 3:
			return d.severity(&f.Violence.Filtered, &f.Violence.Severity)
		case 4:
			return d.detected(&f.JailBreak.Filtered, &f.JailBreak.Detected)
		}
		return d.detected(&f.Profanity.Filtered, &f.Profanity.Detected)
	})
}

// severity reads {"filtered", "severity"}.
func (d *answerDecoder) severity(filtered *bool, severity *string) bool {
	if d.s.Peek() == 'n' {
		return d.null()
	}
	return d.object(severityNames, func(k int) bool {
		if k == 0 {
			return d.bool(filtered)
		}
		return d.str(severity)
	})
}

// detected reads {"filtered", "detected"}.
func (d *answerDecoder) detected(filtered, detected *bool) bool {
	if d.s.Peek() == 'n' {
		return d.null()
	}
	return d.object(detectedNames, func(k int) bool {
		if k == 0 {
			return d.bool(filtered)
		}
		return d.bool(detected)
	})
}

// bool reads true or false into dst; a null leaves dst as it is.
func (d *answerDecoder) bool(dst *bool) bool {
	switch {
	case d.s.Literal("true"):
		*dst = true
	case d.s.Literal("false"):
		*dst = false
	default:
		return d.null()
	}
	return true
}

// message reads a message as go-openai's UnmarshalJSON reads one whose content is a string.
func (d *answerDecoder) message(m *openai.ChatCompletionMessage) bool {
	if d.s.Peek() == 'n' {
		return d.null()
	}
	return d.object(messageNames, func(k int) bool {
		switch k {
		case 0:
			return d.str(&m.Role)
		case 1:
			return d.str(&m.Content)
		case 2:
			return d.str(&m.Refusal)
		case 3:
			return d.str(&m.Name)
		case 4:
			return d.str(&m.ReasoningContent)
		case 5:
			if d.s.Peek() == 'n' {
				return d.null()
			}
			m.FunctionCall = new(openai.FunctionCall)
			return d.function(m.FunctionCall)
		case 6:
			return list(d, &m.ToolCalls, d.toolCall)
		case 7:
			return d.str(&m.ToolCallID)
		}
		return false
	})
}

func (d *answerDecoder) toolCall(tc *openai.ToolCall) bool {
	if d.s.Peek() == 'n' {
		return d.null()
	}
	return d.object(callNames, func(k int) bool {
		switch k {
		case 0:
			if d.s.Peek() == 'n' {
				return d.null()
			}
			var i int
			if !d.int(&i) {
				return false
			}
			tc.Index = &i
			return true
		case 1:
			return d.str(&tc.ID)
		case 2:
			return d.str((*string)(&tc.Type))
		case 3:
			return d.function(&tc.Function)
		}
		return false
	})
}

func (d *answerDecoder) function(f *openai.FunctionCall) bool {
	if d.s.Peek() == 'n' {
		return d.null()
	}
	return d.object(functionNames, func(k int) bool {
		if k == 0 {
			return d.str(&f.Name)
		}
		return d.str(&f.Arguments)
	})
}

func (d *answerDecoder) usage(u *openai.Usage) bool {
	if d.s.Peek() == 'n' {
		return d.null()
	}
	return d.object(usageNames, func(k int) bool {
		switch k {
		case 0:
			return d.int(&u.PromptTokens)
		case 1:
			return d.int(&u.CompletionTokens)
		case 2:
			return d.int(&u.TotalTokens)
		case 3:
			if d.s.Peek() == 'n' {
				return d.null()
			}
			p := new(openai.PromptTokensDetails)
			u.PromptTokensDetails = p
			return d.object(promptNames, func(k int) bool {
				if k == 0 {
					return d.int(&p.AudioTokens)
				}
				return d.int(&p.CachedTokens)
			})
		case 4:
			if d.s.Peek() == 'n' {
				return d.null()
			}
			c := new(openai.CompletionTokensDetails)
			u.CompletionTokensDetails = c
			return d.object(outputNames, func(k int) bool {
				switch k {
				case 0:
					return d.int(&c.AudioTokens)
				case 1:
					return d.int(&c.ReasoningTokens)
				case 2:
					return d.int(&c.AcceptedPredictionTokens)
				}
				return d.int(&c.RejectedPredictionTokens)
			})
		}
		return false
	})
}
