package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/rollout-dev/rollout/pkg/agent"
	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/plan"
	"github.com/rollout-dev/rollout/pkg/retry"
	"github.com/rollout-dev/rollout/pkg/servers"
	"github.com/rollout-dev/rollout/pkg/sim"
	"github.com/rollout-dev/rollout/pkg/toolclient"
	"github.com/rollout-dev/rollout/pkg/verify"
)

// ---- a two-step workflow on the fake resource server ----

// wfTools are the tools of the workflow test row: lookup (step discover), configure and check
// (step configure; check validates), fail (HTTP 500, step discover).
const wfTools = `[{"type":"function","name":"lookup","description":"Find things.","parameters":{"type":"object","properties":{"q":{"type":"string"}}}},` +
	`{"type":"function","name":"configure","parameters":{"type":"object","properties":{}}},` +
	`{"type":"function","name":"check","description":"Validate.","parameters":{"type":"object","properties":{"channel":{"type":"string"}}}},` +
	`{"type":"function","name":"fail","parameters":{"type":"object","properties":{}}}]`

const wfRow = `{"id":"w1","responses_create_params":{"input":[{"role":"user","content":"Build the thing."}],"tools":` + wfTools + `}}`

const (
	prompt1 = "Step 1 of 2: discover. Follow this workflow in order. Do NOT skip steps or go back."
	prompt2 = "Step 2 of 2: configure. Follow this workflow in order. Do NOT skip steps or go back."
	// missingChannel is check's answer without a channel.
	missingChannel = `{"valid":false,"errors":[{"property":"channel","message":"Required field 'channel' is missing"}]}`
	// prematureAnswerMessage is the validation-enforcement message for missingChannel.
	prematureAnswerMessage = "You returned a final response but validations have not all passed.\nValidation Errors Found:\n1. Property: channel\n   Message: Required field 'channel' is missing\nPlease fix the errors and call the validation tools again."
)

func testWorkflow() *agent.Workflow {
	return &agent.Workflow{Steps: []plan.Step{
		{Name: "discover", Prompt: prompt1, Tools: []string{"lookup", "fail"}, MaxIterations: 5, MaxRetries: 0},
		{Name: "configure", Prompt: prompt2, Tools: []string{"configure", "check"}, ValidationTools: []string{"check"}, MaxIterations: 6, MaxRetries: 0},
	}}
}

// wfResource is the fake resource server with the workflow tools.
func wfResource(t *testing.T) *fakeResource {
	res := newFakeResource(t, nil)
	res.handle("lookup", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"id":"x1"}`) })
	res.handle("configure", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"ok":true}`) })
	res.handle("check", func(w http.ResponseWriter, r *http.Request) {
		// The fake server has read the body already: it is the last call logged.
		calls := res.log()
		var args struct {
			Channel string `json:"channel"`
		}
		json.Unmarshal([]byte(calls[len(calls)-1].Body), &args)
		if args.Channel == "" {
			io.WriteString(w, missingChannel)
			return
		}
		io.WriteString(w, `{"valid":true,"errors":[]}`)
	})
	return res
}

// runWorkflow runs the workflow test row with wf against a scripted model.
func runWorkflow(t *testing.T, wf *agent.Workflow, mode string, script ...step) (*agent.Trajectory, *fakeModel, *fakeResource) {
	t.Helper()
	res := wfResource(t)
	m := newFakeModel(t, nil, script...)
	task := parseTask(t, wfRow)
	c := m.config(nil)
	c.Policy, c.Workflow, c.ToolMode = agent.PolicyWorkflow, wf, mode
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	tr := c.Run(context.Background(), task, res.session(t, task), 7)
	return tr, m, res
}

func toolNames(req chatRequest) []string {
	var out []string
	for _, tl := range req.Tools {
		out = append(out, tl.Function.Name)
	}
	return out
}

