package sim

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// DefaultMaxTrackedRequests bounds the table of request fingerprints that numbers the attempts
// of a retried request (see Options.MaxTrackedRequests).
const DefaultMaxTrackedRequests = 100_000

// Options are the simulator's knobs. The zero value is a simulator that answers at once and never
// errs. Every random decision is drawn from a hash of (Seed, the conversation, the round, the
// decision's name), so the same Seed and the same requests give the same answers, whatever the
// order and concurrency in which conversations arrive.
type Options struct {
	// Seed selects one of the simulator's deterministic behaviours.
	Seed int64

	// Latency is the time taken before each answer (see Latency). An injected 429 is answered
	// at once; everything else, the injected 500 included, after the latency.
	Latency Latency

	// The error rates: each is a probability in [0, 1], drawn once per model call (round).
	//
	// WrongArgument perturbs one value in the arguments of one planned call of the round: a
	// number gets +1, a string gets its last character changed (an integer in a string: +1),
	// a boolean is negated, an array is reversed (or, when reversing changes nothing,
	// shortened by its last element). The value is picked among all values at any depth of
	// the arguments, after the references were resolved.
	WrongArgument float64
	// SkipStep leaves one planned call of the round out. When that empties the round, the
	// simulator goes on with the next round in the same answer (its references to the
	// skipped call resolve to null), or answers when no round is left.
	SkipStep float64
	// PrematureAnswer answers with the plan's final text (its references to calls not made
	// yet resolve to null) while rounds of the plan are still to come.
	PrematureAnswer float64
	// MalformedToolCall cuts the arguments of one tool call of the answer to half their
	// length, so that they are not valid JSON. It applies to unplanned conversations too.
	MalformedToolCall float64
	// HTTP429 answers 429 with an OpenAI-style rate_limit_exceeded error. The draw includes
	// the attempt number of the request (how often this exact request body was seen), so a
	// client's retry of the same request can succeed when HTTP429 < 1.
	HTTP429 float64
	// HTTP500 answers 500 with an OpenAI-style server_error, drawn like HTTP429.
	HTTP500 float64
	// ConnectionReset answers nothing: the simulator takes the connection over (http.Hijacker),
	// sets SO_LINGER to 0 and closes it, so that the client gets a TCP RST ("connection reset
	// by peer", or an EOF) instead of an answer. Drawn like HTTP429, once per request. Where
	// the connection cannot be taken over (HTTP/2), the handler aborts with
	// http.ErrAbortHandler, which resets the stream.
	ConnectionReset float64
	// Hang answers nothing and never returns until the client gives up: the handler waits for
	// the request's context to end (the client's timeout, or the connection closed), then
	// returns, holding no goroutine beyond the request. Drawn like HTTP429, once per request.
	Hang float64
	// RetryAfter, when positive, is sent with an injected 429 as a Retry-After header, in
	// whole seconds rounded up.
	RetryAfter time.Duration

	// ToolCountErrorSlope models an effect reported of real models (offered 15 tools, they
	// often call the wrong one): the more tools a request offers, the likelier a wrong argument.
	// The WrongArgument probability of a request offering n tools is
	// min(1, WrongArgument + ToolCountErrorSlope*max(0, n-ToolCountBaseline)).
	// It is in [0, 1]; 0 (the default) turns the effect off.
	ToolCountErrorSlope float64
	// ToolCountBaseline is the number of tools that costs nothing (>= 0).
	ToolCountBaseline int

	// The context model (context.go): a model of how a model's context could affect it, so
	// that rollout's context strategies have something to differ on. It is a model of a model,
	// not evidence about any real one.
	//
	// ContextLimit, in tokens (> 0; 0: no limit), refuses a request whose prompt (its message
	// texts and tool calls at 4 bytes a token) plus its max_tokens is over it, with HTTP 400
	// and vLLM's error body ("This model's maximum context length is ...").
	ContextLimit int
	// ContextErrorSlope raises the WrongArgument probability of a planned round by this much
	// per 1000 prompt tokens of its request, in [0, 1]: a long context, more mistakes.
	ContextErrorSlope float64
	// DistanceErrorSlope raises the WrongArgument probability of a planned round by this much
	// per round between where a value its calls use was read and the round itself, in [0, 1]:
	// a value read long ago is misremembered more often. A value of the last round's results
	// is at distance 0, of the round before at 1, and so on; a value from a briefing (written
	// just before the round) at 0. A value the request no longer holds (a window dropped it, a
	// briefing left it out) cannot be used at all: it resolves to null.
	DistanceErrorSlope float64
	// BriefingDrop is the probability, in [0, 1], that the simulator's briefing leaves out one
	// fact (a call's result), drawn per fact and briefing.
	BriefingDrop float64

	// MaxTrackedRequests bounds the table that numbers the attempts of identical requests
	// (kept only when HTTP429, HTTP500, ConnectionReset or Hang is positive); when it is full
	// it is cleared at once.
	// 0 means DefaultMaxTrackedRequests.
	MaxTrackedRequests int

	// Now gives the "created" time of answers; nil means time.Now. Tests fix it to compare
	// answers byte for byte.
	Now func() time.Time
}

