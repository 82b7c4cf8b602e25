package sim

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/rollout-dev/rollout/pkg/plan"
)

// The context model: a context limit answered as vLLM answers it, wrong arguments likelier with
// a longer context and with values read longer ago, and briefings. See Options.ContextLimit.
//
// # Briefings
//
// A request that offers no tools and whose last message is a user message mentioning a
// "briefing" is a request for one (rollout's briefing strategy sends such a request after each
// round). A planned conversation's briefing lists, one line a fact, the result of every plan
// call the request holds (in tool messages or in an earlier briefing) that a later round or the
// final text refers to, each left out with probability Options.BriefingDrop, and how many
// rounds of the plan remain:
//
//	Briefing of the simulator.
//	Facts:
//	- call_0_1a2b3c4d list_sources: {"sources": [...]}
//	Remaining: 2 more rounds of tool calls.
//
// A user message's fact lines are read back as results of those calls: a later round resolves
// its references from them, as from tool messages, at the distance of the briefing.

// overflow answers a request over Options.ContextLimit as vLLM does (HTTP 400, a top-level
// error object); ok is false when it fits.
func (s *Simulator) overflow(w http.ResponseWriter, req *chatRequest) bool {
	if s.opt.ContextLimit <= 0 {
		return false
	}
	prompt := req.promptBytes() / 4
	completion := 0
	if req.MaxTokens != nil {
		completion = *req.MaxTokens
	} else if req.MaxCompletion != nil {
		completion = *req.MaxCompletion
	}
	if prompt+completion <= s.opt.ContextLimit {
		return false
	}
	s.c.contextOverflow.Add(1)
	writeJSON(w, http.StatusBadRequest, map[string]any{
		"object": "error",
		"message": fmt.Sprintf("This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the messages, %d in the completion). Please reduce the length of the messages or completion.",
			s.opt.ContextLimit, prompt+completion, prompt, completion),
		"type": "BadRequestError", "param": nil, "code": http.StatusBadRequest,
	})
	return true
}

// briefingRequest reports whether req asks for a briefing (see the package documentation).
func (req *chatRequest) briefingRequest() bool {
	if len(req.offered()) > 0 || len(req.Messages) == 0 {
		return false
	}
	last := req.Messages[len(req.Messages)-1]
	return last.Role == "user" && strings.Contains(strings.ToLower(last.text), "briefing")
}

// briefingTitle starts the simulator's briefings; a request that holds it holds a briefing.
const briefingTitle = "Briefing of the simulator."

// factPrefix starts a fact line of a briefing.
const factPrefix = "- call_"

// seen is what a request holds of a plan's calls: the id each was made with, its result, and
// the message the result was read from.
type seen struct {
	made    map[int]string // plan call index → the id it was made with
	outputs map[string]string
	at      map[string]int // call id → index of the message its result was read from
	next    int            // the round after the last round with a call made
	first   int            // the plan round of the first assistant message's first plan call (-1: none)
	briefed bool           // a user message holds one of the simulator's briefings
}

// trimmed reports whether the request cannot be the whole conversation of plan p: it holds a
// briefing, or its first round of calls is not the plan's first. A whole conversation's first
// calls are round 0's, or round 1's when a skipped step emptied round 0 (one call, skipped:
// then the same answer played round 1), so a first round of 2 or more, or of 1 when round 0
// has several calls, says that rounds were left out. (A window that starts at round 1 of a
// plan whose round 0 has one call looks like the whole conversation, and is taken for it.)
func (sn *seen) trimmed(p *plan.Plan) bool {
	return sn.briefed || sn.first >= 2 || sn.first == 1 && len(p.Rounds[0]) > 1
}