func content(req chatRequest, i int) string {
	if i < 0 {
		i += len(req.Messages)
	}
	if c := req.Messages[i].Content; c != nil {
		return *c
	}
	return ""
}

// toolMessages are the contents of the request's tool messages, in order.
func toolMessages(req chatRequest) []string {
	var out []string
	for _, msg := range req.Messages {
		if msg.Role == "tool" {
			out = append(out, *msg.Content)
		}
	}
	return out
}

// Each step offers only its own tools; the step prompt starts the step as a user message after
// the task's messages (the first user message stays the task's); the next step's context
// carries the previous step's result; the rollout's answer is the last step's.
func TestWorkflowStepsOfferOnlyTheirTools(t *testing.T) {
	tr, m, res := runWorkflow(t, testWorkflow(), "",
		toolCalls(call{"a", "lookup", `{"q":"thing"}`}),
		final("found x1"),
		toolCalls(call{"b", "check", `{"channel":"web"}`}),
		final("configured"))
	if tr.Termination != agent.Completed || tr.FinalText != "configured" || tr.FailureClass != "" {
		t.Fatalf("termination %q final %q failure %q %s", tr.Termination, tr.FinalText, tr.FailureClass, tr.Error)
	}
	if m.calls() != 4 {
		t.Fatalf("model calls %d, want 4", m.calls())
	}
	for i, want := range [][]string{{"lookup", "fail"}, {"lookup", "fail"}, {"configure", "check"}, {"configure", "check"}} {
		if got := toolNames(m.request(i)); !equalStrings(got, want) {
			t.Errorf("request %d offered %v, want %v", i, got, want)
		}
	}
	first := m.request(0)
	if len(first.Messages) != 2 || content(first, 0) != "Build the thing." || first.Messages[1].Role != "user" || content(first, 1) != prompt1 {
		t.Errorf("step 1 starts with %+v", first.Messages)
	}
	third := m.request(2)
	last := third.Messages[len(third.Messages)-1]
	if last.Role != "user" || *last.Content != "Result of step discover: found x1\n\n"+prompt2 {
		t.Errorf("step 2 starts with %s %q", last.Role, *last.Content)
	}
	if content(third, 0) != "Build the thing." {
		t.Errorf("the first user message changed: %q", content(third, 0))
	}
	if got := res.toolPaths(); !equalStrings(got, []string{"lookup", "check"}) {
		t.Errorf("tools called %v", got)
	}
	if len(tr.Steps) != 2 {
		t.Fatalf("steps %+v", tr.Steps)
	}
	for i, want := range []agent.StepTrace{
		{Name: "discover", Attempts: 1, Iterations: 2, FirstRound: 0, Rounds: 2, Completed: true, Result: "found x1"},
		{Name: "configure", Attempts: 1, Iterations: 2, FirstRound: 2, Rounds: 2, Completed: true, Result: "configured"},
	} {
		if !reflect.DeepEqual(tr.Steps[i], want) {
			t.Errorf("step %d: %+v, want %+v", i, tr.Steps[i], want)
		}
	}
	// The trajectory's JSON carries the steps.
	b, _ := json.Marshal(tr)
	if !bytes.Contains(b, []byte(`"steps":[{"name":"discover","attempts":1`)) {
		t.Errorf("trajectory JSON without steps: %s", b)
	}
}

