// Package agent runs one rollout: the model client (Chat Completions through Model, native or
// JSON-mode tool calls, redaction of secrets), the policy loop (multi-step, single-step or a
// workflow of named steps) and the trajectory it records, in rollout's JSON and as a NeMo Gym
// response. Tool calls go through the Tools interface; package toolclient is the
// resource-server client that implements it.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/toolclient"
	"github.com/rollout-dev/rollout/pkg/wire"
)

// Termination is how the agent loop ended (docs/ARCHITECTURE.md, "Terminations and failure classes").
type Termination string

// Terminations.
const (
	Completed     Termination = "completed"
	MaxRounds     Termination = "max_rounds"
	ContextLength Termination = "context_length"
	ModelError    Termination = "model_error"
	ToolError     Termination = "tool_error"
	VerifyError   Termination = "verify_error"
	Timeout       Termination = "timeout"
	Cancelled     Termination = "cancelled"
	InvalidOutput Termination = "invalid_output"
	// Length: the model's answer was cut off by max_tokens (finish_reason "length"). The
	// answer is the model's result: the rollout ends there, any tool call in the cut answer
	// is not made, and the rollout is verified like max_rounds.
	Length Termination = "length"
	// Degraded: with --degrade, after MaxFailedRounds consecutive rounds of failed tool calls,
	// one last model call without tools gave the final answer, which is verified.
	Degraded Termination = "degraded"
)

// Usage is token usage summed over a rollout or one round.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	CachedTokens     int `json:"cached_tokens,omitempty"`
	ReasoningTokens  int `json:"reasoning_tokens,omitempty"`
}

func (u *Usage) add(v Usage) {
	u.PromptTokens += v.PromptTokens
	u.CompletionTokens += v.CompletionTokens
	u.CachedTokens += v.CachedTokens
	u.ReasoningTokens += v.ReasoningTokens
}

func usageOf(u openai.Usage) Usage {
	v := Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens}
	if u.PromptTokensDetails != nil {
		v.CachedTokens = u.PromptTokensDetails.CachedTokens
	}
	if u.CompletionTokensDetails != nil {
		v.ReasoningTokens = u.CompletionTokensDetails.ReasoningTokens
	}
	return v
}

// ToolCall is one tool call of a round and its result. Arguments and
// output are in the trajectory's messages; they are not repeated here.
type ToolCall struct {
	CallID      string  `json:"call_id"`
	Name        string  `json:"name"`
	Arguments   string  `json:"-"`
	Output      string  `json:"-"`
	Status      int     `json:"status,omitempty"`
	Failed      bool    `json:"failed,omitempty"`
	Unreachable bool    `json:"unreachable,omitempty"`
	TimedOut    bool    `json:"timed_out,omitempty"`
	LatencyMs   float64 `json:"latency_ms"`
	// OriginalBytes is set when Output was cut (at the tool-result cap or the rollout's
	// budget, MaxToolBytes): the answer's size before the cut, -1 when it is not known.
	OriginalBytes int64 `json:"original_bytes,omitempty"`
}

// toolBudget is what is left of a rollout's MaxToolBytes.
type toolBudget struct{ left int64 }

// take cuts res to what is left of the budget, and spends it.
func (b *toolBudget) take(name string, res toolclient.Result) toolclient.Result {
	n := int64(len(res.Output))
	if n <= b.left {
		b.left -= n
		return res
	}
	orig := n
	if res.OriginalBytes != 0 {
		orig = res.OriginalBytes
	}
	res.Output = fmt.Sprintf("%s\n[cut: this rollout's tool results reached their bound (--max-tool-bytes); the answer of %s was %d bytes]", strings.ToValidUTF8(res.Output[:b.left], ""), name, n)
	b.left = 0
	res.OriginalBytes, res.Failed = orig, true
	return res
}

