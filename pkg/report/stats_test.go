package report

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
)

// rollouts makes the records of one task in one arm, one per reward, with rollout indices
// from 0. Behaviour is fixed so that its means are easy by hand: rollout r has r+1 rounds,
// 2(r+1) tool calls, 10 prompt and 2 completion tokens, latency 100·(task+1) ms; the
// termination is "completed" for reward 1, else "tool_error".
func rollouts(arm string, task int64, fields map[string]string, rewards ...float64) []record.Record {
	var out []record.Record
	for r, x := range rewards {
		term := "tool_error"
		if x == 1 {
			term = "completed"
		}
		out = append(out, record.Record{
			TaskIndex: task, RolloutIndex: int64(r), Arm: arm, SourceFile: "tasks.jsonl", TaskFields: fields,
			Reward: x, HasReward: true, Rounds: int32(r + 1), ToolCalls: int32(2 * (r + 1)), ToolErrors: 1,
			PromptTokens: 10, CompletionTokens: 2, LatencyMs: 100 * float64(task+1), Termination: term,
		})
	}
	return out
}

// fixtureA: 3 tasks × 4 repeats, arm "multi".
//
//	task 0 (difficulty easy): 1 1 1 1  n=4 c=4
//	task 1 (difficulty hard): 1 0 1 0  n=4 c=2
//	task 2 (no difficulty):   0 0 0 1  n=4 c=1
func fixtureA() []record.Record {
	return slices.Concat(
		rollouts("multi", 0, map[string]string{"difficulty": "easy"}, 1, 1, 1, 1),
		rollouts("multi", 1, map[string]string{"difficulty": "hard"}, 1, 0, 1, 0),
		rollouts("multi", 2, nil, 0, 0, 0, 1),
	)
}

// fixtureB: fixtureA plus two failed rollouts of task 1 (indices 4 and 5), with behaviour
// that must not reach the means.
func fixtureB() []record.Record {
	recs := fixtureA()
	for i, class := range []string{record.FailRateLimited, record.FailTimeout} {
		recs = append(recs, record.Record{
			TaskIndex: 1, RolloutIndex: int64(4 + i), Arm: "multi", SourceFile: "tasks.jsonl",
			TaskFields: map[string]string{"difficulty": "hard"}, FailureClass: record.FailureClass(class), Error: "boom",
			Rounds: 9, ToolCalls: 99, PromptTokens: 1000, CompletionTokens: 100, LatencyMs: 60000, Termination: "timeout",
		})
	}
	return recs
}

// fixtureArms: fixtureA as arm "multi", and arm "single" on the same tasks:
//
//	task 0: 1 1 0 0  c=2
//	task 1: 0 0 0 0  c=0
//	task 2: 0 0 0 0  c=0
func fixtureArms() []record.Record {
	return slices.Concat(fixtureA(),
		rollouts("single", 0, map[string]string{"difficulty": "easy"}, 1, 1, 0, 0),
		rollouts("single", 1, map[string]string{"difficulty": "hard"}, 0, 0, 0, 0),
		rollouts("single", 2, nil, 0, 0, 0, 0),
	)
}

// want is the numbers of one scope checked by TestEvaluate.
type want struct {
	rollouts, failed, scored, tasks, successes int
	mean, stdErr                               float64
	pass                                       map[int][2]float64 // k → {pass@k, pass^k}; a k not listed must be absent
}

func checkScores(t *testing.T, s Scores, w want) {
	t.Helper()
	const eps = 1e-12
	if s.Rollouts != w.rollouts || s.Failed != w.failed || s.Scored != w.scored || s.Tasks != w.tasks || s.Successes != w.successes {
		t.Errorf("%s: rollouts %d failed %d scored %d tasks %d successes %d; want %d %d %d %d %d", s.Scope,
			s.Rollouts, s.Failed, s.Scored, s.Tasks, s.Successes, w.rollouts, w.failed, w.scored, w.tasks, w.successes)
	}
	if math.Abs(s.MeanReward-w.mean) > eps || math.Abs(s.StdErr-w.stdErr) > eps {
		t.Errorf("%s: mean %.15g ± %.15g, want %.15g ± %.15g", s.Scope, s.MeanReward, s.StdErr, w.mean, w.stdErr)
	}
	if len(s.PassAtK) != len(w.pass) {
		t.Errorf("%s: pass@k for %v, want %d values of k", s.Scope, s.PassAtK, len(w.pass))
	}
	for k, p := range w.pass {
		got, ok := s.Pass(k)
		if !ok {
			t.Errorf("%s: no pass@%d", s.Scope, k)
			continue
		}
		if math.Abs(got.PassAt-p[0]) > eps || math.Abs(got.PassHat-p[1]) > eps {
			t.Errorf("%s: pass@%d %.15g pass^%d %.15g, want %.15g and %.15g", s.Scope, k, got.PassAt, k, got.PassHat, p[0], p[1])
		}
	}
}

