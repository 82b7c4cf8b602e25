package agent

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	openai "github.com/sashabaranov/go-openai"

	"github.com/rollout-dev/rollout/pkg/record"
)

// Context strategies: what a rollout's model is shown of the conversation in each round
// (Config.Context). The trajectory always keeps the whole conversation; a strategy only
// changes the messages of the requests.
const (
	// ContextFull sends the whole conversation every round (the default).
	ContextFull = "full"
	// ContextWindow sends the task's messages and the last N rounds, whole.
	ContextWindow = "window"
	// ContextBudget sends the whole conversation while it fits in a budget of tokens; past it,
	// the oldest tool results are shortened first, then the oldest rounds dropped.
	ContextBudget = "budget"
	// ContextBriefing asks the model after each round for a briefing of what it has found;
	// the next round is shown the task's messages, the briefing and the last round.
	ContextBriefing = "briefing"
)

// BytesPerToken is how budget:TOKENS turns tokens into bytes of the request's messages (their
// JSON, as sent): 4 bytes a token, the usual rule of thumb for English text and the
// simulator's own estimate. The endpoint's usage gives the real count, recorded per round.
const BytesPerToken = 4

// ContextStrategy is a parsed --context value. The zero value is full, not set: records of a
// run without --context have no context column.
type ContextStrategy struct {
	Kind string // "" (full, not set), ContextFull, ContextWindow, ContextBudget or ContextBriefing
	N    int    // window: rounds kept; budget: tokens
}

// ParseContext parses full, window:N (N >= 1), budget:TOKENS (TOKENS >= 1) or briefing.
func ParseContext(s string) (ContextStrategy, error) {
	kind, arg, hasArg := strings.Cut(strings.TrimSpace(s), ":")
	switch kind {
	case ContextFull, ContextBriefing:
		if hasArg {
			return ContextStrategy{}, fmt.Errorf("context %q: %s takes no argument", s, kind)
		}
		return ContextStrategy{Kind: kind}, nil
	case ContextWindow, ContextBudget:
		n, err := strconv.Atoi(arg)
		if !hasArg || err != nil || n < 1 {
			what := "ROUNDS"
			if kind == ContextBudget {
				what = "TOKENS"
			}
			return ContextStrategy{}, fmt.Errorf("context %q: want %s:%s, a whole number >= 1", s, kind, what)
		}
		return ContextStrategy{Kind: kind, N: n}, nil
	}
	return ContextStrategy{}, fmt.Errorf("unknown context %q (want full, window:N, budget:TOKENS or briefing)", s)
}

// String is the strategy as --context spells it; the zero value is "full".
func (s ContextStrategy) String() string {
	switch s.Kind {
	case ContextWindow, ContextBudget:
		return s.Kind + ":" + strconv.Itoa(s.N)
	case "":
		return ContextFull
	}
	return s.Kind
}

// trimmed reports whether the strategy changes what is sent (anything but full).
func (s ContextStrategy) trimmed() bool { return s.Kind != "" && s.Kind != ContextFull }

// ContextTrace is what a context strategy did in one rollout: per model call of a round, what
// was sent and removed, and the briefings. Trajectory.Context; nil with the full strategy and
// without --degrade.
type ContextTrace struct {
	Strategy string `json:"strategy"`
	// Rounds has one entry per round's model call, in order.
	Rounds []ContextRound `json:"rounds"`
	// Briefings are the briefing calls' answers, one per round that was followed by another.
	Briefings []Briefing `json:"briefings,omitempty"`
}

// ContextRound is one round's request: the messages and bytes of its messages array as sent,
// what the strategy removed from the whole conversation, and the prompt tokens the endpoint's
// usage counted.
type ContextRound struct {
	Messages        int `json:"messages"`
	Bytes           int `json:"bytes"`
	RemovedMessages int `json:"removed_messages,omitempty"`
	RemovedBytes    int `json:"removed_bytes,omitempty"`
	// Shortened counts tool results cut to fit budget:TOKENS (each with a marker).
	Shortened    int `json:"shortened,omitempty"`
	PromptTokens int `json:"prompt_tokens"`
}

