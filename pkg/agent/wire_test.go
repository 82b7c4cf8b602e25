package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/rollout-dev/rollout/internal/redact"
	"github.com/rollout-dev/rollout/pkg/agent"
)

// rawAnswer is a 200 whose body is body as it is.
func rawAnswer(body string) step {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, body)
	}
}

// cutAnswer is a chat completion cut off by max_tokens (finish_reason "length"), with content
// and, when args is not empty, one tool call whose arguments are args.
func cutAnswer(content, name, args string) step {
	msg := map[string]any{"role": "assistant", "content": content}
	if args != "" {
		msg["tool_calls"] = []any{map[string]any{"id": "call_cut", "type": "function",
			"function": map[string]any{"name": name, "arguments": args}}}
	}
	b, _ := json.Marshal(map[string]any{
		"id": "chatcmpl-cut", "object": "chat.completion", "created": 1, "model": "test-model",
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": "length"}},
		"usage":   map[string]any{"prompt_tokens": 30, "completion_tokens": 8, "total_tokens": 38},
	})
	return rawAnswer(string(b))
}

// A temperature or top_p of 0 reaches the endpoint as the bytes `0`, on the first attempt and
// on a retry, while the same text elsewhere in the request (a message, a tool's parameters)
// is left as it is.
func TestLiteralZeroOnTheWire(t *testing.T) {
	tools := `[{"type":"function","name":"increment","parameters":{"type":"object","properties":{},"x-defaults":{"temperature":1e-45}}}]`
	row := `{"responses_create_params":{"input":"say {\"temperature\":1e-45}","temperature":0,"top_p":0,"tools":` + tools + `}}`
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil, status(503, `{"error":{"message":"busy","type":"unavailable_error","code":503}}`), final("ok"))
	task := parseTask(t, row)
	tr := m.config(nil).Run(context.Background(), task, res.session(t, task), 7)
	if tr.Termination != agent.Completed || m.calls() != 2 {
		t.Fatalf("termination %q after %d calls (%s)", tr.Termination, m.calls(), tr.Error)
	}
	for i := range 2 {
		body := m.bodies[i]
		for _, want := range []string{`"temperature":0,`, `"top_p":0,`, `say {\"temperature\":1e-45}`, `"x-defaults":{"temperature":1e-45}`} {
			if !bytes.Contains(body, []byte(want)) {
				t.Errorf("attempt %d: the body lacks %s:\n%s", i, want, body)
			}
		}
		if n := bytes.Count(body, []byte("1e-45")); n != 2 {
			t.Errorf("attempt %d: 1e-45 %d times, want 2 (the message and the parameters):\n%s", i, n, body)
		}
	}
}