// Round is one model call plus the tool calls it asked for.
type Round struct {
	Index          int     `json:"index"`
	ModelLatencyMs float64 `json:"model_latency_ms"`
	Usage          Usage   `json:"usage"`
	FinishReason   string  `json:"finish_reason"`
	Content        string  `json:"-"`
	// Reasoning is the answer's reasoning_content, kept for training data (export).
	Reasoning string     `json:"reasoning,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`

	// Endpoint names the endpoint of a pool that answered (wire.EndpointHeader); "" with one endpoint.
	Endpoint string `json:"endpoint,omitempty"`
	// The call's tokens, with --capture-tokens (tokens.go): the prompt's ids, the generated
	// ids and their log-probabilities under the sampling policy, NeMo Gym's names. TokenNote
	// says what the endpoint did not return.
	PromptTokenIDs     []int32   `json:"prompt_token_ids,omitempty"`
	GenerationTokenIDs []int32   `json:"generation_token_ids,omitempty"`
	GenerationLogProbs []float64 `json:"generation_log_probs,omitempty"`
	TokenNote          string    `json:"token_note,omitempty"`
}

// Trajectory is the full history of a rollout: the chat messages, rounds
// with their usage and timing, and how it ended.
type Trajectory struct {
	Messages    []openai.ChatCompletionMessage `json:"messages"`
	Rounds      []Round                        `json:"rounds"`
	Usage       Usage                          `json:"usage"`
	Termination Termination                    `json:"termination"`
	// FailureClass is set when infrastructure failed (no reward then).
	FailureClass record.FailureClass `json:"failure_class,omitempty"`
	Error        string              `json:"error,omitempty"`
	// FinalText is the model's last answer.
	FinalText string `json:"-"`
	// Steps is the workflow policy's per-step record (workflow.go); nil for other policies.
	Steps []StepTrace `json:"steps,omitempty"`
	// InvalidAnswers counts JSON-mode answers refused as malformed (jsonmode.go).
	InvalidAnswers int `json:"invalid_answers,omitempty"`
	// Context is what the context strategy sent and removed per round, and the briefings
	// (context.go); nil with the full strategy and without Degrade.
	Context *ContextTrace `json:"context,omitempty"`
}

// ToolCalls counts the tool calls, failed ones and distinct names.
func (t *Trajectory) ToolCalls() (calls, failed int, names []string) {
	seen := map[string]bool{}
	for _, r := range t.Rounds {
		for _, c := range r.ToolCalls {
			calls++
			if c.Failed {
				failed++
			}
			if !seen[c.Name] {
				seen[c.Name] = true
				names = append(names, c.Name)
			}
		}
	}
	return calls, failed, names
}

// Tools is what a rollout calls tools through; *toolclient.Session implements it.
type Tools interface {
	CallTool(ctx context.Context, name, arguments string) toolclient.Result
}

