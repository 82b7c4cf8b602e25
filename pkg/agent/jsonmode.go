package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/dataset"

	"github.com/rollout-dev/rollout/pkg/record"
)

// Tool modes: how the tools reach the model.
const (
	// ToolModeNative offers the tools in the request's "tools" and reads the answer's
	// tool_calls (the default).
	ToolModeNative = "native"
	// ToolModeJSON is for endpoints without native tool calling (one answer format for both a
	// tool call and the final answer): no tools are sent; the system prompt describes them and the response format,
	// and every answer must be ONE JSON object, {"tool_calls": [{"name", "arguments"}]} or a
	// final {"success", "result", "reasoning"}, validated against answerSchema. Tool results
	// come back as a user message of <tool_response> blocks.
	ToolModeJSON = "json"
)

// DefaultMaxInvalidAnswers is how many invalid JSON-mode answers in a row end a rollout (or,
// under the workflow policy, a step attempt) with invalid_output.
const DefaultMaxInvalidAnswers = 3

// answerSchemaText is the JSON Schema of a JSON-mode answer. if/then/else (rather than oneOf)
// keeps the errors to the form the answer chose: an object with "tool_calls" is a tool call
// request, any other object a final answer.
const answerSchemaText = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "if": {"required": ["tool_calls"]},
  "then": {
    "properties": {
      "tool_calls": {
        "type": "array",
        "minItems": 1,
        "items": {
          "type": "object",
          "properties": {
            "name": {"type": "string", "minLength": 1},
            "arguments": {"type": "object"}
          },
          "required": ["name", "arguments"],
          "additionalProperties": false
        }
      },
      "reasoning": {"type": "string"}
    },
    "additionalProperties": false
  },
  "else": {
    "properties": {
      "success": {"type": "boolean"},
      "result": true,
      "reasoning": {"type": "string"}
    },
    "required": ["success", "result"],
    "additionalProperties": false
  }
}`

// answerSchema is answerSchemaText compiled, once.
var answerSchema = sync.OnceValue(func() *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(answerSchemaText))
	if err != nil {
		panic("agent: the JSON-mode answer schema: " + err.Error())
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("answer.json", doc); err != nil {
		panic("agent: the JSON-mode answer schema: " + err.Error())
	}
	return c.MustCompile("answer.json")
})

// AnswerSchema is the JSON Schema every JSON-mode answer is validated against.
func AnswerSchema() string { return answerSchemaText }

// JSONAnswer is a JSON-mode answer that passed the schema: tool calls, or a final answer.
type JSONAnswer struct {
	// ToolCalls are the calls asked for; empty for a final answer.
	ToolCalls []JSONCall
	// Success and Result are the final answer's.
	Success bool
	Result  json.RawMessage
	// Reasoning is the answer's optional explanation.
	Reasoning string
}

// JSONCall is one tool call of a JSON-mode answer.
type JSONCall struct {
	Name      string
	Arguments json.RawMessage // a JSON object
}

// Final says whether the answer is a final answer rather than tool calls.
func (a *JSONAnswer) Final() bool { return len(a.ToolCalls) == 0 }

// ResultText is the final answer's result as text: a JSON string's value, any other JSON
// value as compact JSON.
func (a *JSONAnswer) ResultText() string {
	var s string
	if json.Unmarshal(a.Result, &s) == nil {
		return s
	}
	var b bytes.Buffer
	if json.Compact(&b, a.Result) == nil {
		return b.String()
	}
	return string(a.Result)
}

// ParseJSONAnswer reads a JSON-mode answer: one JSON object (a ```json fence around it is
// tolerated), valid for AnswerSchema. The error is what the model is told: why the text is not
// JSON, or each schema violation as the validator words it, naming the JSON path
// ("at '/tool_calls': minItems: got 0, want 1").
func ParseJSONAnswer(text string) (*JSONAnswer, error) {
	s := unfence(strings.TrimSpace(text))
	if s == "" {
		return nil, errors.New("the answer is empty")
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("the answer is not valid JSON: %s", jsonErrorText(err, s))
	}
	if off := dec.InputOffset(); strings.TrimSpace(s[off:]) != "" {
		return nil, fmt.Errorf("the answer is not ONE JSON object: text follows it at byte %d: %q", off, record.Clip(strings.TrimSpace(s[off:]), 60))
	}
	if err := answerSchema().Validate(v); err != nil {
		var ve *jsonschema.ValidationError
		if !errors.As(err, &ve) {
			return nil, fmt.Errorf("the answer does not match the response format: %v", err)
		}
		var lines []string
		for _, leaf := range schemaLeaves(ve) {
			lines = append(lines, "- "+leaf)
		}
		return nil, fmt.Errorf("the answer does not match the response format:\n%s", strings.Join(lines, "\n"))
	}
	var raw struct {
		ToolCalls []struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		} `json:"tool_calls"`
		Success   bool            `json:"success"`
		Result    json.RawMessage `json:"result"`
		Reasoning string          `json:"reasoning"`
	}
	if err := json.Unmarshal([]byte(s), &raw); err != nil { // cannot happen after the schema
		return nil, fmt.Errorf("the answer does not match the response format: %v", err)
	}
	a := &JSONAnswer{Success: raw.Success, Result: raw.Result, Reasoning: raw.Reasoning}
	for _, c := range raw.ToolCalls {
		a.ToolCalls = append(a.ToolCalls, JSONCall{Name: c.Name, Arguments: c.Arguments})
	}
	return a, nil
}

