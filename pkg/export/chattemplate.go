package export

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// ChatTemplate is a model's chat template, rendered as Hugging Face transformers'
// apply_chat_template renders it (jinja with trim_blocks and lstrip_blocks, tojson as Python's
// json.dumps, raise_exception), by github.com/ardanlabs/jinja, a Go Jinja engine written to
// render chat templates byte for byte as that setup does.
type ChatTemplate struct {
	Path string
	// main renders conversations; withTools, when the tokenizer config names a "tool_use"
	// template, those that have tools (transformers' choice between the two).
	main, withTools *jinja.Template
	// special is the tokenizer config's special tokens (bos_token, eos_token...), which
	// transformers hands the template as variables.
	special map[string]jinja.Value
}

// generationTag matches {% generation %} and {% endgeneration %}: the markers with which
// training templates (TRL's) mark the assistant's text. They change nothing in the rendered
// text, and the spans are found without them.
var generationTag = regexp.MustCompile(`\{%-?\s*(end)?generation\s*-?%\}`)

// LoadChatTemplate reads a chat template: a Jinja file, or a Hugging Face tokenizer_config.json
// (its chat_template, a string or a list of named templates, and its special tokens).
func LoadChatTemplate(path string) (*ChatTemplate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--chat-template: %w", err)
	}
	ct := &ChatTemplate{Path: path, special: map[string]jinja.Value{}}
	sources := map[string]string{"default": string(data)}
	if strings.EqualFold(filepath.Ext(path), ".json") || json.Valid(data) {
		if sources, err = ct.tokenizerConfig(data); err != nil {
			return nil, fmt.Errorf("--chat-template %s: %w", path, err)
		}
	}
	for name, src := range sources {
		tmpl, err := jinja.Compile(generationTag.ReplaceAllString(src, ""))
		if err != nil {
			return nil, fmt.Errorf("--chat-template %s: template %q: %w", path, name, err)
		}
		switch name {
		case "default":
			ct.main = tmpl
		case "tool_use":
			ct.withTools = tmpl
		}
	}
	if ct.main == nil {
		ct.main, ct.withTools = ct.withTools, nil
	}
	if ct.main == nil {
		return nil, fmt.Errorf("--chat-template %s: no template named default or tool_use", path)
	}
	return ct, nil
}

// tokenizerConfig reads a tokenizer_config.json: its templates by name and its special tokens.
func (ct *ChatTemplate) tokenizerConfig(data []byte) (map[string]string, error) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("not a Jinja template, and not a tokenizer_config.json: %w", err)
	}
	raw, ok := cfg["chat_template"]
	if !ok {
		return nil, errors.New("a JSON file without chat_template (give the model's tokenizer_config.json or its .jinja template)")
	}
	sources := map[string]string{}
	var one string
	var named []struct{ Name, Template string }
	switch {
	case json.Unmarshal(raw, &one) == nil:
		sources["default"] = one
	case json.Unmarshal(raw, &named) == nil:
		for _, t := range named {
			sources[t.Name] = t.Template
		}
	default:
		return nil, errors.New("chat_template is neither a string nor a list of {name, template}")
	}
	for k, v := range cfg {
		if !strings.HasSuffix(k, "_token") {
			continue
		}
		var s string
		var added struct{ Content *string }
		if json.Unmarshal(v, &s) == nil {
			ct.special[k] = jinja.NewString(s)
		} else if json.Unmarshal(v, &added) == nil && added.Content != nil {
			ct.special[k] = jinja.NewString(*added.Content)
		}
	}
	return sources, nil
}

// render renders messages (and tools, when not None) as apply_chat_template does.
func (ct *ChatTemplate) render(messages []jinja.Value, tools jinja.Value, generationPrompt bool) (string, error) {
	data := make(map[string]jinja.Value, len(ct.special)+3)
	for k, v := range ct.special {
		data[k] = v
	}
	data["messages"] = jinja.NewList(messages)
	data["tools"] = tools
	data["add_generation_prompt"] = jinja.NewBool(generationPrompt)
	tmpl := ct.main
	if ct.withTools != nil && !tools.IsNone() {
		tmpl = ct.withTools
	}
	return tmpl.RenderValues(data)
}