// A call of another step's tool is refused with an error the model sees, and never reaches the
// server; the call is in the round (a failed call) like any other.
func TestWorkflowRefusesToolsOfOtherSteps(t *testing.T) {
	tr, m, res := runWorkflow(t, testWorkflow(), "",
		toolCalls(call{"a", "check", `{"channel":"web"}`}),
		final("nothing found"),
		toolCalls(call{"b", "check", `{"channel":"web"}`}),
		final("configured"))
	if tr.Termination != agent.Completed {
		t.Fatalf("termination %q: %s", tr.Termination, tr.Error)
	}
	got := toolMessages(m.request(1))
	want := "<tool_response>\n<tool_name>check</tool_name>\n<status>ERROR</status>\n<result>Error: tool check is not available in step \"discover\"; available: lookup, fail</result>\n</tool_response>\nIMPORTANT: This tool call failed. Read the error, understand the issue, fix and retry."
	if len(got) != 1 || got[0] != want {
		t.Errorf("tool messages %q\nwant %q", got, want)
	}
	if paths := res.toolPaths(); !equalStrings(paths, []string{"check"}) {
		t.Errorf("server calls %v, want the configure step's check only", paths)
	}
	if tr.Steps[0].RefusedCalls != 1 || tr.Steps[1].RefusedCalls != 0 {
		t.Errorf("refused calls %d, %d", tr.Steps[0].RefusedCalls, tr.Steps[1].RefusedCalls)
	}
	if c := tr.Rounds[0].ToolCalls[0]; !c.Failed || c.Status != 0 {
		t.Errorf("refused call recorded as %+v", c)
	}
	if _, failed, _ := tr.ToolCalls(); failed != 1 {
		t.Errorf("failed calls %d, want 1", failed)
	}
}

// A final answer before the step's validations pass is refused with the validation-enforcement message (the
// tools not called yet, then the errors of the last validation answers) and the step goes on;
// a failed validation is shown as a structured error.
func TestWorkflowValidationEnforcement(t *testing.T) {
	tr, m, _ := runWorkflow(t, testWorkflow(), "",
		toolCalls(call{"a", "lookup", `{}`}),
		final("found"),
		final("premature"),                                 // request 2: check not called yet
		toolCalls(call{"b", "check", `{}`}),                // request 3: fails
		final("still premature"),                           // request 4: refused with the errors
		toolCalls(call{"c", "check", `{"channel":"web"}`}), // request 5: passes
		final("configured"))                                // request 6: accepted
	if tr.Termination != agent.Completed || tr.FinalText != "configured" {
		t.Fatalf("termination %q final %q: %s", tr.Termination, tr.FinalText, tr.Error)
	}
	if m.calls() != 7 {
		t.Fatalf("model calls %d, want 7", m.calls())
	}
	notCalled := "You returned a final response but validations have not all passed.\nValidation tools not called yet in this step: check\nPlease fix the errors and call the validation tools again."
	if got := content(m.request(3), -1); got != notCalled {
		t.Errorf("after the first premature answer: %q\nwant %q", got, notCalled)
	}
	wantErr := "<tool_response>\n<tool_name>check</tool_name>\n<status>ERROR</status>\n<result>" + missingChannel + "</result>\n</tool_response>\nIMPORTANT: This tool call failed. Read the error, understand the issue, fix and retry."
	if got := toolMessages(m.request(4)); got[len(got)-1] != wantErr {
		t.Errorf("failed validation shown as %q\nwant %q", got[len(got)-1], wantErr)
	}
	if got := content(m.request(5), -1); got != prematureAnswerMessage {
		t.Errorf("after the second premature answer: %q\nwant %q", got, prematureAnswerMessage)
	}
	// A validation that passed is shown as the server's answer.
	if got := toolMessages(m.request(6)); got[len(got)-1] != `{"valid":true,"errors":[]}` {
		t.Errorf("passed validation shown as %q", got[len(got)-1])
	}
	st := tr.Steps[1]
	if st.RejectedAnswers != 2 || st.ValidationFailures != 1 || st.Iterations != 5 || st.Attempts != 1 || !st.Completed {
		t.Errorf("step trace %+v", st)
	}
	// A step without validation tools accepts its first final answer.
	if tr.Steps[0].RejectedAnswers != 0 || tr.Steps[0].Iterations != 2 {
		t.Errorf("discover trace %+v", tr.Steps[0])
	}
}

