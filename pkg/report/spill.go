package report

import (
	"cmp"
	"encoding/binary"
	"math"
	"strings"

	"github.com/rollout-dev/rollout/internal/extsort"
)

// spillRows is how many rows an Evaluator that spills keeps in memory (6 MiB): a full buffer
// is sorted and written to its file as one run.
const spillRows = 1 << 17

// SpillTo makes the Evaluator keep at most spillRows rows in memory: past that, the rows are
// sorted and written to a temporary file in dir (removed by Close), and Evaluation merges
// them back. Its result is the same as without. Call it before Add; Err says whether reading
// them back failed. If the file cannot be written, the rows stay in memory.
func (e *Evaluator) SpillTo(dir string) {
	rows := extsort.New(dir, spillRows, rowCodec)
	rows.Buf = e.rows.Buf
	e.rows = rows
}

// Err is the first error in reading back the rows written by SpillTo: the last Evaluation
// is incomplete.
func (e *Evaluator) Err() error { return e.err }

// Close releases the temporary file of SpillTo, if any.
func (e *Evaluator) Close() error { return e.rows.Close() }

// rowCodec is a row in the spill file.
var rowCodec = extsort.Codec[evalRow]{
	Size: 8 + 8 + 8 + 8 + 4 + 4 + 4 + 1,
	Encode: func(b []byte, r *evalRow) {
		le := binary.LittleEndian
		le.PutUint64(b[0:], uint64(r.task))
		le.PutUint64(b[8:], uint64(r.rollout))
		le.PutUint64(b[16:], math.Float64bits(r.reward))
		le.PutUint64(b[24:], math.Float64bits(r.latencyMs))
		le.PutUint32(b[32:], uint32(r.src))
		le.PutUint32(b[36:], uint32(r.arm))
		le.PutUint32(b[40:], uint32(r.group))
		b[44] = r.flags
	},
	Decode: func(b []byte, r *evalRow) {
		le := binary.LittleEndian
		r.task = int64(le.Uint64(b[0:]))
		r.rollout = int64(le.Uint64(b[8:]))
		r.reward = math.Float64frombits(le.Uint64(b[16:]))
		r.latencyMs = math.Float64frombits(le.Uint64(b[24:]))
		r.src = int32(le.Uint32(b[32:]))
		r.arm = int32(le.Uint32(b[36:]))
		r.group = int32(le.Uint32(b[40:]))
		r.flags = b[44]
	},
}

// compareRows orders rows by source, task, arm (by name, through nameCmp) and rollout, then
// by the rest, so that only identical rows tie.
func compareRows(nameCmp func(a, b int32) int) func(a, b evalRow) int {
	return func(a, b evalRow) int {
		return cmp.Or(
			nameCmp(a.src, b.src),
			cmp.Compare(a.task, b.task),
			nameCmp(a.arm, b.arm),
			cmp.Compare(a.rollout, b.rollout),
			nameCmp(a.group, b.group),
			cmp.Compare(a.reward, b.reward),
			cmp.Compare(a.latencyMs, b.latencyMs),
			cmp.Compare(a.flags, b.flags),
		)
	}
}

// byName compares names by their strings: the order of their ranks, which are not known
// until every name is.
func (e *Evaluator) byName(a, b int32) int {
	if a == b {
		return 0
	}
	return strings.Compare(e.names[a], e.names[b])
}

// eachSorted calls f with every row added, in the order of compareRows (through order); an
// error in reading spilled rows back is kept for Err.
func (e *Evaluator) eachSorted(order func(a, b evalRow) int, f func(*evalRow)) {
	if err := e.rows.Each(order, f); err != nil && e.err == nil {
		e.err = err
	}
}
