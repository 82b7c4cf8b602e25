// Package loadbench is rollout's load benchmark: it runs the rollout binary against the model
// simulator (`rollout sim`) and a built-in resource server (`rollout serve counter`), each in
// its own process on loopback, streams generated tasks into the runner's stdin, and measures
// the runner from outside: model calls per second against the slot limit, its own CPU time per
// turn from its rusage, and its resident memory over the run.
//
// The tasks are counter tasks (the built-in "counter" server) with a reference plan of
// Rounds-1 rounds of one increment_counter call each, then a final answer (a one-round task
// offers no tool and has no plan: the simulator answers at once): every rollout is
// exactly Rounds model calls and Rounds-1 tool calls, and scores 1 when the runner did its job.
// All tasks of a scenario share one prompt, so the simulator knows the plan from one task (it
// keys conversations by their first user message and the request's seed), and a run of 10^6
// tasks needs no task file: they are generated while the runner reads them.
package loadbench

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// TaskShape is what a generated task makes a rollout do.
type TaskShape struct {
	// Rounds is the number of model calls per rollout (>= 1): Rounds-1 rounds with one tool
	// call each, then the answer.
	Rounds int
	// PromptBytes pads the conversation with a system message of about this many bytes, sent
	// with every model call (0: none).
	PromptBytes int
}

// Requests is the number of HTTP requests the runner makes for one rollout of the shape:
// seed_session, Rounds model calls, Rounds-1 tool calls, verify, and end_session (`rollout
// serve` says it takes it).
func (s TaskShape) Requests() int { return 1 + s.Rounds + s.Rounds - 1 + 1 + 1 }

// RequestsPerTurn is Requests / Rounds.
func (s TaskShape) RequestsPerTurn() float64 { return float64(s.Requests()) / float64(s.Rounds) }

func (s TaskShape) String() string {
	return fmt.Sprintf("%d rounds, %d B prompt", s.Rounds, s.PromptBytes)
}

// taskTail is the part of every row after the id: the same for all tasks of a shape.
func (s TaskShape) taskTail() string {
	var b strings.Builder
	b.WriteString(`,"responses_create_params":{"input":[`)
	if s.PromptBytes > 0 {
		b.WriteString(`{"role":"system","content":"`)
		const filler = "You are a careful assistant that keeps a counter with tools. "
		for n := 0; n < s.PromptBytes; n += len(filler) {
			b.WriteString(filler[:min(len(filler), s.PromptBytes-n)])
		}
		b.WriteString(`"},`)
	}
	fmt.Fprintf(&b, `{"role":"user","content":"The counter starts at 0. Increment it by 1, one call per round, %d times; then say its value."}],`, s.Rounds-1)
	if s.Rounds == 1 {
		// No tool to call, no plan: the simulator answers at once.
		b.WriteString(`"tools":[]},"agent_ref":{"type":"responses_api_agents","name":"counter"},"initial_count":0,"expected_count":0}` + "\n")
		return b.String()
	}
	b.WriteString(`"tools":[` +
		`{"type":"function","name":"increment_counter","description":"Add count to the session's counter; returns the new value.","parameters":{"type":"object","properties":{"count":{"type":"integer","description":"How much to add."}},"required":["count"],"additionalProperties":false},"strict":true},` +
		`{"type":"function","name":"get_counter_value","description":"The counter's value.","parameters":{"type":"object","properties":{},"additionalProperties":false},"strict":true}],` +
		`"parallel_tool_calls":false},`)
	b.WriteString(`"agent_ref":{"type":"responses_api_agents","name":"counter"},"initial_count":0,`)
	fmt.Fprintf(&b, `"expected_count":%d,"reference_plan":{"rounds":[`, s.Rounds-1)
	for i := range s.Rounds - 1 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`[{"name":"increment_counter","arguments":{"count":1}}]`)
	}
	b.WriteString(`],"final":"The counter is at ` + strconv.Itoa(s.Rounds-1) + `."}}` + "\n")
	return b.String()
}

// WriteTasks writes n tasks of the shape as NeMo Gym JSONL, ids 0..n-1, stopping at the first
// write error (a runner that stopped reading).
func WriteTasks(w io.Writer, n int, s TaskShape) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	tail := s.taskTail()
	var num []byte
	for i := range n {
		num = strconv.AppendInt(append(num[:0], `{"id":`...), int64(i), 10)
		bw.Write(num)
		if _, err := bw.WriteString(tail); err != nil {
			return err
		}
	}
	return bw.Flush()
}