// A step attempt that runs out of iterations is retried from the step's start context: the
// retry's first request carries exactly the messages of the failed attempt's first request.
func TestWorkflowStepRetry(t *testing.T) {
	wf := testWorkflow()
	wf.Steps[1].MaxIterations, wf.Steps[1].MaxRetries = 2, 1
	tr, m, res := runWorkflow(t, wf, "",
		toolCalls(call{"a", "lookup", `{}`}),
		final("found"),
		toolCalls(call{"b", "configure", `{}`}),            // attempt 1
		final("no validation"),                             // refused; attempt 1 is out of iterations
		toolCalls(call{"c", "check", `{"channel":"web"}`}), // attempt 2
		final("configured"))
	if tr.Termination != agent.Completed || tr.FinalText != "configured" {
		t.Fatalf("termination %q final %q: %s", tr.Termination, tr.FinalText, tr.Error)
	}
	a1, a2 := m.request(2), m.request(4)
	if !reflect.DeepEqual(a1.Messages, a2.Messages) {
		t.Errorf("the retry did not start from the step's start context:\n%+v\n%+v", a1.Messages, a2.Messages)
	}
	if got := toolNames(a2); !equalStrings(got, []string{"configure", "check"}) {
		t.Errorf("the retry offered %v", got)
	}
	st := tr.Steps[1]
	if st.Attempts != 2 || len(st.Failures) != 1 || st.Failures[0].Reason != agent.MaxRounds || st.Failures[0].Attempt != 1 {
		t.Fatalf("step trace %+v", st)
	}
	if n := len(st.Failures[0].Messages); n != 4 { // calls, tool result, answer, refusal
		t.Errorf("failed attempt kept %d messages, want 4", n)
	}
	for _, msg := range tr.Messages {
		if msg.Content == "no validation" {
			t.Error("the failed attempt's messages are still in the conversation")
		}
	}
	if len(tr.Rounds) != 6 || st.Rounds != 4 || st.Iterations != 4 {
		t.Errorf("rounds %d, step rounds %d, iterations %d", len(tr.Rounds), st.Rounds, st.Iterations)
	}
	// The server saw both attempts: its state is not rolled back.
	if got := res.toolPaths(); !equalStrings(got, []string{"lookup", "configure", "check"}) {
		t.Errorf("server calls %v", got)
	}
}

// When every attempt of a step fails the rollout ends as max_rounds (still verified: no failure
// class), and the next step never starts.
func TestWorkflowAllAttemptsFail(t *testing.T) {
	wf := testWorkflow()
	wf.Steps[0].MaxIterations, wf.Steps[0].MaxRetries = 1, 2
	tr, m, res := runWorkflow(t, wf, "", toolCalls(call{"a", "lookup", `{}`}))
	if tr.Termination != agent.MaxRounds || tr.FailureClass != "" {
		t.Fatalf("termination %q failure %q", tr.Termination, tr.FailureClass)
	}
	if tr.Error != `workflow step "discover": all 3 attempts failed (at most 1 model calls each); the last: no accepted final answer` {
		t.Errorf("error %q", tr.Error)
	}
	if m.calls() != 3 || len(res.toolPaths()) != 3 {
		t.Errorf("model calls %d, tool calls %v; want 3 attempts of 1 call", m.calls(), res.toolPaths())
	}
	for i := range m.calls() {
		if got := toolNames(m.request(i)); !equalStrings(got, []string{"lookup", "fail"}) {
			t.Errorf("request %d offered %v: the next step started", i, got)
		}
	}
	if len(tr.Steps) != 1 || tr.Steps[0].Attempts != 3 || len(tr.Steps[0].Failures) != 3 || tr.Steps[0].Completed {
		t.Fatalf("steps %+v", tr.Steps)
	}
	if f := tr.Steps[0].Failures; f[0].Messages == nil || f[2].Messages != nil {
		t.Error("the discarded attempts keep their messages; the last one stays in the conversation")
	}
}

