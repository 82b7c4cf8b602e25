package rundir_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// A run's directory from start to end, as rollout run drives it: Prepare locks it and writes
// the manifest, the Sink takes each rollout's result, Finish derives rollouts.parquet,
// summary.json and evaluation.json from the journal. The records are then read back.
func Example() {
	root, err := os.MkdirTemp("", "rundir-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(root)
	input := filepath.Join(root, "tasks.jsonl")
	if err := os.WriteFile(input, []byte(`{"responses_create_params":{"input":"hi"}}`+"\n"), 0o644); err != nil {
		panic(err)
	}
	dir := filepath.Join(root, "out")

	d, err := rundir.Prepare(dir, rundir.PrepareOptions{Input: input, Config: map[string]int{"num_repeats": 2}})
	if err != nil {
		panic(err)
	}
	sink, err := d.OpenSink(nil)
	if err != nil {
		panic(err)
	}
	for i, reward := range []float64{1, 0} {
		rec := record.Record{TaskID: "t1", RolloutIndex: int64(i), Arm: "multi", Reward: reward, HasReward: true, Termination: "completed"}
		if err := sink.Write(&record.Result{Record: rec, Trajectory: []byte(`{"rounds":[]}`)}); err != nil {
			panic(err)
		}
	}
	if err := sink.Close(); err != nil {
		panic(err)
	}
	fin, err := rundir.Finish(dir, rundir.FinishOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d rollouts, mean reward %g\n", fin.Summary.Rollouts, fin.Summary.MeanReward)

	recs, err := record.ReadParquet(filepath.Join(dir, rundir.ParquetFile))
	if err != nil {
		panic(err)
	}
	for _, r := range recs {
		fmt.Printf("%s #%d: reward %g\n", r.TaskID, r.RolloutIndex, r.Reward)
	}
	d.Unlock()

	// A new run in the same directory is refused: it holds a run (a resume would finish it).
	_, err = rundir.Prepare(dir, rundir.PrepareOptions{Input: input})
	var pe *rundir.PrepareError
	fmt.Println(errors.As(err, &pe) && pe.Problem == rundir.HoldsRun)
	// Output:
	// 2 rollouts, mean reward 0.5
	// t1 #0: reward 1
	// t1 #1: reward 0
	// true
}
