package agent_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/agent"
)

// everyMemberAnswer is an answer that sets every JSON member of go-openai's chat completion
// response, down to the last nested one, to a value that is neither null nor zero.
const everyMemberAnswer = "testdata/every-member-answer.json"

// leftToEncodingJSON are the members whose answers the direct decoder hands to encoding/json
// when they are there and not null.
var leftToEncodingJSON = []string{"prompt_filter_results", "choices[].logprobs", "choices[].message.MultiContent"}

// ownDecoders are the go-openai types in a response that decode themselves, and whose JSON
// members, as their UnmarshalJSON reads them, are still their fields' json names:
// ChatCompletionMessage decodes into a struct of its own fields and tags (and, for a content of
// parts, the same with MultiContent as "content").
var ownDecoders = []reflect.Type{reflect.TypeFor[openai.ChatCompletionMessage]()}

// responseMembers walks the members of a chat completion response as encoding/json decodes
// them: the exported fields of each struct by their json names (embedded structs flattened),
// through pointers, slices ("[]") and maps ("{}"). It calls member with each member's path and
// its values in the responses, in order (the values of a slice's members are those of each
// element), and fails the test on a type that decodes itself and is not one of ownDecoders.
func responseMembers(t *testing.T, resps []openai.ChatCompletionResponse, member func(path string, vs []reflect.Value)) {
	t.Helper()
	vs := make([]reflect.Value, len(resps))
	for i := range resps {
		vs[i] = reflect.ValueOf(&resps[i]).Elem()
	}
	unmarshaler := reflect.TypeFor[json.Unmarshaler]()
	var onPath []reflect.Type
	var value func(typ reflect.Type, vs []reflect.Value, path string)
	var fields func(typ reflect.Type, vs []reflect.Value, path string)
	value = func(typ reflect.Type, vs []reflect.Value, path string) {
		var inner []reflect.Value
		switch typ.Kind() {
		case reflect.Pointer:
			for _, v := range vs {
				if !v.IsNil() {
					inner = append(inner, v.Elem())
				}
			}
			value(typ.Elem(), inner, path)
		case reflect.Slice, reflect.Array:
			if typ.Elem().Kind() == reflect.Uint8 {
				return
			}
			for _, v := range vs {
				for i := range v.Len() {
					inner = append(inner, v.Index(i))
				}
			}
			value(typ.Elem(), inner, path+"[]")
		case reflect.Map:
			for _, v := range vs {
				for it := v.MapRange(); it.Next(); {
					inner = append(inner, it.Value())
				}
			}
			value(typ.Elem(), inner, path+"{}")
		case reflect.Struct:
			if slices.Contains(onPath, typ) {
				return
			}
			if reflect.PointerTo(typ).Implements(unmarshaler) && !slices.Contains(ownDecoders, typ) {
				t.Errorf("%s: go-openai decodes %s with its own UnmarshalJSON: check which members it reads, then add it to ownDecoders", path, typ)
			}
			onPath = append(onPath, typ)
			fields(typ, vs, path)
			onPath = onPath[:len(onPath)-1]
		}
	}
	fields = func(typ reflect.Type, vs []reflect.Value, path string) {
		for i := range typ.NumField() {
			sf := typ.Field(i)
			tag := sf.Tag.Get("json")
			name, _, _ := strings.Cut(tag, ",")
			if tag == "-" {
				continue
			}
			fvs := make([]reflect.Value, len(vs))
			for j, v := range vs {
				fvs[j] = v.Field(i)
			}
			ft := sf.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if sf.Anonymous && name == "" && ft.Kind() == reflect.Struct {
				value(sf.Type, fvs, path)
				continue
			}
			if !sf.IsExported() {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			child := name
			if path != "" {
				child = path + "." + name
			}
			member(child, fvs)
			value(sf.Type, fvs, child)
		}
	}
	value(reflect.TypeFor[openai.ChatCompletionResponse](), vs, "")
}

// anySet reports whether any of vs is set: not nil, empty or zero.
func anySet(vs []reflect.Value) bool {
	return slices.ContainsFunc(vs, func(v reflect.Value) bool { return !v.IsZero() })
}

// memberDiffs names the members where got and want differ: a value, a length, nil or not.
func memberDiffs(t *testing.T, got, want openai.ChatCompletionResponse) []string {
	t.Helper()
	var diffs []string
	responseMembers(t, []openai.ChatCompletionResponse{got, want}, func(path string, vs []reflect.Value) {
		if len(vs)%2 != 0 {
			return // below a difference in length, already named
		}
		n := len(vs) / 2
		for i := range n {
			g, w := vs[i], vs[n+i]
			same := true
			switch g.Kind() {
			case reflect.Pointer, reflect.Interface:
				same = g.IsNil() == w.IsNil()
			case reflect.Slice, reflect.Map:
				same = g.IsNil() == w.IsNil() && g.Len() == w.Len()
				if same && g.Type().Elem().Kind() == reflect.Uint8 {
					same = reflect.DeepEqual(g.Interface(), w.Interface())
				}
			case reflect.Struct:
			default:
				same = g.Equal(w)
			}
			if !same {
				diffs = append(diffs, fmt.Sprintf("%s: %#v, encoding/json's %#v", path, g, w))
			}
		}
	})
	return diffs
}

func readEveryMemberAnswer(t testing.TB) []byte {
	t.Helper()
	data, err := os.ReadFile(everyMemberAnswer)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// The every-member answer sets every JSON member of go-openai's response, so that a go-openai
// version with a new member fails here instead of the direct decoder skipping that member
// unseen; and the walk sees members down to the deepest, all unset in an empty response.
func TestEveryMemberAnswerSetsEveryMember(t *testing.T) {
	resp, err := decodeLikeGoOpenAI(readEveryMemberAnswer(t))
	if err != nil {
		t.Fatalf("%s: %v", everyMemberAnswer, err)
	}
	var paths []string
	responseMembers(t, []openai.ChatCompletionResponse{resp}, func(path string, vs []reflect.Value) {
		paths = append(paths, path)
		if !anySet(vs) {
			t.Errorf("%s leaves %s unset: set it, and teach decodeAnswer its member (or leave answers with it to encoding/json)", everyMemberAnswer, path)
		}
	})
	for _, deep := range append([]string{"id", "choices[].message.tool_calls[].function.arguments", "choices[].message.tool_calls[].index",
		"usage.completion_tokens_details.rejected_prediction_tokens", "prompt_filter_results[].content_filter_results.profanity.detected",
		"choices[].logprobs.content[].top_logprobs[].bytes", "choices[].message.MultiContent[].image_url.detail"}, leftToEncodingJSON...) {
		if !slices.Contains(paths, deep) {
			t.Errorf("the walk of the response's members misses %s; it saw %q", deep, paths)
		}
	}
	responseMembers(t, []openai.ChatCompletionResponse{{}}, func(path string, vs []reflect.Value) {
		if anySet(vs) {
			t.Errorf("an empty response sets %s", path)
		}
	})
}

// withoutMembers returns the answer without the members at paths (as responseMembers names
// them), re-encoded.
func withoutMembers(t testing.TB, data []byte, paths ...string) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	var drop func(v any, segs []string)
	drop = func(v any, segs []string) {
		obj, _ := v.(map[string]any)
		key, list := strings.CutSuffix(segs[0], "[]")
		if len(segs) == 1 {
			delete(obj, key)
			return
		}
		if !list {
			drop(obj[key], segs[1:])
			return
		}
		items, _ := obj[key].([]any)
		for _, item := range items {
			drop(item, segs[1:])
		}
	}
	for _, p := range paths {
		drop(doc, strings.Split(p, "."))
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The direct decoder decodes the every-member answer, without the members it leaves to
// encoding/json, exactly as encoding/json does, setting every member; and it hands the answer
// to encoding/json when any one of those members is there.
func TestDecodeAnswerEveryMember(t *testing.T) {
	full := readEveryMemberAnswer(t)
	if checkAnswer(t, full) {
		t.Errorf("%s: taken on, with members it leaves to encoding/json", everyMemberAnswer)
	}
	taken := withoutMembers(t, full, leftToEncodingJSON...)
	var got openai.ChatCompletionResponse
	if !agent.DecodeAnswer(taken, &got) {
		t.Fatalf("left to encoding/json: %s", taken)
	}
	want, err := decodeLikeGoOpenAI(taken)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range memberDiffs(t, got, want) {
		t.Errorf("the direct decoder gives %s", d)
	}
	responseMembers(t, []openai.ChatCompletionResponse{got}, func(path string, vs []reflect.Value) {
		left := slices.ContainsFunc(leftToEncodingJSON, func(l string) bool {
			return path == l || strings.HasPrefix(path, l+".") || strings.HasPrefix(path, l+"[]")
		})
		if !anySet(vs) && !left {
			t.Errorf("the direct decoder leaves %s unset", path)
		}
	})
	if !checkAnswer(t, taken) {
		t.Errorf("left to encoding/json: %s", taken)
	}
	for i, l := range leftToEncodingJSON {
		one := withoutMembers(t, full, slices.Delete(slices.Clone(leftToEncodingJSON), i, i+1)...)
		if checkAnswer(t, one) {
			t.Errorf("taken on with %s: %s", l, one)
		}
	}
}

// An int member is read as encoding/json reads it into an int of the platform's size: a number
// out of an int's range is left to encoding/json (whose error it is on 32-bit platforms).
func TestDecodeAnswerIntRange(t *testing.T) {
	for _, a := range []string{`{"usage":{"prompt_tokens":2147483648}}`, `{"choices":[{"index":-2147483649}]}`,
		`{"usage":{"completion_tokens_details":{"reasoning_tokens":4294967296}}}`, `{"choices":[{"message":{"tool_calls":[{"index":9223372036854775807}]}}]}`} {
		if taken := checkAnswer(t, []byte(a)); taken != (strconv.IntSize == 64) {
			t.Errorf("%s: taken on %v with %d-bit ints", a, taken, strconv.IntSize)
		}
	}
}
