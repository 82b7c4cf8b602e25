// Package sim is rollout's model simulator: an OpenAI-compatible Chat Completions endpoint that
// plays the tasks' reference plans (pkg/plan), with seeded latency and injected errors, so that a
// whole run can be exercised without a model. It is a simulator, not a model: it reads the tool
// results it is sent, but it understands nothing.
//
// # Endpoints
//
//	POST /v1/chat/completions (also /chat/completions)   a chat.completion, never streamed
//	GET  /v1/models (also /models)                        one model, "rollout-sim"
//	GET  /                                                health: {"status":"ok"}
//	GET  /stats                                           the counters so far (Stats, as JSON)
//
// # Conversations
//
// Each request is answered on its own (the simulator keeps no conversation state): where the
// conversation is comes from its messages. Its identity is the text of its first "user"
// message (content a string, or text parts joined with "") and the request's "seed" field when
// it has one (the runner sends one per task and repeat). The task it belongs to is found in
// Tasks by that text (see Tasks for ties).
//
// # Playing a plan
//
// The simulator names each tool call it makes for a plan call "call_<N>_<8 hex digits>", N the
// call's index in the plan (plan.Calls) and the digits a hash of the seed, the conversation and
// N; an id of another form, or with other digits, is not the simulator's and is ignored. So
// from a request's assistant messages it knows which plan calls were made, and from its "tool"
// messages (matched by tool_call_id) what each returned: the outputs (plan.DecodeOutput of the
// tool message's content) that "$ref"s are resolved with (plan.Resolve), so the arguments it
// sends really are built from the tool results it was sent. A call without a tool message, or
// whose output lacks the pointer, resolves to null.
//
// The next round is the one after the last round that has a call made. The simulator answers it
// with all its calls as parallel tool_calls of one assistant message (finish_reason
// "tool_calls"), and after the last round with the plan's final text (plan.FinalText;
// finish_reason "stop"). A planned call whose tool the request does not offer is left out (and
// counted in Stats.UnofferedCalls); if that leaves a round empty the simulator goes on with the
// next round, and if no round is left it answers with the final text. A request that offers no
// tools, or with tool_choice "none", gets the final text from the outputs it has (the
// single-step arm: one round of tools, then an answer without tools). tool_choice
// {"type":"function","function":{"name":X}} offers X alone; "required" changes nothing (after
// the plan the simulator answers with text even then).
//
// The rounds are played as the plan has them, whatever parallel_tool_calls says.
//
// # Conversations without a plan
//
// For a conversation of no task, or of a task without a plan, the simulator makes 1 to 3
// rounds (drawn per conversation) of random tool calls with arguments valid for the tools'
// JSON Schemas, 1 to 3 calls a round (1 when parallel_tool_calls is false), named
// "call_r<ROUND>_<I>_<8 hex digits>"; then it answers "Finished after N tool calls.". The round
// is the number of assistant messages with tool calls in the request. The schema keywords
// understood: type (a name or a list), properties, required (always filled; other properties
// half of the time), enum, const, items, minItems, maxItems, uniqueItems, minimum, maximum,
// exclusiveMinimum, exclusiveMaximum, minLength, maxLength, format (date, date-time, email,
// uri, uuid), anyOf, oneOf, allOf.
//
// # Knobs, determinism, retries
//
// See Options. Every decision (an injected error, which call or value it hits, the latency, the
// random arguments) is drawn from a hash of (Options.Seed, the conversation's identity, the
// round, the decision's name), never from a shared generator, so that the same seed and the
// same requests give the same answers in any order and at any concurrency. The round of a draw
// is the number of assistant messages with tool calls in the request. WrongArgument, SkipStep
// and PrematureAnswer act on planned conversations only; MalformedToolCall, HTTP429, HTTP500,
// ConnectionReset, Hang and the latency on all.
//
// The draws of ConnectionReset, Hang, HTTP429 and HTTP500 (and of the latency) also include the
// attempt number: how many times this exact request body was seen before from the same
// rollout (a SHA-256 of the body and the request's RolloutHeader, kept in a table of at most
// Options.MaxTrackedRequests entries, cleared at once when full, and only when one of those
// four rates is set). rollout's agent names each rollout (arm, task, repeat) in that header,
// so two arms that send the same first request count their retries apart, and which rollout
// an error hits does not depend on which arm's request came first. They are drawn in that order, and the
// first that hits decides: a reset or a hang at once, a 429 at once, a 500 after the latency. So a client's retry of the identical request is a new draw and, at a rate
// below 1, eventually gets through. The attempt number is the only state the simulator keeps:
// sending a request again later, beyond retries, may draw a different HTTP error; the answer
// itself never depends on it.
//
// # Requests
//
// A malformed request gets 400 with an OpenAI-style error ({"error":{"message", "type":
// "invalid_request_error", "param", "code"}}): not a JSON object, no messages, an unknown
// role, content that is not a string or a list of parts, a tool message without a
// tool_call_id or answering no tool call of the assistant message just before, an assistant
// message's tool calls not all answered, a tool that is not a named function, a bad or
// unsatisfiable tool_choice (or one without tools), "stream": true, "n" other than 1.
//
// Usage is an estimate at 4 bytes a token: the prompt is the request's message texts and tool
// calls, the completion the answer's text or tool calls. "model" is the request's model, or
// "rollout-sim".
//
// # Context
//
// A model of a model's context, not evidence about any real one (context.go): with
// Options.ContextLimit a request over it is refused with vLLM's 400; ContextErrorSlope and
// DistanceErrorSlope make a wrong argument likelier with a longer prompt and with a value read
// more rounds ago; a value the request no longer holds resolves to null. A request for a
// briefing (no tools, the last message a user message that mentions a "briefing") is answered
// with the results the request holds, as fact lines that later requests are read back from.
package sim

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rollout-dev/rollout/internal/jsonfast"
	"github.com/rollout-dev/rollout/pkg/chaos"
	"github.com/rollout-dev/rollout/pkg/plan"
)

