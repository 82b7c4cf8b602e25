package report

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
)

// A task whose every rollout failed is counted and listed, shown in the table and a note, and
// left out of the scores unless failures are scored as zero.
func TestEvaluateAllFailedTasks(t *testing.T) {
	failed := func(task, k int64) record.Record {
		return record.Record{TaskIndex: task, RolloutIndex: k, Arm: "multi", SourceFile: "tasks.jsonl", FailureClass: record.FailTimeout}
	}
	recs := slices.Concat(rollouts("multi", 0, nil, 1, 0), []record.Record{failed(1, 0), failed(1, 1), failed(2, 0)}, rollouts("multi", 2, nil, 1)[:0],
		[]record.Record{{TaskIndex: 2, RolloutIndex: 1, Arm: "multi", SourceFile: "tasks.jsonl", Reward: 1, HasReward: true}})
	ev := Evaluate(recs, StatsOptions{})
	s := ev.Overall
	if s.Tasks != 2 || s.TasksAllFailed != 1 || !slices.Equal(s.AllFailedTasks, []TaskRef{{"tasks.jsonl", 1}}) || s.TaskArms != 3 {
		t.Errorf("tasks %d, all failed %d %v, task arms %d; want 2, 1 [tasks.jsonl 1], 3", s.Tasks, s.TasksAllFailed, s.AllFailedTasks, s.TaskArms)
	}
	// pass@2 is over task 0 only (task 2 has one scored rollout, task 1 none).
	if p, _ := s.Pass(2); p.Tasks != 1 {
		t.Errorf("pass@2 over %d tasks, want 1", p.Tasks)
	}
	var text bytes.Buffer
	if err := ev.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"2 (+1 all failed)", "note: all: 1 tasks had every rollout fail and are in no score: tasks.jsonl task 1",
		"(1/3)", "note: all: pass@k and pass^k rest on fewer than its 3 tasks: pass@1 over 2, pass@2 over 1",
		"note: a k is over the tasks with at least k scored rollouts"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	zero := Evaluate(recs, StatsOptions{ScoreFailuresAsZero: true}).Overall
	if zero.Tasks != 3 || zero.TasksAllFailed != 1 || zero.MeanReward != 2.0/6 {
		t.Errorf("failures as zero: tasks %d, all failed %d, mean %v; want 3, 1, 1/3", zero.Tasks, zero.TasksAllFailed, zero.MeanReward)
	}
}

// PassKCommonTasks puts every k on the tasks with at least the largest k scored rollouts.
func TestPassKCommonTasks(t *testing.T) {
	// Task 0: 4 tries, 2 successes; task 1: 2 tries, 2 successes. k = 1, 2, 4.
	recs := slices.Concat(rollouts("m", 0, nil, 1, 0, 1, 0), rollouts("m", 1, nil, 1, 1))
	each := Evaluate(recs, StatsOptions{}).Overall
	common := Evaluate(recs, StatsOptions{PassKCommonTasks: true})
	// Default: pass@1 over both, (1/2 + 1)/2 = 3/4; pass@4 over task 0 only: 1 − C(2,4)/C(4,4) = 1.
	if p, _ := each.Pass(1); p.Tasks != 2 || p.PassAt != 0.75 {
		t.Errorf("pass@1 %+v, want 0.75 over 2", p)
	}
	// Common: every k over task 0: pass@1 1/2, pass@2 1 − C(2,2)/C(4,2) = 5/6, pass@4 1.
	for k, want := range map[int]float64{1: 0.5, 2: 5.0 / 6, 4: 1} {
		if p, _ := common.Overall.Pass(k); p.Tasks != 1 || math.Abs(p.PassAt-want) > 1e-12 {
			t.Errorf("common tasks: pass@%d %+v, want %v over 1 task", k, p, want)
		}
	}
	if m := common.method(); !strings.Contains(m, "every k over the tasks with at least 4 scored rollouts") {
		t.Errorf("method %q", m)
	}
}

