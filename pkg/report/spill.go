package report

import (
	"bufio"
	"cmp"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
)

// spillRows is how many rows an Evaluator that spills keeps in memory (6 MiB): a full buffer
// is sorted and written to its file as one run.
const spillRows = 1 << 17

// spillRowBytes is the size of a row in the spill file.
const spillRowBytes = 8 + 8 + 8 + 8 + 4 + 4 + 4 + 1

// spillReadBuffer is the read buffer of each run while the runs are merged: 10^8 rows are 763
// runs, 6 MiB of buffers.
const spillReadBuffer = 8 << 10

// spill is where an Evaluator's rows go when there are too many to keep: a temporary file
// of sorted runs, merged when the statistics are computed.
type spill struct {
	dir  string // "" when the Evaluator does not spill
	rows int    // rows kept in memory before a run is written
	f    *os.File
	path string // the file's path while it still has one (removed at Close)
	runs []spillRun
	size int64
	err  error // the first error reading the runs back
}

// spillRun is a sorted run of rows in the spill file.
type spillRun struct{ off, n int64 }

// SpillTo makes the Evaluator keep at most spillRows rows in memory: past that, the rows are
// sorted and written to a temporary file in dir (removed by Close), and Evaluation merges
// them back. Its result is the same as without. Call it before Add; Err says whether reading
// them back failed. If the file cannot be written, the rows stay in memory.
func (e *Evaluator) SpillTo(dir string) {
	e.spill.dir, e.spill.rows = dir, spillRows
}

// Err is the first error in reading back the rows written by SpillTo: the last Evaluation
// is incomplete.
func (e *Evaluator) Err() error { return e.spill.err }

// Close releases the temporary file of SpillTo, if any.
func (e *Evaluator) Close() error {
	s := &e.spill
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	if s.path != "" {
		err = errors.Join(err, os.Remove(s.path))
	}
	s.f, s.path, s.runs, s.size = nil, "", nil, 0
	return err
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

// spillRun sorts the rows in memory and appends them to the spill file as a run. If that
// fails, the Evaluator stops spilling and keeps its rows.
func (e *Evaluator) spillRun() {
	s := &e.spill
	if len(e.rows) == 0 {
		return
	}
	if s.f == nil {
		f, err := os.CreateTemp(s.dir, ".evaluation-*.tmp")
		if err != nil {
			s.dir = ""
			return
		}
		s.f, s.path = f, f.Name()
		// Unlinked now where the system allows it, so that nothing is left if the process dies.
		if os.Remove(s.path) == nil {
			s.path = ""
		}
	}
	slices.SortFunc(e.rows, compareRows(e.byName))
	w := bufio.NewWriterSize(io.NewOffsetWriter(s.f, s.size), 64<<10)
	var b [spillRowBytes]byte
	for i := range e.rows {
		encodeRow(&b, &e.rows[i])
		w.Write(b[:])
	}
	if err := w.Flush(); err != nil {
		s.dir = ""
		return
	}
	s.runs = append(s.runs, spillRun{off: s.size, n: int64(len(e.rows))})
	s.size += int64(len(e.rows)) * spillRowBytes
	e.rows = e.rows[:0]
}

func encodeRow(b *[spillRowBytes]byte, r *evalRow) {
	le := binary.LittleEndian
	le.PutUint64(b[0:], uint64(r.task))
	le.PutUint64(b[8:], uint64(r.rollout))
	le.PutUint64(b[16:], math.Float64bits(r.reward))
	le.PutUint64(b[24:], math.Float64bits(r.latencyMs))
	le.PutUint32(b[32:], uint32(r.src))
	le.PutUint32(b[36:], uint32(r.arm))
	le.PutUint32(b[40:], uint32(r.group))
	b[44] = r.flags
}

func decodeRow(b []byte, r *evalRow) {
	le := binary.LittleEndian
	r.task = int64(le.Uint64(b[0:]))
	r.rollout = int64(le.Uint64(b[8:]))
	r.reward = math.Float64frombits(le.Uint64(b[16:]))
	r.latencyMs = math.Float64frombits(le.Uint64(b[24:]))
	r.src = int32(le.Uint32(b[32:]))
	r.arm = int32(le.Uint32(b[36:]))
	r.group = int32(le.Uint32(b[40:]))
	r.flags = b[44]
}

// eachSorted calls f with every row added, in the order of compareRows. The rows in memory
// are sorted in place; with spilled runs, they become one more run and the runs are merged.
func (e *Evaluator) eachSorted(order func(a, b evalRow) int, f func(*evalRow)) {
	s := &e.spill
	if len(s.runs) > 0 && s.dir != "" {
		e.spillRun()
	}
	if len(s.runs) == 0 {
		slices.SortFunc(e.rows, order)
		for i := range e.rows {
			f(&e.rows[i])
		}
		return
	}
	m := &runMerge{order: order}
	for _, run := range s.runs {
		c := &runCursor{r: bufio.NewReaderSize(io.NewSectionReader(s.f, run.off, run.n*spillRowBytes), spillReadBuffer), left: run.n}
		if err := c.next(); err != nil {
			s.err = cmp.Or(s.err, err)
			return
		}
		m.cursors = append(m.cursors, c)
	}
	// Rows that stayed in memory (the spill file could not be written) are a run of their own.
	if len(e.rows) > 0 {
		slices.SortFunc(e.rows, order)
		c := &runCursor{mem: e.rows, left: int64(len(e.rows))}
		c.next()
		m.cursors = append(m.cursors, c)
	}
	heap.Init(m)
	for m.Len() > 0 {
		c := m.cursors[0]
		f(&c.row)
		if c.left == 0 {
			heap.Pop(m)
			continue
		}
		if err := c.next(); err != nil {
			s.err = cmp.Or(s.err, err)
			return
		}
		heap.Fix(m, 0)
	}
}

// runCursor reads one run back, from the spill file or from memory (mem).
type runCursor struct {
	r    *bufio.Reader
	mem  []evalRow
	left int64 // rows still to read
	row  evalRow
	buf  [spillRowBytes]byte
}

func (c *runCursor) next() error {
	if c.r == nil {
		c.row, c.mem = c.mem[0], c.mem[1:]
		c.left--
		return nil
	}
	if _, err := io.ReadFull(c.r, c.buf[:]); err != nil {
		return fmt.Errorf("evaluation: reading back its temporary file: %w", err)
	}
	decodeRow(c.buf[:], &c.row)
	c.left--
	return nil
}

// runMerge is a heap of run cursors by their current rows.
type runMerge struct {
	cursors []*runCursor
	order   func(a, b evalRow) int
}

func (m *runMerge) Len() int           { return len(m.cursors) }
func (m *runMerge) Less(i, j int) bool { return m.order(m.cursors[i].row, m.cursors[j].row) < 0 }
func (m *runMerge) Swap(i, j int)      { m.cursors[i], m.cursors[j] = m.cursors[j], m.cursors[i] }
func (m *runMerge) Push(x any)         { m.cursors = append(m.cursors, x.(*runCursor)) }
func (m *runMerge) Pop() any {
	c := m.cursors[len(m.cursors)-1]
	m.cursors = m.cursors[:len(m.cursors)-1]
	return c
}