func TestEvaluate(t *testing.T) {
	// fixtureA, by hand. Binomials: C(4,2) = 6, C(4,4) = 1.
	//   pass@1 = mean c/n = (4/4 + 2/4 + 1/4)/3 = 7/12 (pass^1 is the same)
	//   pass@2: task 0: 1 − C(0,2)/6 = 1; task 1: 1 − C(2,2)/6 = 5/6; task 2: 1 − C(3,2)/6 = 1/2
	//           mean (1 + 5/6 + 1/2)/3 = 7/9
	//   pass@4: C(0,4) = C(2,4) = C(3,4) = 0, so 1 for every task: 1
	//   pass^2: task 0: C(4,2)/6 = 1; task 1: C(2,2)/6 = 1/6; task 2: C(1,2) = 0: (7/6)/3 = 7/18
	//   pass^4: task 0: 1; tasks 1 and 2: 0: 1/3
	//   mean reward: 7 ones in 12 = 7/12. Task-clustered std err: task sums 4, 2, 1 of 4
	//   rollouts each; residuals S_g − mean·n_g = 4 − 7/3 = 5/3, −1/3, −4/3; squares 42/9 =
	//   14/3; times G/(G−1) = 3/2: 7; std err sqrt(7)/12.
	wantA := want{rollouts: 12, scored: 12, tasks: 3, successes: 7, mean: 7.0 / 12, stdErr: math.Sqrt(7) / 12,
		pass: map[int][2]float64{1: {7.0 / 12, 7.0 / 12}, 2: {7.0 / 9, 7.0 / 18}, 4: {1, 1.0 / 3}}}

	// fixtureB with failures scored as 0: task 1 has n=6, c=2; C(6,2) = 15, C(6,4) = 15.
	//   pass@1 = (1 + 2/6 + 1/4)/3 = (12/12 + 4/12 + 3/12)/3 = 19/36
	//   pass@2: task 1: 1 − C(4,2)/15 = 1 − 6/15 = 3/5: (1 + 3/5 + 1/2)/3 = 7/10
	//   pass@4: task 1: 1 − C(4,4)/15 = 14/15: (1 + 14/15 + 1)/3 = 44/45
	//   pass^2: task 1: C(2,2)/15 = 1/15: (1 + 1/15 + 0)/3 = 16/45
	//   pass^4: task 1: C(2,4) = 0: (1 + 0 + 0)/3 = 1/3
	//   k goes up to 4 (the most scored rollouts of a task is 6: 8 is too many).
	//   mean reward: 7 ones in 14 = 1/2. Task sums 4 (n 4), 2 (n 6), 1 (n 4): residuals 2, −1,
	//   −1; squares 6; times 3/2: 9; std err 3/14.
	wantBZero := want{rollouts: 14, failed: 2, scored: 14, tasks: 3, successes: 7, mean: 0.5, stdErr: 3.0 / 14,
		pass: map[int][2]float64{1: {19.0 / 36, 19.0 / 36}, 2: {7.0 / 10, 16.0 / 45}, 4: {44.0 / 45, 1.0 / 3}}}
	wantBExcluded := wantA
	wantBExcluded.rollouts, wantBExcluded.failed = 14, 2

	// Groups of fixtureA (one task each, so no clustered std err: 0):
	//   easy (task 0, c=4): mean 1; pass@1 1, pass@2 1, pass@4 1; pass^2 1, pass^4 1
	//   hard (task 1, c=2): mean 1/2; pass@2 5/6, pass^2 1/6, pass@4 1, pass^4 0
	//   (none) (task 2, c=1): mean 1/4; pass@2 1/2, pass^2 0, pass@4 1, pass^4 0
	wantEasy := want{rollouts: 4, scored: 4, tasks: 1, successes: 4, mean: 1, stdErr: 0,
		pass: map[int][2]float64{1: {1, 1}, 2: {1, 1}, 4: {1, 1}}}
	wantHard := want{rollouts: 4, scored: 4, tasks: 1, successes: 2, mean: 0.5, stdErr: 0,
		pass: map[int][2]float64{1: {0.5, 0.5}, 2: {5.0 / 6, 1.0 / 6}, 4: {1, 0}}}
	wantNone := want{rollouts: 4, scored: 4, tasks: 1, successes: 1, mean: 0.25, stdErr: 0,
		pass: map[int][2]float64{1: {0.25, 0.25}, 2: {0.5, 0}, 4: {1, 0}}}
	// hard with its two failures scored as 0: n=6, c=2: mean 2/6 = 1/3; pass@1 1/3,
	// pass@2 3/5, pass^2 1/15, pass@4 14/15, pass^4 0.
	wantHardZero := want{rollouts: 6, failed: 2, scored: 6, tasks: 1, successes: 2, mean: 1.0 / 3, stdErr: 0,
		pass: map[int][2]float64{1: {1.0 / 3, 1.0 / 3}, 2: {3.0 / 5, 1.0 / 15}, 4: {14.0 / 15, 0}}}
	wantHardExcluded := wantHard
	wantHardExcluded.rollouts, wantHardExcluded.failed = 6, 2

	// Arm single (c = 2, 0, 0): mean 2/12 = 1/6; residuals 2 − 2/3 = 4/3, −2/3, −2/3;
	// squares 24/9; times 3/2: 4; std err 2/12 = 1/6; pass@1 (2/4)/3 = 1/6;
	// pass@2: task 0: 1 − C(2,2)/6 = 5/6, others 0: 5/18; pass^2: C(2,2)/6 = 1/6: 1/18;
	// pass@4: task 0: 1 − C(2,4) = 1: 1/3; pass^4: 0.
	wantSingle := want{rollouts: 12, scored: 12, tasks: 3, successes: 2, mean: 1.0 / 6, stdErr: 1.0 / 6,
		pass: map[int][2]float64{1: {1.0 / 6, 1.0 / 6}, 2: {5.0 / 18, 1.0 / 18}, 4: {1.0 / 3, 0}}}
	// Both arms: pass@k averages over the 6 (task, arm) pairs, tasks are the 3 tasks.
	//   mean 9/24 = 3/8; the clusters are tasks across arms: sums 6, 2, 1 of 8 rollouts each;
	//   residuals 3, −1, −2; squares 14; times 3/2: 21; std err sqrt(21)/24
	//   pass@1 (1 + 1/2 + 1/4 + 1/2 + 0 + 0)/6 = 9/24 = 3/8
	//   pass@2 (1 + 5/6 + 1/2 + 5/6 + 0 + 0)/6 = (19/6)/6 = 19/36
	//   pass^2 (1 + 1/6 + 0 + 1/6 + 0 + 0)/6 = (4/3)/6 = 2/9
	//   pass@4 (1 + 1 + 1 + 1 + 0 + 0)/6 = 2/3; pass^4 (1 + 0 …)/6 = 1/6
	wantArms := want{rollouts: 24, scored: 24, tasks: 3, successes: 9, mean: 3.0 / 8, stdErr: math.Sqrt(21) / 24,
		pass: map[int][2]float64{1: {3.0 / 8, 3.0 / 8}, 2: {19.0 / 36, 2.0 / 9}, 4: {2.0 / 3, 1.0 / 6}}}
	// Easy in both arms: task 0 multi (c=4) and single (c=2): mean 6/8 = 3/4; one task: no
	// std err;
	// pass@2 (1 + 5/6)/2 = 11/12, pass^2 (1 + 1/6)/2 = 7/12, pass@4 1, pass^4 1/2.
	wantEasyArms := want{rollouts: 8, scored: 8, tasks: 1, successes: 6, mean: 0.75, stdErr: 0,
		pass: map[int][2]float64{1: {0.75, 0.75}, 2: {11.0 / 12, 7.0 / 12}, 4: {1, 0.5}}}

	tests := []struct {
		name    string
		recs    []record.Record
		opt     StatsOptions
		overall want
		arms    map[string]want
		groups  map[string]want
		// armGroups is by "arm group".
		armGroups map[string]want
	}{
		{name: "3 tasks x 4 repeats", recs: fixtureA(), overall: wantA, arms: map[string]want{"multi": wantA}},
		{name: "failures excluded", recs: fixtureB(), overall: wantBExcluded, arms: map[string]want{"multi": wantBExcluded}},
		{name: "failures scored as zero", recs: fixtureB(), opt: StatsOptions{ScoreFailuresAsZero: true}, overall: wantBZero},
		{
			name: "grouped", recs: fixtureA(), opt: StatsOptions{GroupBy: "difficulty"}, overall: wantA,
			groups: map[string]want{"easy": wantEasy, "hard": wantHard, NoGroup: wantNone},
		},
		{
			name: "grouped, failures excluded", recs: fixtureB(), opt: StatsOptions{GroupBy: "difficulty"},
			groups: map[string]want{"easy": wantEasy, "hard": wantHardExcluded, NoGroup: wantNone},
		},
		{
			name: "grouped, failures scored as zero", recs: fixtureB(), opt: StatsOptions{GroupBy: "difficulty", ScoreFailuresAsZero: true},
			groups: map[string]want{"easy": wantEasy, "hard": wantHardZero, NoGroup: wantNone},
		},
		{
			name: "per arm", recs: fixtureArms(), opt: StatsOptions{GroupBy: "difficulty"}, overall: wantArms,
			arms:      map[string]want{"multi": wantA, "single": wantSingle},
			groups:    map[string]want{"easy": wantEasyArms},
			armGroups: map[string]want{"multi easy": wantEasy, "multi hard": wantHard, "multi " + NoGroup: wantNone},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := Evaluate(tt.recs, tt.opt)
			if tt.overall.rollouts > 0 {
				checkScores(t, ev.Overall, tt.overall)
			}
			found := func(list []Scores, key func(Scores) string, w map[string]want) {
				t.Helper()
				for name, w := range w {
					i := slices.IndexFunc(list, func(s Scores) bool { return key(s) == name })
					if i < 0 {
						t.Errorf("no scores for %q in %v", name, list)
						continue
					}
					checkScores(t, list[i], w)
				}
			}
			found(ev.ByArm, func(s Scores) string { return s.Arm }, tt.arms)
			found(ev.ByGroup, func(s Scores) string { return s.Group }, tt.groups)
			found(ev.ByArmGroup, func(s Scores) string { return s.Arm + " " + s.Group }, tt.armGroups)
			if tt.opt.GroupBy == "" && (ev.ByGroup != nil || ev.ByArmGroup != nil) {
				t.Errorf("groups without --group-by: %v %v", ev.ByGroup, ev.ByArmGroup)
			}
		})
	}
}

