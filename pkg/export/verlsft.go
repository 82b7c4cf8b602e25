package export

import (
	"encoding/json"
	"strings"

	"github.com/ardanlabs/jinja"
	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/internal/jsonfast"
)

// LayoutVerl is the sft layout that verl's multi-turn SFT trainer reads (--layout verl).
const LayoutVerl = "verl"

// VerlSFTRow is a conversation as verl's MultiTurnSFTDataset reads its Parquet files
// (--format sft --layout verl): messages only. verl hands the tools column to the chat template
// as the rows hold it, and Parquet cannot hold JSON schemas as the dicts transformers wants
// (a struct column has every member of every schema, null where a schema lacks it, and tojson
// writes the nulls); so the tools block is written into the system message, as the template
// writes it, and there is no tools column. Tool-call arguments are JSON text as Python's
// json.dumps writes the object (what a template's tojson of it writes), which templates that
// write string arguments as they are (Qwen3's) render as the object.
type VerlSFTRow struct {
	Messages []OpenAIMessage `parquet:"messages,list" json:"messages"`
}

// Reasons a rollout has no verl row.
const (
	DropVerlTools  = "the chat template does not write the tools block where a system message's text goes (verl: the tools cannot be folded into the system message)"
	DropVerlCheck  = "verl's MultiTurnSFTDataset refuses it: the messages rendered one by one are not the whole conversation's render (sanity_check), as with two tool messages in a row"
	DropVerlRender = "verl would render it otherwise than the model saw it (the template writes string arguments as a JSON string, as Qwen2.5's does)"
	DropVerlMask   = "verl would train on other text than the model's answers (the task's own assistant messages)"
)

// tojsonTemplate writes a value as the templates' tojson writes it.
var tojsonTemplate = func() *jinja.Template {
	t, err := jinja.Compile("{{ v | tojson }}")
	if err != nil {
		panic(err)
	}
	return t
}()

// pythonJSON is a JSON value written as Python's json.dumps writes it (", " and ": ", non-ASCII
// as it is).
func pythonJSON(raw []byte) (string, error) {
	v, err := jsonValue(raw)
	if err != nil {
		return "", err
	}
	return tojsonTemplate.RenderValues(map[string]jinja.Value{"v": v})
}

// verlSentinel stands for the system message's text while the template renders around it.
const verlSentinel = "\x00rollout-system\x00"

func (e *exporter) verlSFTRow(ro *rollout) (*VerlSFTRow, string, error) {
	row, why, err := e.textRow(ro)
	if row == nil || err != nil {
		return nil, why, err
	}
	msgs, prompt, tools, _, _ := e.sftMessages(ro)
	out := make([]OpenAIMessage, 0, len(msgs)+1)
	for _, m := range msgs {
		o := OpenAIMessage{Role: m.Role, Content: m.Content, ToolCalls: []ToolCall[ArgsText]{}, ToolCallID: m.ToolCallID, ReasoningContent: m.ReasoningContent}
		for _, tc := range m.ToolCalls {
			args, err := pythonJSON([]byte(tc.Function.Arguments))
			if err != nil {
				return nil, DropFloat, nil
			}
			o.ToolCalls = append(o.ToolCalls, ToolCall[ArgsText]{ID: tc.ID, Type: tc.Type, Function: Function[ArgsText]{Name: tc.Function.Name, Arguments: ArgsText(args)}})
		}
		out = append(out, o)
	}
	if tools != "[]" {
		var why string
		if out, why = e.foldTools(msgs[:prompt], tools, out, prompt); why != "" {
			return nil, why, nil
		}
	}
	text, trainable, err := e.verlRender(out)
	switch {
	case err != nil || text == "":
		return nil, DropVerlCheck, nil
	case text != row.Text:
		return nil, DropVerlRender, nil
	}
	if len(trainable) != len(row.AssistantSpans) {
		return nil, DropVerlMask, nil
	}
	for k, s := range trainable {
		if s != row.AssistantSpans[k] {
			return nil, DropVerlMask, nil
		}
	}
	return &VerlSFTRow{Messages: out}, "", nil
}