// Config is the agent's settings; it is shared by all rollouts of a run.
type Config struct {
	Model     Model
	ModelName string
	// Policy is how rounds go: PolicyMulti (the default), PolicySingle or PolicyWorkflow.
	Policy string
	// MaxRounds bounds the rounds of a rollout (default 10, never unlimited).
	MaxRounds int
	// MaxToolCalls bounds the tool calls of one model answer (default 64): an answer with more
	// ends the rollout as invalid_output, and none of its calls is made.
	MaxToolCalls int
	// MaxToolBytes bounds the bytes of tool results one rollout keeps (default
	// DefaultMaxToolBytes): past it, a result is cut to what is left (nothing at the end), the
	// call counts as failed, and the cut is recorded with the result's size, so that a
	// resource server cannot make one trajectory, and every request of its history, hundreds
	// of MiB.
	MaxToolBytes int64
	// MaxFailedRounds ends a rollout as tool_error after this many
	// consecutive rounds in which every tool call failed (default 2).
	MaxFailedRounds int
	// ModelTimeout bounds one model call (0: only the rollout's deadline).
	ModelTimeout time.Duration
	// Temperature overrides the rows' temperature when set.
	Temperature *float64
	// MaxTokens overrides the rows' max_output_tokens when > 0.
	MaxTokens int
	// Workflow is the steps of PolicyWorkflow (workflow.go); other policies ignore it.
	Workflow *Workflow
	// ToolMode is how tools reach the model: ToolModeNative ("" too) or ToolModeJSON (jsonmode.go).
	ToolMode string
	// CaptureTokens, when set, asks each model call for its token ids and log-probs and keeps
	// them in the round (tokens.go). One is shared by all the rollouts of a run.
	CaptureTokens *TokenCapture
	// Context is what the model is shown of the conversation each round (context.go); the zero
	// value sends it all. Policies single and multi, native tool mode.
	Context ContextStrategy
	// BriefingPrompt is the briefing strategy's request after each round ("":
	// DefaultBriefingPrompt).
	BriefingPrompt string
	// Request is the run's request options (request.go): one JSON object merged over the body
	// of every model call, after the row's own options; nil: none. ArmRequest, an arm's own,
	// is merged after it.
	Request, ArmRequest json.RawMessage
	// Degrade: after MaxFailedRounds consecutive rounds of failed tool calls, one last model
	// call without tools asks for the best answer (termination Degraded) instead of ending
	// the rollout as tool_error.
	Degrade bool
}

// Policies.
const (
	// PolicyMulti: rounds until the model answers without tool calls, up to MaxRounds; the
	// tools are offered in every round.
	PolicyMulti = "multi"
	// PolicySingle: at most one round of tool calls; then one more model call without tools
	// for the final answer (the single-step baseline: the tools are removed after the first round).
	PolicySingle = "single"
)

// Defaults.
const (
	DefaultMaxRounds       = 10
	DefaultMaxFailedRounds = 2
	DefaultMaxToolCalls    = 64
	// DefaultMaxToolBytes is 16 MiB of tool results in one rollout.
	DefaultMaxToolBytes = 16 << 20
)

// Validate checks the settings and fills defaults.
func (c *Config) Validate() error {
	if c.Model == nil {
		return fmt.Errorf("agent: no model")
	}
	if c.ModelName == "" {
		return fmt.Errorf("agent: no model name (--model)")
	}
	switch c.Policy {
	case "":
		c.Policy = PolicyMulti
	case PolicyMulti, PolicySingle, PolicyWorkflow:
	default:
		return fmt.Errorf("agent: unknown policy %q (want %s, %s or %s)", c.Policy, PolicySingle, PolicyMulti, PolicyWorkflow)
	}
	if c.MaxRounds == 0 {
		c.MaxRounds = DefaultMaxRounds
	}
	if c.MaxRounds < 1 {
		return fmt.Errorf("max rounds must be at least 1, got %d", c.MaxRounds)
	}
	if c.MaxFailedRounds == 0 {
		c.MaxFailedRounds = DefaultMaxFailedRounds
	}
	if c.MaxToolCalls == 0 {
		c.MaxToolCalls = DefaultMaxToolCalls
	}
	if c.MaxToolCalls < 1 {
		return fmt.Errorf("max tool calls must be at least 1, got %d", c.MaxToolCalls)
	}
	if c.MaxToolBytes == 0 {
		c.MaxToolBytes = DefaultMaxToolBytes
	}
	if c.MaxToolBytes < 1 {
		return fmt.Errorf("max tool bytes must be at least 1, got %d", c.MaxToolBytes)
	}
	if c.MaxFailedRounds < 1 {
		return fmt.Errorf("max failed rounds must be at least 1, got %d", c.MaxFailedRounds)
	}
	if (c.Context.trimmed() || c.Degrade) && (c.Policy == PolicyWorkflow || c.ToolMode == ToolModeJSON) {
		return fmt.Errorf("context %s and degrade apply to the single and multi policies in native tool mode", c.Context)
	}
	if c.Temperature != nil && (*c.Temperature < 0 || *c.Temperature > 2) {
		return fmt.Errorf("temperature must be in [0, 2], got %g", *c.Temperature)
	}
	return c.validateSteps()
}

// Run runs the multi-step loop of one rollout: rounds
// until the model answers without tool calls or MaxRounds is reached; all
// tools offered every round; every tool call of a round executed in order
// before the next model call. It never returns an error: how the rollout
// ended is in the trajectory.
func (c *Config) Run(ctx context.Context, task *dataset.Task, tools Tools, seed int64) *Trajectory {
	ctx = withRequestPatches(ctx, c.requestPatches(task.Params.ChatOptions()))
	if c.Policy == PolicyWorkflow || c.ToolMode == ToolModeJSON {
		return c.runSteps(ctx, task, tools, seed) // workflow.go
	}
	p := task.Params
	tr := &Trajectory{Messages: ChatMessages(p)}
	req := c.multiRequest(p, seed)
	offered := make(map[string]bool, len(p.Tools))
	for _, t := range p.Tools {
		offered[t.Name] = true
	}

	cv := &conversation{nTask: len(tr.Messages)}
	if c.Context.trimmed() || c.Degrade {
		tr.Context = &ContextTrace{Strategy: c.Context.String()}
	}
	briefing := "" // the briefing strategy's last briefing

	failedRounds, unreachableRounds, timedOutRounds := 0, 0, 0
	budget := &toolBudget{left: c.maxToolBytes()}
	toolsRemoved := false // single-step: the final call, without tools
	for round := 0; ; round++ {
		var cr *ContextRound
		req.Messages, cr = cv.send(c.Context, tr, briefing)
		var resp openai.ChatCompletionResponse
		latency, tap, err := c.callInto(ctx, &req, lastRound(tr), &resp)
		if err != nil {
			modelCallFailed(ctx, tr, err, tap, round)
			return tr
		}
		if len(resp.Choices) == 0 {
			tr.Termination, tr.FailureClass = InvalidOutput, record.FailModelError
			tr.Error = fmt.Sprintf("model call in round %d: the answer has no choices", round)
			return tr
		}
		rd := newRound(&resp, round, latency)
		c.captureTokens(ctx, &rd, tap)
		tr.Usage.add(rd.Usage)
		if cr != nil {
			cr.PromptTokens = rd.Usage.PromptTokens
		}
		msg := &resp.Choices[0].Message
		hist := historyMessage(msg, round)
		if rd.FinishReason == finishLength {
			cutOffAt(tr, &rd, &hist)
			return tr
		}
		if toolsRemoved && len(hist.ToolCalls) > 0 {
			// Asked for tools after they were taken away: the calls are not made (nor kept
			// in the history, where they would have no answers); the policy's bound is hit.
			hist.ToolCalls = nil
			tr.Messages = append(tr.Messages, hist)
			tr.Rounds = append(tr.Rounds, rd)
			tr.FinalText = msg.Content
			tr.Termination = MaxRounds
			return tr
		}
		if n := len(hist.ToolCalls); n > c.maxToolCalls() {
			// None of the calls is made, nor kept (they would have no answers); the answer is
			// the model's, scored as it is.
			hist.ToolCalls = nil
			tr.Messages = append(tr.Messages, hist)
			tr.Rounds = append(tr.Rounds, rd)
			tr.FinalText = msg.Content
			tr.Termination, tr.Error = InvalidOutput, c.tooManyToolCalls(round, n)
			return tr
		}
		tr.Messages = append(tr.Messages, hist)
		if len(hist.ToolCalls) == 0 {
			tr.Rounds = append(tr.Rounds, rd)
			tr.FinalText = msg.Content
			tr.Termination = Completed
			return tr
		}
		allFailed, allUnreachable, allTimedOut := callTools(ctx, tools, p, offered, budget, hist.ToolCalls, &rd, tr)
		tr.Rounds = append(tr.Rounds, rd)
		if ctx.Err() != nil {
			tr.Termination, tr.FailureClass = Timeout, record.FailTimeout
			if ctxCancelled(ctx) {
				tr.Termination, tr.FailureClass = Cancelled, record.FailCancelled
			}
			tr.Error = fmt.Sprintf("tool calls of round %d: %v", round, ctx.Err())
			return tr
		}
		if allFailed {
			failedRounds++
		} else {
			failedRounds = 0
		}
		if allUnreachable {
			unreachableRounds++
		} else {
			unreachableRounds = 0
		}
		if allTimedOut {
			timedOutRounds++
		} else {
			timedOutRounds = 0
		}
		if failedRounds >= c.MaxFailedRounds && c.Degrade && timedOutRounds < c.MaxFailedRounds && unreachableRounds < c.MaxFailedRounds {
			c.degrade(ctx, &req, cv, tr, briefing, round+1, failedRounds)
			return tr
		}
		if failedRounds >= c.MaxFailedRounds {
			toolRoundsFailed(tr, rd.ToolCalls[0].Output, failedRounds, timedOutRounds, unreachableRounds, c.MaxFailedRounds)
			return tr
		}
		if round+1 >= c.MaxRounds {
			tr.Termination = MaxRounds
			return tr
		}
		if c.Context.Kind == ContextBriefing {
			var ok bool
			if briefing, ok = c.brief(ctx, &req, cv, tr, briefing, round); !ok {
				return tr
			}
		}
		if c.Policy == PolicySingle {
			// One round of tool calls is all single-step gets: the next call is for the
			// final answer, with no tools offered.
			req.Tools, req.ToolChoice, req.ParallelToolCalls = nil, nil, nil
			toolsRemoved = true
		}
	}
}

