package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/plan"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/toolclient"
)

// PolicyWorkflow: a multi-step workflow of named steps. The rollout goes through the steps of
// Config.Workflow in order; each step offers only its own tools, has an iteration budget (model
// calls per attempt), accepts a final answer only when its validation tools have all passed,
// shows failed tool calls to the model in structured form, and is retried from its start when
// an attempt fails. See runSteps.
const PolicyWorkflow = "workflow"

// Step defaults: at most 10 model calls per attempt of a step, and 3 retries of a failed step.
const (
	DefaultStepIterations = 10
	DefaultStepRetries    = 3
)

// Workflow is the ordered steps of the workflow policy.
type Workflow struct {
	Steps []plan.Step `json:"steps"`
}

// stepIterations is st.MaxIterations, or DefaultStepIterations when it is not set.
func stepIterations(st *plan.Step) int {
	if st.MaxIterations <= 0 {
		return DefaultStepIterations
	}
	return st.MaxIterations
}

// stepKeys are the keys of a step in a steps file, in order.
var stepKeys = []string{"name", "prompt", "tools", "validation_tools", "max_iterations", "max_retries"}

// LoadWorkflow reads a steps file: a JSON array of steps {name, prompt, tools,
// validation_tools, max_iterations, max_retries}. It is strict: an unknown key, a missing name,
// prompt or tools, a validation tool that is not one of the step's tools, or a value of the
// wrong type is an error naming the file, the step and the key. max_iterations defaults to
// DefaultStepIterations and max_retries to DefaultStepRetries.
func LoadWorkflow(path string) (*Workflow, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	wf, err := ParseWorkflow(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return wf, nil
}

// ParseWorkflow is LoadWorkflow on bytes; its errors do not name a file.
func ParseWorkflow(data []byte) (*Workflow, error) {
	var raws []json.RawMessage
	if err := json.Unmarshal(data, &raws); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "" {
			return nil, fmt.Errorf("want a JSON array of steps, got a JSON %s", te.Value)
		}
		return nil, fmt.Errorf("not valid JSON: %s", jsonErrorAt(err, data))
	}
	wf := &Workflow{}
	for i, raw := range raws {
		st, err := parseStep(raw)
		if err != nil {
			return nil, fmt.Errorf("step %d%s: %w", i+1, quotedName(raw), err)
		}
		wf.Steps = append(wf.Steps, st)
	}
	if err := wf.validate(); err != nil {
		return nil, err
	}
	return wf, nil
}

// quotedName is ` ("NAME")` when raw is an object with a string name, else "".
func quotedName(raw json.RawMessage) string {
	var v struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(raw, &v) == nil && v.Name != "" {
		return fmt.Sprintf(" (%q)", v.Name)
	}
	return ""
}

func parseStep(raw json.RawMessage) (plan.Step, error) {
	st := plan.Step{MaxIterations: DefaultStepIterations, MaxRetries: DefaultStepRetries}
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return st, fmt.Errorf("want a JSON object, got %s", record.Clip(string(t), 40))
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return st, err
	}
	var unknown []string
	for k := range obj {
		if !slices.Contains(stepKeys, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return st, fmt.Errorf("unknown key %q (a step's keys are %s)", unknown[0], strings.Join(stepKeys, ", "))
	}
	field := func(key string, dst any, what string) error {
		v, ok := obj[key]
		if !ok || string(bytes.TrimSpace(v)) == "null" {
			return nil
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return fmt.Errorf("%s: want %s, got %s", key, what, record.Clip(string(v), 60))
		}
		return nil
	}
	for _, f := range []struct {
		key, what string
		dst       any
	}{
		{"name", "a string", &st.Name},
		{"prompt", "a string", &st.Prompt},
		{"tools", "a list of tool names", &st.Tools},
		{"validation_tools", "a list of tool names", &st.ValidationTools},
		{"max_iterations", "an integer", &st.MaxIterations},
		{"max_retries", "an integer", &st.MaxRetries},
	} {
		if err := field(f.key, f.dst, f.what); err != nil {
			return st, err
		}
	}
	if v, ok := obj["max_iterations"]; ok && string(bytes.TrimSpace(v)) != "null" && st.MaxIterations < 1 {
		return st, fmt.Errorf("max_iterations: must be at least 1, got %d", st.MaxIterations)
	}
	return st, nil
}

