package report

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
)

// recs makes records of one arm: task i's repeat r has reward rewards[i][r].
func recs(arm, src string, fields map[string]string, rewards ...[]float64) []record.Record {
	var out []record.Record
	for i, rs := range rewards {
		for r, x := range rs {
			out = append(out, record.Record{SourceFile: src, TaskIndex: int64(i), RolloutIndex: int64(r), TaskID: src + "-" + string(rune('a'+i)),
				Arm: arm, Reward: x, HasReward: true, TaskFields: fields})
		}
	}
	return out
}

func run(name string, rs ...[]record.Record) LeaderRun {
	all := slices.Concat(rs...)
	return LeaderRun{Name: name, Records: func(yield func(*record.Record) bool) {
		for i := range all {
			if !yield(&all[i]) {
				return
			}
		}
	}}
}

// Each row is paired with the baseline's arm of its name, or its only arm; rows without one
// say why; the difference is the mean over pairs of the row's reward minus the baseline's.
func TestLeaderboardRows(t *testing.T) {
	base := run("a", recs("multi", "t", nil, []float64{1, 0}, []float64{0, 0}), recs("single", "t", nil, []float64{0, 0}, []float64{0, 0}))
	b := run("b", recs("multi", "t", nil, []float64{1, 1}, []float64{1, 0}), recs("workflow", "t", nil, []float64{1, 1}, []float64{1, 1}))
	other := run("c", recs("multi", "u", nil, []float64{1}))
	lb, err := NewLeaderboard([]LeaderRun{base, b, other}, 0, StatsOptions{Bootstrap: -1})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		run, arm, note string
		pairs          int
		diff           float64
	}
	want := []row{{"a", "multi", "", 0, 0}, {"a", "single", "", 0, 0}, {"b", "multi", "", 4, 0.5}, {"b", "workflow", "the baseline has no arm workflow (its arms: multi, single)", 0, 0},
		{"c", "multi", "no task in common with the baseline", 0, 0}}
	if len(lb.Rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(lb.Rows), len(want))
	}
	for i, w := range want {
		r := lb.Rows[i]
		got := row{run: r.Run, arm: r.Arm}
		if v := r.VsBaseline; v != nil {
			got.note, got.pairs, got.diff = v.Note, v.Pairs, v.MeanDiff
		}
		if got.run != w.run || got.arm != w.arm || got.note != w.note || got.pairs != w.pairs || math.Abs(got.diff-w.diff) > 1e-12 || r.IsBaseline != (w.run == "a") {
			t.Errorf("row %d: %+v, want %+v", i, got, w)
		}
	}
	if none := lb.NoCommonTasks(); len(none) != 1 || !strings.HasPrefix(none[0], "c multi") {
		t.Errorf("NoCommonTasks %q", none)
	}
	// The only arm of a baseline pairs with any arm.
	lb, _ = NewLeaderboard([]LeaderRun{b, run("one", recs("x", "t", nil, []float64{0, 0}, []float64{0, 0}))}, 1, StatsOptions{Bootstrap: -1})
	if v := lb.Rows[0].VsBaseline; v == nil || v.Against != "one x" || v.Pairs != 4 || v.MeanDiff != 0.75 {
		t.Errorf("against the only arm: %+v", v)
	}
}

// A group-by field: a row per value under each arm; a field no run has is refused, naming the
// fields there are.
func TestLeaderboardGroups(t *testing.T) {
	a := run("a", recs("multi", "t", map[string]string{"level": "easy"}, []float64{1}), recs("multi", "t2", map[string]string{"level": "hard"}, []float64{0}))
	b := run("b", recs("multi", "t", map[string]string{"topic": "x"}, []float64{1}))
	lb, err := NewLeaderboard([]LeaderRun{a, b}, 0, StatsOptions{GroupBy: "level", Bootstrap: -1})
	if err != nil {
		t.Fatal(err)
	}
	var groups []string
	for _, r := range lb.Rows {
		groups = append(groups, r.Run+"/"+r.Arm+"/"+r.Group)
	}
	if want := []string{"a/multi/", "a/multi/easy", "a/multi/hard", "b/multi/", "b/multi/(none)"}; !slices.Equal(groups, want) {
		t.Errorf("rows %q, want %q", groups, want)
	}
	_, err = NewLeaderboard([]LeaderRun{a, b}, 0, StatsOptions{GroupBy: "model"})
	var u *UnknownFieldError
	if !errors.As(err, &u) || u.Field != "model" || !slices.Equal(u.Known, []string{"level", "topic"}) {
		t.Errorf("unknown field: %v", err)
	}
}
