package rundir

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
	"github.com/rollout-dev/rollout/pkg/record"
)

// lineReader reads the lines of a JSONL file, naming the file and line in its errors.
type lineReader struct {
	path string
	f    *os.File
	br   *bufio.Reader
	n    int
	buf  []byte
	// over, when set, is the length past which a line is not held: next reads the rest of it
	// through, and returns a *LineOverError with its key (its members names, decoded as it
	// streams) and size; what names the file's lines in errors.
	over  int64
	names [3]string
	what  string
}

// A LineOverError is a line of a side file longer than a SideLines' bound: its key and
// length. The line is not held.
type LineOverError struct {
	Path string
	What string // "trajectory", "NeMo Gym"
	Line int
	Key  record.Key
	Size int64 // without its newline
	Over int64
}

func (e *LineOverError) Error() string {
	return fmt.Sprintf("%s:%d: a %s line of %d bytes, over --max-row-bytes %d", e.Path, e.Line, e.What, e.Size, e.Over)
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
// (every string cut short, so the line is never held), and returns its *LineOverError.
func (l *lineReader) skipLong(head []byte, complete bool) error {
	rest := &restOfLine{br: l.br, done: complete}
	l.n++
	var m map[string]json.RawMessage
	c := ClipStrings(io.MultiReader(bytes.NewReader(head), rest), 4<<10, math.MaxInt64)
	derr := json.NewDecoder(c).Decode(&m)
	if _, err := io.Copy(io.Discard, rest); err != nil {
		return fmt.Errorf("%s: %w", l.path, err)
	}
	if !rest.done {
		return io.EOF // a torn last line
	}
	var k record.Key
	if derr == nil {
		derr = errors.Join(json.Unmarshal(m[l.names[0]], &k.Task), json.Unmarshal(m[l.names[1]], &k.Rollout), json.Unmarshal(m[l.names[2]], &k.Arm))
	}
	if derr != nil {
		return fmt.Errorf("%s:%d: not a %s line: %v", l.path, l.n, l.what, derr)
	}
	return &LineOverError{Path: l.path, Line: l.n, What: l.what, Key: k, Size: int64(len(head)) + max(rest.n-1, 0), Over: l.over}
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
			if l.over == 0 && int64(len(l.buf)) > MaxTrajectoryLine {
				return nil, fmt.Errorf("%s:%d: line longer than %d bytes", l.path, l.n+1, MaxTrajectoryLine)
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

// SideLines finds each record's line in a side file of the run (trajectories.jsonl, the NeMo
// Gym lines), which the run writes in the journal's order, read in one pass beside the
// journal: lines read past the one wanted wait in a map until asked for, so that memory stays
// bounded by how far the two files' orders differ. A nil *SideLines has no lines.
type SideLines[T any] struct {
	lines   *lineReader
	what    string    // "trajectory", "NeMo Gym"
	names   [3]string // the members of the key: task index, rollout index, arm
	value   func(line []byte) (k record.Key, v T, err error)
	pending map[record.Key]T
	skipped map[record.Key]bool           // keys left out before their line was read
	large   map[record.Key]*LineOverError // lines too long to read, not yet asked for
	eof     bool
}

// OpenTrajectoryLines reads dir's trajectories.jsonl in order, for a reader that takes each
// record's trajectory as it reads the journal (ReadJournal): value decodes a line into its key
// and what the reader keeps of it (sharing no memory with the line). A line longer than over
// bytes is not held, and its key's Get is a *LineOverError; with over 0, a line longer than
// MaxTrajectoryLine is an error.
func OpenTrajectoryLines[T any](dir string, over int64, value func(line []byte) (record.Key, T, error)) (*SideLines[T], error) {
	l, err := openLines(filepath.Join(dir, TrajectoriesFile))
	if err != nil {
		return nil, fmt.Errorf("%s: no trajectories: %w", dir, err)
	}
	l.over, l.names, l.what = over, [3]string{"task_index", "rollout_index", "arm"}, "trajectory"
	return newSideLines(l, value), nil
}

// OpenNemoGymLines reads the NeMo Gym lines of dir's run in order (its --jsonl-out file, or
// nemo_gym.jsonl while it runs), as OpenTrajectoryLines reads its trajectories; nil, nil
// when the run has none.
func OpenNemoGymLines[T any](dir string, over int64, value func(line []byte) (record.Key, T, error)) (*SideLines[T], error) {
	path := filepath.Join(dir, NemoGymFile)
	if m, err := ReadManifest(dir); err == nil && m.JSONLOut != "" {
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
	l.over, l.names, l.what = over, [3]string{ngTaskIndexKey, ngRolloutIndexKey, ngArmKey}, "NeMo Gym"
	return newSideLines(l, value), nil
}

func newSideLines[T any](l *lineReader, value func([]byte) (record.Key, T, error)) *SideLines[T] {
	return &SideLines[T]{lines: l, what: l.what, names: l.names, value: value, pending: map[record.Key]T{}, skipped: map[record.Key]bool{}, large: map[record.Key]*LineOverError{}}
}

// skip drops k's line, read or still to come.
func (t *SideLines[T]) Skip(k record.Key) {
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

// Get returns the value of k's line, or ok false when the file has no line for k; a line
// too long to read is a *LineOverError.
func (t *SideLines[T]) Get(k record.Key) (v T, ok bool, err error) {
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
		var large *LineOverError
		if errors.As(err, &large) {
			switch {
			case large.Key == k:
				return v, false, large
			case t.skipped[large.Key]:
				delete(t.skipped, large.Key)
			default:
				t.large[large.Key] = large
			}
			continue
		}
		if err != nil {
			return v, false, err
		}
		// The fast path reads the key alone, for a line to skip.
		task, rollout, arm, _, fast := jsonfast.LineKeys(line, t.names[0], t.names[1], t.names[2])
		if lk := (record.Key{Task: task, Rollout: rollout, Arm: string(arm)}); fast && lk != k && t.skipped[lk] {
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

// Close closes the file.
func (t *SideLines[T]) Close() error {
	if t == nil {
		return nil
	}
	return t.lines.close()
}