// modelCallFailed ends tr on the failed model call of a round. Not inlined, as callTools.
//
//go:noinline
func modelCallFailed(ctx context.Context, tr *Trajectory, err error, tap *answerTap, round int) {
	term, class := modelFailure(ctx, err)
	tr.Termination, tr.FailureClass, tr.Error = term, class, fmt.Sprintf("model call in round %d: %s", round, modelErrorText(err, term, tap))
}

// toolRoundsFailed ends tr after failed consecutive rounds whose every tool call failed
// (timedOut of them timed out, unreachable found the server down; limit is MaxFailedRounds);
// output is the last round's first answer. Not inlined, as callTools.
//
//go:noinline
func toolRoundsFailed(tr *Trajectory, output string, failed, timedOut, unreachable, limit int) {
	tr.Termination = ToolError
	tr.Error = fmt.Sprintf("every tool call failed in %d consecutive rounds", failed)
	switch {
	case timedOut >= limit:
		// The server takes the calls and never answers in time.
		tr.Termination, tr.FailureClass = Timeout, record.FailTimeout
		tr.Error = fmt.Sprintf("every tool call timed out in %d consecutive rounds: %s", timedOut, errClip(output))
	case unreachable >= limit:
		// The server is down: that is infrastructure, not the model.
		tr.FailureClass = record.FailResourceServer
		tr.Error = fmt.Sprintf("resource server unreachable in %d consecutive rounds: %s", unreachable, errClip(output))
	}
}

