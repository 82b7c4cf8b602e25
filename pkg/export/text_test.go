package export_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/internal/hfrender"
	"github.com/rollout-dev/rollout/pkg/export"
)

const (
	qwen25      = "testdata/templates/Qwen-Qwen2.5-7B-Instruct.jinja"
	toolsQwen25 = `{"function": {"name": "count", "description": "counts", "parameters": {"type": "object", "properties": {"to": {"type": "integer"}}}}, "type": "function"}`
)

type textRow struct {
	Text  string `json:"text"`
	Spans []struct {
		Start int64 `json:"start"`
		End   int64 `json:"end"`
	} `json:"assistant_spans"`
	InputIDs *[]int32 `json:"input_ids"`
	Masks    *[]int32 `json:"assistant_masks"`
}

// span is text[start:end] in code points.
func span(text string, start, end int64) string {
	r := []rune(text)
	return string(r[start:end])
}

// The text layout of a run, by the real Qwen2.5 template: the text is the conversation as the
// template writes it (written out here by hand from the template's rules), each answer's span
// is its text and end-of-turn after the generation prompt, and nothing of the system, user or
// tool messages is in a span. A run without token ids has no token columns; in a
// --capture-tokens run every row has the ids with the mask 1 exactly on the generated ids, and
// a rollout without one sequence of ids is left out.
func TestTextLayout(t *testing.T) {
	dir := writeRun(t, 3, baseRun)
	out := filepath.Join(t.TempDir(), "text.jsonl")
	rep := exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatSFT, Layout: export.LayoutText, ChatTemplate: qwen25, Output: out})
	rows := readJSONL[textRow](t, out)
	if len(rows) != 8 || rep.Rows != 8 {
		t.Fatalf("%d rows, report %+v", len(rows), rep)
	}
	system := "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n" +
		"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" + toolsQwen25 + "\n</tools>\n\n" +
		"For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n" +
		"<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
	call := "<tool_call>\n{\"name\": \"count\", \"arguments\": {\"to\": 0}}\n</tool_call><|im_end|>\n"
	answer := "Done: 0 (repeat 0).<|im_end|>\n"
	want := system + "<|im_start|>user\nCount to 0.<|im_end|>\n<|im_start|>assistant\n" + call +
		"<|im_start|>user\n<tool_response>\n1..0\n</tool_response><|im_end|>\n<|im_start|>assistant\n" + answer
	r := rows[0]
	if r.Text != want {
		t.Fatalf("text:\n%q\nwant\n%q", r.Text, want)
	}
	if len(r.Spans) != 2 || span(r.Text, r.Spans[0].Start, r.Spans[0].End) != call || span(r.Text, r.Spans[1].Start, r.Spans[1].End) != answer {
		t.Fatalf("spans %+v", r.Spans)
	}
	masked := span(r.Text, 0, r.Spans[0].Start) + span(r.Text, r.Spans[0].End, r.Spans[1].Start)
	for _, s := range []string{"Be brief.", "Count to 0.", "1..0", "<|im_start|>assistant\n"} {
		if !strings.Contains(masked, s) {
			t.Errorf("%q is not in the masked text", s)
		}
	}
	for _, r := range rows {
		if r.InputIDs != nil || r.Masks != nil {
			t.Fatalf("a run without token ids has token columns: %v %v", r.InputIDs, r.Masks)
		}
	}

	markCaptured(t, dir)
	rep = exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatSFT, Layout: export.LayoutText, ChatTemplate: qwen25, Output: out, Overwrite: true})
	rows = readJSONL[textRow](t, out)
	if len(rows) != 1 || rep.Dropped[export.DropNoTokens] != 7 || rows[0].Text != want || rows[0].InputIDs == nil {
		t.Fatalf("%d rows, report %+v", len(rows), rep)
	}
	if !slices.Equal(*rows[0].InputIDs, []int32{1, 2, 3, 10, 0, 99}) || !slices.Equal(*rows[0].Masks, []int32{0, 0, 0, 1, 1, 1}) {
		t.Errorf("tokens %v mask %v", *rows[0].InputIDs, *rows[0].Masks)
	}
	// In Parquet the four columns are flat (DuckDB), and the row is the JSONL row.
	pq := filepath.Join(t.TempDir(), "text.parquet")
	exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatSFT, Layout: export.LayoutText, ChatTemplate: qwen25, Output: pq})
	cols, got := duckdbRows(t, pq)
	if len(cols) != 4 || cols["input_ids"] != "INTEGER[]" || cols["assistant_masks"] != "INTEGER[]" || cols["text"] != "VARCHAR" || len(got) != 1 {
		t.Fatalf("columns %v, %d rows", cols, len(got))
	}
	b, _ := json.Marshal(got[0])
	if a, w := normalJSON(t, b), normalJSON(t, []byte(readFileT(t, out))); a != w {
		t.Errorf("Parquet row %s\nJSONL row %s", a, w)
	}
}

