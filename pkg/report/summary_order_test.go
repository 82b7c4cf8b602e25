package report

import (
	"math/rand/v2"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
)

// The summary's means of rounds and tool calls are the same whatever order the records came
// in (a merge of shards reads them in another order than the run that wrote them): the sums
// are integers, divided once.
func TestSummaryMeansDoNotDependOnOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	recs := make([]record.Record, 999)
	for i := range recs {
		recs[i] = record.Record{TaskIndex: int64(i), HasReward: true, Reward: r.Float64(), Rounds: int32(r.IntN(37)), ToolCalls: int32(r.IntN(101))}
	}
	var a Stats
	sumRounds, sumCalls := 0, 0
	for i := range recs {
		a.Add(&recs[i])
		sumRounds += int(recs[i].Rounds)
		sumCalls += int(recs[i].ToolCalls)
	}
	for range 5 {
		r.Shuffle(len(recs), func(i, j int) { recs[i], recs[j] = recs[j], recs[i] })
		var b Stats
		for i := range recs {
			b.Add(&recs[i])
		}
		sa, sb := a.Summary(), b.Summary()
		if sa.MeanRounds != sb.MeanRounds || sa.MeanToolCalls != sb.MeanToolCalls {
			t.Fatalf("means differ by order: rounds %v vs %v, tool calls %v vs %v", sa.MeanRounds, sb.MeanRounds, sa.MeanToolCalls, sb.MeanToolCalls)
		}
	}
	s := a.Summary()
	if s.MeanRounds != float64(sumRounds)/999 || s.MeanToolCalls != float64(sumCalls)/999 {
		t.Errorf("mean rounds %v, tool calls %v; want %v, %v", s.MeanRounds, s.MeanToolCalls, float64(sumRounds)/999, float64(sumCalls)/999)
	}
}
