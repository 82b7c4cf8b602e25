package report_test

import (
	"os"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/report"
)

// The statistics of a run's records (as record.ReadParquet or record.ScanJSONL give them):
// two tasks, two rollouts each, one rollout failed and left out of the scores. The mean reward
// is (1+1+0)/3; its standard error, clustered by task, is sqrt(2/1·((2·(1-2/3))² + (0-2/3)²))/3.
func ExampleEvaluate() {
	recs := []record.Record{
		{TaskIndex: 0, RolloutIndex: 0, TaskID: "a", Arm: "multi", Reward: 1, HasReward: true, Termination: "completed"},
		{TaskIndex: 0, RolloutIndex: 1, TaskID: "a", Arm: "multi", Reward: 1, HasReward: true, Termination: "completed"},
		{TaskIndex: 1, RolloutIndex: 0, TaskID: "b", Arm: "multi", Reward: 0, HasReward: true, Termination: "max_rounds"},
		{TaskIndex: 1, RolloutIndex: 1, TaskID: "b", Arm: "multi", FailureClass: record.FailTimeout, Error: "deadline exceeded"},
	}
	ev := report.Evaluate(recs, report.StatsOptions{Bootstrap: 200, Seed: 1})
	if err := ev.WriteText(os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// success: reward >= 1; failed rollouts left out of the scores; std err: clustered by task; 95% CI: Wilson score over tasks (task-clustered effective sample size); pass@k: each k over the tasks with at least k scored rollouts
	//
	// scope  rollouts  failed  scored  tasks  mean reward  std err  95% CI            pass@1  pass@2        pass^2
	// all    4         1       3       2      0.6667       0.4444   0.0031 to 0.9992  0.5000  1.0000 (1/2)  1.0000 (1/2)
	//
	// scope  mean rounds  mean tool calls  tool errors  mean prompt tokens  mean completion tokens  mean latency ms  failures   terminations
	// all    0.00         0.00             0            0.0                 0.0                     0.0              timeout 1  completed 2, max_rounds 1
	//
	// note: all: pass@k and pass^k rest on fewer than its 2 tasks: pass@2 over 1
	// note: a k is over the tasks with at least k scored rollouts, and differs from k to k when rollouts failed: --score-failures-as-zero counts failed rollouts as failed tries, --pass-k-common-tasks puts every k on the same tasks
}
