package rundir_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/rundir"
)

// A run made as two shards (rollout run --shard 0/2 and 1/2), each in its own directory:
// OpenRun checks that they are the shards of one run, Scan reads their records as the run's,
// Merge writes them as one run's directory. A set that is not one run is refused, naming why.
func ExampleOpenRun() {
	root, err := os.MkdirTemp("", "rundir-shards")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(root)
	input := filepath.Join(root, "tasks.jsonl")
	if err := os.WriteFile(input, []byte("{}\n{}\n{}\n"), 0o644); err != nil {
		panic(err)
	}
	shard := func(i int) string {
		dir := filepath.Join(root, fmt.Sprintf("shard-%d", i))
		d, err := rundir.Prepare(dir, rundir.PrepareOptions{Input: input, Config: map[string]int{"num_repeats": 1},
			Shard: &rundir.Shard{Index: i, Count: 2}})
		if err != nil {
			panic(err)
		}
		defer d.Unlock()
		sink, err := d.OpenSink(nil)
		if err != nil {
			panic(err)
		}
		for task := i; task < 3; task += 2 { // the tasks of shard i: index i mod 2
			rec := record.Record{TaskIndex: int64(task), Arm: "multi", Reward: float64(task), HasReward: true, Termination: "completed"}
			if err := sink.Write(&record.Result{Record: rec}); err != nil {
				panic(err)
			}
		}
		if err := sink.Close(); err != nil {
			panic(err)
		}
		if _, err := rundir.Finish(dir, rundir.FinishOptions{Complete: true}); err != nil {
			panic(err)
		}
		return dir
	}
	dirs := []string{shard(0), shard(1)}

	r, err := rundir.OpenRun(dirs, rundir.OpenOptions{})
	if err != nil {
		panic(err)
	}
	sum := 0.0
	if err := r.Scan(func(rec *record.Record) error { sum += rec.Reward; return nil }); err != nil {
		panic(err)
	}
	fmt.Printf("%d shards, rewards sum to %g\n", r.Shards, sum)
	fin, err := rundir.Merge(filepath.Join(root, "merged"), r, rundir.MergeOptions{})
	if err != nil {
		panic(err)
	}
	fmt.Printf("merged: %d rollouts, mean reward %g\n", fin.Summary.Rollouts, fin.Summary.MeanReward)

	_, err = rundir.OpenRun(dirs[:1], rundir.OpenOptions{})
	fmt.Println(err)
	// Output:
	// 2 shards, rewards sum to 3
	// merged: 3 rollouts, mean reward 1
	// 1 of 2 shards missing: 1/2 (run them with --shard I/2, or merge what is there with --partial)
}