// ModelID is the simulator's model name.
const ModelID = "rollout-sim"

// RolloutHeader names the rollout a request belongs to (rollout's agent sends it; its value
// is opaque here): retries are counted per body and rollout.
const RolloutHeader = "X-Rollout-Id"

// maxBodyBytes caps a request body.
const maxBodyBytes = 64 << 20

// Simulator is the simulated Chat Completions endpoint, an http.Handler. It is safe for
// concurrent use.
type Simulator struct {
	opt        Options
	tasks      *Tasks
	now        func() time.Time
	maxTracked int

	mu       sync.Mutex
	attempts map[[16]byte]int

	c counters
}

type counters struct {
	requests, badRequests, answers, finalAnswers, toolCalls atomic.Int64
	planned, unplanned, unoffered, cancelled                atomic.Int64
	wrongArgument, skipStep, premature, malformed           atomic.Int64
	http429, http500, reset, hang                           atomic.Int64
	contextOverflow, briefings, briefingDropped             atomic.Int64
}

// Stats counts what the simulator did.
type Stats struct {
	Requests       int64 // POSTs to the chat completions endpoint
	BadRequests    int64 // of which answered 400
	Answers        int64 // chat completions answered (200)
	FinalAnswers   int64 // of which without tool calls
	ToolCalls      int64 // tool calls in the answers
	Planned        int64 // answers played from a reference plan
	Unplanned      int64 // answers for conversations without a plan
	UnofferedCalls int64 // planned calls left out because their tool was not offered
	Cancelled      int64 // requests whose client went away during the latency (hangs not included)
	Injected       Injected
	// ContextOverflow counts requests refused over Options.ContextLimit (answered 400, not
	// counted in BadRequests); Briefings, briefings written (in Answers and FinalAnswers);
	// BriefingDropped, facts a briefing left out.
	ContextOverflow, Briefings, BriefingDropped int64
}

