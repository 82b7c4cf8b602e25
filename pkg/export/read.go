package export

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/rollout-dev/rollout/pkg/dataset"
	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// openTrajectories reads dir's trajectories beside its journal: each line's "trajectory" (nil
// when null), decoded with the line in one pass; a line longer than over is not held, and its
// key's Get is a *rundir.LineOverError.
func openTrajectories(dir string, over int64) (*rundir.SideLines[*storedTrajectory], error) {
	return rundir.OpenTrajectoryLines(dir, over, func(line []byte) (record.Key, *storedTrajectory, error) {
		var full struct {
			TaskIndex    int64             `json:"task_index"`
			RolloutIndex int64             `json:"rollout_index"`
			Arm          string            `json:"arm"`
			Trajectory   *storedTrajectory `json:"trajectory"`
		}
		err := json.Unmarshal(line, &full)
		return record.Key{Task: full.TaskIndex, Rollout: full.RolloutIndex, Arm: full.Arm}, full.Trajectory, err
	})
}

// openVerifyAnswers reads the NeMo Gym lines of dir's run beside its journal: each verify
// answer whole, or nil when the run kept none.
func openVerifyAnswers(dir string, over int64) (*rundir.SideLines[json.RawMessage], error) {
	return rundir.OpenNemoGymLines(dir, over, func(line []byte) (record.Key, json.RawMessage, error) {
		var keys struct {
			TaskIndex    int64  `json:"_ng_task_index"`
			RolloutIndex int64  `json:"_ng_rollout_index"`
			Arm          string `json:"_ng_arm"`
		}
		err := json.Unmarshal(line, &keys)
		return record.Key{Task: keys.TaskIndex, Rollout: keys.RolloutIndex, Arm: keys.Arm}, append(json.RawMessage(nil), line...), err
	})
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
