package report

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// NeMo Gym's keys for a rollout's position, added to each verify answer.
const (
	ngTaskIndexKey    = "_ng_task_index"
	ngRolloutIndexKey = "_ng_rollout_index"
)

// NemoGymWriter writes NeMo Gym-style rollout records (--jsonl-out): for
// each result that has a verify answer, the answer's JSON object on one
// line with "_ng_task_index" and "_ng_rollout_index" added at the end.
// Results without a verify answer (nil or empty: failed rollouts) are
// skipped and counted. The file is opened for appending.
type NemoGymWriter struct {
	file    *jsonlFile
	line    bytes.Buffer
	compact bytes.Buffer
	skipped int
}

var _ Output = (*NemoGymWriter)(nil)

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
func (n *NemoGymWriter) Write(r *Result) error {
	if len(r.Verify) == 0 {
		n.skipped++
		return nil
	}
	n.line.Reset()
	if err := n.spliceKeys(&n.line, r.Verify, r.Record.TaskIndex, r.Record.RolloutIndex); err != nil {
		return fmt.Errorf("nemo gym output: task %d rollout %d: %w", r.Record.TaskIndex, r.Record.RolloutIndex, err)
	}
	n.line.WriteByte('\n')
	if err := n.file.writeLine(n.line.Bytes()); err != nil {
		return fmt.Errorf("nemo gym output: %w", err)
	}
	return nil
}

// spliceKeys writes obj to dst with the two index keys set at its end. The
// object is compacted (so that it fits on one line) but its members are
// otherwise kept byte for byte, in order; members with the index keys are
// dropped before the new ones are added.
func (n *NemoGymWriter) spliceKeys(dst *bytes.Buffer, obj json.RawMessage, task, rollout int64) error {
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
		if key == ngTaskIndexKey || key == ngRolloutIndexKey {
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
	dst.WriteByte('}')
	return nil
}

// Flush hands buffered lines to the operating system (without fsync).
func (n *NemoGymWriter) Flush() error { return n.file.Flush() }

// Sync makes the lines written so far durable.
func (n *NemoGymWriter) Sync() error { return n.file.Sync() }

// Close flushes and fsyncs the file.
func (n *NemoGymWriter) Close() error { return n.file.Close() }