// jsonErrorAt is a JSON error with its line and column.
func jsonErrorAt(err error, data []byte) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		before := data[:min(int(se.Offset), len(data))]
		line := bytes.Count(before, []byte("\n")) + 1
		col := len(before) - bytes.LastIndexByte(before, '\n')
		return fmt.Sprintf("line %d, column %d: %v", line, col, se)
	}
	return err.Error()
}

// validate checks the steps: at least one; each with a unique name, a prompt, at least one tool
// (no duplicates), validation tools among its tools, no negative budget.
func (w *Workflow) validate() error {
	if w == nil || len(w.Steps) == 0 {
		return errors.New("no steps")
	}
	seen := map[string]bool{}
	for i := range w.Steps {
		st := &w.Steps[i]
		at := fmt.Sprintf("step %d (%q)", i+1, st.Name)
		if strings.TrimSpace(st.Name) == "" {
			return fmt.Errorf("step %d: name: missing", i+1)
		}
		if seen[st.Name] {
			return fmt.Errorf("%s: name: another step has it", at)
		}
		seen[st.Name] = true
		if strings.TrimSpace(st.Prompt) == "" {
			return fmt.Errorf("%s: prompt: missing", at)
		}
		if len(st.Tools) == 0 {
			return fmt.Errorf("%s: tools: empty; a step offers at least one tool", at)
		}
		tools := map[string]bool{}
		for _, t := range st.Tools {
			if t == "" {
				return fmt.Errorf("%s: tools: an empty name", at)
			}
			if tools[t] {
				return fmt.Errorf("%s: tools: %q twice", at, t)
			}
			tools[t] = true
		}
		vals := map[string]bool{}
		for _, t := range st.ValidationTools {
			if !tools[t] {
				return fmt.Errorf("%s: validation_tools: %q is not one of the step's tools (%s)", at, t, strings.Join(st.Tools, ", "))
			}
			if vals[t] {
				return fmt.Errorf("%s: validation_tools: %q twice", at, t)
			}
			vals[t] = true
		}
		if st.MaxIterations < 0 {
			return fmt.Errorf("%s: max_iterations: must be at least 1, got %d", at, st.MaxIterations)
		}
		if st.MaxRetries < 0 {
			return fmt.Errorf("%s: max_retries: must be at least 0, got %d", at, st.MaxRetries)
		}
	}
	return nil
}

// Check says whether a task offering these tools can run the workflow: every step's tools must
// be offered.
func (w *Workflow) Check(offered []string) error {
	if w == nil {
		return errors.New("workflow: no steps")
	}
	set := make(map[string]bool, len(offered))
	for _, t := range offered {
		set[t] = true
	}
	for _, st := range w.Steps {
		for _, t := range st.Tools {
			if !set[t] {
				list := strings.Join(offered, ", ")
				if list == "" {
					list = "none"
				}
				return fmt.Errorf("workflow step %q: tool %q is not offered by the task (offered: %s)", st.Name, t, record.Clip(list, 2000))
			}
		}
	}
	return nil
}

// validateSteps checks the tool mode and the workflow (called by Validate).
func (c *Config) validateSteps() error {
	switch c.ToolMode {
	case "", ToolModeNative, ToolModeJSON:
	default:
		return fmt.Errorf("agent: unknown tool mode %q (want %s or %s)", c.ToolMode, ToolModeNative, ToolModeJSON)
	}
	if c.Policy == PolicySingle && c.ToolMode == ToolModeJSON {
		return fmt.Errorf("agent: tool mode %s works with the %s and %s policies, not %s", ToolModeJSON, PolicyMulti, PolicyWorkflow, PolicySingle)
	}
	if c.Policy != PolicyWorkflow {
		return nil
	}
	if c.Workflow == nil {
		return errors.New("agent: the workflow policy needs its steps (a steps file)")
	}
	if err := c.Workflow.validate(); err != nil {
		return fmt.Errorf("agent: workflow: %w", err)
	}
	return nil
}

