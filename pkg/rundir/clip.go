package rundir

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"

	"github.com/rollout-dev/rollout/pkg/record"
)

// MaxShownString is how much of one JSON string of a trajectory line the readers that show a
// transcript (view, show, report --html) keep: a longer one is cut there, with a note of its
// size (ClipNote).
var MaxShownString = 256 << 10

// ClipNote is what a string cut by a clipped read ends with: its size in the file.
func ClipNote(total int64) string {
	return " … [cut here: " + strconv.FormatInt(total, 10) + " bytes in trajectories.jsonl]"
}

// Clipped reads the "trajectory" member of the line of (task, rollout, arm) as it streams from
// the file, without taking the line into memory: every JSON string longer than maxString bytes
// (as written, escapes counted) is cut at a character boundary and ends with ClipNote. What is
// kept of the line may be at most MaxTrajectoryLine bytes (else a *LineTooLongError), so a
// line of any length costs a reader that much at most. ok is false when the run has no line
// for the rollout; traj is "null" when the line has no trajectory. A line at the indexed
// offset that is not that rollout's makes the index be built again, once.
func (t *Trajectories) Clipped(task, rollout int64, arm string, maxString int) (traj json.RawMessage, ok bool, err error) {
	for attempt := 0; ; attempt++ {
		off, found := t.index.lookup(task, rollout, arm)
		if !found {
			return nil, false, nil
		}
		var l struct {
			Task       int64           `json:"task_index"`
			Rollout    int64           `json:"rollout_index"`
			Arm        string          `json:"arm"`
			Trajectory json.RawMessage `json:"trajectory"`
		}
		path := join(t.dir, TrajectoriesFile)
		err := decodeClippedAt(path, off, maxString, MaxTrajectoryLine, &l)
		var malformed *MalformedLineError
		switch {
		case errors.As(err, &malformed) && attempt == 0:
			// Not a line at that offset: the file was rewritten since; the index is rebuilt below.
		case err != nil:
			return nil, false, err
		case l.Task == task && l.Rollout == rollout && l.Arm == arm:
			if l.Trajectory == nil {
				l.Trajectory = json.RawMessage("null")
			}
			return l.Trajectory, true, nil
		}
		if attempt > 0 {
			return nil, false, fmt.Errorf("%s at offset %d: not the line of task %d rollout %d arm %q", path, off, task, rollout, arm)
		}
		if err := t.load(true); err != nil {
			return nil, false, err
		}
	}
}

// trajLineKey is the key members of a trajectory line.
type trajLineKey struct {
	Task    int64  `json:"task_index"`
	Rollout int64  `json:"rollout_index"`
	Arm     string `json:"arm"`
}

// decodeTrajKey decodes the key of the trajectory line that starts at offset at of path and is
// length bytes long, of which line holds the head: a whole line is decoded from line; of a longer
// one only its keys are decoded as the line streams from the file, every string cut at 4 KiB, so
// the line is never in memory whole.
func decodeTrajKey(path string, line []byte, length, at int64) (k trajLineKey, err error) {
	if length > int64(len(line)) {
		err = decodeClippedAt(path, at, 4<<10, math.MaxInt64, &k)
	} else {
		err = json.Unmarshal(line, &k)
	}
	return k, err
}

// decodeSideKeyAt decodes the key (the task, rollout and arm members) of the side-file line at
// off of path, a line too long to hold: its members are decoded as it streams from the file,
// strings cut at 64 KiB (far longer than a key); ok is false when it has no such key.
func decodeSideKeyAt(path string, off int64, task, rollout, arm string) (key record.Key, ok bool) {
	var m map[string]json.RawMessage
	if decodeClippedAt(path, off, 64<<10, math.MaxInt64, &m) != nil {
		return record.Key{}, false
	}
	return keyOfMembers(m, task, rollout, arm)
}

// decodeClippedAt decodes the line at off into v through a ClipStrings reader that passes on
// at most limit bytes.
func decodeClippedAt(path string, off int64, maxString int, limit int64, v any) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return err
	}
	c := ClipStrings(f, maxString, limit)
	if err := json.NewDecoder(c).Decode(v); err != nil {
		var tooLong *LineTooLongError
		if errors.As(c.Err(), &tooLong) {
			tooLong.Path, tooLong.Offset = path, off
			return tooLong
		}
		if rerr := c.Err(); rerr != nil && rerr != io.EOF {
			return fmt.Errorf("%s at offset %d: %w", path, off, rerr) // the file could not be read
		}
		return &MalformedLineError{Path: path, Offset: off, Err: err}
	}
	return nil
}

// MalformedLineError is a line of a run's file that is not the JSON it should be.
type MalformedLineError struct {
	Path   string
	Offset int64
	Err    error
}

func (e *MalformedLineError) Error() string {
	return fmt.Sprintf("%s at offset %d: %v", e.Path, e.Offset, e.Err)
}

func (e *MalformedLineError) Unwrap() error { return e.Err }

// StringClipper is the reader ClipStrings returns.
type StringClipper struct {
	src     *bufio.Reader
	max     int64 // of one string
	limit   int64 // of what is passed on
	passed  int64
	in      bool  // within a string
	esc     bool  // after a backslash
	hex     int   // \u digits to come
	n       int64 // the current string's bytes so far
	cut     bool  // the current string is being dropped
	pending []byte
	err     error
}

// ClipStrings reads one line of JSON from r (up to its newline, or the end) and passes it on
// with every string (member names included) longer than maxString bytes cut, at the first
// character boundary past maxString, and ended with ClipNote; it holds a fixed buffer, never
// the line. Passing on more than limit bytes ends the read with a *LineTooLongError (no path).
func ClipStrings(r io.Reader, maxString int, limit int64) *StringClipper {
	return &StringClipper{src: bufio.NewReaderSize(r, 32<<10), max: int64(maxString), limit: limit}
}

// Err is the error that ended the read (io.EOF at the line's end).
func (c *StringClipper) Err() error { return c.err }

func (c *StringClipper) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if len(c.pending) > 0 {
			k := copy(p[n:], c.pending)
			c.pending, n = c.pending[k:], n+k
			continue
		}
		if c.err != nil {
			break
		}
		b, err := c.src.ReadByte()
		if err != nil {
			c.err = err
			break
		}
		if b == '\n' {
			c.err = io.EOF // the line's end (a string holds no raw newline)
			break
		}
		keep := true
		if !c.in {
			c.in = b == '"'
			c.n, c.cut = 0, false
		} else if b == '"' && !c.esc && c.hex == 0 {
			c.in = false
			if c.cut {
				c.pending = append([]byte(ClipNote(c.n)), '"')
				keep = false
			}
		} else {
			boundary := !c.esc && c.hex == 0 && b&0xC0 != 0x80
			if !c.cut && c.n >= c.max && boundary {
				c.cut = true
			}
			switch {
			case c.esc:
				c.esc = false
				if b == 'u' {
					c.hex = 4
				}
			case c.hex > 0:
				c.hex--
			case b == '\\':
				c.esc = true
			}
			c.n++
			keep = !c.cut
		}
		if keep {
			p[n] = b
			n++
		}
	}
	c.passed += int64(n)
	if c.passed > c.limit {
		c.err = &LineTooLongError{Limit: c.limit}
		return 0, c.err
	}
	if n > 0 {
		return n, nil
	}
	return 0, c.err
}