// unfence drops a markdown code fence around the whole text (```json ... ``` or ``` ... ```).
func unfence(s string) string {
	if !strings.HasPrefix(s, "```") || !strings.HasSuffix(s, "```") || len(s) < 6 {
		return s
	}
	inner := strings.TrimSuffix(s[3:], "```")
	nl := strings.IndexByte(inner, '\n')
	if nl < 0 {
		return s
	}
	if lang := strings.TrimSpace(inner[:nl]); lang != "" && lang != "json" && lang != "JSON" {
		return s
	}
	return strings.TrimSpace(inner[nl+1:])
}

// jsonErrorText is a decoding error with its position.
func jsonErrorText(err error, s string) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%v (at byte %d)", se, se.Offset)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Sprintf("it ends (at byte %d) before the JSON value does", len(s))
	}
	return err.Error()
}

// schemaLeaves are the validator's innermost errors, each "at 'PATH': message".
func schemaLeaves(ve *jsonschema.ValidationError) []string {
	var out []string
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaf := jsonschema.ValidationError{SchemaURL: e.SchemaURL, InstanceLocation: e.InstanceLocation, ErrorKind: e.ErrorKind}
			out = append(out, leaf.Error())
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	return out
}

// invalidAnswerMessage is what the model is told after an invalid JSON-mode answer.
func invalidAnswerMessage(problem error) string {
	return "Your answer was not accepted: " + problem.Error() + "\n" + jsonFormatReminder
}

const jsonFormatReminder = `Answer with exactly ONE JSON object and nothing else: {"tool_calls": [{"name": "<tool name>", "arguments": {<arguments>}}]} to call tools, or {"success": true, "result": <your final answer>, "reasoning": "<why>"} when you are done.`

// jsonModeInstructions is the system prompt of JSON mode: the tools (when given) and the
// response format.
func jsonModeInstructions(tools []dataset.Tool, stepwise bool) string {
	var b strings.Builder
	b.WriteString("You call tools by answering in JSON: no native tool calling is available.\n\n")
	if stepwise {
		b.WriteString("The work goes in steps. Each step's instructions list the tools you may call in that step; call no others.\n\n")
	} else {
		b.WriteString(describeTools("Tools", tools))
		b.WriteString("\n")
	}
	b.WriteString(`Response format: answer every turn with exactly ONE JSON object and nothing else, in one of two forms.
1. To call tools: {"tool_calls": [{"name": "<tool name>", "arguments": {<the arguments, a JSON object valid for the tool's parameters>}}]}
   The calls are made in order; their results come back in <tool_response> blocks.
2. When you are done: {"success": true or false, "result": <your final answer>, "reasoning": "<a short explanation>"}
An answer of any other shape is refused and you will be asked again.`)
	return b.String()
}