// StepTrace is the record of one workflow step in a trajectory.
type StepTrace struct {
	Name string `json:"name"`
	// Attempts is how many attempts the step got (1 + the retries used).
	Attempts int `json:"attempts"`
	// Iterations counts the step's model calls, over all attempts.
	Iterations int `json:"iterations"`
	// ValidationFailures counts validation-tool answers that did not pass.
	ValidationFailures int `json:"validation_failures"`
	// RejectedAnswers counts final answers refused because validations had not all passed.
	RejectedAnswers int `json:"rejected_answers"`
	// RefusedCalls counts calls of tools outside the step (never sent to the server).
	RefusedCalls int `json:"refused_calls"`
	// InvalidAnswers counts JSON-mode answers refused as malformed.
	InvalidAnswers int `json:"invalid_answers,omitempty"`
	// FirstRound is the index in Trajectory.Rounds of the step's first round; Rounds is the
	// number of its rounds (all attempts).
	FirstRound int `json:"first_round"`
	Rounds     int `json:"rounds"`
	// Completed: a final answer of the step was accepted; Result is its text.
	Completed bool   `json:"completed"`
	Result    string `json:"result,omitempty"`
	// Failures are the failed attempts, in order.
	Failures []StepFailure `json:"failures,omitempty"`
}

// StepFailure is one failed attempt of a step.
type StepFailure struct {
	Attempt int `json:"attempt"` // 1-based
	// Reason is max_rounds (out of iterations) or invalid_output (too many invalid JSON-mode
	// answers in a row).
	Reason Termination `json:"reason"`
	// Messages are the attempt's messages, which the retry did not see (they are not in
	// Trajectory.Messages); nil for the last attempt, whose messages stay there.
	Messages []openai.ChatCompletionMessage `json:"messages,omitempty"`
}

// stepRun is one rollout of the workflow policy, or of the multi policy in JSON mode (one
// step offering every tool, MaxRounds iterations, no retry).
type stepRun struct {
	c        *Config
	p        *dataset.Params
	tools    Tools
	budget   *toolBudget // what is left of the rollout's MaxToolBytes
	tr       *Trajectory
	req      openai.ChatCompletionRequest
	json     bool
	workflow bool
	// consecutive rounds in which every tool call failed / was unreachable / timed out
	failedRounds, unreachableRounds, timedOutRounds int
}

// attemptEnd is how a step attempt ended.
type attemptEnd int

const (
	attemptAccepted attemptEnd = iota // a final answer was accepted
	attemptFailed                     // out of iterations, or of invalid answers: retry
	rolloutEnded                      // the trajectory's termination is set
)