// Validate checks the options: rates in [0, 1], no negative durations or counts.
func (o Options) Validate() error {
	rates := []struct {
		name string
		v    float64
	}{
		{"wrong-argument", o.WrongArgument},
		{"skip-step", o.SkipStep},
		{"premature-answer", o.PrematureAnswer},
		{"malformed-tool-call", o.MalformedToolCall},
		{"http-429", o.HTTP429},
		{"http-500", o.HTTP500},
		{"connection-reset", o.ConnectionReset},
		{"hang", o.Hang},
		{"tool-count-error-slope", o.ToolCountErrorSlope},
		{"context-error-slope", o.ContextErrorSlope},
		{"distance-error-slope", o.DistanceErrorSlope},
		{"briefing-drop", o.BriefingDrop},
	}
	for _, r := range rates {
		if math.IsNaN(r.v) || r.v < 0 || r.v > 1 {
			return fmt.Errorf("sim: %s rate must be in [0, 1], got %g", r.name, r.v)
		}
	}
	if o.RetryAfter < 0 {
		return fmt.Errorf("sim: retry-after must not be negative, got %v", o.RetryAfter)
	}
	if o.ContextLimit < 0 {
		return fmt.Errorf("sim: context limit must not be negative, got %d", o.ContextLimit)
	}
	if o.ToolCountBaseline < 0 {
		return fmt.Errorf("sim: tool-count baseline must not be negative, got %d", o.ToolCountBaseline)
	}
	if o.MaxTrackedRequests < 0 {
		return fmt.Errorf("sim: max tracked requests must not be negative, got %d", o.MaxTrackedRequests)
	}
	if err := o.Latency.Validate(); err != nil {
		return fmt.Errorf("sim: %v", err)
	}
	return nil
}

// Latency distributions.
const (
	DistNone        = ""
	DistFixed       = "fixed"
	DistUniform     = "uniform"
	DistNormal      = "normal"
	DistExponential = "exponential"
)

// Latency is the distribution of the time the simulator takes to answer:
//
//	Dist ""            no latency
//	Dist "fixed"       always Mean
//	Dist "uniform"     uniform in [Min, Max]
//	Dist "normal"      normal with Mean and Stddev, cut at 0
//	Dist "exponential" exponential with Mean
//
// Each draw is deterministic: a hash of the seed, the conversation, the round and the attempt.
// It implements flag.Value with ParseLatency's syntax.
type Latency struct {
	Dist     string
	Mean     time.Duration
	Stddev   time.Duration
	Min, Max time.Duration
}

