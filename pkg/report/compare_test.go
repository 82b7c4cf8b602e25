package report

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

func cmpRec(task, rollout int64, reward float64, class string) Record {
	r := Record{TaskIndex: task, RolloutIndex: rollout, Reward: reward, HasReward: class == "", FailureClass: class,
		StartedAt: time.Unix(1, 0), Rounds: 1, Termination: "completed"}
	return r
}

// Hand-computed: A = t0 [0 0], t1 [1 0]; B = t0 [1 1], t1 [1 1], plus B t2 r0 without a
// partner. Differences 1, 1, 0, 1: mean 3/4; sample variance ((3·1/16)+9/16)/3 = 1/4, so the
// standard error is (1/2)/√4 = 1/4. Task means: t0 0 → 1 (won), t1 1/2 → 1 (won).
func TestCompare(t *testing.T) {
	a := []Record{cmpRec(0, 0, 0, ""), cmpRec(0, 1, 0, ""), cmpRec(1, 0, 1, ""), cmpRec(1, 1, 0, "")}
	b := []Record{cmpRec(0, 0, 1, ""), cmpRec(0, 1, 1, ""), cmpRec(1, 0, 1, ""), cmpRec(1, 1, 1, ""), cmpRec(2, 0, 1, "")}
	c := Compare(a, b, "A", "B", StatsOptions{Seed: 3})
	if c.Pairs != 4 || c.Unpaired != 1 || math.Abs(c.MeanDiff-0.75) > 1e-12 || math.Abs(c.StdErr-0.25) > 1e-12 {
		t.Errorf("pairs %d unpaired %d mean %v stderr %v; want 4, 1, 0.75, 0.25", c.Pairs, c.Unpaired, c.MeanDiff, c.StdErr)
	}
	if c.Won != 2 || c.Lost != 0 || c.Tied != 0 {
		t.Errorf("won/lost/tied %d/%d/%d, want 2/0/0", c.Won, c.Lost, c.Tied)
	}
	// Two tasks: a resample draws t0 (diff sum 2 over 2) and t1 (1 over 2) with replacement;
	// its mean is one of 1, 3/4, 1/2: the interval lies within [1/2, 1] and holds the mean.
	if c.CI95 == nil || c.CI95.Low < 0.5-1e-12 || c.CI95.High > 1+1e-12 || c.CI95.Low > 0.75 || c.CI95.High < 0.75 {
		t.Errorf("CI %+v", c.CI95)
	}
	if c.Sides[0].MeanReward != 0.25 || c.Sides[1].MeanReward != 1 || c.Sides[0].Scope != "A" {
		t.Errorf("sides %+v %+v", c.Sides[0], c.Sides[1])
	}
	if again := Compare(a, b, "A", "B", StatsOptions{Seed: 3}); *again.CI95 != *c.CI95 {
		t.Error("the same seed gave another interval")
	}

	// A failure on side A: left out of the pairs, or paired as 0.
	a[3] = cmpRec(1, 1, 0, FailTimeout)
	a[2] = cmpRec(1, 0, 1, "")
	c = Compare(a, b, "A", "B", StatsOptions{})
	if c.Pairs != 3 || c.Unpaired != 2 {
		t.Errorf("failure left out: pairs %d unpaired %d, want 3 and 2", c.Pairs, c.Unpaired)
	}
	c = Compare(a, b, "A", "B", StatsOptions{ScoreFailuresAsZero: true})
	if c.Pairs != 4 || math.Abs(c.MeanDiff-0.75) > 1e-12 {
		t.Errorf("failure as zero: pairs %d mean %v", c.Pairs, c.MeanDiff)
	}

	var text, md, js bytes.Buffer
	c.WriteText(&text)
	c.WriteMarkdown(&md)
	c.WriteJSON(&js)
	if !strings.Contains(text.String(), "B − A: mean reward difference +0.7500 ± 0.2500") || !strings.Contains(text.String(), "tasks won 2, lost 0, tied 0") {
		t.Errorf("text:\n%s", text.String())
	}
	if !strings.Contains(md.String(), "| metric | A | B |") || !strings.Contains(js.String(), `"mean_diff": 0.75`) {
		t.Errorf("markdown:\n%s\njson:\n%s", md.String(), js.String())
	}
	if c := Compare(a, nil, "A", "B", StatsOptions{}); c.Pairs != 0 || !strings.Contains(c.headline(), "no (task, repeat)") {
		t.Errorf("no pairs: %+v", c)
	}
}