// callTools makes a round's tool calls in order, each recorded in rd and answered in tr's
// messages; a tool that was not offered is not called. It reports whether every call failed,
// was unreachable, timed out. Not inlined, so that its locals are not in Run's frame while
// Run waits for the model.
//
//go:noinline
func callTools(ctx context.Context, tools Tools, p *dataset.Params, offered map[string]bool, budget *toolBudget, calls []openai.ToolCall, rd *Round, tr *Trajectory) (allFailed, allUnreachable, allTimedOut bool) {
	allFailed, allUnreachable, allTimedOut = true, true, true
	rd.ToolCalls = make([]ToolCall, 0, len(calls))
	for _, tc := range calls {
		call := ToolCall{CallID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}
		start := time.Now()
		var res toolclient.Result
		if !offered[call.Name] {
			// Never sent: the server would not know it, or worse, would.
			res = toolclient.Result{Output: unknownTool(call.Name, p.Tools), Failed: true}
		} else {
			res = tools.CallTool(ctx, call.Name, call.Arguments)
		}
		res = budget.take(call.Name, res)
		call.LatencyMs = ms(time.Since(start))
		call.Output, call.Status, call.Failed, call.Unreachable, call.TimedOut = res.Output, res.Status, res.Failed, res.Unreachable, res.TimedOut
		call.OriginalBytes = res.OriginalBytes
		allFailed = allFailed && res.Failed
		allUnreachable = allUnreachable && res.Unreachable
		allTimedOut = allTimedOut && res.TimedOut
		rd.ToolCalls = append(rd.ToolCalls, call)
		tr.Messages = append(tr.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: call.CallID, Content: res.Output})
	}
	return allFailed, allUnreachable, allTimedOut
}

// maxToolBytes is MaxToolBytes, or its default when unset.
func (c *Config) maxToolBytes() int64 {
	if c.MaxToolBytes > 0 {
		return c.MaxToolBytes
	}
	return DefaultMaxToolBytes
}

// maxToolCalls is MaxToolCalls, or its default when unset.
func (c *Config) maxToolCalls() int {
	if c.MaxToolCalls > 0 {
		return c.MaxToolCalls
	}
	return DefaultMaxToolCalls
}

// tooManyToolCalls is the error of an answer with n tool calls, over the bound.
func (c *Config) tooManyToolCalls(round, n int) string {
	return fmt.Sprintf("model answer in round %d has %d tool calls, over --max-tool-calls %d: none was made", round, n, c.maxToolCalls())
}

// newRound is the record of round idx from its answer (which has choices): the first choice's
// text, reasoning and finish reason, the usage and the latency. Its tool calls are added as they
// are made.
func newRound(resp *openai.ChatCompletionResponse, idx int, latency time.Duration) Round {
	choice := &resp.Choices[0]
	return Round{Index: idx, ModelLatencyMs: ms(latency), Usage: usageOf(resp.Usage),
		FinishReason: string(choice.FinishReason), Content: choice.Message.Content, Reasoning: choice.Message.ReasoningContent,
		Endpoint: resp.Header().Get(wire.EndpointHeader)}
}

// finishLength is the finish reason of an answer cut off by max_tokens.
const finishLength = string(openai.FinishReasonLength)

// cutOff ends a rollout whose round rd was cut off by max_tokens: the answer is kept in the
// history as the model's last message without its tool calls (their arguments are cut too:
// never made, never sent back), and the termination is Length.
// cutOffAt is cutOff of the round and the message by pointer, so that Run's frame holds no
// copies of them for the call.
//
//go:noinline
func cutOffAt(tr *Trajectory, rd *Round, hist *openai.ChatCompletionMessage) { cutOff(tr, *rd, *hist) }

func cutOff(tr *Trajectory, rd Round, hist openai.ChatCompletionMessage) {
	tr.Termination = Length
	tr.FinalText = rd.Content
	if n := len(hist.ToolCalls); n > 0 {
		tr.Error = fmt.Sprintf("round %d: the answer was cut off by max_tokens in a tool call; %d tool call(s) not made", rd.Index, n)
		hist.ToolCalls = nil
	}
	tr.Messages = append(tr.Messages, hist)
	tr.Rounds = append(tr.Rounds, rd)
}