// Huge finite rewards: the means, std errs and intervals stay finite and right.
func TestEvaluateHugeRewards(t *testing.T) {
	for _, c := range []struct {
		name    string
		rewards [][]float64 // per task
		mean    float64
	}{
		{"1e200", [][]float64{{1e200, 1e200}, {1e200}, {0}}, 3e200 / 4},
		{"±max", [][]float64{{math.MaxFloat64}, {-math.MaxFloat64}, {math.MaxFloat64}, {-math.MaxFloat64}}, 0},
		{"1e300 summed", [][]float64{{1e300, 1e300, 1e300}, {1e300, 1e300, 1e300}}, 1e300},
	} {
		var recs []record.Record
		for task, rs := range c.rewards {
			recs = append(recs, rollouts("m", int64(task), nil, rs...)...)
		}
		s := Evaluate(recs, StatsOptions{Bootstrap: 200}).Overall
		if math.Abs(s.MeanReward-c.mean) > 1e-12*math.Max(1, math.Abs(c.mean)) || math.IsInf(s.StdErr, 0) || math.IsNaN(s.StdErr) ||
			s.CI95 == nil || math.IsInf(s.CI95.Low, 0) || math.IsInf(s.CI95.High, 0) {
			t.Errorf("%s: mean %v (want %v), std err %v, CI %+v", c.name, s.MeanReward, c.mean, s.StdErr, s.CI95)
		}
		var sum Stats
		for i := range recs {
			sum.Add(&recs[i])
		}
		if m := sum.Summary().MeanReward; math.IsInf(m, 0) || math.IsNaN(m) {
			t.Errorf("%s: Stats mean %v", c.name, m)
		}
	}
	// A paired difference of huge rewards: B −1e300 where A has 1e300, on two tasks.
	a := slices.Concat(rollouts("m", 0, nil, 1e300, 1e300), rollouts("m", 1, nil, 1e300))
	b := slices.Concat(rollouts("m", 0, nil, -1e300, -1e300), rollouts("m", 1, nil, 1e300))
	c := Compare(a, b, "A", "B", StatsOptions{Bootstrap: 100})
	// Differences −2e300, −2e300, 0: mean −4e300/3; task sums −4e300 (n 2) and 0 (n 1);
	// residuals −4e300 + 8e300/3 = −4e300/3 and 4e300/3; 2·(32e600/9) = 64e600/9; sqrt /3.
	wantSE := math.Sqrt(64.0/9) * 1e300 / 3
	if math.Abs(c.MeanDiff+4e300/3) > 1e288 || math.Abs(c.StdErr-wantSE) > 1e288 || c.CI95 == nil || bad(c.CI95.Low) || c.PairedMeans[0] != 1e300 {
		t.Errorf("huge paired difference: mean %v (want %v), std err %v (want %v), CI %+v, paired means %v", c.MeanDiff, -4e300/3, c.StdErr, wantSE, c.CI95, c.PairedMeans)
	}
}

// FuzzEvaluate: any finite rewards, any failures, any task layout: the mean lies within the
// rewards (to rounding relative to the largest), the std err is finite and not negative, the
// interval is finite and within the rewards, pass@k within [0, 1].
func FuzzEvaluate(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3})
	f.Add(binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, math.Float64bits(1e300)), math.Float64bits(-1e300)))
	f.Add(binary.LittleEndian.AppendUint64(nil, math.Float64bits(math.MaxFloat64)))
	f.Fuzz(func(t *testing.T, data []byte) {
		var recs []record.Record
		lo, hi := math.Inf(1), math.Inf(-1)
		for i := 0; i+9 <= len(data) && len(recs) < 200; i += 9 {
			x := math.Float64frombits(binary.LittleEndian.Uint64(data[i:]))
			b := data[i+8]
			if math.IsNaN(x) || math.IsInf(x, 0) {
				x = float64(b)
			}
			r := record.Record{TaskIndex: int64(b % 7), RolloutIndex: int64(len(recs)), Arm: []string{"a", "b"}[b>>7], Reward: x, HasReward: true}
			if b%11 == 0 {
				r.FailureClass, r.HasReward, r.Reward = record.FailTimeout, false, 0
			} else {
				lo, hi = min(lo, x), max(hi, x)
			}
			recs = append(recs, r)
		}
		for _, zero := range []bool{false, true} {
			ev := Evaluate(recs, StatsOptions{Bootstrap: 50, ScoreFailuresAsZero: zero})
			l, h := lo, hi
			if zero && ev.Overall.Failed > 0 {
				l, h = min(l, 0), max(h, 0)
			}
			// Rewards tiny next to the largest are lost to rounding: allow that much.
			tol := 1e-12 * max(math.Abs(l), math.Abs(h))
			l, h = l-tol, h+tol
			for _, s := range append([]Scores{ev.Overall}, ev.ByArm...) {
				if s.Scored == 0 {
					continue
				}
				if bad(s.MeanReward) || s.MeanReward < l || s.MeanReward > h || bad(s.StdErr) || s.StdErr < 0 {
					t.Fatalf("%s (zero %v): mean %v std err %v, rewards in [%v, %v]", s.Scope, zero, s.MeanReward, s.StdErr, l, h)
				}
				if ci := s.CI95; ci == nil || bad(ci.Low) || bad(ci.High) || ci.Low < l || ci.High > h || ci.Low > ci.High {
					t.Fatalf("%s (zero %v): CI %+v, rewards in [%v, %v]", s.Scope, zero, s.CI95, l, h)
				}
				for _, p := range s.PassAtK {
					if !(p.PassAt >= 0 && p.PassAt <= 1 && p.PassHat >= 0 && p.PassHat <= p.PassAt+1e-12) {
						t.Fatalf("%s: %+v", s.Scope, p)
					}
				}
			}
			var w bytes.Buffer
			if err := ev.WriteJSON(&w); err != nil {
				t.Fatalf("JSON: %v", err)
			}
		}
	})
}

func bad(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }
