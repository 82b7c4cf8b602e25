package rundir

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/rollout-dev/rollout/internal/jsonfast"
	"github.com/rollout-dev/rollout/pkg/record"
)

// TrajectoryWriter writes one JSON line per result to the trajectories
// file, keyed like the record:
//
//	{"task_index":0,"rollout_index":0,"arm":"single","task_id":"t0","reward":1,"has_reward":true,
//	 "termination":"completed","failure_class":"","trajectory":{...}}
//
// The line carries the record's reward and ending, so that a trajectory can be read without a
// join with the Parquet file. "trajectory" is null when the result has none. The file is opened for
// appending, so a resumed run adds to it.
type TrajectoryWriter struct {
	file *jsonlFile
	line []byte
	buf  bytes.Buffer  // for enc
	enc  *json.Encoder // encoding/json, for the lines the fast path refuses, and its error
}

type trajectoryLine struct {
	TaskIndex    int64               `json:"task_index"`
	RolloutIndex int64               `json:"rollout_index"`
	Arm          string              `json:"arm"`
	TaskID       string              `json:"task_id"`
	Reward       float64             `json:"reward"`
	HasReward    bool                `json:"has_reward"`
	Termination  string              `json:"termination"`
	FailureClass record.FailureClass `json:"failure_class"`
	Trajectory   json.RawMessage     `json:"trajectory"`
}

// NewTrajectoryWriter opens path for appending, creating it if needed.
func NewTrajectoryWriter(path string) (*TrajectoryWriter, error) {
	f, err := openJSONL(path)
	if err != nil {
		return nil, fmt.Errorf("trajectory output: %w", err)
	}
	t := &TrajectoryWriter{file: f}
	t.enc = json.NewEncoder(&t.buf)
	t.enc.SetEscapeHTML(false)
	return t, nil
}

// Write appends the result's trajectory as one line. A trajectory that is
// not valid JSON is an error and nothing is written. Pretty-printed
// trajectories are compacted onto the line.
func (t *TrajectoryWriter) Write(r *record.Result) error {
	traj := r.Trajectory
	if len(bytes.TrimSpace(traj)) == 0 {
		traj = nil // encodes as null
	}
	if line, ok := t.appendLine(t.line[:0], r, traj); ok {
		t.line = line[:0]
		if err := t.file.writeLine(line); err != nil {
			return fmt.Errorf("trajectory output: %w", err)
		}
		return nil
	}
	t.buf.Reset()
	err := t.enc.Encode(trajectoryLine{
		TaskIndex:    r.Record.TaskIndex,
		RolloutIndex: r.Record.RolloutIndex,
		Arm:          r.Record.Arm,
		TaskID:       r.Record.TaskID,
		Reward:       r.Record.Reward,
		HasReward:    r.Record.HasReward,
		Termination:  r.Record.Termination,
		FailureClass: r.Record.FailureClass,
		Trajectory:   traj,
	})
	if err != nil {
		return fmt.Errorf("trajectory output: task %d rollout %d: %w", r.Record.TaskIndex, r.Record.RolloutIndex, err)
	}
	if err := t.file.writeLine(t.buf.Bytes()); err != nil {
		return fmt.Errorf("trajectory output: %w", err)
	}
	return nil
}

// Flush hands buffered lines to the operating system (without fsync).
func (t *TrajectoryWriter) Flush() error { return t.file.Flush() }

// Sync makes the lines written so far durable.
func (t *TrajectoryWriter) Sync() error { return t.file.Sync() }

// Close flushes and fsyncs the file.
func (t *TrajectoryWriter) Close() error { return t.file.Close() }

// appendLine appends the line json.Encoder writes for the result's trajectoryLine (HTML
// escaping off): false if the trajectory is not valid JSON, for encoding/json to report.
func (t *TrajectoryWriter) appendLine(dst []byte, r *record.Result, traj json.RawMessage) ([]byte, bool) {
	dst = append(dst, `{"task_index":`...)
	dst = strconv.AppendInt(dst, r.Record.TaskIndex, 10)
	dst = append(dst, `,"rollout_index":`...)
	dst = strconv.AppendInt(dst, r.Record.RolloutIndex, 10)
	dst = append(dst, `,"arm":`...)
	dst = jsonfast.AppendString(dst, r.Record.Arm)
	dst = append(dst, `,"task_id":`...)
	dst = jsonfast.AppendString(dst, r.Record.TaskID)
	dst = append(dst, `,"reward":`...)
	var ok bool
	if dst, ok = jsonfast.AppendFloat(dst, r.Record.Reward); !ok {
		return dst, false
	}
	dst = append(dst, `,"has_reward":`...)
	dst = strconv.AppendBool(dst, r.Record.HasReward)
	dst = append(dst, `,"termination":`...)
	dst = jsonfast.AppendString(dst, r.Record.Termination)
	dst = append(dst, `,"failure_class":`...)
	dst = jsonfast.AppendString(dst, string(r.Record.FailureClass))
	dst = append(dst, `,"trajectory":`...)
	if traj == nil {
		dst = append(dst, "null"...)
	} else {
		if dst, ok = jsonfast.AppendCompact(dst, traj); !ok {
			return dst, false
		}
	}
	return append(dst, '}', '\n'), true
}