// markCaptured makes the run's manifest say that it captured token ids (--capture-tokens).
func markCaptured(t *testing.T, dir string) {
	t.Helper()
	path := filepath.Join(dir, "manifest.json")
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(readFileT(t, path)), &m); err != nil {
		t.Fatal(err)
	}
	m["config"] = json.RawMessage(`{"capture_tokens": true}`)
	b, _ := json.Marshal(m)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// varied is a run whose answers have what a render can get wrong: text beside a tool call,
// two calls in one answer (two tool messages follow), non-ASCII text and arguments (spans are in
// code points), nested arguments, a number with a fraction.
var varied = []rollout{
	{task: 0, repeat: 0, reward: 1, tokens: true},
	{task: 0, repeat: 1, reward: 1, content: "Let me count — «vite».", args: `{"to":"ünïcødé ✓","opts":{"step":2.5,"tags":["a","b"],"none":null,"ok":true}}`},
	{task: 1, repeat: 0, reward: 0, parallel: true},
	{task: 1, repeat: 1, reward: 1, reasoning: "think first"},
}

// The text layout is what transformers' apply_chat_template renders from the sft export of the
// same run (python3 jinja2 as transformers sets it up, the real Qwen2.5 template), and its spans
// are the trainers' loss masks: TRL's assistant_only_loss (the {% generation %} blocks of TRL's
// Qwen2.5 training template, which begin one character earlier, at the generation prompt's
// newline) and verl's MultiTurnSFTDataset (each message rendered alone, the generation prompt
// masked), which refuses a conversation with two tool messages in a row (Qwen2.5 writes them as
// one user turn when together, two when alone).
func TestTextLayoutAsHF(t *testing.T) {
	py := hfrender.Python(t)
	dir := writeRun(t, 2, varied)
	out := t.TempDir()
	text, sft := filepath.Join(out, "text.jsonl"), filepath.Join(out, "sft.jsonl")
	exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatSFT, Layout: export.LayoutText, ChatTemplate: qwen25, Output: text})
	exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatSFT, Output: sft})
	rows := readJSONL[textRow](t, text)
	type sftRow struct {
		Messages []json.RawMessage `json:"messages"`
		Tools    string            `json:"tools"`
	}
	chats := readJSONL[sftRow](t, sft)
	if len(rows) != len(varied) || len(chats) != len(rows) {
		t.Fatalf("%d text rows, %d sft rows", len(rows), len(chats))
	}
	for i, row := range rows {
		tools := json.RawMessage(chats[i].Tools) // as written: tojson keeps the members' order
		hf, err := hfrender.Run(py, hfrender.Request{Template: qwen25, Messages: chats[i].Messages, Tools: tools})
		if err != nil {
			t.Fatal(err)
		}
		if string(hf) != row.Text {
			t.Errorf("row %d: the Go render is not transformers':\nGo: %q\nHF: %q", i, row.Text, hf)
		}
		spans := make([][2]int64, len(row.Spans))
		for k, sp := range row.Spans {
			spans[k] = [2]int64{sp.Start, sp.End}
		}
		verlRefused, problems, err := hfrender.CheckMasks(py, qwen25, chats[i].Messages, tools, row.Text, spans)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("row %d: %s", i, p)
		}
		if verlRefused != varied[i].parallel {
			t.Errorf("row %d: verl's sanity check refuses it: %v", i, verlRefused)
		}
	}
}