// foldTools writes the tools block into the system message of out (inserted when there is
// none): the text that, rendered as a system message without tools, is what the template renders
// with them. It is found on the task's prompt (its first n messages, msgs): the prompt rendered
// with the tools, less what the template renders around a sentinel in the system message's
// place.
func (e *exporter) foldTools(msgs []ChatMessage, tools string, out []OpenAIMessage, n int) ([]OpenAIMessage, string) {
	ct := e.template
	raw := make([]json.RawMessage, len(msgs))
	for i := range msgs {
		raw[i], _ = jsonfast.Marshal(&msgs[i])
	}
	want, err := ct.Render(raw, json.RawMessage(tools), false)
	if err != nil {
		return nil, DropVerlTools
	}
	if len(out) == 0 || out[0].Role != openai.ChatMessageRoleSystem {
		out = append([]OpenAIMessage{{Role: openai.ChatMessageRoleSystem, ToolCalls: []ToolCall[ArgsText]{}}}, out...)
		n++
	}
	out[0].Content = verlSentinel
	around, err := ct.Render(rawMessages(out[:n]), nil, false)
	if err != nil {
		return nil, DropVerlTools
	}
	before, after, ok := strings.Cut(around, verlSentinel)
	if !ok || strings.Contains(after, verlSentinel) || !strings.HasPrefix(want, before) || !strings.HasSuffix(want, after) || len(want) < len(before)+len(after) {
		return nil, DropVerlTools
	}
	out[0].Content = want[len(before) : len(want)-len(after)]
	return out, ""
}

// rawMessages is each message as the JSON a Parquet reader (pandas) gives verl: every member,
// null where there is none.
func rawMessages(msgs []OpenAIMessage) []json.RawMessage {
	out := make([]json.RawMessage, len(msgs))
	for i := range msgs {
		out[i], _ = jsonfast.Marshal(&msgs[i])
	}
	return out
}

// verlRender renders msgs as verl's MultiTurnSFTDataset (verl/utils/dataset/multiturn_sft_dataset.py,
// __getitem__ and _process_single_message) does, on text rather than tokens: each message
// rendered alone with no tools, the template's default system prompt (what an empty user
// message renders before it) cut from every later message that is not a system one, each
// assistant message trainable but for the generation prompt; the spans are in code points.
// text is "" when the pieces are not the whole conversation's render (verl's sanity_check
// raises).
func (e *exporter) verlRender(msgs []OpenAIMessage) (string, []Span, error) {
	ct := e.template
	if e.verl == nil {
		p, err := verlPrompts(ct)
		if err != nil {
			return "", nil, err
		}
		e.verl = p
	}
	system, generation := e.verl.system, e.verl.generation
	if !e.verl.ok {
		return "", nil, nil
	}
	raw := rawMessages(msgs)
	var text strings.Builder
	var trainable []Span
	at := int64(0)
	for i := range raw {
		piece, err := ct.Render(raw[i:i+1], nil, false)
		if err != nil {
			return "", nil, err
		}
		if i != 0 && msgs[i].Role != openai.ChatMessageRoleSystem {
			if len(piece) < len(system) {
				return "", nil, nil
			}
			piece = piece[len(system):]
		}
		n := int64(len([]rune(piece)))
		if msgs[i].Role == openai.ChatMessageRoleAssistant {
			trainable = append(trainable, Span{Start: at + int64(generation), End: at + n})
		}
		text.WriteString(piece)
		at += n
	}
	whole, err := ct.Render(raw, nil, false)
	if err != nil || whole != text.String() {
		return "", nil, err
	}
	return whole, trainable, nil
}

// verlPromptsOf is what verl finds of a template before it reads a row
// (verl/utils/chat_template.py, extract_system_prompt_and_generation): the default system
// prompt (what one empty user message renders beyond what a second one adds) and the generation
// prompt's length in code points; ok is false when the renders do not allow them.
type verlPromptsOf struct {
	system     string
	generation int
	ok         bool
}

func verlPrompts(ct *ChatTemplate) (*verlPromptsOf, error) {
	empty := []json.RawMessage{json.RawMessage(`{"role":"user","content":""}`)}
	one, err := ct.Render(empty, nil, false)
	if err != nil {
		return nil, err
	}
	two, err := ct.Render(append(empty, empty[0]), nil, false)
	if err != nil {
		return nil, err
	}
	prompted, err := ct.Render(empty, nil, true)
	if err != nil {
		return nil, err
	}
	if len(two) < len(one) || len(one) < len(two)-len(one) || !strings.HasPrefix(prompted, one) {
		return &verlPromptsOf{}, nil
	}
	return &verlPromptsOf{system: one[:len(one)-(len(two)-len(one))], generation: len([]rune(prompted[len(one):])), ok: true}, nil
}