// historyMessage is the model's answer msg of round idx as the conversation keeps it: what the
// model said, its reasoning (kept in the trajectory; sendable leaves it out of what is sent
// back), and its tool calls, each with an id (generated when the endpoint gave none), typed
// function, without a stream index.
func historyMessage(msg *openai.ChatCompletionMessage, idx int) openai.ChatCompletionMessage {
	hist := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleAssistant, Content: msg.Content, ReasoningContent: msg.ReasoningContent}
	if len(msg.ToolCalls) > 0 {
		hist.ToolCalls = make([]openai.ToolCall, len(msg.ToolCalls))
		for i, tc := range msg.ToolCalls {
			tc.ID = callID(tc.ID, idx, i)
			tc.Type = openai.ToolTypeFunction
			tc.Index = nil
			hist.ToolCalls[i] = tc
		}
	}
	return hist
}

// multiRequest is the request of every round of a multi-step rollout, but for its messages:
// the base request and all the row's tools, converted once per rollout.
func (c *Config) multiRequest(p *dataset.Params, seed int64) openai.ChatCompletionRequest {
	req := c.baseRequest(p, seed)
	req.Tools = ChatTools(p.Tools)
	if len(req.Tools) > 0 {
		// Chat Completions servers reject tool_choice without tools.
		req.ToolChoice = ChatToolChoice(p.ToolChoice)
	}
	if p.ParallelToolCalls != nil && len(req.Tools) > 0 {
		req.ParallelToolCalls = *p.ParallelToolCalls
	}
	return req
}

// baseRequest is the request every model call of a rollout starts from: the model, sampling
// (the row's, or the run's override), max tokens and the seed. Tools are each policy's own.
func (c *Config) baseRequest(p *dataset.Params, seed int64) openai.ChatCompletionRequest {
	req := openai.ChatCompletionRequest{
		Model:       c.ModelName,
		Temperature: temperature(p.Temperature),
		MaxTokens:   c.MaxTokens,
	}
	if c.Temperature != nil {
		req.Temperature = temperature(c.Temperature)
	}
	if p.TopP != nil {
		req.TopP = float32(*p.TopP)
		if req.TopP == 0 {
			req.TopP = zeroTemperature
		}
	}
	if req.MaxTokens == 0 && p.MaxOutputTokens != nil {
		req.MaxTokens = *p.MaxOutputTokens
	}
	s := int(seed)
	req.Seed = &s
	return req
}

// call makes one model call. prev is the trajectory's last round (nil for none): with
// --capture-tokens its token ids go back on the request's last assistant message when that
// message is prev's answer (tokens.go, sendTokens).
func (c *Config) call(ctx context.Context, req openai.ChatCompletionRequest, prev *Round) (openai.ChatCompletionResponse, time.Duration, *answerTap, error) {
	var resp openai.ChatCompletionResponse
	latency, tap, err := c.callInto(ctx, &req, prev, &resp)
	return resp, latency, tap, err
}

// callInto is call with the request and the answer passed by pointer, for the agent loop: a
// rollout's goroutine waits in it for every model answer, and a request or an answer passed by
// value would be copied into every frame on the way (a chat request is 400 bytes). req is
// left as it was given.
func (c *Config) callInto(ctx context.Context, req *openai.ChatCompletionRequest, prev *Round, resp *openai.ChatCompletionResponse) (time.Duration, *answerTap, error) {
	parent := ctx
	if c.ModelTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.ModelTimeout)
		defer cancel()
	}
	msgs := req.Messages
	req.Messages = sendable(msgs)
	defer func() { req.Messages = msgs }()
	tap := &answerTap{zeros: req.Temperature == zeroTemperature || req.TopP == zeroTemperature}
	tap.patches, _ = ctx.Value(patchKey{}).([]json.RawMessage)
	tap.keep = true
	if tc := c.CaptureTokens; tc != nil {
		tap.capture, tap.vllm, tap.tc = true, !tc.plain.Load(), tc
		tap.prev = sendTokens(req.Messages, prev)
	}
	start := time.Now()
	var err error
	err = c.create(context.WithValue(ctx, tapKey{}, tap), req, resp)
	if err != nil && tap.vllm && refusesTokenOptions(err) {
		// The endpoint (OpenAI's) refuses vLLM's options: ask again, and from now on, for
		// log-probs only (tokens.go).
		c.CaptureTokens.refused(err)
		tap = &answerTap{zeros: tap.zeros, capture: true, prev: tap.prev, patches: tap.patches, keep: true, tc: tap.tc}
		err = c.create(context.WithValue(ctx, tapKey{}, tap), req, resp)
	}
	if err == nil {
		answerReasoning(resp, tap.body)
	}
	if !tap.capture {
		tap.body = nil // kept for answerReasoning only
	}
	if err != nil && parent.Err() == nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within the model timeout of %v: %w", c.ModelTimeout, err)
	}
	if err == nil {
		err = wire.CheckUsage(resp.Usage)
	}
	return time.Since(start), tap, err
}

