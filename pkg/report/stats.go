package report

import (
	"path/filepath"

	"github.com/rollout-dev/rollout/internal/lines"
	"github.com/rollout-dev/rollout/pkg/record"
)

// The statistics of an evaluation: for the whole run, per arm and per group of
// tasks, the mean reward with its standard error and a 95% confidence interval over tasks,
// pass@k and pass^k, failures apart, and the agents' behaviour.

// DefaultBootstrap is the number of bootstrap resamples when StatsOptions.Bootstrap is 0.
const DefaultBootstrap = 2000

// The interval methods of StatsOptions.CI.
const (
	// CIAuto, the default: the Wilson score interval where every value is in [0, 1], the t
	// interval otherwise, both with the task-clustered standard error (see intervalOf).
	CIAuto = "auto"
	// CIBootstrap: the percentile bootstrap with tasks resampled as clusters.
	CIBootstrap = "bootstrap"
)

// NoGroup is the group of the records that lack the group-by field.
const NoGroup = "(none)"

// StatsOptions say how records are scored.
type StatsOptions struct {
	// GroupBy is a TaskFields key (e.g. "category"): the scores are also given per value of
	// that field; records without it go to group NoGroup. Empty: no groups.
	GroupBy string `json:"group_by,omitempty"`
	// Threshold is the reward at or above which a rollout is a success, for pass@k and
	// pass^k. 0 means 1.0 (rewards of 0 or 1) unless ThresholdSet.
	Threshold float64 `json:"threshold"`
	// ThresholdSet makes a Threshold of 0 mean 0 (any reward of at least 0 succeeds).
	ThresholdSet bool `json:"-"`
	// ScoreFailuresAsZero scores the rollouts that have a failure class as reward 0 (and
	// as failed tries for pass@k). By default they are counted apart and left out.
	ScoreFailuresAsZero bool `json:"score_failures_as_zero"`
	// CI is the 95% interval's method: CIAuto ("" too) or CIBootstrap.
	CI string `json:"ci"`
	// Bootstrap is the number of resamples of the bootstrap interval (CIBootstrap): 0 means
	// DefaultBootstrap; a negative number computes no interval, whatever the method.
	Bootstrap int `json:"bootstrap"`
	// Seed seeds the bootstrap: the same records and seed give the same interval.
	Seed uint64 `json:"seed"`
	// PassKCommonTasks averages pass@k and pass^k of every k over the same tasks: those with
	// at least the largest k scored rollouts. By default each k is over the tasks with at
	// least k scored rollouts, so different k may rest on different tasks.
	PassKCommonTasks bool `json:"pass_k_common_tasks,omitempty"`
}

func (o StatsOptions) normalized() StatsOptions {
	if o.Threshold == 0 && !o.ThresholdSet {
		o.Threshold = 1
	}
	o.ThresholdSet = true
	if o.Bootstrap == 0 {
		o.Bootstrap = DefaultBootstrap
	}
	if o.Bootstrap < 0 {
		o.Bootstrap = 0
	}
	if o.CI == "" {
		o.CI = CIAuto
	}
	return o
}

// Interval is a confidence interval.
type Interval struct {
	Low  float64 `json:"low"`
	High float64 `json:"high"`
	// Normal is set when a bootstrap interval (CIBootstrap) is the normal approximation
	// (mean ± 1.96 task-clustered standard errors) instead: for scopes of more than
	// BootstrapMaxTasks tasks.
	Normal bool `json:"normal,omitempty"`
	// Point is set when the interval is a single point: every task's mean is the same (all
	// rewards equal, say) or there is one task, and the values are not all in [0, 1]. It then
	// says nothing about the uncertainty.
	Point bool `json:"point,omitempty"`
	// Method is the interval's: "wilson" (every value in [0, 1]), "t", or "bootstrap".
	Method string `json:"method"`
}

// SmallTasks is the task count under which a bootstrap interval (CIBootstrap) is flagged: its
// coverage, measured by TestIntervalCoverage (docs/statistics.md), is 0.88-0.92 for a
// symmetric mean at 3-10 tasks and 0.56-0.78 for a skewed one (most tasks near 0).
const SmallTasks = 20

// TaskRef names a task: its task file and its index (0-based row) in it.
type TaskRef struct {
	SourceFile string `json:"source_file"`
	TaskIndex  int64  `json:"task_index"`
}

// BootstrapMaxTasks is the most tasks a scope's interval is bootstrapped over. The bootstrap
// costs resamples × tasks draws (2·10^9 for 10^6 tasks, about a minute here); past this many
// tasks the mean's sampling distribution is normal to well within the bootstrap's own
// resampling noise, so the interval is mean ± 1.96 task-clustered standard errors instead.
const BootstrapMaxTasks = 20_000

// PassAtK is pass@k and pass^k for one k, averaged over the Tasks (task and arm pairs) that
// have at least k scored rollouts (at least the largest k with
// StatsOptions.PassKCommonTasks).
type PassAtK struct {
	K     int `json:"k"`
	Tasks int `json:"tasks"`
	// PassAt is the mean over tasks of 1 − C(n−c, k)/C(n, k): the chance that at least one
	// of k tries drawn without replacement from a task's n succeeds (Chen et al. 2021).
	PassAt float64 `json:"pass_at_k"`
	// PassHat is the mean over tasks of C(c, k)/C(n, k): the chance that all k succeed
	// (pass^k, tau-bench).
	PassHat float64 `json:"pass_hat_k"`
}