// runSteps runs a rollout of the workflow policy, or of the multi policy in JSON mode.
//
// Per step, in order: a user message with the previous steps' results ("Result of step NAME:
// TEXT") and the step's prompt (in JSON mode also the step's tools); then model calls, at most
// MaxIterations per attempt, offering only the step's tools. A call of another tool is refused
// without reaching the server. A final answer (no tool calls) is accepted when every validation
// tool of the step was called in the attempt and its last round of answers passed; otherwise
// the model is told what failed and the attempt goes on. Failed tool calls (HTTP errors,
// validation answers that did not pass, refused calls) are shown in <tool_response> blocks. An
// attempt that runs out of iterations (or, in JSON mode, gets DefaultMaxInvalidAnswers invalid
// answers in a row) is retried from the step's start context; when every attempt failed the
// rollout ends (max_rounds or invalid_output) and is still verified. The rollout's final answer
// is the last step's. The workflow ends on infrastructure failures like the multi policy
// (timeouts, an unreachable server), not on ordinary failed tool calls: the step budget bounds
// those.
func (c *Config) runSteps(ctx context.Context, task *dataset.Task, tools Tools, seed int64) *Trajectory {
	p := task.Params
	tr := &Trajectory{Messages: ChatMessages(p)}
	r := &stepRun{c: c, p: p, tools: tools, budget: &toolBudget{left: c.maxToolBytes()}, tr: tr, req: c.baseRequest(p, seed),
		json: c.ToolMode == ToolModeJSON, workflow: c.Policy == PolicyWorkflow}
	offered := make([]string, len(p.Tools))
	for i, t := range p.Tools {
		offered[i] = t.Name
	}
	var steps []plan.Step
	if r.workflow {
		if err := c.Workflow.Check(offered); err != nil {
			tr.FailureClass, tr.Error = record.FailBadTask, err.Error()
			return tr
		}
		steps = c.Workflow.Steps
	} else {
		rounds := c.MaxRounds
		if rounds <= 0 {
			rounds = DefaultMaxRounds
		}
		steps = []plan.Step{{Tools: offered, MaxIterations: rounds}}
	}
	if r.json {
		r.addSystem(jsonModeInstructions(p.Tools, r.workflow))
	}
	var results []string
	for i := range steps {
		st := &steps[i]
		trace := &StepTrace{}
		if r.workflow {
			tr.Steps = append(tr.Steps, StepTrace{Name: st.Name, FirstRound: len(tr.Rounds)})
			trace = &tr.Steps[len(tr.Steps)-1]
			tr.Messages = append(tr.Messages, userMessage(r.stepMessage(steps[:i], results, st)))
		}
		r.offer(st)
		start := len(tr.Messages)
		attempts := 1 + max(st.MaxRetries, 0)
		var reason Termination
		accepted := false
		var result string
		for a := 1; a <= attempts && !accepted; a++ {
			trace.Attempts = a
			end, why, text := r.attempt(ctx, st, trace)
			trace.Rounds = len(tr.Rounds) - trace.FirstRound
			switch end {
			case rolloutEnded:
				return tr
			case attemptAccepted:
				accepted, result = true, text
			case attemptFailed:
				reason = why
				f := StepFailure{Attempt: a, Reason: why}
				if a < attempts {
					f.Messages = slices.Clone(tr.Messages[start:])
					tr.Messages = tr.Messages[:start]
				}
				trace.Failures = append(trace.Failures, f)
			}
		}
		if !accepted {
			tr.Termination = reason
			if n := len(tr.Rounds); n > 0 {
				tr.FinalText = tr.Rounds[n-1].Content
			}
			if r.workflow {
				last := "no accepted final answer"
				if reason == InvalidOutput {
					last = fmt.Sprintf("%d invalid answers in a row", DefaultMaxInvalidAnswers)
				}
				tr.Error = fmt.Sprintf("workflow step %q: all %d attempts failed (at most %d model calls each); the last: %s", st.Name, attempts, stepIterations(st), last)
			} else if reason == InvalidOutput {
				tr.Error = fmt.Sprintf("%d invalid JSON-mode answers in a row", DefaultMaxInvalidAnswers)
			}
			return tr
		}
		trace.Completed, trace.Result = true, result
		results = append(results, result)
		tr.FinalText = result
	}
	tr.Termination = Completed
	return tr
}

// addSystem adds JSON mode's instructions to the first system message, or as one before the
// conversation.
func (r *stepRun) addSystem(text string) {
	msgs := r.tr.Messages
	if len(msgs) > 0 && msgs[0].Role == openai.ChatMessageRoleSystem && len(msgs[0].MultiContent) == 0 {
		msgs[0].Content += "\n\n" + text
		return
	}
	r.tr.Messages = append([]openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleSystem, Content: text}}, msgs...)
}

// stepMessage starts a step: the previous steps' results, the step's prompt and, in JSON
// mode, the step's tools.
func (r *stepRun) stepMessage(done []plan.Step, results []string, st *plan.Step) string {
	var b strings.Builder
	for i := range done {
		fmt.Fprintf(&b, "Result of step %s: %s\n", done[i].Name, results[i])
	}
	if len(done) > 0 {
		b.WriteByte('\n')
	}
	b.WriteString(st.Prompt)
	if r.json {
		b.WriteString("\n\n")
		b.WriteString(describeTools("Tools you may call in this step, and no others", r.stepTools(st)))
	}
	return strings.TrimRight(b.String(), "\n")
}

// stepTools are the task's tools the step offers, in the step's order.
func (r *stepRun) stepTools(st *plan.Step) []dataset.Tool {
	out := make([]dataset.Tool, 0, len(st.Tools))
	for _, name := range st.Tools {
		for _, t := range r.p.Tools {
			if t.Name == name {
				out = append(out, t)
				break
			}
		}
	}
	return out
}

// offer sets the request's tools for a step: its own (none in JSON mode).
func (r *stepRun) offer(st *plan.Step) {
	r.req.Tools, r.req.ToolChoice, r.req.ParallelToolCalls = nil, nil, nil
	if r.json {
		r.req.ResponseFormat = jsonModeFormat(r.stepTools(st))
		return
	}
	r.req.Tools = ChatTools(r.stepTools(st))
	if len(r.req.Tools) == 0 {
		return
	}
	choice := ChatToolChoice(r.p.ToolChoice)
	if tc, ok := choice.(openai.ToolChoice); ok && !slices.Contains(st.Tools, tc.Function.Name) {
		choice = nil // the row forces a tool this step does not offer
	}
	r.req.ToolChoice = choice
	if r.p.ParallelToolCalls != nil {
		r.req.ParallelToolCalls = *r.p.ParallelToolCalls
	}
}