// ParseLatency parses a latency: "" / "0" / "none" (no latency), "100ms" or "fixed:100ms",
// "uniform:50ms-150ms", "normal:100ms,20ms" (mean, standard deviation), "exp:100ms" or
// "exponential:100ms" (mean). Durations are Go durations.
func ParseLatency(s string) (Latency, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" || s == "none" {
		return Latency{}, nil
	}
	bad := func(format string, args ...any) (Latency, error) {
		return Latency{}, fmt.Errorf("latency %q: %s; want D, fixed:D, uniform:MIN-MAX, normal:MEAN,STDDEV or exp:MEAN (D a duration like 100ms)", s, fmt.Sprintf(format, args...))
	}
	dist, rest, hasDist := strings.Cut(s, ":")
	if !hasDist {
		dist, rest = DistFixed, s
	}
	dur := func(what, v string) (time.Duration, error) {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return 0, fmt.Errorf("%s %q is not a duration", what, v)
		}
		if d < 0 {
			return 0, fmt.Errorf("%s %v is negative", what, d)
		}
		return d, nil
	}
	var l Latency
	var err error
	switch strings.ToLower(dist) {
	case DistFixed:
		l.Dist = DistFixed
		l.Mean, err = dur("duration", rest)
	case DistUniform:
		lo, hi, ok := strings.Cut(rest, "-")
		if !ok {
			return bad("uniform needs MIN-MAX")
		}
		l.Dist = DistUniform
		if l.Min, err = dur("minimum", lo); err == nil {
			l.Max, err = dur("maximum", hi)
		}
	case DistNormal:
		mean, sd, ok := strings.Cut(rest, ",")
		if !ok {
			return bad("normal needs MEAN,STDDEV")
		}
		l.Dist = DistNormal
		if l.Mean, err = dur("mean", mean); err == nil {
			l.Stddev, err = dur("standard deviation", sd)
		}
	case "exp", DistExponential:
		l.Dist = DistExponential
		l.Mean, err = dur("mean", rest)
	default:
		return bad("unknown distribution %q", dist)
	}
	if err != nil {
		return bad("%v", err)
	}
	if err := l.Validate(); err != nil {
		return bad("%v", err)
	}
	if l.Dist == DistFixed && l.Mean == 0 {
		return Latency{}, nil
	}
	return l, nil
}

// Validate checks the distribution's name and parameters.
func (l Latency) Validate() error {
	if l.Mean < 0 || l.Stddev < 0 || l.Min < 0 || l.Max < 0 {
		return fmt.Errorf("latency %v: negative duration", l)
	}
	switch l.Dist {
	case DistNone, DistFixed, DistNormal, DistExponential:
	case DistUniform:
		if l.Min > l.Max {
			return fmt.Errorf("latency: uniform minimum %v is above the maximum %v", l.Min, l.Max)
		}
	default:
		return fmt.Errorf("latency: unknown distribution %q", l.Dist)
	}
	return nil
}

// String is the latency in ParseLatency's syntax ("0" for none).
func (l Latency) String() string {
	switch l.Dist {
	case DistFixed:
		return l.Mean.String()
	case DistUniform:
		return fmt.Sprintf("uniform:%v-%v", l.Min, l.Max)
	case DistNormal:
		return fmt.Sprintf("normal:%v,%v", l.Mean, l.Stddev)
	case DistExponential:
		return fmt.Sprintf("exp:%v", l.Mean)
	case DistNone:
		return "0"
	}
	return fmt.Sprintf("%s:?", l.Dist)
}

// Set parses s into l (flag.Value).
func (l *Latency) Set(s string) error {
	v, err := ParseLatency(s)
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// Sample turns two uniform numbers in [0, 1) into a latency of the distribution.
func (l Latency) Sample(u1, u2 float64) time.Duration {
	var d float64
	switch l.Dist {
	case DistFixed:
		return l.Mean
	case DistUniform:
		d = float64(l.Min) + u1*float64(l.Max-l.Min)
	case DistNormal:
		// Box-Muller; 1-u1 is in (0, 1], so the logarithm is finite.
		z := math.Sqrt(-2*math.Log(1-u1)) * math.Cos(2*math.Pi*u2)
		d = float64(l.Mean) + z*float64(l.Stddev)
	case DistExponential:
		d = -float64(l.Mean) * math.Log(1-u1)
	default:
		return 0
	}
	if d <= 0 {
		return 0
	}
	if d >= math.MaxInt64 {
		return math.MaxInt64
	}
	return time.Duration(d)
}