// Injected counts injected errors by kind.
type Injected struct {
	WrongArgument, SkipStep, PrematureAnswer, MalformedToolCall, HTTP429, HTTP500 int64
	// ConnectionReset counts connections closed without an answer; Hang, requests left
	// unanswered until the client gave up.
	ConnectionReset, Hang int64
}

// Total is the number of injected errors.
func (i Injected) Total() int64 {
	return i.WrongArgument + i.SkipStep + i.PrematureAnswer + i.MalformedToolCall + i.HTTP429 + i.HTTP500 +
		i.ConnectionReset + i.Hang
}

// New returns a simulator playing the plans of tasks (nil: no task; every conversation is
// unplanned). tasks must not change afterwards.
func New(tasks *Tasks, opt Options) (*Simulator, error) {
	if err := opt.Validate(); err != nil {
		return nil, err
	}
	s := &Simulator{opt: opt, tasks: tasks, now: opt.Now, maxTracked: opt.MaxTrackedRequests, attempts: map[[16]byte]int{}}
	if s.now == nil {
		s.now = time.Now
	}
	if s.maxTracked == 0 {
		s.maxTracked = DefaultMaxTrackedRequests
	}
	return s, nil
}

// Stats returns the counters so far.
func (s *Simulator) Stats() Stats {
	c := &s.c
	return Stats{
		Requests: c.requests.Load(), BadRequests: c.badRequests.Load(), Answers: c.answers.Load(),
		FinalAnswers: c.finalAnswers.Load(), ToolCalls: c.toolCalls.Load(), Planned: c.planned.Load(),
		Unplanned: c.unplanned.Load(), UnofferedCalls: c.unoffered.Load(), Cancelled: c.cancelled.Load(),
		Injected: Injected{
			WrongArgument: c.wrongArgument.Load(), SkipStep: c.skipStep.Load(), PrematureAnswer: c.premature.Load(),
			MalformedToolCall: c.malformed.Load(), HTTP429: c.http429.Load(), HTTP500: c.http500.Load(),
			ConnectionReset: c.reset.Load(), Hang: c.hang.Load(),
		},
		ContextOverflow: c.contextOverflow.Load(), Briefings: c.briefings.Load(), BriefingDropped: c.briefingDropped.Load(),
	}
}

// ServeHTTP serves the endpoints.
func (s *Simulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	if len(path) > 1 {
		path = strings.TrimSuffix(path, "/")
	}
	switch path {
	case "/v1/chat/completions", "/chat/completions":
		if r.Method != http.MethodPost {
			methodNotAllowed(w, http.MethodPost)
			return
		}
		s.complete(w, r)
	case "/v1/models", "/models":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, http.MethodGet)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{
			{"id": ModelID, "object": "model", "created": 0, "owned_by": "rollout"},
		}})
	case "", "/":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, http.MethodGet)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok", "model": ModelID})
	case "/stats":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			methodNotAllowed(w, http.MethodGet)
			return
		}
		writeJSON(w, http.StatusOK, s.Stats())
	default:
		writeError(w, http.StatusNotFound, "invalid_request_error", "", "", fmt.Sprintf("the simulator has no %s; it serves POST /v1/chat/completions, GET /v1/models, GET /stats and GET /", r.URL.Path))
	}
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "", "", "method not allowed; use "+allow)
}