// ZeroSampling rewrites only a top-level member whose value is exactly 1e-45, and leaves
// anything that is not a JSON object alone.
func TestZeroSampling(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"temperature":1e-45,"top_p":1e-45}`, `{"temperature":0,"top_p":0}`},
		{`{ "model" : "m", "temperature" : 1e-45 }`, `{ "model" : "m", "temperature" : 0 }`},
		{`{"temperature":0.7,"top_p":1e-45}`, `{"temperature":0.7,"top_p":0}`},
		{`{"temperature":1e-450}`, `{"temperature":1e-450}`},
		{`{"temperature":"1e-45"}`, `{"temperature":"1e-45"}`},
		{`{"nested":{"temperature":1e-45}}`, `{"nested":{"temperature":1e-45}}`},
		{`{"temperature":1e-45`, `{"temperature":1e-45`},
		{`[1e-45]`, `[1e-45]`},
		{`{"temperature":0.5}`, `{"temperature":0.5}`},
	}
	for _, c := range cases {
		got, changed := agent.ZeroSampling([]byte(c.in))
		if string(got) != c.want || changed != (c.in != c.want) {
			t.Errorf("ZeroSampling(%s) = %s, %v; want %s", c.in, got, changed, c.want)
		}
	}
}

// Every real server's error body is read: the stored error is the endpoint's own message with
// its status, type and code, and the classification goes by type or code first and wording
// second (testdata/server-errors.json says where each body comes from).
func TestServerErrorBodies(t *testing.T) {
	data, err := os.ReadFile("testdata/server-errors.json")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []struct {
			Name, Termination, Class, Error string
			Status                          int
			Body                            json.RawMessage
		}
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) < 10 {
		t.Fatalf("%d cases", len(file.Cases))
	}
	for _, c := range file.Cases {
		t.Run(c.Name, func(t *testing.T) {
			body := string(c.Body)
			var s string
			if json.Unmarshal(c.Body, &s) == nil {
				body = s // a body that is not JSON
			}
			res := newFakeResource(t, nil)
			m := newFakeModel(t, nil, status(c.Status, body), status(c.Status, body), status(c.Status, body))
			task := parseTask(t, counterRow(""))
			tr := m.config(nil).Run(context.Background(), task, res.session(t, task), 1)
			if string(tr.Termination) != c.Termination || string(tr.FailureClass) != c.Class {
				t.Errorf("termination %q class %q, want %q %q", tr.Termination, tr.FailureClass, c.Termination, c.Class)
			}
			if want := "model call in round 0: " + c.Error; tr.Error != want {
				t.Errorf("error\n %q\nwant\n %q", tr.Error, want)
			}
			if strings.Contains(tr.Error, "%!") {
				t.Errorf("a formatting verb failed: %s", tr.Error)
			}
		})
	}
}

// JSON mode: an empty answer is refused, and the next request still carries an assistant
// message with a content (servers refuse one with neither content nor tool calls); the
// trajectory keeps the answer as it was, empty.
func TestJSONModeEmptyAnswerIsSent(t *testing.T) {
	tr, m, _ := runJSON(t, final(""), final(`{"success": true, "result": "2"}`))
	if tr.Termination != agent.Completed || tr.InvalidAnswers != 1 {
		t.Fatalf("termination %q invalid %d (%s)", tr.Termination, tr.InvalidAnswers, tr.Error)
	}
	req := m.request(1)
	var assistant int
	for i, msg := range req.Messages {
		if msg.Role != "assistant" {
			continue
		}
		assistant++
		if msg.Content == nil || len(msg.ToolCalls) > 0 {
			t.Fatalf("message %d: an assistant message without content: %s", i, m.bodies[1])
		}
	}
	if assistant != 1 || !bytes.Contains(m.bodies[1], []byte(`{"role":"assistant","content":" "}`)) {
		t.Fatalf("the empty answer is not sent as one space:\n%s", m.bodies[1])
	}
	for _, msg := range tr.Messages {
		if msg.Role == "assistant" && msg.Content == " " {
			t.Fatalf("the trajectory records the placeholder, not the empty answer")
		}
	}
}

// A tool result with an empty output is sent with a content too (llama.cpp refuses a
// non-assistant message without one).
func TestEmptyToolOutputIsSent(t *testing.T) {
	res := newFakeResource(t, nil)
	res.extra["increment"] = func(w http.ResponseWriter, r *http.Request) {}
	m := newFakeModel(t, nil, toolCalls(call{"c1", "increment", `{}`}), final("done"))
	task := parseTask(t, counterRow(""))
	tr := m.config(nil).Run(context.Background(), task, res.session(t, task), 1)
	if tr.Termination != agent.Completed {
		t.Fatalf("termination %q (%s)", tr.Termination, tr.Error)
	}
	if !bytes.Contains(m.bodies[1], []byte(`{"role":"tool","content":" ","tool_call_id":"c1"}`)) {
		t.Fatalf("the empty tool output is not sent as one space:\n%s", m.bodies[1])
	}
}

// An answer cut off by max_tokens ends the rollout with termination length and no failure
// class (it is verified): a cut tool call is not made and never sent back; a cut text answer
// does not count as completed. Every policy and tool mode does the same.
func TestCutOffAnswer(t *testing.T) {
	cases := []struct {
		name, policy, mode string
		step               step
		wantText, wantErr  string
	}{
		{"native tool call", agent.PolicyMulti, agent.ToolModeNative, cutAnswer("", "increment", `{"by": `), "", "round 1: the answer was cut off by max_tokens in a tool call; 1 tool call(s) not made"},
		{"native text", agent.PolicyMulti, agent.ToolModeNative, cutAnswer("The count is", "", ""), "The count is", ""},
		{"single policy", agent.PolicySingle, agent.ToolModeNative, cutAnswer("", "increment", `{"by`), "", "round 1: the answer was cut off by max_tokens in a tool call; 1 tool call(s) not made"},
		{"json mode", agent.PolicyMulti, agent.ToolModeJSON, cutAnswer(`{"tool_calls": [{"name": "incr`, "", ""), `{"tool_calls": [{"name": "incr`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := newFakeResource(t, nil)
			first := toolCalls(call{"c1", "increment", `{"by": 1}`})
			if c.mode == agent.ToolModeJSON {
				first = final(`{"tool_calls": [{"name": "increment", "arguments": {"by": 1}}]}`)
			}
			m := newFakeModel(t, nil, first, c.step, final("never asked"))
			task := parseTask(t, counterRow(""))
			cfg := m.config(nil)
			cfg.Policy, cfg.ToolMode = c.policy, c.mode
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			tr := cfg.Run(context.Background(), task, res.session(t, task), 1)
			if tr.Termination != agent.Length || tr.FailureClass != "" || tr.Error != c.wantErr {
				t.Fatalf("termination %q class %q error %q", tr.Termination, tr.FailureClass, tr.Error)
			}
			if m.calls() != 2 || len(tr.Rounds) != 2 || tr.Rounds[1].FinishReason != "length" || len(tr.Rounds[1].ToolCalls) != 0 {
				t.Fatalf("%d model calls, rounds %+v", m.calls(), tr.Rounds)
			}
			if calls, _, _ := tr.ToolCalls(); calls != 1 || len(res.log()) != 2 { // seed + the first call
				t.Fatalf("%d tool calls, resource server saw %+v", calls, res.log())
			}
			if tr.FinalText != c.wantText {
				t.Fatalf("final text %q, want %q", tr.FinalText, c.wantText)
			}
			last := tr.Messages[len(tr.Messages)-1]
			if last.Role != "assistant" || len(last.ToolCalls) != 0 || last.Content != c.wantText {
				t.Fatalf("last message %+v", last)
			}
			if tr.Usage.CompletionTokens != 5+8 {
				t.Fatalf("usage %+v", tr.Usage)
			}
		})
	}
}

// JSON mode asks the endpoint for grammar-constrained answers: a json_schema response_format
// built from the offered tools, with no if/then/else. The schema accepts exactly the answers
// the agent accepts for these tools (checked with a JSON Schema validator), so a server that
// enforces it can only produce valid answers.
func TestJSONModeResponseFormat(t *testing.T) {
	_, m, _ := runJSON(t, final(`{"success": true, "result": "2"}`))
	raw := m.rawBody(0)["response_format"]
	var rf struct {
		Type       string `json:"type"`
		JSONSchema struct {
			Name   string          `json:"name"`
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil || rf.Type != "json_schema" || rf.JSONSchema.Name == "" {
		t.Fatalf("response_format %s (%v)", raw, err)
	}
	if bytes.Contains(rf.JSONSchema.Schema, []byte(`"if"`)) {
		t.Fatalf("the schema uses if/then/else: %s", rf.JSONSchema.Schema)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(rf.JSONSchema.Schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("format.json", doc); err != nil {
		t.Fatal(err)
	}
	schema, err := c.Compile("format.json")
	if err != nil {
		t.Fatalf("the schema does not compile: %v\n%s", err, rf.JSONSchema.Schema)
	}
	answers := []struct {
		text  string
		valid bool
	}{
		{`{"tool_calls": [{"name": "increment", "arguments": {"by": 2}}]}`, true},
		{`{"tool_calls": [{"name": "get_count", "arguments": {}}, {"name": "increment", "arguments": {}}], "reasoning": "x"}`, true},
		{`{"success": true, "result": {"count": 2}, "reasoning": "done"}`, true},
		{`{"success": false, "result": null}`, true},
		{`{"tool_calls": [{"name": "decrement", "arguments": {}}]}`, false},
		{`{"tool_calls": [{"name": "increment", "arguments": {"by": "two"}}]}`, false},
		{`{"tool_calls": []}`, false},
		{`{"tool_calls": [{"name": "increment"}]}`, false},
		{`{"success": true}`, false},
		{`{"result": "2", "extra": 1, "success": true}`, false},
	}
	for _, a := range answers {
		var v any
		if err := json.Unmarshal([]byte(a.text), &v); err != nil {
			t.Fatal(err)
		}
		if err := schema.Validate(v); (err == nil) != a.valid {
			t.Errorf("%s: valid %v, want %v (%v)", a.text, err == nil, a.valid, err)
		}
		_, perr := agent.ParseJSONAnswer(a.text)
		if a.valid && perr != nil {
			t.Errorf("%s: the schema accepts what the agent refuses: %v", a.text, perr)
		}
	}
	// Native mode sends no response_format.
	res := newFakeResource(t, nil)
	nm := newFakeModel(t, nil, final("ok"))
	task := parseTask(t, counterRow(""))
	nm.config(nil).Run(context.Background(), task, res.session(t, task), 1)
	if v, ok := nm.rawBody(0)["response_format"]; ok {
		t.Fatalf("native mode sent response_format %s", v)
	}
}

// The record's message is written from the endpoint's error parts (message, type, code) and,
// for an answer that is not a chat completion, from its first bytes: a key echoed in any of
// them is redacted.
func TestEndpointErrorPartsRedacted(t *testing.T) {
	const key = "sk-test-0123456789abcdef"
	bodies := []struct {
		status int
		body   string
	}{
		{401, `{"error":{"message":"bad key ` + key + `","type":"auth ` + key + `","code":"` + key + `"}}`},
		{404, `{"object":"error","message":"no model for ` + key + `","type":"NotFoundError","code":404}`},
		{400, `{"detail":"key ` + key + ` refused"}`},
		{200, `Bearer ` + key + ` is not JSON`},
	}
	for _, b := range bodies {
		res := newFakeResource(t, nil)
		m := newFakeModel(t, nil, status(b.status, b.body))
		task := parseTask(t, counterRow(""))
		cfg := m.config(nil)
		cfg.Model = agent.RedactModel(cfg.Model, key)
		tr := cfg.Run(context.Background(), task, res.session(t, task), 1)
		if tr.Error == "" || strings.Contains(tr.Error, key) || !strings.Contains(tr.Error, redact.Placeholder) {
			t.Errorf("HTTP %d %s: error %q", b.status, b.body, tr.Error)
		}
	}
}
