package report

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
)

// naiveCompare is the pairing written the plain way, with maps of strings over whole sides:
// the first scored record of each (TaskKey, repeat) on each side, the pairs' differences
// grouped by task. It checks Comparer's sort-and-merge pairing.
type naiveResult struct {
	pairs, unpaired, won, lost, tied int
	meanDiff                         float64
	onlyA, onlyB, noPairs            []string
	first                            map[string][2]int // each task's lowest paired repeat's positions
}

func naiveCompare(sides [2][]record.Record, byIndex, failZero bool) naiveResult {
	type key struct {
		task string
		rep  int64
	}
	type scored struct {
		v  float64
		at int
	}
	var m [2]map[key]scored
	var seen [2]map[string]bool
	for s, recs := range sides {
		m[s], seen[s] = map[key]scored{}, map[string]bool{}
		for i := range recs {
			r := &recs[i]
			k := key{TaskKey(r, byIndex), r.RolloutIndex}
			seen[s][k.task] = true
			v, ok := r.Reward, r.FailureClass == "" && r.HasReward
			if r.FailureClass != "" && failZero {
				v, ok = 0, true
			}
			if _, dup := m[s][k]; ok && !dup {
				m[s][k] = scored{v, i}
			}
		}
	}
	res := naiveResult{first: map[string][2]int{}}
	sums, ns, firstRep := map[string]float64{}, map[string]int{}, map[string]int64{}
	var total float64
	for k, a := range m[0] {
		b, ok := m[1][k]
		if !ok {
			res.unpaired++
			continue
		}
		res.pairs++
		total += b.v - a.v
		sums[k.task] += b.v - a.v
		ns[k.task]++
		if r, ok := firstRep[k.task]; !ok || k.rep < r {
			firstRep[k.task], res.first[k.task] = k.rep, [2]int{a.at, b.at}
		}
	}
	for k := range m[1] {
		if _, ok := m[0][k]; !ok {
			res.unpaired++
		}
	}
	for t := range seen[0] {
		switch {
		case !seen[1][t]:
			res.onlyA = append(res.onlyA, t)
		case ns[t] == 0:
			res.noPairs = append(res.noPairs, t)
		}
	}
	for t := range seen[1] {
		if !seen[0][t] {
			res.onlyB = append(res.onlyB, t)
		}
	}
	for t, s := range sums {
		switch d := s / float64(ns[t]); {
		case d > 1e-12:
			res.won++
		case d < -1e-12:
			res.lost++
		default:
			res.tied++
		}
	}
	if res.pairs > 0 {
		res.meanDiff = total / float64(res.pairs)
	}
	for _, l := range [][]string{res.onlyA, res.onlyB, res.noPairs} {
		slices.Sort(l)
	}
	return res
}

// TestComparerAgainstNaive checks Compare (a Comparer over two slices) against naiveCompare on
// random sides: repeats out of order, duplicate (task, repeat) records, failures, tasks on one
// side only or without a pair, keys by id, by row hash, and by index (a record without either).
func TestComparerAgainstNaive(t *testing.T) {
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		keyed := seed % 3 // 0 ids, 1 ids and hashes, 2 some records with neither
		var sides [2][]record.Record
		for s := range sides {
			for range 20 + rng.IntN(200) {
				task := int64(rng.IntN(30))
				r := record.Record{TaskIndex: task, RolloutIndex: int64(rng.IntN(4)), SourceFile: "t.jsonl",
					Reward: float64(rng.IntN(3)) / 2, HasReward: rng.IntN(10) > 0, Rounds: 1, Termination: "completed"}
				switch {
				case keyed == 0 || task%2 == 0:
					r.TaskID = fmt.Sprintf("t%02d", task)
				case keyed == 1 || rng.IntN(4) > 0:
					r.TaskHash = fmt.Sprintf("h%02d", task)
				}
				if rng.IntN(8) == 0 {
					r.FailureClass, r.HasReward = record.FailTimeout, false
				}
				sides[s] = append(sides[s], r)
			}
		}
		for _, failZero := range []bool{false, true} {
			name := fmt.Sprintf("seed %d, failures as zero %v", seed, failZero)
			c := NewComparer("A", "B", StatsOptions{ScoreFailuresAsZero: failZero, Bootstrap: 50})
			for s := range sides {
				for i := range sides[s] {
					c.Check(s, &sides[s][i])
				}
			}
			for s := range sides {
				for i := range sides[s] {
					c.Add(s, &sides[s][i])
				}
			}
			got := c.Comparison()
			want := naiveCompare(sides, got.PairedBy == "task index", failZero)
			if (got.PairedBy == "task index") != (keyed == 2) {
				t.Errorf("%s: paired by %s", name, got.PairedBy)
			}
			if got.Pairs != want.pairs || got.Unpaired != want.unpaired || got.Won != want.won || got.Lost != want.lost || got.Tied != want.tied ||
				math.Abs(got.MeanDiff-want.meanDiff) > 1e-12 {
				t.Errorf("%s: pairs %d unpaired %d won/lost/tied %d/%d/%d diff %v; naive %d %d %d/%d/%d %v", name,
					got.Pairs, got.Unpaired, got.Won, got.Lost, got.Tied, got.MeanDiff,
					want.pairs, want.unpaired, want.won, want.lost, want.tied, want.meanDiff)
			}
			if !slices.Equal(got.OnlyA, want.onlyA) || !slices.Equal(got.OnlyB, want.onlyB) || !slices.Equal(got.NoPairs, want.noPairs) {
				t.Errorf("%s: only A %v B %v no pairs %v; naive %v %v %v", name, got.OnlyA, got.OnlyB, got.NoPairs, want.onlyA, want.onlyB, want.noPairs)
			}
			tasks := c.Tasks()
			if len(tasks) != got.Tasks || !slices.IsSortedFunc(tasks, func(a, b TaskPairs) int { return strings.Compare(a.Key, b.Key) }) {
				t.Errorf("%s: %d tasks listed (sorted: %v), %d compared", name, len(tasks), slices.IsSortedFunc(tasks, func(a, b TaskPairs) int { return strings.Compare(a.Key, b.Key) }), got.Tasks)
			}
			for _, tp := range tasks {
				if tp.First != want.first[tp.Key] {
					t.Errorf("%s: task %s's first pair at %v, naive %v", name, tp.Key, tp.First, want.first[tp.Key])
				}
			}
		}
	}
}