func (s *Simulator) complete(w http.ResponseWriter, r *http.Request) {
	s.c.requests.Add(1)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err != nil {
		s.c.badRequests.Add(1)
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "", "", fmt.Sprintf("request body over %d bytes", tooBig.Limit))
			return
		}
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "", "could not read the request body: "+err.Error())
		return
	}
	req, rerr := parseRequest(body)
	if rerr != nil {
		s.c.badRequests.Add(1)
		writeError(w, http.StatusBadRequest, "invalid_request_error", rerr.param, "", rerr.msg)
		return
	}
	if s.overflow(w, req) {
		return
	}
	firstUser, prompt := req.conversation()
	d := drawer{seed: s.opt.Seed, conv: conversationHash(firstUser, req.Seed)}
	round := req.round()
	fp := sha256.Sum256(body)
	attempt := 0
	if s.opt.HTTP429 > 0 || s.opt.HTTP500 > 0 || s.opt.ConnectionReset > 0 || s.opt.Hang > 0 {
		key := fp
		if id := r.Header.Get(RolloutHeader); id != "" {
			h := sha256.New()
			h.Write(fp[:])
			h.Write([]byte(id))
			h.Sum(key[:0])
		}
		attempt = s.attempt([16]byte(key[:16]))
	}

	if d.hit(s.opt.ConnectionReset, "connection-reset", round, attempt) {
		s.c.reset.Add(1)
		chaos.ResetConnection(w)
		return
	}
	if d.hit(s.opt.Hang, "hang", round, attempt) {
		s.c.hang.Add(1)
		// Nothing is written: the handler returns when the client gives up (its timeout, or
		// the connection closed) or the server closes the connection.
		<-r.Context().Done()
		return
	}

	if d.hit(s.opt.HTTP429, "http-429", round, attempt) {
		s.c.http429.Add(1)
		if s.opt.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.FormatInt(int64(math.Ceil(s.opt.RetryAfter.Seconds())), 10))
		}
		writeError(w, http.StatusTooManyRequests, "requests", "", "rate_limit_exceeded",
			"Rate limit reached for rollout-sim (injected by the simulator). Please try again.")
		return
	}
	if lat := s.opt.Latency.Sample(d.float("latency", round, attempt, 0), d.float("latency", round, attempt, 1)); lat > 0 {
		t := time.NewTimer(lat)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			s.c.cancelled.Add(1)
			return
		}
	}
	if d.hit(s.opt.HTTP500, "http-500", round, attempt) {
		s.c.http500.Add(1)
		writeError(w, http.StatusInternalServerError, "server_error", "", "",
			"The server had an error while processing your request (injected by the simulator).")
		return
	}

	e, lerr := s.tasks.lookup(firstUser, prompt, r.Header.Get(RolloutHeader))
	if lerr != nil {
		s.c.badRequests.Add(1)
		writeError(w, http.StatusBadRequest, "invalid_request_error", "messages", "", lerr.Error())
		return
	}
	var ans answer
	if e != nil && e.plan != nil {
		s.c.planned.Add(1)
		ans = s.playPlan(e.plan, req, d, round)
	} else {
		s.c.unplanned.Add(1)
		ans = s.playRandom(req, d, round)
	}
	s.c.answers.Add(1)
	s.c.toolCalls.Add(int64(len(ans.calls)))
	if len(ans.calls) == 0 {
		s.c.finalAnswers.Add(1)
	}
	model := req.Model
	if model == "" {
		model = ModelID
	}
	msg := outMessage{Role: "assistant"}
	completion := 0
	if len(ans.calls) > 0 {
		msg.ToolCalls = ans.calls
		for _, c := range ans.calls {
			completion += len(c.Function.Name) + len(c.Function.Arguments)
		}
	} else {
		msg.Content = &ans.content
		completion = len(ans.content)
	}
	completion = max(completion/4, 1)
	prompt4 := req.promptBytes() / 4
	spliced := req.splicedPrompt() // tokens.go
	if spliced != nil {
		prompt4 = len(spliced)
	}
	id := mix(fnvUint(fnvUint(binary.LittleEndian.Uint64(fp[:8]), uint64(s.opt.Seed)), uint64(attempt)))
	out := chatCompletion{
		ID: fmt.Sprintf("chatcmpl-sim-%016x", id), Object: "chat.completion", Created: s.now().Unix(), Model: model,
		Choices: []chatChoice{{Index: 0, Message: msg, FinishReason: ans.finish}},
		Usage:   chatUsage{PromptTokens: prompt4, CompletionTokens: completion, TotalTokens: prompt4 + completion},
	}
	addTokens(&out, req, &ans, spliced, prompt4, completion) // tokens.go
	writeJSON(w, http.StatusOK, out)
}

