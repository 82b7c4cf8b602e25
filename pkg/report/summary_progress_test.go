package report

import "testing"

// Progress agrees with Summary, which it stands in for after each record.
func TestProgressMatchesSummary(t *testing.T) {
	var s Stats
	for i, rec := range []Record{
		{HasReward: true, Reward: 1, Termination: "completed"},
		{HasReward: true, Reward: 0, Termination: "max_rounds"},
		{FailureClass: FailRateLimited, Termination: "model_error"},
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

func TestClip(t *testing.T) {
	if got := Clip("  short  ", 10); got != "short" {
		t.Errorf("Clip = %q", got)
	}
	if got := Clip("ééé", 3); got != "é…" { // 3 bytes would cut the second é
		t.Errorf("Clip = %q", got)
	}
}
