package rundir

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/rollout-dev/rollout/internal/durable"
	"github.com/rollout-dev/rollout/internal/jsonfast"
	"github.com/rollout-dev/rollout/internal/lines"
	"github.com/rollout-dev/rollout/pkg/record"
)

// NeMo Gym's keys for a rollout's position, added to each verify answer, and ours for its arm
// (NeMo Gym runs one policy at a time; a run of several arms has one line per arm).
const (
	ngTaskIndexKey    = "_ng_task_index"
	ngRolloutIndexKey = "_ng_rollout_index"
	ngArmKey          = "_ng_arm"
)

// NemoGymWriter writes NeMo Gym-style rollout records (--jsonl-out): for
// each result that has a verify answer, the answer's JSON object on one
// line with "_ng_task_index", "_ng_rollout_index" and "_ng_arm" added at
// the end. Results without a verify answer (nil or empty: failed rollouts)
// are skipped and counted. The file is opened for appending.
type NemoGymWriter struct {
	file    *jsonlFile
	line    bytes.Buffer
	compact bytes.Buffer
	arm     []byte
	skipped int
}

// NewNemoGymWriter opens path for appending, creating it if needed.
func NewNemoGymWriter(path string) (*NemoGymWriter, error) {
	f, err := openJSONL(path)
	if err != nil {
		return nil, fmt.Errorf("nemo gym output: %w", err)
	}
	return &NemoGymWriter{file: f}, nil
}

// Skipped is the number of results skipped because they had no verify
// answer.
func (n *NemoGymWriter) Skipped() int { return n.skipped }

// Write appends the result's verify answer, or skips a result without one.
// A verify answer that is not a JSON object is an error and nothing is
// written.
func (n *NemoGymWriter) Write(r *record.Result) error {
	if len(r.Verify) == 0 {
		n.skipped++
		return nil
	}
	n.line.Reset()
	if err := n.spliceKeys(&n.line, r.Verify, r.Record.TaskIndex, r.Record.RolloutIndex, r.Record.Arm); err != nil {
		return fmt.Errorf("nemo gym output: task %d rollout %d: %w", r.Record.TaskIndex, r.Record.RolloutIndex, err)
	}
	n.line.WriteByte('\n')
	if err := n.file.writeLine(n.line.Bytes()); err != nil {
		return fmt.Errorf("nemo gym output: %w", err)
	}
	return nil
}

// spliceKeys writes obj to dst with the index keys and the arm set at its
// end. The object is compacted (so that it fits on one line) but its members
// are otherwise kept byte for byte, in order; members with those keys are
// dropped before the new ones are added.
func (n *NemoGymWriter) spliceKeys(dst *bytes.Buffer, obj json.RawMessage, task, rollout int64, arm string) error {
	n.compact.Reset()
	if err := json.Compact(&n.compact, obj); err != nil {
		return fmt.Errorf("verify answer is not valid JSON: %w", err)
	}
	src := n.compact.Bytes()
	if len(src) == 0 || src[0] != '{' {
		return errors.New("verify answer is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // '{'
		return err
	}
	dst.WriteByte('{')
	members := 0
	for dec.More() {
		start := dec.InputOffset() // before the comma, if any
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
		if key == ngTaskIndexKey || key == ngRolloutIndexKey || key == ngArmKey {
			continue
		}
		member := src[start:dec.InputOffset()]
		member = bytes.TrimPrefix(member, []byte{','})
		if members > 0 {
			dst.WriteByte(',')
		}
		dst.Write(member)
		members++
	}
	if _, err := dec.Token(); err != nil { // '}'
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("verify answer has data after the JSON object")
	}
	if members > 0 {
		dst.WriteByte(',')
	}
	dst.WriteString(`"` + ngTaskIndexKey + `":`)
	dst.WriteString(strconv.FormatInt(task, 10))
	dst.WriteString(`,"` + ngRolloutIndexKey + `":`)
	dst.WriteString(strconv.FormatInt(rollout, 10))
	dst.WriteString(`,"` + ngArmKey + `":`)
	n.arm = jsonfast.AppendString(n.arm[:0], arm)
	dst.Write(n.arm)
	dst.WriteByte('}')
	return nil
}

// Flush hands buffered lines to the operating system (without fsync).
func (n *NemoGymWriter) Flush() error { return n.file.Flush() }

// Sync makes the lines written so far durable.
func (n *NemoGymWriter) Sync() error { return n.file.Sync() }

// Close flushes and fsyncs the file.
func (n *NemoGymWriter) Close() error { return n.file.Close() }

// NemoGymFile is where a run with --jsonl-out keeps its NeMo Gym lines in its output
// directory while it runs (appended, synced and compacted with the journal); WriteNemoGym makes
// the --jsonl-out file from it at the end.
const NemoGymFile = "nemo_gym.jsonl"

// WriteNemoGym writes the run's NeMo Gym file at dest from dir's journal and NeMo Gym lines: the
// first line of each rollout that has a record, in the order they were written. dest is written
// as dest.tmp, synced and renamed over dest, so a crash leaves either the old file or the new
// one. It returns the number of lines written.
func WriteNemoGym(dir, dest string) (written int, err error) {
	done := record.NewDone(0, 0)
	err = record.ScanJSONLInPlace(join(dir, JournalFile), func(rec *record.Record) error {
		done.Add(rec.Key())
		return nil
	})
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	side := join(dir, NemoGymFile)
	if err := keepNemoGymLines(side, lines.Workers(), done); err != nil && !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	in, err := os.Open(side)
	if errors.Is(err, os.ErrNotExist) {
		in, err = os.Open(os.DevNull) // no rollout had a verify answer: an empty file
	}
	if err != nil {
		return 0, err
	}
	defer in.Close()
	var n int
	err = durable.WriteAtomic(dest, 0o644, func(w io.Writer) error {
		cw := &lineCounter{w: w}
		_, err := io.Copy(cw, in)
		n = cw.lines
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("nemo gym output %s: %w", dest, err)
	}
	return n, nil
}

// lineCounter counts the newlines written through it.
type lineCounter struct {
	w     io.Writer
	lines int
}

func (c *lineCounter) Write(p []byte) (int, error) {
	c.lines += bytes.Count(p, []byte{'\n'})
	return c.w.Write(p)
}
