package export

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/rollout-dev/rollout/internal/jsonfast"
	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// maxLine bounds one line of a run's files (a trajectory of a long rollout is large): the
// bound of every reader of trajectories.jsonl.
var maxLine = int(rundir.MaxTrajectoryLine)

// key is a rollout's key within a run directory.
type key struct {
	task, rollout int64
	arm           string
}

func keyOf(r *record.Record) key { return key{r.TaskIndex, r.RolloutIndex, r.Arm} }

// lineReader reads the lines of a JSONL file, naming the file and line in its errors.
type lineReader struct {
	path string
	f    *os.File
	br   *bufio.Reader
	n    int
	buf  []byte
	// over, when set, is the length past which a line is not held: next reads the rest of it
	// through, and returns a *tooLargeError with its key (its members names, decoded as it
	// streams) and size; what names the file's lines in errors.
	over  int64
	names [3]string
	what  string
}

// tooLargeError is a line longer than a lineReader's over: its key and length.
type tooLargeError struct {
	path string
	what string // "trajectory", "NeMo Gym"
	line int
	key  key
	size int64 // without its newline
	over int64
}

func (e *tooLargeError) Error() string {
	return fmt.Sprintf("%s:%d: a %s line of %d bytes, over --max-row-bytes %d", e.path, e.line, e.what, e.size, e.over)
}

// restOfLine reads br up to its next newline (included), and counts what it read.
type restOfLine struct {
	br   *bufio.Reader
	n    int64
	done bool
}

func (r *restOfLine) Read(p []byte) (int, error) {
	if r.done || len(p) == 0 {
		return 0, io.EOF
	}
	if r.br.Buffered() == 0 {
		if _, err := r.br.Peek(1); err != nil {
			return 0, err
		}
	}
	b, _ := r.br.Peek(min(len(p), r.br.Buffered()))
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b, r.done = b[:i+1], true
	}
	n := copy(p, b)
	r.br.Discard(n)
	r.n += int64(n)
	return n, nil
}

// skipLong reads the rest of a line of which head was read (none when complete),
// its key decoded as it streams
// (every string cut short, so the line is never held), and returns its *tooLargeError.
func (l *lineReader) skipLong(head []byte, complete bool) error {
	rest := &restOfLine{br: l.br, done: complete}
	l.n++
	var m map[string]json.RawMessage
	c := rundir.ClipStrings(io.MultiReader(bytes.NewReader(head), rest), 4<<10, math.MaxInt64)
	derr := json.NewDecoder(c).Decode(&m)
	if _, err := io.Copy(io.Discard, rest); err != nil {
		return fmt.Errorf("%s: %w", l.path, err)
	}
	if !rest.done {
		return io.EOF // a torn last line
	}
	var k key
	if derr == nil {
		derr = errors.Join(json.Unmarshal(m[l.names[0]], &k.task), json.Unmarshal(m[l.names[1]], &k.rollout), json.Unmarshal(m[l.names[2]], &k.arm))
	}
	if derr != nil {
		return fmt.Errorf("%s:%d: not a %s line: %v", l.path, l.n, l.what, derr)
	}
	return &tooLargeError{path: l.path, line: l.n, what: l.what, key: k, size: int64(len(head)) + max(rest.n-1, 0), over: l.over}
}

func openLines(path string) (*lineReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return &lineReader{path: path, f: f, br: bufio.NewReaderSize(f, 1<<20)}, nil
}