// Failed tool calls are shown in the structured error form; successful ones as the server's
// answer; the recorded output (what BuildResponse reports) is the server's answer. Rounds where
// every call failed do not end a workflow (the step budget bounds them).
func TestWorkflowStructuredErrorFeedback(t *testing.T) {
	tr, m, _ := runWorkflow(t, testWorkflow(), "",
		toolCalls(call{"a", "fail", `{}`}, call{"b", "lookup", `{}`}),
		toolCalls(call{"c", "fail", `{}`}),
		toolCalls(call{"d", "fail", `{}`}),
		toolCalls(call{"e", "fail", `{}`}),
		final("found"),
		toolCalls(call{"f", "check", `{"channel":"web"}`}),
		final("configured"))
	if tr.Termination != agent.Completed {
		t.Fatalf("termination %q: %s", tr.Termination, tr.Error)
	}
	want := "<tool_response>\n<tool_name>fail</tool_name>\n<status>ERROR</status>\n<result>{\"detail\":\"boom: database locked\"}</result>\n</tool_response>\nIMPORTANT: This tool call failed. Read the error, understand the issue, fix and retry."
	got := toolMessages(m.request(1))
	if len(got) != 2 || got[0] != want || got[1] != `{"id":"x1"}` {
		t.Errorf("tool messages %q\nwant [%q %q]", got, want, `{"id":"x1"}`)
	}
	if c := tr.Rounds[0].ToolCalls[0]; c.Output != `{"detail":"boom: database locked"}` || c.Status != 500 || !c.Failed {
		t.Errorf("recorded call %+v output %q", c, c.Output)
	}
	resp := agent.BuildResponse("resp_1", 1, "m", parseTask(t, wfRow).Params, tr)
	if out := resp.Output[2]; out.Type != "function_call_output" || *out.Output != `{"detail":"boom: database locked"}` {
		t.Errorf("response item %+v", out)
	}
}

// A task that does not offer a step's tools cannot run the workflow: bad_task, no model call.
func TestWorkflowTaskWithoutStepTools(t *testing.T) {
	res := wfResource(t)
	m := newFakeModel(t, nil, final("x"))
	task := parseTask(t, counterRow(""))
	c := m.config(nil)
	c.Policy, c.Workflow = agent.PolicyWorkflow, testWorkflow()
	tr := c.Run(context.Background(), task, res.session(t, task), 1)
	if tr.FailureClass != "bad_task" || !strings.Contains(tr.Error, `workflow step "discover": tool "lookup" is not offered by the task`) || m.calls() != 0 {
		t.Errorf("failure %q error %q model calls %d", tr.FailureClass, tr.Error, m.calls())
	}
}

func TestWorkflowConfigValidate(t *testing.T) {
	m := newFakeModel(t, nil, final("x"))
	for _, tc := range []struct {
		policy, mode string
		wf           *agent.Workflow
		err          string
	}{
		{agent.PolicyWorkflow, "", nil, "needs its steps"},
		{agent.PolicyWorkflow, "", &agent.Workflow{}, "no steps"},
		{agent.PolicyWorkflow, "", &agent.Workflow{Steps: []plan.Step{{Name: "a", Prompt: "p"}}}, `step 1 ("a"): tools: empty`},
		{agent.PolicyMulti, "xml", nil, `unknown tool mode "xml"`},
		{agent.PolicySingle, agent.ToolModeJSON, nil, "not single"},
		{agent.PolicyWorkflow, agent.ToolModeJSON, testWorkflow(), ""},
		{agent.PolicyMulti, agent.ToolModeJSON, nil, ""},
		{agent.PolicyMulti, agent.ToolModeNative, testWorkflow(), ""}, // other policies ignore the steps
	} {
		c := m.config(nil)
		c.Policy, c.ToolMode, c.Workflow = tc.policy, tc.mode, tc.wf
		err := c.Validate()
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s/%s: %v, want %q", tc.policy, tc.mode, err, tc.err)
		}
	}
}

// ---- the steps file ----