// The behaviour means are over the rollouts with a reward and no failure class, whether or
// not failures are scored; totals and terminations are over every record.
func TestEvaluateBehaviour(t *testing.T) {
	for _, zero := range []bool{false, true} {
		s := Evaluate(fixtureB(), StatsOptions{ScoreFailuresAsZero: zero}).Overall
		// fixtureA's 12 rollouts: rounds 1..4 in each task: mean 2.5; tool calls twice that:
		// 5; tokens 10 and 2 each; latency 100, 200, 300 four times each: 200. The two failures
		// add 2000 prompt and 200 completion tokens to the totals (12·10 + 2000 = 2120,
		// 12·2 + 200 = 224), no tool errors (12), and terminations timeout 2.
		if s.MeanRounds != 2.5 || s.MeanToolCalls != 5 || s.MeanPromptTokens != 10 || s.MeanCompletionTokens != 2 || s.MeanLatencyMs != 200 {
			t.Errorf("zero=%v: means rounds %v tool calls %v tokens %v/%v latency %v", zero, s.MeanRounds, s.MeanToolCalls, s.MeanPromptTokens, s.MeanCompletionTokens, s.MeanLatencyMs)
		}
		if s.PromptTokens != 2120 || s.CompletionTokens != 224 || s.ToolErrors != 12 {
			t.Errorf("zero=%v: totals %d %d %d", zero, s.PromptTokens, s.CompletionTokens, s.ToolErrors)
		}
		wantTerm := map[string]int{"completed": 7, "tool_error": 5, "timeout": 2}
		wantFail := map[string]int{record.FailRateLimited: 1, record.FailTimeout: 1}
		if !mapsEqual(s.Terminations, wantTerm) || !mapsEqual(s.FailuresByClass, wantFail) {
			t.Errorf("zero=%v: terminations %v failures %v", zero, s.Terminations, s.FailuresByClass)
		}
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// The threshold decides success for pass@k: rewards 0.5, 0.9, 1, 0.2 have one success at
// the default threshold 1 (pass@1 1/4), two at 0.9 (pass@1 1/2). The mean is the same:
// (0.5 + 0.9 + 1 + 0.2)/4 = 0.65.
func TestEvaluateThreshold(t *testing.T) {
	recs := rollouts("multi", 0, nil, 0.5, 0.9, 1, 0.2)
	for _, c := range []struct {
		threshold float64
		succ      int
		pass1     float64
	}{{0, 1, 0.25}, {1, 1, 0.25}, {0.9, 2, 0.5}} {
		s := Evaluate(recs, StatsOptions{Threshold: c.threshold}).Overall
		p, _ := s.Pass(1)
		if s.Successes != c.succ || math.Abs(p.PassAt-c.pass1) > 1e-12 || math.Abs(s.MeanReward-0.65) > 1e-12 {
			t.Errorf("threshold %v: successes %d pass@1 %v mean %v", c.threshold, s.Successes, p.PassAt, s.MeanReward)
		}
	}
}

// pass@k and pass^k against the binomials by hand and, for large n, against log-gamma:
// products of ratios neither overflow nor lose the small values.
func TestPassAtK(t *testing.T) {
	for _, c := range []struct {
		n, c, k       int
		pass, passHat float64
	}{
		{4, 0, 1, 0, 0},
		{4, 4, 4, 1, 1},
		{4, 2, 2, 5.0 / 6, 1.0 / 6},            // 1 − C(2,2)/C(4,2); C(2,2)/C(4,2)
		{5, 2, 3, 1 - 1.0/10, 0},               // 1 − C(3,3)/C(5,3) = 9/10; C(2,3) = 0
		{10, 3, 2, 1 - 21.0/45, 3.0 / 45},      // C(7,2) = 21, C(10,2) = 45, C(3,2) = 3
		{8, 6, 4, 1, 15.0 / 70},                // C(2,4) = 0; C(6,4)/C(8,4) = 15/70
		{20, 1, 1, 1.0 / 20, 1.0 / 20},         // pass@1 = pass^1 = c/n
		{6, 2, 4, 14.0 / 15, 0},                // 1 − C(4,4)/C(6,4) = 1 − 1/15
		{12, 9, 8, 1, 9.0 / 495},               // C(3,8) = 0; C(9,8)/C(12,8) = 9/495
		{100, 50, 1, 0.5, 0.5},                 //
		{100, 99, 100, 1, 0},                   //
		{100, 100, 100, 1, 1},                  //
		{3, 1, 2, 1 - 1.0/3, 0},                // 1 − C(2,2)/C(3,2)
		{7, 3, 3, 1 - 4.0/35, 1.0 / 35},        // C(4,3) = 4, C(7,3) = 35
		{9, 4, 4, 1 - 5.0/126, 1.0 / 126},      // C(5,4) = 5, C(9,4) = 126
		{16, 8, 8, 1 - 1.0/12870, 1.0 / 12870}, // C(8,8) = 1, C(16,8) = 12870
	} {
		if got := PassAt(c.n, c.c, c.k); math.Abs(got-c.pass) > 1e-12 {
			t.Errorf("pass@%d(n=%d, c=%d) = %.17g, want %.17g", c.k, c.n, c.c, got, c.pass)
		}
		if got := PassHat(c.n, c.c, c.k); math.Abs(got-c.passHat) > 1e-12 {
			t.Errorf("pass^%d(n=%d, c=%d) = %.17g, want %.17g", c.k, c.n, c.c, got, c.passHat)
		}
	}
	// C(1000, 512) is about 1e299, C(2000, 1024) overflows float64: the ratios do not.
	lchoose := func(n, k int) float64 {
		a, _ := math.Lgamma(float64(n + 1))
		b, _ := math.Lgamma(float64(k + 1))
		c, _ := math.Lgamma(float64(n - k + 1))
		return a - b - c
	}
	for _, c := range [][3]int{{1000, 500, 256}, {2000, 1500, 1024}, {2000, 10, 512}} {
		n, s, k := c[0], c[1], c[2]
		wantHat := math.Exp(lchoose(s, k) - lchoose(n, k))
		if s < k {
			wantHat = 0
		}
		wantAt := 1 - math.Exp(lchoose(n-s, k)-lchoose(n, k))
		if got := PassAt(n, s, k); math.IsNaN(got) || math.Abs(got-wantAt) > 1e-9 {
			t.Errorf("pass@%d(n=%d, c=%d) = %v, want %v", k, n, s, got, wantAt)
		}
		if got := PassHat(n, s, k); math.IsNaN(got) || math.Abs(got-wantHat) > 1e-9*math.Max(wantHat, 1e-300) {
			t.Errorf("pass^%d(n=%d, c=%d) = %v, want %v", k, n, s, got, wantHat)
		}
	}
}

// k runs over powers of two up to the most scored rollouts of a task in one arm: 3 repeats
// give 1 and 2; 8 give 1, 2, 4, 8; a task with fewer rollouts than k is left out of pass@k.
func TestEvaluatePassAtKs(t *testing.T) {
	ev := Evaluate(rollouts("multi", 0, nil, 1, 0, 1), StatsOptions{})
	if !slices.Equal(ev.K, []int{1, 2}) {
		t.Errorf("3 repeats: k %v", ev.K)
	}
	recs := slices.Concat(rollouts("multi", 0, nil, 1, 0, 1, 0, 1, 0, 0, 0), rollouts("multi", 1, nil, 1, 1))
	ev = Evaluate(recs, StatsOptions{})
	if !slices.Equal(ev.K, []int{1, 2, 4, 8}) {
		t.Errorf("8 repeats: k %v", ev.K)
	}
	// pass@2: task 0: n=8, c=3: 1 − C(5,2)/C(8,2) = 1 − 10/28 = 9/14; task 1: 1: (9/14 + 1)/2 = 23/28.
	// pass@4: task 0 only: 1 − C(5,4)/C(8,4) = 1 − 5/70 = 13/14.
	// pass@8: task 0 only: 1 − C(5,8)/1 = 1.
	// Std err: task sums 3 (n 8) and 2 (n 2), mean 1/2: residuals −1, 1; 2·2/1 = 4: 2/10.
	checkScores(t, ev.Overall, want{rollouts: 10, scored: 10, tasks: 2, successes: 5, mean: 0.5, stdErr: 0.2,
		pass: map[int][2]float64{1: {(3.0/8 + 1) / 2, (3.0/8 + 1) / 2}, 2: {23.0 / 28, (3.0/28 + 1) / 2}, 4: {13.0 / 14, 0}, 8: {1, 0}}})
	if p, _ := ev.Overall.Pass(4); p.Tasks != 1 {
		t.Errorf("pass@4 over %d tasks, want 1", p.Tasks)
	}
	if got := Evaluate(nil, StatsOptions{}); len(got.K) != 0 || got.Overall.Rollouts != 0 || got.Overall.CI95 != nil || len(got.ByArm) != 0 {
		t.Errorf("no records: %+v", got)
	}
}

// The bootstrap interval is deterministic for a seed, does not depend on the order of the
// records, contains the mean, and is clustered by task.
func TestEvaluateBootstrap(t *testing.T) {
	recs := fixtureArms()
	a := Evaluate(recs, StatsOptions{Seed: 7})
	shuffled := slices.Clone(recs)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	b := Evaluate(shuffled, StatsOptions{Seed: 7})
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("the order of the records changed the evaluation:\n%s\n%s", ja, jb)
	}
	for _, s := range append([]Scores{a.Overall}, a.ByArm...) {
		if s.CI95 == nil || s.CI95.Low > s.MeanReward || s.CI95.High < s.MeanReward || s.CI95.Low >= s.CI95.High {
			t.Errorf("%s: mean %v, CI %+v", s.Scope, s.MeanReward, s.CI95)
		}
	}
	if c := Evaluate(recs, StatsOptions{Bootstrap: -1}); c.Overall.CI95 != nil {
		t.Errorf("Bootstrap -1 computed a CI %+v", c.Overall.CI95)
	}
	// Every reward 1: not a point, but the Wilson score interval's lower bound over the 2 tasks,
	// G/(G+q²) with q the 97.5% t quantile of 1 degree of freedom (12.7062047362).
	same := Evaluate(slices.Concat(rollouts("m", 0, nil, 1, 1), rollouts("m", 1, nil, 1, 1)), StatsOptions{}).Overall
	if q := 12.7062047362; same.CI95 == nil || math.Abs(same.CI95.Low-2/(2+q*q)) > 1e-9 || same.CI95.High != 1 || same.CI95.Point || same.CI95.Method != "wilson" {
		t.Errorf("all ones: CI %+v, want [%v, 1] by Wilson", same.CI95, 2/(2+12.7062047362*12.7062047362))
	}
	// Every reward equal but not 0 or 1: the bootstrap's interval is that reward, a point; the
	// default's is Wilson's over the 2 tasks (the effective sample size G when the std err is 0).
	halves := slices.Concat(rollouts("m", 0, nil, 0.5, 0.5), rollouts("m", 1, nil, 0.5, 0.5))
	half := Evaluate(halves, StatsOptions{CI: CIBootstrap}).Overall
	if half.CI95 == nil || half.CI95.Low != 0.5 || half.CI95.High != 0.5 || !half.CI95.Point {
		t.Errorf("all halves, bootstrap: CI %+v", half.CI95)
	}
	q := 12.7062047362
	wlo := (0.5 + q*q/4 - q*math.Sqrt(0.25/2+q*q/16)) / (1 + q*q/2)
	if half = Evaluate(halves, StatsOptions{}).Overall; half.CI95 == nil || half.CI95.Point || half.CI95.Method != "wilson" || math.Abs(half.CI95.Low-wlo) > 1e-9 || math.Abs(half.CI95.High-(1-wlo)) > 1e-9 {
		t.Errorf("all halves: CI %+v, want Wilson [%v, %v]", half.CI95, wlo, 1-wlo)
	}

	// Continuous rewards: the seed moves the interval; the parallelism does not.
	var cont []record.Record
	rng := rand.New(rand.NewPCG(9, 9))
	for task := range int64(30) {
		cont = append(cont, rollouts("m", task, nil, rng.Float64(), rng.Float64(), rng.Float64())...)
	}
	prev := runtime.GOMAXPROCS(1)
	one := Evaluate(cont, StatsOptions{CI: CIBootstrap, Seed: 11}).Overall.CI95
	runtime.GOMAXPROCS(8)
	eight := Evaluate(cont, StatsOptions{CI: CIBootstrap, Seed: 11}).Overall.CI95
	runtime.GOMAXPROCS(prev)
	if *one != *eight {
		t.Errorf("seed 11: CI %+v at GOMAXPROCS 1, %+v at 8", one, eight)
	}
	if other := Evaluate(cont, StatsOptions{CI: CIBootstrap, Seed: 12}).Overall.CI95; *other == *one {
		t.Errorf("seeds 11 and 12 gave the same CI %+v", one)
	}

	// Clustering: 10 tasks × 4 identical repeats, 5 tasks all 1 and 5 all 0. Resampling the
	// 40 rollouts as if independent gives a mean with std err about sqrt(1/4/40) ≈ 0.079; there
	// are only 10 independent tasks, so the clustered one is about sqrt(1/4/10) ≈ 0.158: twice
	// as wide.
	var clustered []record.Record
	var flat []float64
	for task := range int64(10) {
		x := float64(task % 2)
		clustered = append(clustered, rollouts("m", task, nil, x, x, x, x)...)
		flat = append(flat, x, x, x, x)
	}
	ev := Evaluate(clustered, StatsOptions{CI: CIBootstrap, Seed: 3})
	ci := ev.Overall.CI95
	again := Evaluate(clustered, StatsOptions{CI: CIBootstrap, Seed: 3}).Overall.CI95
	if *ci != *again {
		t.Errorf("seed 3 gave %+v then %+v", ci, again)
	}
	rng = rand.New(rand.NewPCG(3, 4))
	means := make([]float64, DefaultBootstrap)
	for i := range means {
		var sum float64
		for range flat {
			sum += flat[rng.IntN(len(flat))]
		}
		means[i] = sum / float64(len(flat))
	}
	slices.Sort(means)
	naiveLo, naiveHi := means[int(0.025*float64(len(means)-1))], means[int(0.975*float64(len(means)-1))]
	if ci.Low > 0.5 || ci.High < 0.5 || ci.High-ci.Low <= 1.5*(naiveHi-naiveLo) {
		t.Errorf("clustered CI %.4f to %.4f (width %.4f) is not wider than the naive %.4f to %.4f (width %.4f)",
			ci.Low, ci.High, ci.High-ci.Low, naiveLo, naiveHi, naiveHi-naiveLo)
	}
	t.Logf("clustered CI %.4f to %.4f; naive %.4f to %.4f", ci.Low, ci.High, naiveLo, naiveHi)
}

// The quantile interpolates between order statistics.
func TestStatsQuantile(t *testing.T) {
	xs := []float64{0, 1, 2, 3, 4}
	for _, c := range [][2]float64{{0, 0}, {1, 4}, {0.5, 2}, {0.125, 0.5}, {0.975, 3.9}} {
		if got := quantile(xs, c[0]); math.Abs(got-c[1]) > 1e-12 {
			t.Errorf("quantile %v = %v, want %v", c[0], got, c[1])
		}
	}
	if got := quantile([]float64{7}, 0.025); got != 7 {
		t.Errorf("one value: %v", got)
	}
}

// EvaluateJournal reads a journal like Evaluate reads records.
func TestEvaluateJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal.jsonl")
	var buf bytes.Buffer
	for _, r := range fixtureB() {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(append(b, '\n'))
	}
	buf.WriteString(`{"task_index": 3, "torn`)
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	o := StatsOptions{GroupBy: "difficulty", Seed: 5}
	got, err := EvaluateJournal(path, o)
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(got)
	jb, _ := json.Marshal(Evaluate(fixtureB(), o))
	if string(ja) != string(jb) {
		t.Errorf("journal:\n%s\nrecords:\n%s", ja, jb)
	}
	if _, err := EvaluateJournal(filepath.Join(t.TempDir(), "missing.jsonl"), o); err == nil || !strings.Contains(err.Error(), "missing.jsonl") {
		t.Errorf("missing journal: %v", err)
	}
}

