package report

import (
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
)

// Progress agrees with Summary, which it stands in for after each record.
func TestProgressMatchesSummary(t *testing.T) {
	var s Stats
	for i, rec := range []record.Record{
		{HasReward: true, Reward: 1, Termination: "completed"},
		{HasReward: true, Reward: 0, Termination: "max_rounds"},
		{FailureClass: record.FailRateLimited, Termination: "model_error"},
		{HasReward: true, Reward: 1, Termination: "completed"},
	} {
		s.Add(&rec)
		done, scored, failed, mean := s.Progress()
		sum := s.Summary()
		if done != sum.Rollouts || scored != sum.Scored || failed != sum.Failed || mean != sum.MeanReward || done != i+1 {
			t.Errorf("after %d: Progress %d %d %d %v, Summary %+v", i+1, done, scored, failed, mean, sum)
		}
	}
}