// attempt runs one attempt of a step; on attemptAccepted it returns the final answer's text,
// on attemptFailed why.
func (r *stepRun) attempt(ctx context.Context, st *plan.Step, trace *StepTrace) (attemptEnd, Termination, string) {
	tr := r.tr
	allowed := make(map[string]bool, len(st.Tools))
	for _, t := range st.Tools {
		allowed[t] = true
	}
	isValidation := make(map[string]bool, len(st.ValidationTools))
	for _, t := range st.ValidationTools {
		isValidation[t] = true
	}
	lastValidation := map[string][]validationAnswer{} // the last round of answers of each validation tool
	invalidRun := 0
	for range stepIterations(st) {
		trace.Iterations++
		idx := len(tr.Rounds)
		r.req.Messages = tr.Messages
		resp, latency, tap, err := r.c.call(ctx, r.req, lastRound(tr))
		if err != nil {
			term, class := modelFailure(ctx, err)
			tr.Termination, tr.FailureClass, tr.Error = term, class, fmt.Sprintf("model call in round %d: %s", idx, modelErrorText(err, term, tap))
			return rolloutEnded, "", ""
		}
		if len(resp.Choices) == 0 {
			tr.Termination, tr.FailureClass = InvalidOutput, record.FailModelError
			tr.Error = fmt.Sprintf("model call in round %d: the answer has no choices", idx)
			return rolloutEnded, "", ""
		}
		rd := newRound(&resp, idx, latency)
		r.c.captureTokens(ctx, &rd, tap)
		tr.Usage.add(rd.Usage)
		msg := &resp.Choices[0].Message
		if rd.FinishReason == finishLength {
			hist := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: msg.Content}
			if !r.json {
				hist = historyMessage(msg, idx)
			}
			cutOff(tr, rd, hist)
			return rolloutEnded, "", ""
		}

		var calls []openai.ToolCall
		if r.json {
			tr.Messages = append(tr.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: msg.Content})
			ans, perr := ParseJSONAnswer(msg.Content)
			if perr == nil {
				perr = r.checkNames(ans, st, allowed)
			}
			if perr != nil {
				tr.Rounds = append(tr.Rounds, rd)
				tr.InvalidAnswers++
				trace.InvalidAnswers++
				invalidRun++
				tr.Messages = append(tr.Messages, userMessage(invalidAnswerMessage(perr)))
				if invalidRun >= DefaultMaxInvalidAnswers {
					return attemptFailed, InvalidOutput, ""
				}
				continue
			}
			invalidRun = 0
			if ans.Reasoning != "" {
				rd.Reasoning = strings.TrimSpace(rd.Reasoning + "\n\n" + ans.Reasoning)
			}
			rd.Content = "" // the calls are the round's function_call items
			if ans.Final() {
				rd.Content = ans.ResultText()
			}
			for i, c := range ans.ToolCalls {
				calls = append(calls, openai.ToolCall{ID: callID("", idx, i), Type: openai.ToolTypeFunction,
					Function: openai.FunctionCall{Name: c.Name, Arguments: string(c.Arguments)}})
			}
		} else {
			hist := historyMessage(msg, idx)
			tr.Messages = append(tr.Messages, hist)
			calls = hist.ToolCalls
		}
		if n := len(calls); n > r.c.maxToolCalls() {
			// None of the calls is made (nor kept in the history, where they would have no
			// answers): the rollout ends with the answer it has.
			if last := &tr.Messages[len(tr.Messages)-1]; len(last.ToolCalls) > 0 {
				last.ToolCalls = nil
			}
			tr.Rounds = append(tr.Rounds, rd)
			tr.Termination, tr.Error = InvalidOutput, r.c.tooManyToolCalls(idx, n)
			return rolloutEnded, "", ""
		}

		if len(calls) == 0 {
			tr.Rounds = append(tr.Rounds, rd)
			if problem := validationProblems(st, lastValidation); problem != "" {
				trace.RejectedAnswers++
				tr.Messages = append(tr.Messages, userMessage(problem))
				continue
			}
			return attemptAccepted, Completed, rd.Content
		}

		allFailed, allUnreachable, allTimedOut := true, true, true
		rd.ToolCalls = make([]ToolCall, 0, len(calls))
		roundValidation := map[string][]validationAnswer{}
		var blocks []string
		for _, tc := range calls {
			call := ToolCall{CallID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}
			start := time.Now()
			var res toolclient.Result
			if !allowed[call.Name] {
				// Never sent: another step's tool, or no tool of the task at all.
				res = toolclient.Result{Output: notInStep(call.Name, st, r.workflow, r.p.Tools), Failed: true}
				trace.RefusedCalls++
			} else {
				res = r.tools.CallTool(ctx, call.Name, call.Arguments)
			}
			res = r.budget.take(call.Name, res)
			call.LatencyMs = ms(time.Since(start))
			call.Output, call.Status, call.Failed, call.Unreachable, call.TimedOut = res.Output, res.Status, res.Failed, res.Unreachable, res.TimedOut
			call.OriginalBytes = res.OriginalBytes
			shownFailed := res.Failed
			if allowed[call.Name] && isValidation[call.Name] {
				v := readValidation(res)
				roundValidation[call.Name] = append(roundValidation[call.Name], v)
				if !v.passed {
					trace.ValidationFailures++
					shownFailed = true
				}
			}
			allFailed = allFailed && res.Failed
			allUnreachable = allUnreachable && res.Unreachable
			allTimedOut = allTimedOut && res.TimedOut
			rd.ToolCalls = append(rd.ToolCalls, call)
			if r.json {
				blocks = append(blocks, toolResponse(call.Name, res.Output, shownFailed))
				continue
			}
			content := res.Output
			if shownFailed && r.workflow {
				content = toolResponse(call.Name, res.Output, true)
			}
			tr.Messages = append(tr.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: call.CallID, Content: content})
		}
		for name, v := range roundValidation {
			lastValidation[name] = v
		}
		if r.json {
			tr.Messages = append(tr.Messages, userMessage(strings.Join(blocks, "\n")))
		}
		tr.Rounds = append(tr.Rounds, rd)
		if ctx.Err() != nil {
			tr.Termination, tr.FailureClass = Timeout, record.FailTimeout
			if ctxCancelled(ctx) {
				tr.Termination, tr.FailureClass = Cancelled, record.FailCancelled
			}
			tr.Error = fmt.Sprintf("tool calls of round %d: %v", idx, ctx.Err())
			return rolloutEnded, "", ""
		}
		if r.streaks(&rd, allFailed, allUnreachable, allTimedOut) {
			return rolloutEnded, "", ""
		}
	}
	return attemptFailed, MaxRounds, ""
}