// attempt numbers the requests with this fingerprint: 0 the first time.
func (s *Simulator) attempt(fp [16]byte) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.attempts[fp]
	if !ok && len(s.attempts) >= s.maxTracked {
		clear(s.attempts)
	}
	s.attempts[fp] = n + 1
	return n
}

// answer is what the simulator says: text, or tool calls.
type answer struct {
	content string
	calls   []wireToolCall
	finish  string
}

func textAnswer(s string) answer { return answer{content: s, finish: "stop"} }

// playPlan answers from a plan (see the package documentation).
func (s *Simulator) playPlan(p *plan.Plan, req *chatRequest, d drawer, round int) answer {
	calls := p.Calls()
	roundOf := make([]int, 0, len(calls))
	for k, rd := range p.Rounds {
		for range rd {
			roundOf = append(roundOf, k)
		}
	}
	sn := holds(req, d, calls, roundOf)
	made, outputs, next := sn.made, sn.outputs, sn.next
	if sn.trimmed(p) {
		// A context strategy left earlier rounds out of the request: the draws are keyed on
		// the plan's round, as with the whole conversation, not on the few rounds shown.
		round = max(round, next)
	}
	out := func(n int) (any, bool) {
		id, ok := made[n]
		if !ok {
			return nil, false
		}
		text, ok := outputs[id]
		if !ok {
			return nil, false
		}
		return plan.DecodeOutput(text), true
	}
	final := func() answer {
		text, _, err := p.FinalText(out)
		if err != nil {
			text = "Done."
		}
		return textAnswer(text)
	}
	if req.briefingRequest() {
		return s.briefing(p, sn, d, round)
	}
	offered := req.offered()
	if len(offered) == 0 || next >= len(p.Rounds) {
		return final()
	}
	if d.hit(s.opt.PrematureAnswer, "premature-answer", round) {
		s.c.premature.Add(1)
		return final()
	}
	names := make(map[string]*chatTool, len(offered))
	for _, t := range offered {
		names[t.Function.Name] = t
	}
	skip := d.hit(s.opt.SkipStep, "skip-step", round)
	var chosen []int
	for k := next; k < len(p.Rounds) && len(chosen) == 0; k++ {
		first := p.First(k)
		for i, c := range p.Rounds[k] {
			if names[c.Name] == nil {
				s.c.unoffered.Add(1)
				continue
			}
			chosen = append(chosen, first+i)
		}
		if skip && len(chosen) > 0 {
			j := d.intn(len(chosen), "skip-step/call", round)
			chosen = slices.Delete(chosen, j, j+1)
			skip = false
			s.c.skipStep.Add(1)
		}
	}
	if len(chosen) == 0 {
		return final()
	}
	args := make([]string, len(chosen))
	dist := 0 // the longest distance of a value the calls use
	for i, n := range chosen {
		resolved, _, err := plan.Resolve(calls[n].Arguments, func(k int) (any, bool) {
			if at, ok := sn.at[made[k]]; ok {
				dist = max(dist, req.distance(at))
			}
			return out(k)
		})
		if err != nil {
			resolved = calls[n].Arguments
		}
		args[i] = string(resolved)
	}
	rate := min(1, s.wrongArgumentRate(len(req.Tools))+s.contextRate(req.promptBytes()/4, dist))
	if d.hit(rate, "wrong-argument", round) {
		j := d.intn(len(args), "wrong-argument/call", round)
		for k := range args {
			i := (j + k) % len(args)
			if a, ok := perturb(args[i], d.rand("wrong-argument/value", round)); ok {
				args[i] = a
				s.c.wrongArgument.Add(1)
				break
			}
		}
	}
	for i, n := range chosen {
		args[i] = inSchemaOrder(args[i], names[calls[n].Name].Function.Parameters)
	}
	s.malform(args, d, round)
	res := make([]wireToolCall, len(chosen))
	for i, n := range chosen {
		res[i] = toolCall(planCallID(d, n), calls[n].Name, args[i])
	}
	return answer{calls: res, finish: "tool_calls"}
}

