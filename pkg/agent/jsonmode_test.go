package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/agent"
)

// runJSON runs the counter row in JSON mode (multi policy) against a scripted model.
func runJSON(t *testing.T, script ...step) (*agent.Trajectory, *fakeModel, *fakeResource) {
	t.Helper()
	res := newFakeResource(t, nil)
	m := newFakeModel(t, nil, script...)
	task := parseTask(t, counterRow(`"tool_choice":"auto","parallel_tool_calls":false`))
	c := m.config(nil)
	c.ToolMode = agent.ToolModeJSON
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c.Run(context.Background(), task, res.session(t, task), 1), m, res
}

// No tools go to the model: the system prompt describes them and the answer format. A valid
// tool_calls answer executes the calls; their results come back as a user message of
// <tool_response> blocks (there are no tool messages); a final answer ends the rollout with its
// result as the answer.
func TestJSONModeToolCalls(t *testing.T) {
	tr, m, res := runJSON(t,
		final(`{"tool_calls": [{"name": "increment", "arguments": {"by": 2}}], "reasoning": "count up"}`),
		final(`{"success": true, "result": "2", "reasoning": "counted"}`))
	if tr.Termination != agent.Completed || tr.FinalText != "2" || tr.InvalidAnswers != 0 {
		t.Fatalf("termination %q final %q invalid %d: %s", tr.Termination, tr.FinalText, tr.InvalidAnswers, tr.Error)
	}
	for i := range 2 {
		raw := m.rawBody(i)
		for _, key := range []string{"tools", "tool_choice", "parallel_tool_calls"} {
			if raw[key] != nil {
				t.Errorf("request %d sent %s: %s", i, key, raw[key])
			}
		}
	}
	first := m.request(0)
	sys := content(first, 0)
	if first.Messages[0].Role != "system" || !strings.HasPrefix(sys, "You count.\n\n") {
		t.Errorf("system message %s %q", first.Messages[0].Role, sys)
	}
	for _, want := range []string{
		`{"name":"increment","description":"Add by (default 1) to the session's counter.","parameters":{"type":"object","properties":{"by":{"type":"integer"}}}}`,
		`{"name":"get_count","description":"The counter.","parameters":{"type":"object","properties":{}}}`,
		`{"tool_calls": [{"name": "<tool name>", "arguments": {`,
		`{"success": true or false, "result": <your final answer>`,
	} {
		if !strings.Contains(sys, want) {
			t.Errorf("system prompt lacks %s:\n%s", want, sys)
		}
	}
	if paths := res.log(); len(paths) != 2 || paths[1].Path != "increment" || paths[1].Body != `{"by": 2}` {
		t.Errorf("server calls %+v", paths)
	}
	second := m.request(1)
	for _, msg := range second.Messages {
		if msg.Role == "tool" || len(msg.ToolCalls) > 0 {
			t.Errorf("JSON mode sent a native tool message or call: %+v", msg)
		}
	}
	if got := content(second, -2); got != `{"tool_calls": [{"name": "increment", "arguments": {"by": 2}}], "reasoning": "count up"}` {
		t.Errorf("the assistant turn is %q, want the model's text", got)
	}
	want := "<tool_response>\n<tool_name>increment</tool_name>\n<status>OK</status>\n<result>{\"count\":2}</result>\n</tool_response>"
	if last := second.Messages[len(second.Messages)-1]; last.Role != "user" || *last.Content != want {
		t.Errorf("tool results sent as %s %q\nwant %q", last.Role, *last.Content, want)
	}
	if len(tr.Rounds) != 2 {
		t.Fatalf("rounds %d", len(tr.Rounds))
	}
	c := tr.Rounds[0].ToolCalls
	if len(c) != 1 || c[0].Name != "increment" || c[0].Arguments != `{"by": 2}` || c[0].CallID != "call_0_0" || c[0].Output != `{"count":2}` {
		t.Errorf("recorded calls %+v", c)
	}
	if tr.Rounds[0].Content != "" || tr.Rounds[0].Reasoning != "count up" || tr.Rounds[1].Content != "2" {
		t.Errorf("rounds content %q reasoning %q, final %q", tr.Rounds[0].Content, tr.Rounds[0].Reasoning, tr.Rounds[1].Content)
	}
}