// Render renders messages (JSON objects) and tools (a JSON array, or nil for none) as
// apply_chat_template does.
func (ct *ChatTemplate) Render(messages []json.RawMessage, tools json.RawMessage, generationPrompt bool) (string, error) {
	msgs, toolsValue, err := chatValues(messages, tools)
	if err != nil {
		return "", err
	}
	return ct.render(msgs, toolsValue, generationPrompt)
}

// chatValues is messages and tools (none when empty or "[]") as jinja values.
func chatValues(messages []json.RawMessage, tools json.RawMessage) ([]jinja.Value, jinja.Value, error) {
	msgs := make([]jinja.Value, len(messages))
	for i, m := range messages {
		v, err := jsonValue(m)
		if err != nil {
			return nil, jinja.Undefined(), err
		}
		msgs[i] = v
	}
	if len(tools) == 0 || string(tools) == "[]" {
		return msgs, jinja.None(), nil
	}
	v, err := jsonValue(tools)
	return msgs, v, err
}

// Span is a character range [Start, End) of a rendered text, in Unicode code points (Python's
// string indexes).
type Span struct {
	Start int64 `parquet:"start" json:"start"`
	End   int64 `parquet:"end" json:"end"`
}

// errNotPrefix says that the template renders a conversation's beginning otherwise than as the
// beginning of the whole (Qwen3's, which drops the reasoning of earlier turns, for one).
var errNotPrefix = errors.New("the chat template does not render the conversation up to an answer as the beginning of the whole")

// renderSpans renders a conversation (messages as the JSON objects the JSONL export writes,
// tools as their JSON text, "[]" for none) and finds each answer's span: for the assistant
// message i (i ≥ first), from the end of messages[:i] rendered with the generation prompt to
// the end of messages[:i+1]; the whole text must begin with both.
func (ct *ChatTemplate) renderSpans(messages []json.RawMessage, roles []string, tools string, first int) (string, []Span, error) {
	msgs, toolsValue, err := chatValues(messages, json.RawMessage(tools))
	if err != nil {
		return "", nil, err
	}
	text, err := ct.render(msgs, toolsValue, false)
	if err != nil {
		return "", nil, err
	}
	spans := []Span{}
	for i := first; i < len(msgs); i++ {
		if roles[i] != "assistant" {
			continue
		}
		before, err := ct.render(msgs[:i], toolsValue, true)
		if err != nil {
			return "", nil, err
		}
		through, err := ct.render(msgs[:i+1], toolsValue, false)
		if err != nil {
			return "", nil, err
		}
		if !strings.HasPrefix(through, before) || !strings.HasPrefix(text, through) || len(through) == len(before) {
			return "", nil, errNotPrefix
		}
		spans = append(spans, Span{Start: int64(utf8.RuneCountInString(before)), End: int64(utf8.RuneCountInString(through))})
	}
	return text, spans, nil
}

// errFloat says that a number would be written otherwise than Python writes it.
var errFloat = errors.New("a number that the Go renderer writes otherwise than Python's json.dumps (an integral or large float, such as 1.0 or 1e6)")

// jsonValue decodes JSON into jinja values, keeping each object's member order (Python's
// json.loads keeps it, and tojson writes it). A float whose Go form is not Python's repr
// (1.0 is "1" in Go) is refused: the render would differ from transformers'.
func jsonValue(data []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), errors.New("trailing data after a JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.AsDict().Set(k.(string), v)
			}
			_, err := dec.Token()
			return d, err
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			_, err := dec.Token()
			return jinja.NewList(items), err
		}
	case json.Number:
		v := jinja.FromGoValue(t)
		if v.IsFloat() && strconv.FormatFloat(v.AsFloat(), 'g', -1, 64) != pythonRepr(v.AsFloat()) {
			return jinja.Undefined(), errFloat
		}
		return v, nil
	case string:
		return jinja.NewString(t), nil
	case bool:
		return jinja.NewBool(t), nil
	case nil:
		return jinja.None(), nil
	}
	return jinja.Undefined(), fmt.Errorf("unexpected JSON token %v", tok)
}

// pythonRepr is Python's repr of a float: the shortest digits, fixed notation with at least
// one decimal from 1e-4 up to 1e16, else an exponent of at least two digits.
func pythonRepr(f float64) string {
	if a := math.Abs(f); a != 0 && (a < 1e-4 || a >= 1e16) {
		return strconv.FormatFloat(f, 'e', -1, 64)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}