// The printers, against golden files (go test ./pkg/report -run Golden -update rewrites
// them): two arms, a group-by field, failures.
func TestEvaluationGolden(t *testing.T) {
	recs := fixtureArms()
	for i, class := range []string{record.FailRateLimited, record.FailTimeout} {
		recs = append(recs, record.Record{TaskIndex: 1, RolloutIndex: int64(4 + i), Arm: "single", SourceFile: "tasks.jsonl",
			TaskFields: map[string]string{"difficulty": "hard"}, FailureClass: record.FailureClass(class), PromptTokens: 1000, Termination: "timeout"})
	}
	ev := Evaluate(recs, StatsOptions{GroupBy: "difficulty", Seed: 1})
	for _, c := range []struct{ format, file string }{
		{"text", "evaluation.txt"},
		{"markdown", "evaluation.md"},
		{"json", "evaluation.json"},
	} {
		t.Run(c.format, func(t *testing.T) {
			var buf bytes.Buffer
			if err := ev.Write(&buf, c.format); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", c.file+".golden")
			if *update {
				if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./pkg/report -run Golden -update to create it)", err)
			}
			if got := buf.String(); got != string(want) {
				t.Errorf("%s output differs from %s (go test ./pkg/report -run Golden -update rewrites it):\n got:\n%s\nwant:\n%s", c.format, golden, got, want)
			}
		})
	}
	if err := ev.Write(&bytes.Buffer{}, "yaml"); err == nil {
		t.Error("format yaml: no error")
	}
	for _, f := range []string{"text", "markdown", "json"} {
		if err := ev.Write(failingWriter{}, f); err == nil {
			t.Errorf("%s: no error from a failing writer", f)
		}
	}
}