// Briefing is one briefing call: after round Round, its text, usage and latency.
type Briefing struct {
	Round     int     `json:"round"`
	Text      string  `json:"text"`
	Usage     Usage   `json:"usage"`
	LatencyMs float64 `json:"latency_ms"`
}

// DefaultBriefingPrompt is the briefing strategy's request after each round (--briefing-prompt
// FILE replaces it): the last message of the briefing call, a user message.
//
//go:embed briefing_prompt.txt
var DefaultBriefingPrompt string

// briefingHeader starts the user message that carries the briefing into the next round.
const briefingHeader = "Briefing of the earlier rounds (written by you after the last round):\n\n"

// degradePrompt is the last message of --degrade's final call, without tools.
const degradePrompt = "The tool calls of the last %d rounds all failed, and no more tools can be called. " +
	"From what is known so far, give your best final answer now, in the form the task asks for."

// conversation is the whole conversation of a rollout as the context strategies see it: the
// task's first nTask messages, then rounds (an assistant message and the tool results that
// answer it), with each message's size as sent cached.
type conversation struct {
	nTask int
	sizes []int       // JSON bytes of each message of the trajectory, as sendable() sends it
	cut   map[int]int // JSON bytes of budget's shortened tool results, by message index
}

// messageBytes is the size of m in a request's messages array: its JSON as go-openai's
// encoder writes it, after sendable().
func messageBytes(m openai.ChatCompletionMessage) int {
	if m.Content == "" && len(m.MultiContent) == 0 && len(m.ToolCalls) == 0 && m.FunctionCall == nil {
		m.Content = emptyContent
	}
	b, err := json.Marshal(m)
	if err != nil {
		return len(m.Content)
	}
	return len(b)
}

// arrayBytes is the size of a JSON array of elements of these sizes.
func arrayBytes(sizes []int) int {
	n := 2 + max(len(sizes)-1, 0)
	for _, s := range sizes {
		n += s
	}
	return n
}

// size is the bytes of msgs[i], measured once.
func (cv *conversation) size(msgs []openai.ChatCompletionMessage, i int) int {
	for len(cv.sizes) <= i {
		cv.sizes = append(cv.sizes, -1)
	}
	if cv.sizes[i] < 0 {
		cv.sizes[i] = messageBytes(msgs[i])
	}
	return cv.sizes[i]
}

// rounds splits msgs[nTask:] into rounds: the index of each round's first message. A round
// starts at an assistant message; the tool results (and any other message) after it belong to
// it, so that a call is never separated from its results.
func (cv *conversation) rounds(msgs []openai.ChatCompletionMessage) []int {
	var starts []int
	for i := cv.nTask; i < len(msgs); i++ {
		if msgs[i].Role == openai.ChatMessageRoleAssistant || len(starts) == 0 {
			starts = append(starts, i)
		}
	}
	return starts
}

// view is what strategy s sends of msgs in the next request, and what it removed. briefing
// is the last briefing's text (the briefing strategy; "" before the first).
func (cv *conversation) view(s ContextStrategy, msgs []openai.ChatCompletionMessage, briefing string) ([]openai.ChatCompletionMessage, ContextRound) {
	full := make([]int, len(msgs))
	for i := range msgs {
		full[i] = cv.size(msgs, i)
	}
	all := ContextRound{Messages: len(msgs), Bytes: arrayBytes(full)}
	starts := cv.rounds(msgs)
	if !s.trimmed() || len(starts) == 0 {
		return msgs, all
	}
	var out []openai.ChatCompletionMessage
	var sizes []int
	switch s.Kind {
	case ContextWindow:
		if len(starts) <= s.N {
			return msgs, all
		}
		from := starts[len(starts)-s.N]
		out = append(append(out, msgs[:cv.nTask]...), msgs[from:]...)
		sizes = append(append(sizes, full[:cv.nTask]...), full[from:]...)
	case ContextBriefing:
		if briefing == "" {
			return msgs, all
		}
		from := starts[len(starts)-1]
		b := userMessage(briefingHeader + briefing)
		out = append(append(append(out, msgs[:cv.nTask]...), b), msgs[from:]...)
		sizes = append(append(append(sizes, full[:cv.nTask]...), messageBytes(b)), full[from:]...)
	case ContextBudget:
		return cv.budget(s.N*BytesPerToken, msgs, starts, full, all)
	}
	return out, measure(sizes, all)
}