// create asks the model for req's answer, into resp: by pointer when the model is an
// *OpenAIModel, else through its CreateChatCompletion, called from a function of its own so
// that the request's copy is not in callInto's frame.
func (c *Config) create(ctx context.Context, req *openai.ChatCompletionRequest, resp *openai.ChatCompletionResponse) error {
	*resp = openai.ChatCompletionResponse{} // an answer is decoded into a zero one
	if m, ok := c.Model.(*OpenAIModel); ok {
		return m.chatInto(ctx, req, resp)
	}
	return createByValue(ctx, c.Model, req, resp)
}

//go:noinline
func createByValue(ctx context.Context, m Model, req *openai.ChatCompletionRequest, resp *openai.ChatCompletionResponse) (err error) {
	*resp, err = m.CreateChatCompletion(ctx, *req)
	return err
}

// emptyContent is what an empty message content is sent as: go-openai omits an empty
// content, and servers refuse an assistant message with neither content nor tool calls, or a
// tool or user message without content (llama.cpp: 400 "Assistant message must contain
// either 'content' or 'tool_calls'!").
const emptyContent = " "

// sendable is msgs as they can be sent: a message with an empty content (and no tool calls or
// multi-part content) gets emptyContent, and the model's reasoning is not echoed back to it.
// msgs itself is not changed (the trajectory keeps the answer as it was); it is copied only
// when a message needs it.
func sendable(msgs []openai.ChatCompletionMessage) []openai.ChatCompletionMessage {
	var out []openai.ChatCompletionMessage
	for i := range msgs {
		m := &msgs[i]
		empty := m.Content == "" && len(m.MultiContent) == 0 && len(m.ToolCalls) == 0 && m.FunctionCall == nil
		if !empty && m.ReasoningContent == "" {
			continue
		}
		if out == nil {
			out = slices.Clone(msgs)
		}
		out[i].ReasoningContent = ""
		if empty {
			out[i].Content = emptyContent
		}
	}
	if out == nil {
		return msgs
	}
	return out
}

func ctxCancelled(ctx context.Context) bool { return ctx.Err() == context.Canceled }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// errText is an error's message, shortened for the record.
func errText(err error) string { return record.Clip(err.Error(), 500) }

func errClip(s string) string { return record.Clip(s, 500) }

// unknownTool is what the model is told when it calls a tool the row does
// not offer; the call is not sent.
func unknownTool(name string, offered []dataset.Tool) string {
	if len(offered) == 0 {
		return fmt.Sprintf("Error: unknown tool %q: no tools are offered in this conversation", record.Clip(name, 100))
	}
	var b strings.Builder
	for i, t := range offered {
		if i > 0 {
			b.WriteString(", ")
		}
		if b.Len() > 2000 {
			fmt.Fprintf(&b, "and %d more", len(offered)-i)
			break
		}
		b.WriteString(t.Name)
	}
	return fmt.Sprintf("Error: unknown tool %q; available: %s", record.Clip(name, 100), b.String())
}