// An invalid answer gets a precise error as the next user message (the schema validator's words,
// naming the JSON path) and another try; each is counted; a valid answer resets the run of
// invalid ones.
func TestJSONModeInvalidAnswers(t *testing.T) {
	tr, m, res := runJSON(t,
		final(`Sure! I'll count.`),
		final(`{"tool_calls": []}`),
		final(`{"tool_calls": [{"name": "increment", "arguments": {}}]}`),
		final(`{"tool_calls": [{"name": "increment", "arguments": "{\"by\": 1}"}]}`),
		final(`{"tool_calls": [{"name": "increment", "arguments": {}}, {"name": "launch", "arguments": {}}]}`),
		final(`{"tool_calls": [{"name": "get_count", "arguments": {}}]}`),
		final(`{"success": true}`),
		final("```json\n{\"success\": true, \"result\": 1}\n```"))
	if tr.Termination != agent.Completed || tr.FinalText != "1" {
		t.Fatalf("termination %q final %q: %s", tr.Termination, tr.FinalText, tr.Error)
	}
	if tr.InvalidAnswers != 5 || len(tr.Rounds) != 8 {
		t.Errorf("invalid answers %d rounds %d, want 5 and 8", tr.InvalidAnswers, len(tr.Rounds))
	}
	for _, tc := range []struct {
		req  int
		want string
	}{
		{1, "Your answer was not accepted: the answer is not valid JSON: invalid character 'S' looking for beginning of value (at byte 1)\n"},
		{2, "Your answer was not accepted: the answer does not match the response format:\n- at '/tool_calls': minItems: got 0, want 1\n"},
		{4, "Your answer was not accepted: the answer does not match the response format:\n- at '/tool_calls/0/arguments': got string, want object\n"},
		{5, "Your answer was not accepted: the answer calls tools that are not available:\n- at '/tool_calls/1/name': unknown tool \"launch\"; available: increment, get_count, fail, reject\n"},
		{7, "Your answer was not accepted: the answer does not match the response format:\n- at '': missing property 'result'\n"},
	} {
		req := m.request(tc.req)
		last := req.Messages[len(req.Messages)-1]
		if last.Role != "user" || !strings.HasPrefix(*last.Content, tc.want) || !strings.HasSuffix(*last.Content, `when you are done.`) {
			t.Errorf("request %d ends with %s %q\nwant %q + the format", tc.req, last.Role, *last.Content, tc.want)
		}
	}
	// Only the valid answers' calls were made: an invalid answer's calls never are.
	if paths := res.toolPaths(); !equalStrings(paths, []string{"increment", "get_count"}) {
		t.Errorf("server calls %v", paths)
	}
}

// Three invalid answers in a row end the rollout as invalid_output, which is still verified.
func TestJSONModeThreeInvalidInARow(t *testing.T) {
	tr, m, res := runJSON(t,
		final(`I will call increment.`),
		final(`{"tool_calls": [{"name": "increment"}]}`),
		final(`{"tool_calls": [{"name": "increment", "arguments": {}}]} and then get_count`),
		final(`{"success": true, "result": 1}`))
	if tr.Termination != agent.InvalidOutput || tr.FailureClass != "" || m.calls() != 3 || tr.InvalidAnswers != 3 {
		t.Fatalf("termination %q failure %q model calls %d invalid %d", tr.Termination, tr.FailureClass, m.calls(), tr.InvalidAnswers)
	}
	if !strings.Contains(tr.Error, "3 invalid JSON-mode answers in a row") {
		t.Errorf("error %q", tr.Error)
	}
	if len(res.toolPaths()) != 0 {
		t.Errorf("server calls %v", res.toolPaths())
	}
	want := "Your answer was not accepted: the answer is not ONE JSON object: text follows it at byte 56: \"and then get_count\""
	if got := tr.Messages[len(tr.Messages)-1].Content; !strings.HasPrefix(got, want) {
		t.Errorf("last message %q", got)
	}
}