// next returns the next non-blank line (valid until the next call), or io.EOF. A last line
// without its newline (torn by a crash) is skipped, as resume drops it.
func (l *lineReader) next() ([]byte, error) {
	for {
		l.buf = l.buf[:0]
		for {
			chunk, err := l.br.ReadSlice('\n')
			l.buf = append(l.buf, chunk...)
			if l.over > 0 && int64(len(l.buf)) > l.over && err == bufio.ErrBufferFull {
				return nil, l.skipLong(l.buf, false) // longer than over, its newline still to come
			}
			if l.over == 0 && len(l.buf) > maxLine {
				return nil, fmt.Errorf("%s:%d: line longer than %d bytes", l.path, l.n+1, maxLine)
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err == io.EOF {
				return nil, io.EOF // nothing, or a torn last line
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", l.path, err)
			}
			break
		}
		if l.over > 0 && int64(len(l.buf)-1) > l.over {
			return nil, l.skipLong(l.buf[:len(l.buf)-1], true)
		}
		l.n++
		line := l.buf[:len(l.buf)-1]
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		if len(line) > 0 {
			return line, nil
		}
	}
}

func (l *lineReader) close() error { return l.f.Close() }

// keyedLines finds each record's line in a side file of the run (trajectories.jsonl, the NeMo
// Gym lines), which the run writes in the journal's order: lines read past the one wanted
// wait in a map until asked for, so that memory stays bounded by how far the two files'
// orders differ.
type keyedLines[T any] struct {
	lines   *lineReader
	what    string    // "trajectory", "NeMo Gym"
	names   [3]string // the members of the key: task index, rollout index, arm
	value   func(line []byte) (k key, v T, err error)
	pending map[key]T
	skipped map[key]bool           // keys left out before their line was read
	large   map[key]*tooLargeError // lines too long to read, not yet asked for
	eof     bool
}

// openTrajectories reads dir's trajectories.jsonl: each line's "trajectory" (nil when null),
// decoded with the line in one pass; a line longer than over is not held, and its key's get
// is a *tooLargeError.
func openTrajectories(dir string, over int64) (*keyedLines[*storedTrajectory], error) {
	l, err := openLines(filepath.Join(dir, rundir.TrajectoriesFile))
	if err != nil {
		return nil, fmt.Errorf("%s: no trajectories: %w", dir, err)
	}
	l.over, l.names, l.what = over, [3]string{"task_index", "rollout_index", "arm"}, "trajectory"
	return newKeyedLines(l, l.what, l.names, func(line []byte) (key, *storedTrajectory, error) {
		var full struct {
			TaskIndex    int64             `json:"task_index"`
			RolloutIndex int64             `json:"rollout_index"`
			Arm          string            `json:"arm"`
			Trajectory   *storedTrajectory `json:"trajectory"`
		}
		err := json.Unmarshal(line, &full)
		return key{full.TaskIndex, full.RolloutIndex, full.Arm}, full.Trajectory, err
	}), nil
}

// openVerifyAnswers reads the NeMo Gym lines of dir's run (its --jsonl-out file, or
// nemo_gym.jsonl while it runs): each verify answer whole, or nil when the run kept none.
func openVerifyAnswers(dir string, over int64) (*keyedLines[json.RawMessage], error) {
	path := filepath.Join(dir, rundir.NemoGymFile)
	if m, err := rundir.ReadManifest(dir); err == nil && m.JSONLOut != "" {
		if _, err := os.Stat(m.JSONLOut); err == nil {
			path = m.JSONLOut
		}
	}
	l, err := openLines(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	l.over, l.names, l.what = over, [3]string{"_ng_task_index", "_ng_rollout_index", "_ng_arm"}, "NeMo Gym"
	return newKeyedLines(l, l.what, l.names, func(line []byte) (key, json.RawMessage, error) {
		var keys struct {
			TaskIndex    int64  `json:"_ng_task_index"`
			RolloutIndex int64  `json:"_ng_rollout_index"`
			Arm          string `json:"_ng_arm"`
		}
		err := json.Unmarshal(line, &keys)
		return key{keys.TaskIndex, keys.RolloutIndex, keys.Arm}, append(json.RawMessage(nil), line...), err
	}), nil
}

func newKeyedLines[T any](l *lineReader, what string, names [3]string, value func([]byte) (key, T, error)) *keyedLines[T] {
	return &keyedLines[T]{lines: l, what: what, names: names, value: value, pending: map[key]T{}, skipped: map[key]bool{}, large: map[key]*tooLargeError{}}
}

// skip drops k's line, read or still to come.
func (t *keyedLines[T]) skip(k key) {
	if t == nil {
		return
	}
	if _, ok := t.pending[k]; ok {
		delete(t.pending, k)
		return
	}
	if _, ok := t.large[k]; ok {
		delete(t.large, k)
		return
	}
	t.skipped[k] = true
}

// get returns the value of k's line, or ok false when the file has no line for k; a line
// too long to read is a *tooLargeError. Values do not share memory with the line.
func (t *keyedLines[T]) get(k key) (v T, ok bool, err error) {
	if v, ok := t.pending[k]; ok {
		delete(t.pending, k)
		return v, true, nil
	}
	if e, ok := t.large[k]; ok {
		delete(t.large, k)
		return v, false, e
	}
	for !t.eof {
		line, err := t.lines.next()
		if err == io.EOF {
			t.eof = true
			break
		}
		var large *tooLargeError
		if errors.As(err, &large) {
			switch {
			case large.key == k:
				return v, false, large
			case t.skipped[large.key]:
				delete(t.skipped, large.key)
			default:
				t.large[large.key] = large
			}
			continue
		}
		if err != nil {
			return v, false, err
		}
		// The fast path reads the key alone, for a line to skip.
		task, rollout, arm, _, fast := jsonfast.LineKeys(line, t.names[0], t.names[1], t.names[2])
		if lk := (key{task, rollout, string(arm)}); fast && lk != k && t.skipped[lk] {
			delete(t.skipped, lk)
			continue
		}
		lk, lv, err := t.value(line)
		if err != nil {
			return v, false, fmt.Errorf("%s:%d: not a %s line: %v", t.lines.path, t.lines.n, t.what, err)
		}
		if lk == k {
			return lv, true, nil
		}
		if t.skipped[lk] {
			delete(t.skipped, lk)
			continue
		}
		t.pending[lk] = lv
	}
	return v, false, nil
}

func (t *keyedLines[T]) close() error {
	if t == nil {
		return nil
	}
	return t.lines.close()
}

// tasks serves the task rows an export needs, read in order from the run's task file: a row
// read before it is asked for waits until its last rollout (need) has taken it.
type tasks struct {
	r       *dataset.Reader
	need    map[int64]int
	pending map[int64]*dataset.Task
	eof     bool
}

// openTasks opens the task file of dir's run (its manifest's input), or input when set.
func openTasks(dir, input string, need map[int64]int) (*tasks, error) {
	if input == "" {
		m, err := rundir.ReadManifest(dir)
		if err != nil {
			return nil, &InputError{fmt.Errorf("%s: %w (give the task file with --input)", dir, err)}
		}
		input = m.Input
	}
	r, err := dataset.Open(input)
	if err != nil {
		return nil, &InputError{fmt.Errorf("%s: the run's task file: %w (give it with --input)", dir, err)}
	}
	return &tasks{r: r, need: need, pending: map[int64]*dataset.Task{}}, nil
}

// get returns the row of task index i, or nil when the file has none.
func (t *tasks) get(i int64) (*dataset.Task, error) {
	task, ok := t.pending[i]
	for !ok && !t.eof {
		next, err := t.r.Next()
		if errors.Is(err, io.EOF) {
			t.eof = true
			break
		}
		if err != nil {
			return nil, err
		}
		if t.need[int64(next.Index)] == 0 {
			continue
		}
		t.pending[int64(next.Index)] = next
		task, ok = t.pending[i]
	}
	if !ok {
		return nil, nil
	}
	if t.need[i]--; t.need[i] <= 0 {
		delete(t.pending, i)
		delete(t.need, i)
	}
	return task, nil
}

func (t *tasks) close() error { return t.r.Close() }