// streaks counts consecutive failed rounds and ends the rollout like the multi policy does:
// timeouts and an unreachable server always; any other all-failed rounds only outside the
// workflow policy, whose step budget bounds them.
func (r *stepRun) streaks(rd *Round, allFailed, allUnreachable, allTimedOut bool) bool {
	bump := func(n *int, hit bool) {
		if hit {
			*n++
		} else {
			*n = 0
		}
	}
	bump(&r.failedRounds, allFailed)
	bump(&r.unreachableRounds, allUnreachable)
	bump(&r.timedOutRounds, allTimedOut)
	limit := r.c.MaxFailedRounds
	if limit <= 0 {
		limit = DefaultMaxFailedRounds
	}
	tr := r.tr
	switch {
	case r.timedOutRounds >= limit:
		tr.Termination, tr.FailureClass = Timeout, record.FailTimeout
		tr.Error = fmt.Sprintf("every tool call timed out in %d consecutive rounds: %s", r.timedOutRounds, errClip(rd.ToolCalls[0].Output))
	case r.unreachableRounds >= limit:
		tr.Termination, tr.FailureClass = ToolError, record.FailResourceServer
		tr.Error = fmt.Sprintf("resource server unreachable in %d consecutive rounds: %s", r.unreachableRounds, errClip(rd.ToolCalls[0].Output))
	case !r.workflow && r.failedRounds >= limit:
		tr.Termination = ToolError
		tr.Error = fmt.Sprintf("every tool call failed in %d consecutive rounds", r.failedRounds)
	default:
		return false
	}
	return true
}