// The Responses object for /verify lists JSON-mode calls as function_call and
// function_call_output items, exactly like native calls, and not the JSON text they came in.
func TestJSONModeBuildResponse(t *testing.T) {
	tr, _, _ := runJSON(t,
		final(`{"tool_calls": [{"name": "increment", "arguments": {"by": 1}}, {"name": "get_count", "arguments": {}}], "reasoning": "count"}`),
		final(`{"success": true, "result": {"count": 1}}`))
	if tr.Termination != agent.Completed {
		t.Fatalf("termination %q: %s", tr.Termination, tr.Error)
	}
	resp := agent.BuildResponse("resp_x", 1, "m", parseTask(t, counterRow("")).Params, tr)
	var types []string
	for _, it := range resp.Output {
		types = append(types, it.Type)
	}
	want := []string{"reasoning", "function_call", "function_call", "function_call_output", "function_call_output", "message"}
	if !equalStrings(types, want) {
		t.Fatalf("output items %v, want %v", types, want)
	}
	o := resp.Output
	if o[1].Name != "increment" || *o[1].Arguments != `{"by": 1}` || o[1].CallID != "call_0_0" ||
		o[2].Name != "get_count" || *o[2].Arguments != `{}` || o[2].CallID != "call_0_1" {
		t.Errorf("function calls %+v %+v", o[1], o[2])
	}
	if o[3].CallID != "call_0_0" || *o[3].Output != `{"count":1}` || o[4].CallID != "call_0_1" || *o[4].Output != `{"count":1}` {
		t.Errorf("function call outputs %+v %+v", o[3], o[4])
	}
	if o[0].Summary[0].Text != "count" || o[5].Content[0].Text != `{"count":1}` {
		t.Errorf("reasoning %+v, message %+v", o[0].Summary, o[5].Content)
	}
	b, _ := json.Marshal(resp)
	if strings.Contains(string(b), `\"tool_calls\"`) {
		t.Errorf("the response carries the JSON-mode text: %s", b)
	}
}

// JSON mode under the workflow policy: each step's message lists its tools; a call of another
// step's tool is an invalid answer naming the path and the step, never sent; validation
// enforcement and structured errors work as in native mode.
func TestJSONModeWorkflow(t *testing.T) {
	tr, m, res := runWorkflow(t, testWorkflow(), agent.ToolModeJSON,
		final(`{"tool_calls": [{"name": "check", "arguments": {"channel": "web"}}]}`),
		final(`{"tool_calls": [{"name": "lookup", "arguments": {"q": "thing"}}]}`),
		final(`{"success": true, "result": {"id": "x1"}, "reasoning": "found it"}`),
		final(`{"success": true, "result": "done"}`),
		final(`{"tool_calls": [{"name": "check", "arguments": {}}]}`),
		final(`{"tool_calls": [{"name": "check", "arguments": {"channel": "web"}}]}`),
		final(`{"success": true, "result": "configured"}`))
	if tr.Termination != agent.Completed || tr.FinalText != "configured" {
		t.Fatalf("termination %q final %q: %s", tr.Termination, tr.FinalText, tr.Error)
	}
	first := m.request(0)
	if len(first.Tools) != 0 {
		t.Errorf("JSON mode offered native tools %v", toolNames(first))
	}
	stepMsg := content(first, -1)
	if !strings.HasPrefix(stepMsg, prompt1+"\n\nTools you may call in this step, and no others") ||
		!strings.Contains(stepMsg, `{"name":"lookup","description":"Find things."`) || strings.Contains(stepMsg, `"name":"check"`) {
		t.Errorf("step 1 message %q", stepMsg)
	}
	if sys := content(first, 0); first.Messages[0].Role != "system" || !strings.Contains(sys, "Each step's instructions list the tools you may call in that step") {
		t.Errorf("system message %q", sys)
	}
	want := "Your answer was not accepted: the answer calls tools that are not available:\n- at '/tool_calls/0/name': tool check is not available in step \"discover\"; available: lookup, fail\n"
	if got := content(m.request(1), -1); !strings.HasPrefix(got, want) {
		t.Errorf("refusal %q\nwant %q", got, want)
	}
	step2 := content(m.request(3), -1)
	if !strings.HasPrefix(step2, "Result of step discover: {\"id\":\"x1\"}\n\n"+prompt2) || !strings.Contains(step2, `"name":"check"`) || strings.Contains(step2, `"name":"lookup"`) {
		t.Errorf("step 2 message %q", step2)
	}
	notCalled := "You returned a final response but validations have not all passed.\nValidation tools not called yet in this step: check\nPlease fix the errors and call the validation tools again."
	if got := content(m.request(4), -1); got != notCalled {
		t.Errorf("premature answer: %q", got)
	}
	wantErr := "<tool_response>\n<tool_name>check</tool_name>\n<status>ERROR</status>\n<result>" + missingChannel + "</result>\n</tool_response>\nIMPORTANT: This tool call failed. Read the error, understand the issue, fix and retry."
	if got := content(m.request(5), -1); got != wantErr {
		t.Errorf("failed validation: %q\nwant %q", got, wantErr)
	}
	if paths := res.toolPaths(); !equalStrings(paths, []string{"lookup", "check", "check"}) {
		t.Errorf("server calls %v", paths)
	}
	if s := tr.Steps; s[0].InvalidAnswers != 1 || s[0].RefusedCalls != 0 || s[1].RejectedAnswers != 1 || s[1].ValidationFailures != 1 || tr.InvalidAnswers != 1 {
		t.Errorf("steps %+v", s)
	}
}

