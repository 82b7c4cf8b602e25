package agent

import (
	"encoding/json"
	"strconv"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// plainResponse is Response without its MarshalJSON method: encoding/json's encoding by
// reflection, the reference that MarshalJSON gives byte for byte.
type plainResponse Response

// MarshalJSON encodes the response exactly as encoding/json encodes its fields, in one pass
// without reflection: the runner encodes one per rollout, for /verify.
func (r *Response) MarshalJSON() ([]byte, error) {
	if b, ok := r.appendJSON(make([]byte, 0, r.sizeHint())); ok {
		return b, nil
	}
	// What the fast encoder does not take on (an error, annotations, numbers JSON has no form
	// for, tools or tool_choice that are not valid JSON): encoding/json's way, for its bytes or
	// its error.
	return json.Marshal((*plainResponse)(r))
}

// sizeHint is about the size of the encoding.
func (r *Response) sizeHint() int {
	n := 512 + len(r.ID) + len(r.Model) + len(r.Tools) + len(r.ToolChoice)
	if r.Instructions != nil {
		n += len(*r.Instructions)
	}
	for i := range r.Output {
		o := &r.Output[i]
		n += 96 + len(o.ID) + len(o.CallID) + len(o.Name)
		if o.Arguments != nil {
			n += len(*o.Arguments)
		}
		if o.Output != nil {
			n += len(*o.Output)
		}
		for _, c := range o.Content {
			n += 64 + len(c.Text)
		}
		for _, s := range o.Summary {
			n += 32 + len(s.Text)
		}
	}
	return n + n/16
}

func (r *Response) appendJSON(b []byte) (_ []byte, ok bool) {
	if r.Error != nil {
		return b, false
	}
	b = append(b, `{"id":`...)
	b = jsonfast.AppendStringHTML(b, r.ID)
	b = append(b, `,"created_at":`...)
	if b, ok = jsonfast.AppendFloat(b, r.CreatedAt); !ok {
		return b, false
	}
	b = append(b, `,"model":`...)
	b = jsonfast.AppendStringHTML(b, r.Model)
	b = append(b, `,"object":`...)
	b = jsonfast.AppendStringHTML(b, r.Object)
	b = append(b, `,"output":`...)
	if b, ok = appendList(b, r.Output, appendOutputItem); !ok {
		return b, false
	}
	b = append(b, `,"parallel_tool_calls":`...)
	b = strconv.AppendBool(b, r.ParallelToolCalls)
	if b, ok = appendRaw(b, `,"tool_choice":`, r.ToolChoice); !ok {
		return b, false
	}
	if b, ok = appendRaw(b, `,"tools":`, r.Tools); !ok {
		return b, false
	}
	b = append(b, `,"status":`...)
	b = jsonfast.AppendStringHTML(b, r.Status)
	b = append(b, `,"error":null,"incomplete_details":`...)
	if r.IncompleteDetails == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, `{"reason":`...)
		b = append(jsonfast.AppendStringHTML(b, r.IncompleteDetails.Reason), '}')
	}
	b = append(b, `,"instructions":`...)
	if r.Instructions == nil {
		b = append(b, "null"...)
	} else {
		b = jsonfast.AppendStringHTML(b, *r.Instructions)
	}
	for _, f := range []struct {
		key string
		v   *float64
	}{{`,"temperature":`, r.Temperature}, {`,"top_p":`, r.TopP}} {
		b = append(b, f.key...)
		if f.v == nil {
			b = append(b, "null"...)
		} else if b, ok = jsonfast.AppendFloat(b, *f.v); !ok {
			return b, false
		}
	}
	b = append(b, `,"max_output_tokens":`...)
	if r.MaxOutputTokens == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, int64(*r.MaxOutputTokens), 10)
	}
	u := &r.Usage
	b = append(b, `,"usage":{"input_tokens":`...)
	b = strconv.AppendInt(b, int64(u.InputTokens), 10)
	b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(u.InputTokensDetails.CachedTokens), 10)
	b = append(b, `},"output_tokens":`...)
	b = strconv.AppendInt(b, int64(u.OutputTokens), 10)
	b = append(b, `,"output_tokens_details":{"reasoning_tokens":`...)
	b = strconv.AppendInt(b, int64(u.OutputTokensDetails.ReasoningTokens), 10)
	b = append(b, `},"total_tokens":`...)
	b = strconv.AppendInt(b, int64(u.TotalTokens), 10)
	return append(b, "}}"...), true
}

// appendRaw appends key and a json.RawMessage as encoding/json writes it: null when nil,
// compacted and HTML-escaped otherwise (ok false when it is not valid JSON).
func appendRaw(b []byte, key string, raw json.RawMessage) ([]byte, bool) {
	b = append(b, key...)
	if raw == nil {
		return append(b, "null"...), true
	}
	return jsonfast.AppendCompactHTML(b, raw)
}

// appendOutputItem encodes an output item as encoding/json does, for items without
// annotations in their text parts.
func appendOutputItem(b []byte, o *OutputItem) ([]byte, bool) {
	b = append(b, `{"type":`...)
	b = jsonfast.AppendStringHTML(b, o.Type)
	b = appendOmitEmpty(b, `,"id":`, o.ID)
	b = appendOmitEmpty(b, `,"status":`, o.Status)
	b = appendOmitEmpty(b, `,"role":`, o.Role)
	if len(o.Content) > 0 {
		b = append(b, `,"content":[`...)
		for i, c := range o.Content {
			if c.Annotations == nil || len(c.Annotations) > 0 {
				return b, false
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":`...)
			b = jsonfast.AppendStringHTML(b, c.Type)
			b = append(b, `,"text":`...)
			b = jsonfast.AppendStringHTML(b, c.Text)
			b = append(b, `,"annotations":[]}`...)
		}
		b = append(b, ']')
	}
	b = appendOmitEmpty(b, `,"call_id":`, o.CallID)
	b = appendOmitEmpty(b, `,"name":`, o.Name)
	if o.Arguments != nil {
		b = jsonfast.AppendStringHTML(append(b, `,"arguments":`...), *o.Arguments)
	}
	if o.Output != nil {
		b = jsonfast.AppendStringHTML(append(b, `,"output":`...), *o.Output)
	}
	if len(o.Summary) > 0 {
		b = append(b, `,"summary":[`...)
		for i, s := range o.Summary {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":`...)
			b = jsonfast.AppendStringHTML(b, s.Type)
			b = append(b, `,"text":`...)
			b = append(jsonfast.AppendStringHTML(b, s.Text), '}')
		}
		b = append(b, ']')
	}
	return append(b, '}'), true
}
