package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/dataset"
)

func TestChatMessages(t *testing.T) {
	row := `{"responses_create_params":{"instructions":"Be brief.","input":[` +
		`{"role":"developer","content":"Use tools."},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"Weather in "},{"type":"input_text","text":"Paris and Rome?"}]},` +
		`{"type":"function_call","name":"get_weather","arguments":"{\"city\":\"Paris\"}","call_id":"c1"},` +
		`{"type":"function_call","name":"get_weather","arguments":"{\"city\":\"Rome\"}","call_id":"c2"},` +
		`{"type":"function_call_output","call_id":"c1","output":"sunny"},` +
		`{"type":"function_call_output","call_id":"c2","output":"rain"},` +
		`{"role":"assistant","content":"Let me check Oslo too."},` +
		`{"type":"function_call","name":"get_weather","arguments":"{\"city\":\"Oslo\"}","call_id":"c3"},` +
		`{"type":"function_call_output","call_id":"c3","output":"snow"},` +
		`{"role":"user","content":"Thanks"}]}}`
	task := parseTask(t, row)
	got := agent.ChatMessages(task.Params)
	fc := func(id, city string) openai.ToolCall {
		return openai.ToolCall{ID: id, Type: openai.ToolTypeFunction, Function: openai.FunctionCall{Name: "get_weather", Arguments: `{"city":"` + city + `"}`}}
	}
	want := []openai.ChatCompletionMessage{
		{Role: "system", Content: "Be brief."},
		{Role: "system", Content: "Use tools."},
		{Role: "user", Content: "Weather in Paris and Rome?"},
		{Role: "assistant", ToolCalls: []openai.ToolCall{fc("c1", "Paris"), fc("c2", "Rome")}},
		{Role: "tool", ToolCallID: "c1", Content: "sunny"},
		{Role: "tool", ToolCallID: "c2", Content: "rain"},
		{Role: "assistant", Content: "Let me check Oslo too.", ToolCalls: []openai.ToolCall{fc("c3", "Oslo")}},
		{Role: "tool", ToolCallID: "c3", Content: "snow"},
		{Role: "user", Content: "Thanks"},
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		t.Fatalf("got\n%s", g)
	}
	// A string input is one user message.
	got = agent.ChatMessages(parseTask(t, `{"responses_create_params":{"input":"hi"}}`).Params)
	if len(got) != 1 || got[0].Role != "user" || got[0].Content != "hi" {
		t.Fatalf("string input: %+v", got)
	}
}