func TestLoadWorkflow(t *testing.T) {
	wf, err := agent.LoadWorkflow("../../data/workflow.steps.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(wf.Steps) != 3 {
		t.Fatalf("steps %+v", wf.Steps)
	}
	want := []plan.Step{
		{Name: "discovery", Tools: []string{"search_components", "list_components", "get_component_info"}, ValidationTools: []string{}, MaxIterations: 10, MaxRetries: 3},
		{Name: "configuration", Tools: []string{"get_config_schema", "validate_config"}, ValidationTools: []string{"validate_config"}, MaxIterations: 10, MaxRetries: 3},
		{Name: "assembly", Tools: []string{"assemble_pipeline", "validate_pipeline", "deploy_pipeline"}, ValidationTools: []string{"validate_pipeline"}, MaxIterations: 10, MaxRetries: 3},
	}
	for i, st := range wf.Steps {
		if !strings.Contains(st.Prompt, "Follow this workflow in order. Do NOT skip steps or go back.") {
			t.Errorf("step %d prompt %q", i, st.Prompt)
		}
		st.Prompt = ""
		if !reflect.DeepEqual(st, want[i]) {
			t.Errorf("step %d: %+v, want %+v", i, st, want[i])
		}
	}
	// Every step's tools are the workflow server's.
	var offered []string
	for tool := range strings.FieldsSeq("search_components list_components get_component_info get_config_schema validate_config assemble_pipeline validate_pipeline deploy_pipeline") {
		offered = append(offered, tool)
	}
	if err := wf.Check(offered); err != nil {
		t.Error(err)
	}
	err = wf.Check(offered[1:])
	if err == nil || err.Error() != `workflow step "discovery": tool "search_components" is not offered by the task (offered: list_components, get_component_info, get_config_schema, validate_config, assemble_pipeline, validate_pipeline, deploy_pipeline)` {
		t.Errorf("check without search_components: %v", err)
	}

	dir := t.TempDir()
	load := func(text string) (*agent.Workflow, error, string) {
		path := filepath.Join(dir, "steps.json")
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		wf, err := agent.LoadWorkflow(path)
		return wf, err, path
	}
	// Defaults: max_iterations 10, max_retries 3; an explicit 0 retries is kept.
	wf, err, _ = load(`[{"name":"a","prompt":"p","tools":["x","v"],"validation_tools":["v"]},{"name":"b","prompt":"q","tools":["y"],"max_retries":0,"max_iterations":4,"validation_tools":null}]`)
	if err != nil {
		t.Fatal(err)
	}
	if st := wf.Steps[0]; st.MaxIterations != 10 || st.MaxRetries != 3 {
		t.Errorf("defaults: %+v", st)
	}
	if st := wf.Steps[1]; st.MaxIterations != 4 || st.MaxRetries != 0 || len(st.ValidationTools) != 0 {
		t.Errorf("explicit values: %+v", st)
	}
	for _, tc := range []struct{ text, want string }{
		{`[{"name":"a","prompt":"p","tools":["x"],"validaton_tools":[]}]`, `step 1 ("a"): unknown key "validaton_tools" (a step's keys are name, prompt, tools, validation_tools, max_iterations, max_retries)`},
		{`[{"name":"a","prompt":"p","tools":["x"]},{"name":"b","prompt":"p","tools":["y"],"validation_tools":["z"]}]`, `step 2 ("b"): validation_tools: "z" is not one of the step's tools (y)`},
		{`[{"name":"a","prompt":"p","tools":[]}]`, `step 1 ("a"): tools: empty; a step offers at least one tool`},
		{`[{"name":"a","prompt":"p"}]`, `step 1 ("a"): tools: empty`},
		{`[{"name":"a","prompt":"p","tools":["x"],"max_iterations":"ten"}]`, `step 1 ("a"): max_iterations: want an integer, got "ten"`},
		{`[{"name":"a","prompt":"p","tools":["x"],"max_iterations":0}]`, `step 1 ("a"): max_iterations: must be at least 1, got 0`},
		{`[{"name":"a","prompt":"p","tools":["x"],"max_retries":-1}]`, `step 1 ("a"): max_retries: must be at least 0, got -1`},
		{`[{"name":"a","prompt":"p","tools":["x"]},{"name":"a","prompt":"p","tools":["x"]}]`, `step 2 ("a"): name: another step has it`},
		{`[{"prompt":"p","tools":["x"]}]`, `step 1: name: missing`},
		{`[{"name":"a","tools":["x"]}]`, `step 1 ("a"): prompt: missing`},
		{`[{"name":"a","prompt":"p","tools":["x","x"]}]`, `step 1 ("a"): tools: "x" twice`},
		{`{"steps":[]}`, `want a JSON array of steps, got a JSON object`},
		{`[]`, `no steps`},
		{"[\n  {\"name\": \"a\",}\n]", `not valid JSON: line 2, column 17`},
		{`["a"]`, `step 1: want a JSON object, got "a"`},
	} {
		_, err, path := load(tc.text)
		if err == nil || !strings.HasPrefix(err.Error(), path+": ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s:\n got %v\nwant %s: ...%s", tc.text, err, path, tc.want)
		}
	}
	if _, err := agent.LoadWorkflow(filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("missing file: %v", err)
	}
}