// measure is the ContextRound of sending messages of these sizes instead of the whole
// conversation (all).
func measure(sizes []int, all ContextRound) ContextRound {
	cr := ContextRound{Messages: len(sizes), Bytes: arrayBytes(sizes)}
	cr.RemovedMessages = max(all.Messages-cr.Messages, 0)
	cr.RemovedBytes = max(all.Bytes-cr.Bytes, 0)
	return cr
}

// keepHead is how much of a shortened tool result budget:TOKENS keeps.
const keepHead = 80

// cutMarker ends a shortened tool result: how many bytes were cut.
func cutMarker(n int) string {
	return fmt.Sprintf(" [... %d bytes cut to fit the context budget]", n)
}

// budget is the budget strategy's view: msgs while they fit in limit bytes; else the tool
// results of the rounds before the last are shortened, oldest first, to keepHead bytes and a
// marker, until the messages fit; then the oldest rounds are dropped, whole, until they fit.
// The task's messages and the last round are always sent, even over the budget.
func (cv *conversation) budget(limit int, msgs []openai.ChatCompletionMessage, starts, sizes []int, all ContextRound) ([]openai.ChatCompletionMessage, ContextRound) {
	if all.Bytes <= limit {
		return msgs, all
	}
	total := all.Bytes
	sizes = append([]int(nil), sizes...)
	var out []openai.ChatCompletionMessage // a copy, made at the first change
	shortened := 0
	last := starts[len(starts)-1]
	for i := starts[0]; i < last && total > limit; i++ {
		m := &msgs[i]
		if m.Role != openai.ChatMessageRoleTool || len(m.Content) <= keepHead+len(cutMarker(len(m.Content))) {
			continue
		}
		if out == nil {
			out = append([]openai.ChatCompletionMessage(nil), msgs...)
		}
		head := strings.ToValidUTF8(m.Content[:keepHead], "")
		out[i].Content = head + cutMarker(len(m.Content)-len(head))
		n, ok := cv.cut[i]
		if !ok {
			// The same message is shortened the same way in every later round: measured once.
			n = messageBytes(out[i])
			if cv.cut == nil {
				cv.cut = map[int]int{}
			}
			cv.cut[i] = n
		}
		total += n - sizes[i]
		sizes[i] = n
		shortened++
	}
	if out == nil {
		out = msgs
	}
	// Drop the oldest rounds, whole, but never the last.
	from := 0
	for from < len(starts)-1 && total > limit {
		end := starts[from+1]
		for i := starts[from]; i < end; i++ {
			total -= sizes[i] + 1
		}
		from++
	}
	if from > 0 {
		out = append(append([]openai.ChatCompletionMessage(nil), out[:cv.nTask]...), out[starts[from]:]...)
		sizes = append(sizes[:cv.nTask], sizes[starts[from]:]...)
	}
	cr := measure(sizes, all)
	cr.Shortened = shortened
	return out, cr
}

// send is the messages of the next round's request under strategy s, and its entry in
// tr.Context (nil when the trajectory keeps no context trace: full, without Degrade).
func (cv *conversation) send(s ContextStrategy, tr *Trajectory, briefing string) ([]openai.ChatCompletionMessage, *ContextRound) {
	if tr.Context == nil {
		return tr.Messages, nil
	}
	out, cr := cv.view(s, tr.Messages, briefing)
	tr.Context.Rounds = append(tr.Context.Rounds, cr)
	return out, &tr.Context.Rounds[len(tr.Context.Rounds)-1]
}

