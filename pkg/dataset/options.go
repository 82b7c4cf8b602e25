package dataset

import (
	"bytes"
	"encoding/json"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// ResponsesKeys are the members of responses_create_params that NeMo Gym's
// NeMoGymResponseCreateParamsNonStreaming (nemo_gym/openai_utils.py) declares. It is a pydantic
// model with extra="forbid": a resource server built on NeMo Gym answers 422 to a /verify whose
// responses_create_params has any other member. The first 23 come from the OpenAI
// ResponseCreateParams copy of every release; the rest were added later "to mirror the SDK
// request schema".
var ResponsesKeys = map[string]bool{
	"background": true, "include": true, "input": true, "instructions": true,
	"max_output_tokens": true, "max_tool_calls": true, "metadata": true, "model": true,
	"parallel_tool_calls": true, "previous_response_id": true, "prompt": true, "reasoning": true,
	"service_tier": true, "store": true, "temperature": true, "text": true, "tool_choice": true,
	"tools": true, "top_logprobs": true, "top_p": true, "truncation": true, "user": true,
	"stream": true,
	// later additions
	"context_management": true, "conversation": true, "moderation": true, "prompt_cache_key": true,
	"prompt_cache_retention": true, "safety_identifier": true, "stream_options": true,
}

// notChatOptions are members that a row cannot set in a chat request: rollout writes them
// itself in every call (the conversation, the tools, one answer, no stream).
var notChatOptions = map[string]bool{"model": true, "messages": true, "tools": true, "functions": true, "stream": true, "n": true}

// ChatOptions is the row's own request options for a Chat Completions endpoint, as one JSON
// object to merge over each request (nil when there are none):
//   - every member of responses_create_params that is not a Responses field (ResponsesKeys),
//     as it is: top_k, min_p, stop, presence_penalty, chat_template_kwargs, ...;
//   - the members of "extra_body" at the top level, as the OpenAI SDK sends its extra_body;
//   - reasoning.effort as reasoning_effort, Chat Completions' name for it.
//
// Members rollout writes itself (model, messages, tools, stream, n) are left out.
func (p *Params) ChatOptions() json.RawMessage {
	if p == nil {
		return nil
	}
	fields, err := objectFields(p.Raw, rcp)
	if err != nil {
		return nil
	}
	var out []Field
	add := func(f Field) {
		if notChatOptions[f.Key] {
			return
		}
		for i := range out {
			if out[i].Key == f.Key {
				out[i] = f
				return
			}
		}
		out = append(out, f)
	}
	var extra []Field
	for _, f := range fields {
		switch {
		case f.Key == "extra_body":
			if jsonfast.TypeName(f.Value) == "an object" {
				extra, _ = objectFields(f.Value, rcp+".extra_body")
			}
		case f.Key == "reasoning":
			if jsonfast.TypeName(f.Value) == "an object" {
				r, _ := objectFields(f.Value, rcp+".reasoning")
				if e := lookup(r, "effort"); !isNull(e) {
					add(Field{Key: "reasoning_effort", Value: e})
				}
			}
		case !ResponsesKeys[f.Key]:
			add(f)
		}
	}
	for _, f := range extra { // extra_body last: it is what the row says to send as it is
		add(f)
	}
	if len(out) == 0 {
		return nil
	}
	return AppendObject(nil, out)
}

// VerifyParams is responses_create_params as a NeMo Gym resource server takes it in /verify:
// without the members that are not Responses fields (the chat request options ChatOptions
// reads), which its pydantic model refuses. changed is false, and raw is p.Raw itself, when
// there are none.
func (p *Params) VerifyParams() (raw json.RawMessage, changed bool) {
	fields, err := objectFields(p.Raw, rcp)
	if err != nil {
		return p.Raw, false
	}
	kept := fields[:0:0]
	for _, f := range fields {
		if ResponsesKeys[f.Key] {
			kept = append(kept, f)
		}
	}
	if len(kept) == len(fields) {
		return p.Raw, false
	}
	return AppendObject(make([]byte, 0, len(p.Raw)), kept), true
}

// AppendObject appends the compact JSON object of fields, in their order, to dst.
func AppendObject(dst []byte, fields []Field) []byte {
	dst = append(dst, '{')
	for i, f := range fields {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonfast.AppendString(dst, f.Key)
		dst = append(dst, ':')
		dst = append(dst, bytes.TrimSpace(f.Value)...)
	}
	return append(dst, '}')
}

// SplitObject splits a JSON object into its members in the order written (a repeated key is a
// member each time); ok is false when raw is not an object (empty, a number, a list...). Unlike
// a row's own members, the values are copies, and raw need not be checked JSON: a malformed
// object is an error.
func SplitObject(raw json.RawMessage) (fields []Field, ok bool, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, false, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil, false, err
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, false, err
		}
		k, _ := t.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, false, err
		}
		fields = append(fields, Field{Key: k, Value: v})
	}
	if _, err := dec.Token(); err != nil {
		return nil, false, err
	}
	return fields, true, nil
}