// A template that renders the last message otherwise (as Qwen3's drops earlier reasoning) has no
// answer spans: the rollout is left out with the reason. A float that Go would write otherwise
// than Python (1.0) leaves its rollout out too. A tokenizer_config.json's named templates and
// special tokens are used as transformers uses them.
func TestTextLayoutTemplates(t *testing.T) {
	dir := writeRun(t, 2, []rollout{{task: 0, repeat: 0, reward: 1}, {task: 1, repeat: 0, reward: 1, args: `{"to":1.0}`}})
	tmp := t.TempDir()
	lastDiffers := filepath.Join(tmp, "last.jinja")
	os.WriteFile(lastDiffers, []byte(`{% for m in messages %}{% if loop.last %}[last]{% endif %}{{ m.role }}: {{ m.content }}
{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}`), 0o644)
	rep := exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatSFT, Layout: export.LayoutText, ChatTemplate: lastDiffers, Output: filepath.Join(tmp, "a.jsonl")})
	if rep.Rows != 0 || rep.Dropped[export.DropNotPrefix] != 1 || rep.Dropped[export.DropFloat] != 1 {
		t.Errorf("report %+v", rep)
	}

	cfg := filepath.Join(tmp, "tokenizer_config.json")
	b, _ := json.Marshal(map[string]any{
		"bos_token": map[string]any{"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>",
		"chat_template": []map[string]string{
			{"name": "default", "template": "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}{{ '\\n' }}{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"},
			{"name": "tool_use", "template": "{{ bos_token }}[{{ tools | length }} tools]{% for m in messages %}{{ m.role }}: {% generation %}{{ m.content }}{% endgeneration %}{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}{{ '\\n' }}{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"},
		}})
	os.WriteFile(cfg, b, 0o644)
	out := filepath.Join(tmp, "b.jsonl")
	exportTo(t, export.Options{Dirs: []string{dir}, Format: export.FormatSFT, Layout: export.LayoutText, ChatTemplate: cfg, Output: out})
	rows := readJSONL[textRow](t, out)
	want := "<s>[1 tools]system: Be brief.\nuser: Count to 0.\nassistant: </s>\ntool: 1..0\nassistant: Done: 0 (repeat 0).</s>\n"
	if len(rows) != 1 || rows[0].Text != want {
		t.Fatalf("rows %+v, want the text %q", rows, want)
	}
	if got := span(want, rows[0].Spans[1].Start, rows[0].Spans[1].End); got != "Done: 0 (repeat 0).</s>\n" {
		t.Errorf("the answer's span is %q", got)
	}
}

// Bad templates and options are one clear error naming the file or flag, and nothing is
// written; the template is an input the output may not replace.
func TestTextLayoutErrors(t *testing.T) {
	dir := writeRun(t, 1, []rollout{{task: 0, repeat: 0, reward: 1}})
	tmp := t.TempDir()
	broken := filepath.Join(tmp, "broken.jinja")
	os.WriteFile(broken, []byte("{% for m in messages %}{{ m.content }"), 0o644)
	noTemplate := filepath.Join(tmp, "config.json")
	os.WriteFile(noTemplate, []byte(`{"eos_token": "</s>"}`), 0o644)
	raises := filepath.Join(tmp, "raises.jinja")
	os.WriteFile(raises, []byte(`{% for m in messages %}{% if m.role == 'tool' %}{{ raise_exception('tool messages are not supported') }}{% endif %}{{ m.content }}{% endfor %}`), 0o644)
	tpl := filepath.Join(tmp, "chat.jinja")
	os.WriteFile(tpl, []byte("{% for m in messages %}{{ m.content }}{% endfor %}"), 0o644)
	for _, tc := range []struct {
		name   string
		opt    export.Options
		output string
		want   string
	}{
		{"no template", export.Options{Layout: export.LayoutText}, "", "--layout text renders each conversation with the model's chat template: give it with --chat-template FILE"},
		{"template without layout", export.Options{ChatTemplate: tpl}, "", "--chat-template is for --format sft --layout text"},
		{"missing", export.Options{Layout: export.LayoutText, ChatTemplate: filepath.Join(tmp, "nope.jinja")}, "", "--chat-template: open " + filepath.Join(tmp, "nope.jinja")},
		{"syntax", export.Options{Layout: export.LayoutText, ChatTemplate: broken}, "", "--chat-template " + broken + ": template \"default\""},
		{"no chat_template", export.Options{Layout: export.LayoutText, ChatTemplate: noTemplate}, "", "--chat-template " + noTemplate + ": a JSON file without chat_template"},
		{"raises", export.Options{Layout: export.LayoutText, ChatTemplate: raises}, "", "--chat-template " + raises + ": task t0 repeat 0: "},
		{"output is the template", export.Options{Layout: export.LayoutText, ChatTemplate: tpl, Overwrite: true}, tpl, "-o " + tpl},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			opt := tc.opt
			opt.Dirs, opt.Format, opt.Output = []string{dir}, export.FormatSFT, filepath.Join(out, "x.jsonl")
			if tc.output != "" {
				opt.Output = tc.output
			}
			before, _ := os.ReadFile(tpl)
			_, err := export.Run(context.Background(), opt)
			var ie *export.InputError
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ie) {
				t.Fatalf("error %v, want an input error with %q", err, tc.want)
			}
			if left, _ := os.ReadDir(out); len(left) != 0 {
				t.Errorf("left behind: %v", left)
			}
			if after, _ := os.ReadFile(tpl); string(after) != string(before) {
				t.Error("the template was changed")
			}
		})
	}
}