// wrongArgumentRate is WrongArgument raised by the tool-count effect.
func (s *Simulator) wrongArgumentRate(tools int) float64 {
	return min(1, s.opt.WrongArgument+s.opt.ToolCountErrorSlope*float64(max(0, tools-s.opt.ToolCountBaseline)))
}

func (s *Simulator) malform(args []string, d drawer, round int) {
	if d.hit(s.opt.MalformedToolCall, "malformed-tool-call", round) {
		i := d.intn(len(args), "malformed-tool-call/call", round)
		args[i] = malformed(args[i])
		s.c.malformed.Add(1)
	}
}

// playRandom answers a conversation without a plan (see the package documentation).
func (s *Simulator) playRandom(req *chatRequest, d drawer, round int) answer {
	offered := req.offered()
	rounds := 1 + d.intn(3, "random/rounds", 0)
	if len(offered) == 0 || round >= rounds {
		n := 0
		for _, m := range req.Messages {
			n += len(m.ToolCalls)
		}
		return textAnswer(fmt.Sprintf("Finished after %d tool calls.", n))
	}
	most := 1
	if req.ParallelToolCalls == nil || *req.ParallelToolCalls {
		most = min(3, len(offered))
	}
	n := 1 + d.intn(most, "random/calls", round)
	tools := make([]*chatTool, n)
	args := make([]string, n)
	for i := range n {
		tools[i] = offered[d.intn(len(offered), "random/tool", round, i)]
		args[i] = inSchemaOrder(schemaArguments(tools[i].Function.Parameters, d.rand("random/arguments", round, i)), tools[i].Function.Parameters)
	}
	s.malform(args, d, round)
	res := make([]wireToolCall, n)
	for i := range n {
		res[i] = toolCall(fmt.Sprintf("call_r%d_%d_%s", round, i, d.idSuffix("random", round, i)), tools[i].Function.Name, args[i])
	}
	return answer{calls: res, finish: "tool_calls"}
}

// planCallID is the id of plan call n: "call_<n>_<8 hex digits>".
func planCallID(d drawer, n int) string {
	return "call_" + strconv.Itoa(n) + "_" + d.idSuffix("plan", n, 0)
}

// planCallIndex reads a plan call id; ok is false for ids the simulator did not make.
func planCallIndex(d drawer, id string) (int, bool) {
	rest, ok := strings.CutPrefix(id, "call_")
	if !ok {
		return 0, false
	}
	num, suffix, ok := strings.Cut(rest, "_")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(num)
	if err != nil || n < 0 || num != strconv.Itoa(n) || suffix != d.idSuffix("plan", n, 0) {
		return 0, false
	}
	return n, true
}

func toolCall(id, name, args string) wireToolCall {
	tc := wireToolCall{ID: id, Type: "function"}
	tc.Function.Name, tc.Function.Arguments = name, args
	return tc
}

// The answer's JSON.

type chatCompletion struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []chatChoice `json:"choices"`
	Usage   chatUsage    `json:"usage"`
	// PromptTokenIDs is vLLM's answer to return_token_ids (tokens.go).
	PromptTokenIDs []int32 `json:"prompt_token_ids,omitempty"`
}

type chatChoice struct {
	Index        int        `json:"index"`
	Message      outMessage `json:"message"`
	Logprobs     any        `json:"logprobs"`
	FinishReason string     `json:"finish_reason"`
	TokenIDs     []int32    `json:"token_ids,omitempty"`
}

type outMessage struct {
	Role      string         `json:"role"`
	Content   *string        `json:"content"`
	ToolCalls []wireToolCall `json:"tool_calls,omitempty"`
}

type chatUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := jsonfast.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// writeError writes an OpenAI-style error; empty param and code are null.
func writeError(w http.ResponseWriter, status int, typ, param, code, msg string) {
	e := map[string]any{"message": msg, "type": typ, "param": nil, "code": nil}
	if param != "" {
		e["param"] = param
	}
	if code != "" {
		e["code"] = code
	}
	writeJSON(w, status, map[string]any{"error": e})
}
