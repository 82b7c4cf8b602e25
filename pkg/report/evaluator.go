package report

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/rollout-dev/rollout/internal/extsort"
	"github.com/rollout-dev/rollout/pkg/record"
)

// Evaluator collects records, keeping a few numbers of each (not the records), for an
// Evaluation. It is not safe for concurrent use.
//
// Each record costs an evalRow (48 bytes): what the order-dependent statistics need (the
// reward, and the latency, whose float sum depends on the order of the terms). The counts
// and integer sums are kept per cell, an arm and a group-by value, which every scope is a
// union of. With SpillTo, the rows go to a temporary file in sorted runs of spillRows, so
// that its memory does not grow with the records (see spill.go).
type Evaluator struct {
	o     StatsOptions
	rows  *extsort.Sorter[evalRow]
	n     int   // rows added, spilled ones included
	err   error // the first error in reading spilled rows back
	cells []evalCell
	// cellOf indexes cells by arm and group; lastCell is the cell of the last record, which
	// the next one often shares.
	cellOf   map[[2]int32]int32
	lastCell int32
	// Interned strings: sources, arms, groups, failure classes, terminations; the last of
	// each kind, which the next record often repeats.
	names []string
	index map[string]int32
	last  [5]struct {
		s string
		i int32
	}
	// groupSeen says a record had the GroupBy field; until then fields collects the task
	// fields the records have (at most maxFieldNames), for the error of an unknown field.
	groupSeen bool
	fields    map[string]bool
}

// maxFieldNames bounds the task field names an Evaluator keeps for UnknownGroupBy.
const maxFieldNames = 64

// UnknownFieldError is a group-by field that no record has.
type UnknownFieldError struct {
	Field string
	Known []string // the task fields the records have, sorted
}

func (u *UnknownFieldError) Error() string {
	known := "the records have no task field"
	if len(u.Known) > 0 {
		known = "the task fields are: " + strings.Join(u.Known, ", ")
	}
	return fmt.Sprintf("--group-by %q: no record has this task field; %s (arms and runs are rows of every report already)", u.Field, known)
}

// UnknownGroupBy returns an *UnknownFieldError when the options group by a field that none of
// the records added has (nil without GroupBy, records, or when some record has it).
func (e *Evaluator) UnknownGroupBy() error {
	if e.o.GroupBy == "" || e.groupSeen || e.n == 0 {
		return nil
	}
	return &UnknownFieldError{Field: e.o.GroupBy, Known: slices.Sorted(maps.Keys(e.fields))}
}

// Kinds of interned strings, for Evaluator.last.
const (
	nameSource = iota
	nameArm
	nameGroup
	nameFailure
	nameTermination
)

// evalRow is what the statistics need of one record, apart from its cell's sums.
type evalRow struct {
	task, rollout   int64
	reward          float64
	latencyMs       float64
	src, arm, group int32 // indices into names
	flags           uint8
}

const (
	rowHasReward = 1 << iota
	rowFailed    // a failure class
)

// evalCell sums the records of one arm and one group-by value.
type evalCell struct {
	arm, group       int32
	rollouts, failed int
	failures         map[int32]int // by class (an index into names)
	terminations     map[int32]int // by termination, "" left out
	promptTokens     int64
	completionTokens int64
	toolErrors       int64
	// Over the records with a reward and no failure class.
	behaved                                             int
	rounds, toolCalls, behavedPrompt, behavedCompletion int64
	// most is the largest magnitude of their rewards (NaN if one is NaN), for scaleFor.
	most float64
}

// NewEvaluator returns an empty Evaluator.
func NewEvaluator(o StatsOptions) *Evaluator {
	e := &Evaluator{o: o.normalized(), rows: extsort.New("", 0, rowCodec), index: map[string]int32{}, cellOf: map[[2]int32]int32{}, lastCell: -1}
	for k := range e.last {
		e.last[k].i = -1
	}
	return e
}

// Reserve makes room for n more records (for at most a run's worth with SpillTo).
func (e *Evaluator) Reserve(n int) {
	if e.rows.Spilling() {
		n = min(n, e.rows.Max-len(e.rows.Buf))
	}
	e.rows.Buf = slices.Grow(e.rows.Buf, n)
}

// internAs is intern, first trying the last string of its kind.
func (e *Evaluator) internAs(kind int, s string) int32 {
	if l := &e.last[kind]; l.s == s && l.i >= 0 {
		return l.i
	}
	i := e.intern(s)
	e.last[kind].s, e.last[kind].i = s, i
	return i
}

func (e *Evaluator) intern(s string) int32 {
	if i, ok := e.index[s]; ok {
		return i
	}
	i := int32(len(e.names))
	e.names = append(e.names, s)
	e.index[s] = i
	return i
}

// Add counts one record.
func (e *Evaluator) Add(r *record.Record) {
	group := ""
	if e.o.GroupBy != "" {
		var ok bool
		if group, ok = r.TaskFields[e.o.GroupBy]; !ok {
			group = NoGroup
			if !e.groupSeen && len(e.fields) < maxFieldNames {
				if e.fields == nil {
					e.fields = map[string]bool{}
				}
				for k := range r.TaskFields {
					e.fields[k] = true
				}
			}
		} else {
			e.groupSeen = true
		}
	}
	row := evalRow{
		task: r.TaskIndex, rollout: r.RolloutIndex, reward: r.Reward, latencyMs: r.LatencyMs,
		src: e.internAs(nameSource, r.SourceFile), arm: e.internAs(nameArm, r.Arm), group: e.internAs(nameGroup, group),
	}
	if r.HasReward {
		row.flags |= rowHasReward
	}
	if r.FailureClass != record.FailNone {
		row.flags |= rowFailed
	}
	e.rows.Buf = append(e.rows.Buf, row)
	e.n++
	if e.rows.Full() {
		e.rows.Spill(compareRows(e.byName))
	}

	c := e.cell(row.arm, row.group)
	c.rollouts++
	if r.FailureClass != record.FailNone {
		c.failed++
		c.failures[e.internAs(nameFailure, string(r.FailureClass))]++
	}
	if r.Termination != "" {
		c.terminations[e.internAs(nameTermination, r.Termination)]++
	}
	c.promptTokens += r.PromptTokens
	c.completionTokens += r.CompletionTokens
	c.toolErrors += int64(r.ToolErrors)
	if r.FailureClass == record.FailNone && r.HasReward {
		c.most = max(c.most, math.Abs(r.Reward))
		c.behaved++
		c.rounds += int64(r.Rounds)
		c.toolCalls += int64(r.ToolCalls)
		c.behavedPrompt += r.PromptTokens
		c.behavedCompletion += r.CompletionTokens
	}
}

func (e *Evaluator) cell(arm, group int32) *evalCell {
	if e.lastCell >= 0 {
		if c := &e.cells[e.lastCell]; c.arm == arm && c.group == group {
			return c
		}
	}
	i, ok := e.cellOf[[2]int32{arm, group}]
	if !ok {
		i = int32(len(e.cells))
		e.cells = append(e.cells, evalCell{arm: arm, group: group, failures: map[int32]int{}, terminations: map[int32]int{}})
		e.cellOf[[2]int32{arm, group}] = i
	}
	e.lastCell = i
	return &e.cells[i]
}