// Past BootstrapMaxTasks the interval is the normal one with task-clustered standard errors;
// it must agree with the bootstrap it replaces, and say so.
func TestNormalIntervalForManyTasks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var clusters []cluster
	var sum float64
	var n int
	for range BootstrapMaxTasks + 5000 {
		p := rng.Float64() // each task its own success rate: clustering matters
		c := cluster{n: 1 + rng.IntN(4)}
		for range c.n {
			if rng.Float64() < p {
				c.sum++
			}
		}
		clusters = append(clusters, c)
		sum += c.sum
		n += c.n
	}
	mean := sum / float64(n)
	blo, bhi := bootstrapCI(clusters, 500, 7)
	nlo, nhi := normalCI(mean, clusteredStdErr(clusters, mean))
	width := bhi - blo
	if math.Abs(nlo-blo) > 0.1*width || math.Abs(nhi-bhi) > 0.1*width {
		t.Errorf("normal CI [%g, %g], bootstrap [%g, %g]: more than a tenth of the width apart", nlo, nhi, blo, bhi)
	}
	if !(nlo < mean && mean < nhi) {
		t.Errorf("normal CI [%g, %g] does not hold the mean %g", nlo, nhi, mean)
	}

	e := NewEvaluator(StatsOptions{CI: CIBootstrap})
	for i, c := range clusters {
		for k := range c.n {
			reward := 0.0
			if float64(k) < c.sum {
				reward = 1
			}
			e.Add(&record.Record{TaskIndex: int64(i), RolloutIndex: int64(k), Arm: "multi", HasReward: true, Reward: reward})
		}
	}
	ev := e.Evaluation()
	if ci := ev.Overall.CI95; ci == nil || !ci.Normal || math.Abs(ci.Low-nlo) > 1e-12 || math.Abs(ci.High-nhi) > 1e-12 {
		t.Errorf("overall CI %+v, want the normal one [%g, %g]", ci, nlo, nhi)
	}
	if m := ev.method(); !strings.Contains(m, "normal, task-clustered") {
		t.Errorf("method %q does not say the interval is normal", m)
	}
}