// ---- end to end: the built-in workflow server and the simulator ----

// recordTools wraps a Chat Completions handler and records the tools each request offered.
type recordTools struct {
	h    http.Handler
	mu   sync.Mutex
	reqs [][]string
}

func (rt *recordTools) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req chatRequest
	json.Unmarshal(body, &req)
	rt.mu.Lock()
	rt.reqs = append(rt.reqs, toolNames(req))
	rt.mu.Unlock()
	r.Body = io.NopCloser(bytes.NewReader(body))
	rt.h.ServeHTTP(w, r)
}

// The workflow policy with data/workflow.steps.json, against the real workflow server and the
// simulator playing data/workflow.jsonl's reference plans: the simulator leaves out the planned
// calls whose tools a step does not offer, so each step makes its own part of the plan and then
// answers; every validation passes; the pipeline is deployed and verify gives reward 1.
func TestWorkflowEndToEndSimulator(t *testing.T) {
	const n = 6
	f, err := os.Open("../../data/workflow.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rd, err := dataset.NewReader(f, "workflow.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var tasks []*dataset.Task
	for len(tasks) < n {
		task, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		if task.Err != nil {
			t.Fatal(task.Err)
		}
		tasks = append(tasks, task)
	}
	ts, err := sim.NewTasks(tasks...)
	if err != nil {
		t.Fatal(err)
	}
	simulator, err := sim.New(ts, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordTools{h: simulator}
	modelSrv := httptest.NewServer(rec)
	defer modelSrv.Close()
	wsrv, err := servers.New("workflow", servers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wsrv.Close()
	resSrv := httptest.NewServer(wsrv)
	defer resSrv.Close()
	toolSrv, err := toolclient.New("workflow", resSrv.URL, http.DefaultTransport)
	if err != nil {
		t.Fatal(err)
	}
	toolSrv.Retry = fastPolicy

	wf, err := agent.LoadWorkflow("../../data/workflow.steps.json")
	if err != nil {
		t.Fatal(err)
	}
	doer := &retry.Doer{Client: &http.Client{}, Policy: fastPolicy}
	c := &agent.Config{Model: agent.NewOpenAIModel(modelSrv.URL+"/v1", "", doer), ModelName: sim.ModelID,
		Policy: agent.PolicyWorkflow, Workflow: wf}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	stepOf := map[string]string{}
	for _, st := range wf.Steps {
		for _, tool := range st.Tools {
			stepOf[tool] = st.Name
		}
	}
	ctx := context.Background()
	for _, task := range tasks {
		rec.mu.Lock()
		rec.reqs = nil
		rec.mu.Unlock()
		sess := toolSrv.NewSession()
		if err := sess.Seed(ctx, task.Raw); err != nil {
			t.Fatal(err)
		}
		tr := c.Run(ctx, task, sess, 3)
		if tr.Termination != agent.Completed || tr.FailureClass != "" {
			t.Fatalf("%s: termination %q failure %q: %s", task.ID, tr.Termination, tr.FailureClass, tr.Error)
		}
		if len(tr.Steps) != 3 {
			t.Fatalf("%s: steps %+v", task.ID, tr.Steps)
		}
		for i, st := range tr.Steps {
			if !st.Completed || st.Attempts != 1 || st.RefusedCalls != 0 || st.RejectedAnswers != 0 || st.ValidationFailures != 0 {
				t.Errorf("%s: step %d: %+v", task.ID, i, st)
			}
			// Each step's rounds call its own tools only, and it made calls.
			calls := 0
			for _, rd := range tr.Rounds[st.FirstRound : st.FirstRound+st.Rounds] {
				for _, call := range rd.ToolCalls {
					calls++
					if stepOf[call.Name] != st.Name {
						t.Errorf("%s: step %s called %s", task.ID, st.Name, call.Name)
					}
				}
			}
			if calls == 0 {
				t.Errorf("%s: step %s made no tool call", task.ID, st.Name)
			}
		}
		// Every request offered exactly one step's tools, the steps in order.
		rec.mu.Lock()
		reqs := rec.reqs
		rec.mu.Unlock()
		k := 0
		for i, got := range reqs {
			for k < len(wf.Steps) && !equalStrings(got, wf.Steps[k].Tools) {
				k++
			}
			if k == len(wf.Steps) {
				t.Fatalf("%s: request %d offered %v: not the current or a later step's tools", task.ID, i, got)
			}
		}
		if want := tr.Steps[0].Rounds + tr.Steps[1].Rounds + tr.Steps[2].Rounds; len(reqs) != want {
			t.Errorf("%s: %d model requests, %d rounds", task.ID, len(reqs), want)
		}

		resp := agent.BuildResponse("resp_"+task.ID, 1, sim.ModelID, task.Params, tr)
		rb, err := json.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		body := task.AppendObject(nil, []string{"response"}, dataset.Field{Key: "response", Value: rb})
		var keys []string
		for _, fl := range task.Fields {
			keys = append(keys, fl.Key)
		}
		v, err := verify.Remote(ctx, sess, body, keys)
		if err != nil {
			t.Fatal(err)
		}
		if v.Reward != 1 {
			t.Errorf("%s: reward %v, components %v\nverify: %s", task.ID, v.Reward, v.Components, v.Answer)
		}
		if v.Components["steps_in_order"] != 1 || v.Components["validated_before_deploy"] != 1 {
			t.Errorf("%s: components %v", task.ID, v.Components)
		}
	}
	if st := simulator.Stats(); st.UnofferedCalls == 0 || st.Planned == 0 {
		t.Errorf("simulator stats %+v: the steps should have left planned calls out", st)
	}
}

// The workflow ends on infrastructure failures like the multi policy: a resource server that
// stops answering ends the rollout (resource_server) after MaxFailedRounds rounds, instead of
// burning the step's iterations and retries.
func TestWorkflowUnreachableServer(t *testing.T) {
	res := wfResource(t)
	m := newFakeModel(t, nil, toolCalls(call{"a", "lookup", `{}`}))
	task := parseTask(t, wfRow)
	c := m.config(nil)
	c.Policy, c.Workflow = agent.PolicyWorkflow, testWorkflow()
	sess := res.session(t, task)
	res.srv.Close()
	tr := c.Run(context.Background(), task, sess, 1)
	if tr.Termination != agent.ToolError || tr.FailureClass != "resource_server" || m.calls() != agent.DefaultMaxFailedRounds {
		t.Errorf("termination %q failure %q model calls %d: %s", tr.Termination, tr.FailureClass, m.calls(), tr.Error)
	}
}