func TestChatTools(t *testing.T) {
	task := parseTask(t, `{"responses_create_params":{"input":"x","tools":[`+
		`{"type":"function","name":"a","description":"A tool","parameters":{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]},"strict":true},`+
		`{"type":"function","name":"b","parameters":null},`+
		`{"type":"function","name":"c"}]}}`)
	tools := agent.ChatTools(task.Params.Tools)
	if len(tools) != 3 {
		t.Fatalf("%d tools", len(tools))
	}
	b, err := json.Marshal(tools)
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"type":"function","function":{"name":"a","description":"A tool","strict":true,"parameters":{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}}},` +
		`{"type":"function","function":{"name":"b","parameters":{"type":"object","properties":{}}}},` +
		`{"type":"function","function":{"name":"c","parameters":{"type":"object","properties":{}}}}]`
	var gotV, wantV any
	json.Unmarshal(b, &gotV)
	json.Unmarshal([]byte(want), &wantV)
	if !reflect.DeepEqual(gotV, wantV) {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
	if agent.ChatTools(nil) != nil {
		t.Fatal("no tools should be nil (omitted)")
	}
}

func TestChatToolChoice(t *testing.T) {
	for _, s := range []string{"auto", "none", "required"} {
		if got := agent.ChatToolChoice(json.RawMessage(`"` + s + `"`)); got != s {
			t.Errorf("%s: %#v", s, got)
		}
	}
	got := agent.ChatToolChoice(json.RawMessage(`{"type":"function","name":"get_weather"}`))
	want := openai.ToolChoice{Type: openai.ToolTypeFunction, Function: openai.ToolFunction{Name: "get_weather"}}
	if got != want {
		t.Fatalf("object: %#v", got)
	}
	b, _ := json.Marshal(got)
	if string(b) != `{"type":"function","function":{"name":"get_weather"}}` {
		t.Fatalf("object on the wire: %s", b)
	}
	if agent.ChatToolChoice(nil) != nil || agent.ChatToolChoice(json.RawMessage(`{"type":"function"}`)) != nil {
		t.Fatal("nil or nameless choice should be nil")
	}
}

// buildTrajectory runs a scripted rollout for BuildResponse.
func buildTrajectory(t *testing.T, row string, script ...step) (*dataset.Task, *agent.Trajectory) {
	t.Helper()
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil, script...)
	task := parseTask(t, row)
	tr := m.config(nil).Run(context.Background(), task, res.session(t, task), 1)
	return task, tr
}

func TestBuildResponseOutputOrder(t *testing.T) {
	task, tr := buildTrajectory(t, counterRow(`"temperature":0,"parallel_tool_calls":true`),
		toolCalls(call{"c1", "increment", `{}`}, call{"c2", "get_count", `{}`}),
		answer("Checking again.", 10, 5, call{"c3", "get_count", `{}`}),
		final("The count is 1."))
	if tr.Termination != agent.Completed {
		t.Fatalf("termination %q", tr.Termination)
	}
	r := agent.BuildResponse("resp_multi_0_0", 1700000000, "test-model", task.Params, tr)
	type item struct{ typ, callID, name, text string }
	var got []item
	for _, o := range r.Output {
		it := item{typ: o.Type, callID: o.CallID, name: o.Name}
		switch o.Type {
		case "message":
			if o.Role != "assistant" || len(o.Content) != 1 || o.Content[0].Type != "output_text" {
				t.Fatalf("message %+v", o)
			}
			it.text = o.Content[0].Text
		case "function_call":
			it.text = *o.Arguments
		case "function_call_output":
			it.text = *o.Output
		}
		got = append(got, it)
	}
	want := []item{
		{"function_call", "c1", "increment", "{}"},
		{"function_call", "c2", "get_count", "{}"},
		{"function_call_output", "c1", "", `{"count":1}`},
		{"function_call_output", "c2", "", `{"count":1}`},
		{"message", "", "", "Checking again."},
		{"function_call", "c3", "get_count", "{}"},
		{"function_call_output", "c3", "", `{"count":1}`},
		{"message", "", "", "The count is 1."},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("output\n%+v\nwant\n%+v", got, want)
	}
	ids := map[string]bool{}
	for _, o := range r.Output {
		if o.ID != "" {
			if ids[o.ID] {
				t.Fatalf("duplicate item id %q", o.ID)
			}
			ids[o.ID] = true
		}
	}
	if r.Usage.InputTokens != 30 || r.Usage.OutputTokens != 15 || r.Usage.TotalTokens != 45 || r.Status != "completed" {
		t.Fatalf("usage %+v status %q", r.Usage, r.Status)
	}
	if r.Temperature == nil || *r.Temperature != 0 || !r.ParallelToolCalls {
		t.Fatalf("temperature %v parallel %v", r.Temperature, r.ParallelToolCalls)
	}
}

// The JSON has every key NeMo Gym requires; tools are the row's, byte for
// byte.
func TestBuildResponseJSON(t *testing.T) {
	task, tr := buildTrajectory(t, counterRow(`"tool_choice":"required"`),
		toolCalls(call{"c1", "increment", `{"by":1}`}), final("done"))
	r := agent.BuildResponse("resp_a_1_0", 1700000000, "test-model", task.Params, tr)

	rowTools := rawField(t, task.Field("responses_create_params"), "tools")
	if !bytes.Equal(r.Tools, rowTools) {
		t.Fatalf("tools %s\nrow   %s", r.Tools, rowTools)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"id", "created_at", "model", "object", "output", "parallel_tool_calls", "tool_choice", "tools", "usage", "status"} {
		if _, ok := obj[k]; !ok {
			t.Errorf("no %q in %s", k, b)
		}
	}
	if string(obj["object"]) != `"response"` || string(obj["id"]) != `"resp_a_1_0"` || string(obj["tool_choice"]) != `"required"` ||
		string(obj["model"]) != `"test-model"` || string(obj["created_at"]) != "1700000000" {
		t.Fatalf("response %s", b)
	}
	if !bytes.Equal(obj["tools"], rowTools) {
		t.Fatalf("tools on the wire %s\nrow %s", obj["tools"], rowTools)
	}
	// Arguments are a JSON string; the final message has output_text.
	var out []map[string]any
	json.Unmarshal(obj["output"], &out)
	if out[0]["type"] != "function_call" || out[0]["arguments"] != `{"by":1}` || out[1]["output"] != `{"count":1}` {
		t.Fatalf("output %s", obj["output"])
	}
	content := out[2]["content"].([]any)[0].(map[string]any)
	if content["type"] != "output_text" || content["text"] != "done" {
		t.Fatalf("final message %v", out[2])
	}

	// A row with spaced JSON: the Response holds the tools byte for byte
	// (encoding/json compacts them on the wire, which is the same JSON).
	spaced := strings.Replace(counterRow(""), `"tools":[{"type":"function",`, `"tools": [ {"type": "function", `, 1)
	task2 := parseTask(t, spaced)
	r2 := agent.BuildResponse("resp_b", 0, "m", task2.Params, &agent.Trajectory{})
	if !bytes.Equal(r2.Tools, rawField(t, task2.Field("responses_create_params"), "tools")) {
		t.Fatalf("spaced tools not kept: %s", r2.Tools)
	}
	b2, _ := json.Marshal(r2)
	var obj2 map[string]any
	json.Unmarshal(b2, &obj2)
	var rowTools2 any
	json.Unmarshal(r2.Tools, &rowTools2)
	if !reflect.DeepEqual(obj2["tools"], rowTools2) {
		t.Fatal("tools changed on the wire")
	}
	// No tools, no tool_choice: the defaults.
	r3 := agent.BuildResponse("resp_c", 0, "m", parseTask(t, `{"responses_create_params":{"input":"x"}}`).Params, &agent.Trajectory{})
	if string(r3.Tools) != `[]` || string(r3.ToolChoice) != `"auto"` || r3.Output == nil {
		t.Fatalf("defaults: tools %s choice %s output %v", r3.Tools, r3.ToolChoice, r3.Output)
	}
}

// A rollout cut by max_output_tokens is an incomplete response.
func TestBuildResponseIncomplete(t *testing.T) {
	task := parseTask(t, counterRow(""))
	tr := &agent.Trajectory{Rounds: []agent.Round{{FinishReason: "length", Content: "Once upon"}}}
	r := agent.BuildResponse("resp_x", 0, "m", task.Params, tr)
	if r.Status != "incomplete" || r.IncompleteDetails == nil || r.IncompleteDetails.Reason != "max_output_tokens" {
		t.Fatalf("status %q details %+v", r.Status, r.IncompleteDetails)
	}
	// Any id works, also one shorter than "resp_".
	tr.Rounds = append(tr.Rounds, agent.Round{ToolCalls: []agent.ToolCall{{CallID: "c", Name: "n"}}})
	for _, id := range []string{"", "x", "resp_", "other_id"} {
		if r := agent.BuildResponse(id, 0, "m", task.Params, tr); len(r.Output) != 3 {
			t.Fatalf("id %q: %d items", id, len(r.Output))
		}
	}
}

func rawField(t *testing.T, obj json.RawMessage, key string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(obj, &m); err != nil {
		t.Fatal(err)
	}
	return m[key]
}