// describeTools lists tools for a JSON-mode prompt under a title, one JSON object a line:
// name, description and parameters (a JSON Schema).
func describeTools(title string, tools []dataset.Tool) string {
	var b strings.Builder
	b.WriteString(title + " (one JSON object a line: name, description, parameters as a JSON Schema):\n")
	for _, t := range tools {
		params := toolParameters(t)
		line, err := json.Marshal(struct {
			Name        string          `json:"name"`
			Description string          `json:"description,omitempty"`
			Parameters  json.RawMessage `json:"parameters"`
		}{t.Name, t.Description, params})
		if err != nil { // parameters that are not JSON: the row reader refuses them
			line, _ = json.Marshal(map[string]string{"name": t.Name, "description": t.Description})
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// toolParameters is a tool's parameters schema, emptyParameters when it has none.
func toolParameters(t dataset.Tool) json.RawMessage {
	if t.Parameters == nil || string(bytes.TrimSpace(t.Parameters)) == "null" {
		return emptyParameters
	}
	return t.Parameters
}

// finalAnswerSchema is the final-answer form of a JSON-mode answer, for response_format.
const finalAnswerSchema = `{"type":"object","properties":{"success":{"type":"boolean"},"result":{},"reasoning":{"type":"string"}},"required":["success","result"],"additionalProperties":false}`

// jsonModeFormat is the response_format of a JSON-mode request offering tools: a JSON Schema
// that servers with grammar-constrained decoding (llama.cpp, vLLM, SGLang) compile into a
// grammar, so that every answer is valid JSON of one of the two forms. It is an anyOf of the
// tool-call form, whose calls are each an anyOf of one branch per tool (its name as a const,
// its parameters as the arguments' schema), and the final-answer form; no if/then/else, which
// llama.cpp's grammar compiler ignores. Without tools only the final-answer form is offered.
func jsonModeFormat(tools []dataset.Tool) *openai.ChatCompletionResponseFormat {
	var b bytes.Buffer
	b.WriteString(`{"anyOf":[`)
	if len(tools) > 0 {
		b.WriteString(`{"type":"object","properties":{"tool_calls":{"type":"array","minItems":1,"items":{"anyOf":[`)
		for i, t := range tools {
			if i > 0 {
				b.WriteByte(',')
			}
			name, _ := json.Marshal(t.Name)
			params := toolParameters(t)
			if !json.Valid(params) { // the row reader refuses such tools; never send invalid JSON
				params = emptyParameters
			}
			b.WriteString(`{"type":"object","properties":{"name":{"const":`)
			b.Write(name)
			b.WriteString(`},"arguments":`)
			b.Write(params)
			b.WriteString(`},"required":["name","arguments"],"additionalProperties":false}`)
		}
		b.WriteString(`]}},"reasoning":{"type":"string"}},"required":["tool_calls"],"additionalProperties":false},`)
	}
	b.WriteString(finalAnswerSchema)
	b.WriteString(`]}`)
	return &openai.ChatCompletionResponseFormat{
		Type:       openai.ChatCompletionResponseFormatTypeJSONSchema,
		JSONSchema: &openai.ChatCompletionResponseFormatJSONSchema{Name: "answer", Schema: json.RawMessage(b.Bytes())},
	}
}

// toolResponse is a tool result as the model sees it in structured form:
//
//	<tool_response>
//	<tool_name>X</tool_name>
//	<status>OK|ERROR</status>
//	<result>...</result>
//	</tool_response>
//
// followed, for an error, by the line "IMPORTANT: This tool call failed. Read the error,
// understand the issue, fix and retry."
func toolResponse(name, output string, failed bool) string {
	status := "OK"
	if failed {
		status = "ERROR"
	}
	s := "<tool_response>\n<tool_name>" + name + "</tool_name>\n<status>" + status + "</status>\n<result>" + output + "</result>\n</tool_response>"
	if failed {
		s += "\n" + toolFailedNote
	}
	return s
}

const toolFailedNote = "IMPORTANT: This tool call failed. Read the error, understand the issue, fix and retry."