// checkNames refuses a JSON-mode answer calling a tool the step does not offer.
func (r *stepRun) checkNames(ans *JSONAnswer, st *plan.Step, allowed map[string]bool) error {
	var bad []string
	for i, c := range ans.ToolCalls {
		if !allowed[c.Name] {
			bad = append(bad, fmt.Sprintf("- at '/tool_calls/%d/name': %s", i, strings.TrimPrefix(notInStep(c.Name, st, r.workflow, r.p.Tools), "Error: ")))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("the answer calls tools that are not available:\n%s", strings.Join(bad, "\n"))
}

// notInStep is what the model is told when it calls a tool the step does not offer.
func notInStep(name string, st *plan.Step, workflow bool, offered []dataset.Tool) string {
	if !workflow {
		return unknownTool(name, offered)
	}
	return fmt.Sprintf("Error: tool %s is not available in step %q; available: %s", record.Clip(name, 100), st.Name, strings.Join(st.Tools, ", "))
}

func userMessage(s string) openai.ChatCompletionMessage {
	return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: s}
}

// validationAnswer is one answer of a validation tool.
type validationAnswer struct {
	passed bool
	issues []validationIssue
	output string
	status int
}

type validationIssue struct {
	property, message string
}

// readValidation reads a validation tool's answer: it passed when the call succeeded and the
// answer is a JSON object with "valid": true. Errors are read from "errors": objects with
// property (or field, path) and message (or msg, error), or strings.
func readValidation(res toolclient.Result) validationAnswer {
	v := validationAnswer{output: res.Output, status: res.Status}
	var body struct {
		Valid  *bool             `json:"valid"`
		Errors []json.RawMessage `json:"errors"`
	}
	if json.Unmarshal([]byte(res.Output), &body) != nil {
		body.Valid, body.Errors = nil, nil
	}
	v.passed = !res.Failed && body.Valid != nil && *body.Valid
	for _, raw := range body.Errors {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			v.issues = append(v.issues, validationIssue{message: s})
			continue
		}
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			continue
		}
		v.issues = append(v.issues, validationIssue{
			property: firstText(obj, "property", "field", "path", "loc"),
			message:  firstText(obj, "message", "msg", "error"),
		})
	}
	return v
}

// firstText is the first of keys present in obj, as text (a string unquoted, else its JSON).
func firstText(obj map[string]json.RawMessage, keys ...string) string {
	for _, k := range keys {
		raw, ok := obj[k]
		if !ok {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
		return string(raw)
	}
	return ""
}

// validationProblems is what the model is told when it gives a final answer before the step's
// validations have all passed, or "" when they have:
//
//	You returned a final response but validations have not all passed.
//	Validation Errors Found:
//	1. Property: channel
//	   Message: Required field 'channel' is missing
//	Validation tools not called yet in this step: validate_pipeline
//	Please fix the errors and call the validation tools again.
//
// The errors are those of the last round of answers of each validation tool; an answer that
// failed without listing errors is shown as "N. Tool: NAME" with its answer.
func validationProblems(st *plan.Step, last map[string][]validationAnswer) string {
	var issues []string
	var notCalled []string
	for _, name := range st.ValidationTools {
		answers, ok := last[name]
		if !ok {
			notCalled = append(notCalled, name)
			continue
		}
		for _, a := range answers {
			if a.passed {
				continue
			}
			if len(a.issues) == 0 {
				what := record.Clip(a.output, 500)
				if a.status != 0 && a.status/100 != 2 {
					what = fmt.Sprintf("HTTP %d: %s", a.status, what)
				}
				issues = append(issues, fmt.Sprintf("Tool: %s\n   Message: %s", name, what))
				continue
			}
			for _, is := range a.issues {
				prop := is.property
				if prop == "" {
					prop = "(not given)"
				}
				issues = append(issues, fmt.Sprintf("Property: %s\n   Message: %s", prop, is.message))
			}
		}
	}
	if len(issues) == 0 && len(notCalled) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("You returned a final response but validations have not all passed.\n")
	if len(issues) > 0 {
		b.WriteString("Validation Errors Found:\n")
		for i, s := range issues {
			fmt.Fprintf(&b, "%d. %s\n", i+1, s)
		}
	}
	if len(notCalled) > 0 {
		fmt.Fprintf(&b, "Validation tools not called yet in this step: %s\n", strings.Join(notCalled, ", "))
	}
	b.WriteString("Please fix the errors and call the validation tools again.")
	return b.String()
}
