package report

import (
	"bytes"
	"cmp"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/rollout-dev/rollout/pkg/record"
	"github.com/rollout-dev/rollout/pkg/record/recordtest"
)

func TestEvalRowSize(t *testing.T) {
	if n := unsafe.Sizeof(evalRow{}); n > 48 {
		t.Errorf("evalRow is %d bytes, want at most 48", n)
	}
}

// The Evaluator gives the Evaluation it gave when it kept 88 bytes of each record (the old
// one, in stats_old_test.go), to the bit, on random records in any order; with duplicate
// keys (whose order the old one left to its input), the same Evaluation in any order.
func TestEvaluatorMatchesOld(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 60 {
		n := 1 + rng.IntN(400)
		dups := trial%4 == 3
		recs := make([]record.Record, 0, n)
		seen := map[record.Key]bool{}
		for len(recs) < n {
			r := recordtest.Realistic(rng.IntN(200))
			r.RolloutIndex = int64(rng.IntN(6))
			r.Arm = []string{"single", "multi", "workflow"}[rng.IntN(3)]
			r.Reward = []float64{0, 1, 0.5, 0.1, 1.0 / 3}[rng.IntN(5)]
			r.LatencyMs = rng.Float64() * 1e4
			if rng.IntN(8) == 0 {
				r.TaskFields = nil
			}
			if rng.IntN(10) == 0 {
				r.FailureClass, r.HasReward, r.Termination = []record.FailureClass{record.FailTimeout, record.FailBadTask}[rng.IntN(2)], false, ""
			}
			if rng.IntN(20) == 0 {
				r.HasReward = false
			}
			if seen[r.Key()] && !dups {
				continue
			}
			seen[r.Key()] = true
			recs = append(recs, r)
		}
		o := StatsOptions{CI: CIBootstrap, Bootstrap: 50, Seed: uint64(trial), ScoreFailuresAsZero: trial%3 == 0, Threshold: []float64{0, 0.5}[trial%2]}
		if trial%2 == 0 {
			o.GroupBy = "category"
		}
		evaluate := func(order []int) []byte {
			ev := NewEvaluator(o)
			for _, i := range order {
				ev.Add(&recs[i])
			}
			a, _ := json.Marshal(ev.Evaluation())
			// Evaluation sorts the rows in place: a second one is the same.
			if b, _ := json.Marshal(ev.Evaluation()); !bytes.Equal(a, b) {
				t.Fatalf("trial %d: a second Evaluation differs", trial)
			}
			// Spilled in sorted runs of a few rows, merged back: the same, twice.
			sp := NewEvaluator(o)
			sp.SpillTo(t.TempDir())
			sp.rows.Max = 1 + trial%9
			for _, i := range order {
				sp.Add(&recs[i])
			}
			for range 2 {
				if b, _ := json.Marshal(sp.Evaluation()); !bytes.Equal(a, b) {
					t.Fatalf("trial %d: spilled in runs of %d rows:\n%.2000s\nin memory:\n%.2000s", trial, sp.rows.Max, b, a)
				}
			}
			if err := cmp.Or(sp.Err(), sp.Close()); err != nil {
				t.Fatal(err)
			}
			return a
		}
		got := evaluate(rng.Perm(n))
		if again := evaluate(rng.Perm(n)); !bytes.Equal(got, again) {
			t.Fatalf("trial %d (%d records): the order of the records matters", trial, n)
		}
		if dups {
			continue
		}
		old := newOldEvaluator(o)
		for i := range recs {
			old.Add(&recs[i])
		}
		if want, _ := json.Marshal(old.Evaluation()); !bytes.Equal(got, want) {
			t.Fatalf("trial %d (%d records, %+v):\nold %.2000s\nnew %.2000s", trial, len(recs), o, want, got)
		}
	}
}

// An Evaluator that spills holds at most a run of rows and leaves nothing in its directory;
// one that cannot write its file keeps its rows; both give the Evaluation of one that keeps
// every row.
func TestEvaluatorSpill(t *testing.T) {
	recs := make([]record.Record, 1000)
	for i := range recs {
		recs[i] = recordtest.Realistic(i)
	}
	want, _ := json.Marshal(Evaluate(recs, StatsOptions{Seed: 1}))
	for _, tc := range []struct {
		name string
		dir  string
		runs int
	}{{"spilled", t.TempDir(), 1000 / 64}, {"no file", filepath.Join(t.TempDir(), "missing"), 0}} {
		ev := NewEvaluator(StatsOptions{Seed: 1})
		ev.SpillTo(tc.dir)
		ev.rows.Max = 64
		ev.Reserve(len(recs))
		for i := range recs {
			ev.Add(&recs[i])
			if len(ev.rows.Buf) > 64 && ev.rows.Spilling() {
				t.Fatalf("%s: %d rows in memory", tc.name, len(ev.rows.Buf))
			}
		}
		if ev.rows.Runs() != tc.runs {
			t.Errorf("%s: %d runs, want %d", tc.name, ev.rows.Runs(), tc.runs)
		}
		if got, _ := json.Marshal(ev.Evaluation()); !bytes.Equal(got, want) || ev.Err() != nil {
			t.Fatalf("%s: %v\n%.1000s\nwant\n%.1000s", tc.name, ev.Err(), got, want)
		}
		if err := ev.Close(); err != nil {
			t.Fatal(err)
		}
		if left, _ := os.ReadDir(tc.dir); len(left) != 0 {
			t.Errorf("%s: left in the spill directory: %v", tc.name, left)
		}
	}
}