// Scores are the numbers of one scope: the whole run, one arm, one group or one arm's group.
type Scores struct {
	// Scope names the scope: "all", "arm=multi", "difficulty=hard", "arm=multi difficulty=hard".
	Scope string `json:"scope"`
	Arm   string `json:"arm,omitempty"`
	Group string `json:"group,omitempty"`

	// Rollouts counts every record; Failed those with a failure class, by class.
	Rollouts        int            `json:"rollouts"`
	Failed          int            `json:"failed"`
	FailuresByClass map[string]int `json:"failures_by_class"`
	// Scored counts the rollouts in the reward statistics: those with a reward and no
	// failure class, plus the failed ones when they are scored as zero.
	Scored int `json:"scored"`
	// Tasks counts the tasks with at least one scored rollout; Successes the scored
	// rollouts whose reward is at least the threshold.
	Tasks     int `json:"tasks"`
	Successes int `json:"successes"`
	// TasksAllFailed counts the tasks every rollout of which has a failure class, and
	// AllFailedTasks lists them. Unless failures are scored as zero they have no scored
	// rollout, and are in no mean, pass@k or comparison.
	TasksAllFailed int       `json:"tasks_all_failed"`
	AllFailedTasks []TaskRef `json:"all_failed_tasks,omitempty"`

	// MeanReward is the mean of the scored rollouts' rewards. StdErr is its task-clustered
	// standard error: with G tasks, N scored rollouts and S_g the sum of task g's rewards
	// over its n_g scored rollouts, sqrt(G/(G−1) · Σ_g (S_g − MeanReward·n_g)²) / N (0 below
	// 2 tasks). CI95 is the 95% interval of MeanReward over tasks (intervalOf: Wilson or t,
	// or the bootstrap with StatsOptions.CI CIBootstrap); nil when not computed or nothing is
	// scored.
	MeanReward float64   `json:"mean_reward"`
	StdErr     float64   `json:"std_err"`
	CI95       *Interval `json:"ci95,omitempty"`

	// PassAtK lists pass@k and pass^k for k = 1, 2, 4, 8, …; a k that no task of the scope
	// has enough scored rollouts for is left out. Each entry says how many tasks it is over:
	// fewer than TaskArms, the (task, arm) pairs of the scope, when some have fewer scored
	// rollouts than k needs.
	PassAtK  []PassAtK `json:"pass_at_k"`
	TaskArms int       `json:"task_arms"`

	// Behaviour: means over the rollouts with a reward and no failure class (whether or
	// not failures are scored as zero); totals and terminations over every record.
	MeanRounds           float64        `json:"mean_rounds"`
	MeanToolCalls        float64        `json:"mean_tool_calls"`
	MeanPromptTokens     float64        `json:"mean_prompt_tokens"`
	MeanCompletionTokens float64        `json:"mean_completion_tokens"`
	MeanLatencyMs        float64        `json:"mean_latency_ms"`
	PromptTokens         int64          `json:"prompt_tokens"`
	CompletionTokens     int64          `json:"completion_tokens"`
	ToolErrors           int64          `json:"tool_errors"`
	Terminations         map[string]int `json:"terminations"`
}

// Pass returns the entry of k, if the scope has one.
func (s *Scores) Pass(k int) (PassAtK, bool) {
	for _, p := range s.PassAtK {
		if p.K == k {
			return p, true
		}
	}
	return PassAtK{}, false
}

// Evaluation is the statistics of a set of records.
type Evaluation struct {
	Options StatsOptions `json:"options"`
	// K lists the k of pass@k: the powers of two up to the most scored rollouts any task has
	// in one arm.
	K       []int  `json:"k"`
	Overall Scores `json:"overall"`
	// ByArm has one entry per arm, sorted by name.
	ByArm []Scores `json:"by_arm"`
	// ByGroup has one entry per value of the group-by field, sorted, across arms; ByArmGroup
	// one per arm and value, when there is more than one arm.
	ByGroup    []Scores `json:"by_group,omitempty"`
	ByArmGroup []Scores `json:"by_arm_group,omitempty"`
	// Duplicates counts the records whose key (source file, task index, rollout index, arm)
	// an earlier record has: the same run given twice, or runs of one task file by two
	// models under one arm name. They are counted like the others.
	Duplicates int `json:"duplicates,omitempty"`
}

// Evaluate computes the statistics of recs. The result does not depend on the order of recs.
func Evaluate(recs []record.Record, o StatsOptions) *Evaluation {
	ev := NewEvaluator(o)
	for i := range recs {
		ev.Add(&recs[i])
	}
	return ev.Evaluation()
}

// EvaluateJournal computes the statistics of the records of a run's journal (see
// record.ScanJSONL).
func EvaluateJournal(path string, o StatsOptions) (*Evaluation, error) {
	ev := NewEvaluator(o)
	ev.SpillTo(filepath.Dir(path))
	defer ev.Close()
	ev.Reserve(lines.Estimate(path))
	err := record.ScanJSONLInPlace(path, func(rec *record.Record) error {
		ev.Add(rec)
		return nil
	})
	if err != nil {
		return nil, err
	}
	eval := ev.Evaluation()
	return eval, ev.Err()
}
