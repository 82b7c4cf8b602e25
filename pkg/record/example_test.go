package record_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/rollout-dev/rollout/pkg/record"
)

// Reading a run's records: rollouts.parquet holds one row per rollout, success or failure.
// Here three records are written first, as a run's end does.
func ExampleReadParquet() {
	path := filepath.Join(os.TempDir(), "example-rollouts.parquet")
	defer os.Remove(path)
	w, err := record.NewParquetWriter(path, record.ParquetOptions{})
	if err != nil {
		panic(err)
	}
	for i, reward := range []float64{1, 0.5, 0} {
		rec := record.Record{TaskIndex: int64(i), TaskID: fmt.Sprintf("task-%d", i), Arm: "multi", Reward: reward, HasReward: true}
		if i == 2 {
			rec.HasReward, rec.FailureClass, rec.Error = false, record.FailTimeout, "rollout deadline exceeded"
		}
		if err := w.Write(&record.Result{Record: rec}); err != nil {
			panic(err)
		}
	}
	if err := w.Close(); err != nil {
		panic(err)
	}

	recs, err := record.ReadParquet(path)
	if err != nil {
		panic(err)
	}
	for _, r := range recs {
		if r.FailureClass != record.FailNone {
			fmt.Printf("%s: failed (%s, infrastructure: %v): %s\n", r.TaskID, r.FailureClass, r.FailureClass.Infra(), r.Error)
			continue
		}
		fmt.Printf("%s: reward %g\n", r.TaskID, r.Reward)
	}
	// Output:
	// task-0: reward 1
	// task-1: reward 0.5
	// task-2: failed (timeout, infrastructure: true): rollout deadline exceeded
}