// Under the workflow policy, too many invalid answers in a row fail the step attempt, which is
// retried from the step's start; when every attempt fails that way the rollout ends as
// invalid_output.
func TestJSONModeWorkflowInvalidRetries(t *testing.T) {
	wf := testWorkflow()
	wf.Steps[0].MaxRetries = 1
	tr, m, _ := runWorkflow(t, wf, agent.ToolModeJSON, final(`not JSON`))
	if tr.Termination != agent.InvalidOutput || tr.FailureClass != "" || m.calls() != 6 {
		t.Fatalf("termination %q failure %q model calls %d", tr.Termination, tr.FailureClass, m.calls())
	}
	st := tr.Steps[0]
	if st.Attempts != 2 || len(st.Failures) != 2 || st.Failures[0].Reason != agent.InvalidOutput || st.Failures[1].Reason != agent.InvalidOutput || st.InvalidAnswers != 6 {
		t.Errorf("step %+v", st)
	}
	if a, b := m.request(0), m.request(3); len(a.Messages) != len(b.Messages) || content(a, -1) != content(b, -1) {
		t.Errorf("the retry did not start from the step's start context")
	}
	if !strings.Contains(tr.Error, "3 invalid answers in a row") {
		t.Errorf("error %q", tr.Error)
	}
}

func TestParseJSONAnswer(t *testing.T) {
	for _, tc := range []struct {
		text, err string
		calls     int
	}{
		{`{"tool_calls": [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]}`, "", 2},
		{`  {"success": false, "result": null}  `, "", 0},
		{"```\n{\"success\": true, \"result\": [1, 2], \"reasoning\": \"r\"}\n```", "", 0},
		{``, "the answer is empty", 0},
		{`{"a":`, "the answer is not valid JSON: it ends (at byte 5) before the JSON value does", 0},
		{`[{"success": true, "result": 1}]`, "- at '': got array, want object", 0},
		{`{"success": "yes", "result": 1}`, "- at '/success': got string, want boolean", 0},
		{`{"success": true, "result": 1, "answer": 2}`, "- at '': additional properties 'answer' not allowed", 0},
		{`{"tool_calls": [{"name": "", "arguments": {}}]}`, "- at '/tool_calls/0/name': minLength: got 0, want 1", 0},
		{`{"tool_calls": [{"name": "a", "arguments": {}}], "success": true}`, "- at '': additional properties 'success' not allowed", 0},
		{`{"tool_calls": {"name": "a", "arguments": {}}}`, "- at '/tool_calls': got object, want array", 0},
		{"```python\n{\"success\": true, \"result\": 1}\n```", "not valid JSON", 0},
	} {
		a, err := agent.ParseJSONAnswer(tc.text)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.text, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: error %v, want %q", tc.text, err, tc.err)
		case err == nil && (len(a.ToolCalls) != tc.calls || a.Final() != (tc.calls == 0)):
			t.Errorf("%q: %+v", tc.text, a)
		}
	}
	a, _ := agent.ParseJSONAnswer(`{"success": true, "result": {"b": [1, 2]}, "reasoning": "r"}`)
	if a.ResultText() != `{"b":[1,2]}` || !a.Success || a.Reasoning != "r" {
		t.Errorf("result %q %+v", a.ResultText(), a)
	}
}

// The multi policy keeps its rule in JSON mode: rounds in which every call failed end the
// rollout as tool_error; the failures are shown as structured errors.
func TestJSONModeToolErrorRounds(t *testing.T) {
	tr, m, _ := runJSON(t, final(`{"tool_calls": [{"name": "fail", "arguments": {}}]}`))
	if tr.Termination != agent.ToolError || tr.FailureClass != "" || m.calls() != agent.DefaultMaxFailedRounds {
		t.Fatalf("termination %q failure %q model calls %d", tr.Termination, tr.FailureClass, m.calls())
	}
	want := "<tool_response>\n<tool_name>fail</tool_name>\n<status>ERROR</status>\n<result>{\"detail\":\"boom: database locked\"}</result>\n</tool_response>\nIMPORTANT: This tool call failed. Read the error, understand the issue, fix and retry."
	if got := content(m.request(1), -1); got != want {
		t.Errorf("failed call shown as %q", got)
	}
}