// withoutTools is req with msgs and no tools offered: the briefing and degrade calls.
func withoutTools(req openai.ChatCompletionRequest, msgs []openai.ChatCompletionMessage) openai.ChatCompletionRequest {
	req.Messages = msgs
	req.Tools, req.ToolChoice, req.ParallelToolCalls = nil, nil, nil
	return req
}

// brief is the briefing strategy's call after round: the task, the last briefing and the last
// round, then the briefing prompt, without tools. Its answer is the new briefing; its usage
// counts in the trajectory's. A failed call ends the rollout as a failed round's call would
// (ok false).
func (c *Config) brief(ctx context.Context, req *openai.ChatCompletionRequest, cv *conversation, tr *Trajectory, last string, round int) (string, bool) {
	sent, _ := cv.view(c.Context, tr.Messages, last)
	prompt := c.BriefingPrompt
	if prompt == "" {
		prompt = DefaultBriefingPrompt
	}
	resp, latency, tap, err := c.call(ctx, withoutTools(*req, append(slices.Clip(sent), userMessage(prompt))), lastRound(tr))
	if err != nil {
		term, class := modelFailure(ctx, err)
		tr.Termination, tr.FailureClass, tr.Error = term, class, fmt.Sprintf("briefing call after round %d: %s", round, modelErrorText(err, term, tap))
		return "", false
	}
	if len(resp.Choices) == 0 {
		tr.Termination, tr.FailureClass = InvalidOutput, record.FailModelError
		tr.Error = fmt.Sprintf("briefing call after round %d: the answer has no choices", round)
		return "", false
	}
	u := usageOf(resp.Usage)
	tr.Usage.add(u)
	text := strings.TrimSpace(resp.Choices[0].Message.Content)
	if text == "" {
		text = "(the briefing was empty)"
	}
	tr.Context.Briefings = append(tr.Context.Briefings, Briefing{Round: round, Text: text, Usage: u, LatencyMs: ms(latency)})
	return text, true
}

// degrade is --degrade's last call, round number round, after failed consecutive rounds of
// failed tool calls: what the strategy sends, then a request for the best final answer,
// without tools. Its answer is the rollout's final answer (termination Degraded); a tool call
// in it is not made.
func (c *Config) degrade(ctx context.Context, req *openai.ChatCompletionRequest, cv *conversation, tr *Trajectory, briefing string, round, failed int) {
	sent, cr := cv.send(c.Context, tr, briefing)
	resp, latency, tap, err := c.call(ctx, withoutTools(*req, append(slices.Clip(sent), userMessage(fmt.Sprintf(degradePrompt, failed)))), lastRound(tr))
	if err != nil {
		term, class := modelFailure(ctx, err)
		tr.Termination, tr.FailureClass, tr.Error = term, class, fmt.Sprintf("degraded final call in round %d: %s", round, modelErrorText(err, term, tap))
		return
	}
	if len(resp.Choices) == 0 {
		tr.Termination, tr.FailureClass = InvalidOutput, record.FailModelError
		tr.Error = fmt.Sprintf("degraded final call in round %d: the answer has no choices", round)
		return
	}
	rd := newRound(&resp, round, latency)
	c.captureTokens(ctx, &rd, tap)
	tr.Usage.add(rd.Usage)
	cr.PromptTokens = rd.Usage.PromptTokens
	hist := historyMessage(&resp.Choices[0].Message, round)
	hist.ToolCalls = nil
	tr.Messages = append(tr.Messages, hist)
	tr.Rounds = append(tr.Rounds, rd)
	tr.FinalText = rd.Content
	tr.Termination = Degraded
	tr.Error = fmt.Sprintf("every tool call failed in %d consecutive rounds: degraded to one final answer without tools", failed)
}