// holds reads what req holds of the plan's calls: the assistant messages' calls, the tool
// messages' results, and the facts of briefings in user messages.
func holds(req *chatRequest, d drawer, calls []plan.Call, roundOf []int) seen {
	sn := seen{made: map[int]string{}, outputs: map[string]string{}, at: map[string]int{}, first: -1}
	for i, m := range req.Messages {
		switch m.Role {
		case "assistant":
			for _, tc := range m.ToolCalls {
				if n, ok := planCallIndex(d, tc.ID); ok && n < len(calls) {
					sn.made[n] = tc.ID
					sn.next = max(sn.next, roundOf[n]+1)
					if sn.first < 0 {
						sn.first = roundOf[n]
					}
				}
			}
		case "tool":
			sn.outputs[m.ToolCallID], sn.at[m.ToolCallID] = m.text, i
		case "user":
			sn.briefed = sn.briefed || strings.Contains(m.text, briefingTitle)
			for line := range strings.SplitSeq(m.text, "\n") {
				rest, ok := strings.CutPrefix(line, factPrefix)
				if !ok {
					continue
				}
				id, rest, _ := strings.Cut(rest, " ")
				_, text, ok := strings.Cut(rest, ": ")
				id = "call_" + id
				n, valid := planCallIndex(d, id)
				if !ok || !valid || n >= len(calls) {
					continue
				}
				if _, known := sn.made[n]; !known {
					sn.made[n] = id
				}
				if _, known := sn.outputs[id]; !known {
					sn.outputs[id], sn.at[id] = text, -1 // written just before this round
				}
			}
		}
	}
	return sn
}

// distance is the rounds between the message at index i and the end of req: the assistant
// messages with tool calls after it (0 for the last round's results); i < 0 is a briefing's
// fact, written just before the round: 0.
func (req *chatRequest) distance(i int) int {
	n := 0
	if i < 0 {
		return 0
	}
	for _, m := range req.Messages[i+1:] {
		if m.Role == "assistant" && len(m.ToolCalls) > 0 {
			n++
		}
	}
	return n
}

// briefing is the simulator's briefing of a planned conversation (see the package
// documentation).
func (s *Simulator) briefing(p *plan.Plan, sn seen, d drawer, round int) answer {
	calls := p.Calls()
	needed := neededLater(p, sn.next)
	var b strings.Builder
	b.WriteString(briefingTitle + "\nFacts:\n")
	for _, n := range slices.Sorted(maps.Keys(sn.made)) {
		id := sn.made[n]
		text, ok := sn.outputs[id]
		if !ok || !needed[n] {
			continue
		}
		if d.hit(s.opt.BriefingDrop, "briefing-drop", round, n) {
			s.c.briefingDropped.Add(1)
			continue
		}
		fmt.Fprintf(&b, "%s%s %s: %s\n", factPrefix, strings.TrimPrefix(id, "call_"), calls[n].Name, strings.ReplaceAll(text, "\n", " "))
	}
	fmt.Fprintf(&b, "Remaining: %d more rounds of tool calls.", max(len(p.Rounds)-sn.next, 0))
	s.c.briefings.Add(1)
	return textAnswer(b.String())
}

// neededLater is the plan calls whose results the rounds from next on, or the final text,
// refer to: what a briefing must keep.
func neededLater(p *plan.Plan, next int) map[int]bool {
	needed := map[int]bool{}
	track := func(n int) (any, bool) {
		needed[n] = true
		return nil, false
	}
	calls := p.Calls()
	for n := p.First(next); n < len(calls); n++ {
		plan.Resolve(calls[n].Arguments, track) //nolint:errcheck // only the references are wanted
	}
	p.FinalText(track) //nolint:errcheck // likewise
	return needed
}

// contextRate is the WrongArgument probability's raise by the context model for a round whose
// request has promptTokens tokens and whose calls use a value read dist rounds before the
// last.
func (s *Simulator) contextRate(promptTokens, dist int) float64 {
	return s.opt.ContextErrorSlope*float64(promptTokens)/1000 + s.opt.DistanceErrorSlope*float64(dist)
}
