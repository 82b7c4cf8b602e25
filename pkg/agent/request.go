package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/internal/jsonfast"
	"github.com/rollout-dev/rollout/pkg/dataset"
)

// Request options: what a model call sends beyond what rollout writes itself. A run's options
// (Config.Request: --request, --extra-body and the named sampling flags; per arm in --config)
// and a row's own (dataset.Params.ChatOptions: the members of its responses_create_params that
// are not Responses fields) are JSON objects merged into the body of every Chat Completions
// request as JSON Merge Patch (RFC 7396) does: objects merge member by member, recursively; null
// removes a member; any other value replaces it. The row's options go first, the run's over
// them. The body is rewritten where answerDoer rewrites it for --capture-tokens (rewriteBody),
// after go-openai wrote it, so that any member reaches the endpoint whatever the request struct
// knows.

// reservedRequestKeys are members a run's request options may not set: rollout writes them in
// every call (the conversation, the tools, one answer read whole), and the model is --model.
var reservedRequestKeys = []string{"messages", "model", "n", "stream", "tools", "functions"}

// CheckRequest checks a run's request options: one JSON object that sets none of the members
// rollout writes itself. what names where it came from in the error ("--request").
func CheckRequest(raw json.RawMessage, what string) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	if !json.Valid(raw) {
		var v any
		err := json.Unmarshal(raw, &v)
		return fmt.Errorf("%s: not JSON: %v", what, err)
	}
	if jsonfast.TypeName(raw) != "an object" {
		return fmt.Errorf("%s: is %s, want a JSON object such as {\"top_k\": 20}", what, jsonfast.TypeName(raw))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("%s: %v", what, err)
	}
	for _, k := range reservedRequestKeys {
		if _, ok := m[k]; ok {
			return fmt.Errorf("%s: %q cannot be set: rollout writes it in every request (the model is --model)", what, k)
		}
	}
	return nil
}

// MergePatch is target with patch merged over it as JSON Merge Patch (RFC 7396) does; target's
// members keep their order, new ones follow in patch's order. A patch that is not an object
// replaces target; a target that is not an object is taken as {}.
func MergePatch(target, patch json.RawMessage) (json.RawMessage, error) {
	return mergePatch(target, patch, false)
}

// ComposePatch is the one patch that does what applying first and then second does: as
// MergePatch(first, second), but second's nulls are kept (as members whose value is null), so
// that they still remove what the body has when the composed patch is applied. A member that
// first removes (null) and second sets to an object has no such patch (the object would merge
// into the body's member instead of replacing it): that is an error naming the member.
func ComposePatch(first, second json.RawMessage) (json.RawMessage, error) {
	return mergePatch(first, second, true)
}

func mergePatch(target, patch json.RawMessage, keepNulls bool) (json.RawMessage, error) {
	pm, ok, err := dataset.SplitObject(patch)
	if err != nil {
		return nil, err
	}
	if !ok {
		return bytes.TrimSpace(patch), nil
	}
	tm, ok, err := dataset.SplitObject(target)
	if err != nil {
		return nil, err
	}
	if !ok {
		tm = nil
	}
	for _, p := range pm {
		i := slices.IndexFunc(tm, func(m dataset.Field) bool { return m.Key == p.Key })
		if string(p.Value) == "null" {
			switch {
			case keepNulls && i >= 0:
				tm[i].Value = p.Value
			case keepNulls:
				tm = append(tm, p)
			case i >= 0:
				tm = append(tm[:i], tm[i+1:]...)
			}
			continue
		}
		var base json.RawMessage
		if i >= 0 {
			base = tm[i].Value
		}
		if keepNulls && string(base) == "null" && len(p.Value) > 0 && p.Value[0] == '{' {
			return nil, fmt.Errorf("%q is removed (null) and then given members: give it once, or remove it with null after setting it", p.Key)
		}
		v, err := mergePatch(base, p.Value, keepNulls)
		if err != nil {
			return nil, err
		}
		if i >= 0 {
			tm[i].Value = v
		} else {
			tm = append(tm, dataset.Field{Key: p.Key, Value: v})
		}
	}
	return dataset.AppendObject(make([]byte, 0, len(target)+len(patch)), tm), nil
}

// CanonicalRequest is a request-options object in one canonical form (compact, members sorted
// at every level), so that the same options given in another order or spacing are the same
// run settings; nil for an empty or absent object.
func CanonicalRequest(raw json.RawMessage) (json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if m, ok := v.(map[string]any); ok && len(m) == 0 {
		return nil, nil
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // maps are written with their keys sorted
		return nil, err
	}
	return bytes.TrimSpace(b.Bytes()), nil
}

// RequestKeys lists the top-level members of request options, sorted, for messages.
func RequestKeys(raw json.RawMessage) string {
	ms, _, _ := dataset.SplitObject(raw)
	keys := make([]string, len(ms))
	for i, m := range ms {
		keys[i] = m.Key
	}
	sort.Strings(keys)
	return strings.Join(keys, ", ")
}

type patchKey struct{}

// withRequestPatches returns a context whose model calls merge patches over their request
// body, in order.
func withRequestPatches(ctx context.Context, patches []json.RawMessage) context.Context {
	if len(patches) == 0 {
		return ctx
	}
	return context.WithValue(ctx, patchKey{}, patches)
}

// requestPatches is what one rollout of a row with options rowOptions merges over each
// request, in order: the row's options, the run's, the arm's; nil when none has any.
func (c *Config) requestPatches(rowOptions json.RawMessage) []json.RawMessage {
	var ps []json.RawMessage
	for _, p := range []json.RawMessage{rowOptions, c.Request, c.ArmRequest} {
		if len(p) > 0 {
			ps = append(ps, p)
		}
	}
	return ps
}

// answerReasoning fills the first choice's reasoning from vLLM's "reasoning" member when the
// answer has no "reasoning_content" (vLLM renamed it; llama.cpp, SGLang and older vLLM write
// reasoning_content, which go-openai reads). body is the answer as read.
func answerReasoning(resp *openai.ChatCompletionResponse, body []byte) {
	if len(resp.Choices) == 0 || resp.Choices[0].Message.ReasoningContent != "" || !bytes.Contains(body, []byte(`"reasoning"`)) {
		return
	}
	var a struct {
		Choices []struct {
			Message struct {
				Reasoning json.RawMessage `json:"reasoning"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(body, &a) != nil || len(a.Choices) == 0 {
		return
	}
	var s string
	if json.Unmarshal(a.Choices[0].Message.Reasoning, &s) == nil {
		resp.Choices[0].Message.ReasoningContent = s
	}
}
