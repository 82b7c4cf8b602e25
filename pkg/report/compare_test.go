package report

import (
	"bytes"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rollout-dev/rollout/pkg/record"
)

func cmpRec(task, rollout int64, reward float64, class string) record.Record {
	r := record.Record{TaskIndex: task, RolloutIndex: rollout, Reward: reward, HasReward: class == "", FailureClass: record.FailureClass(class),
		StartedAt: time.Unix(1, 0), Rounds: 1, Termination: "completed"}
	return r
}

// Hand-computed: A = t0 [0 0], t1 [1 0]; B = t0 [1 1], t1 [1 1], plus B t2 r0 without a
// partner. Differences 1, 1, 0, 1: mean 3/4. Task-clustered std err: task sums of the
// differences 2 and 1 over 2 pairs each; residuals 2 − 3/2 = 1/2 and −1/2; squares 1/2, times
// G/(G−1) = 2: 1; sqrt(1)/4 = 1/4. Task means: t0 0 → 1 (won), t1 1/2 → 1 (won). Paired
// means: A 1/4, B 1.
func TestCompare(t *testing.T) {
	a := []record.Record{cmpRec(0, 0, 0, ""), cmpRec(0, 1, 0, ""), cmpRec(1, 0, 1, ""), cmpRec(1, 1, 0, "")}
	b := []record.Record{cmpRec(0, 0, 1, ""), cmpRec(0, 1, 1, ""), cmpRec(1, 0, 1, ""), cmpRec(1, 1, 1, ""), cmpRec(2, 0, 1, "")}
	c := Compare(a, b, "A", "B", StatsOptions{CI: CIBootstrap, Seed: 3})
	if c.Pairs != 4 || c.Unpaired != 1 || math.Abs(c.MeanDiff-0.75) > 1e-12 || math.Abs(c.StdErr-0.25) > 1e-12 {
		t.Errorf("pairs %d unpaired %d mean %v stderr %v; want 4, 1, 0.75, 0.25", c.Pairs, c.Unpaired, c.MeanDiff, c.StdErr)
	}
	if c.Won != 2 || c.Lost != 0 || c.Tied != 0 {
		t.Errorf("won/lost/tied %d/%d/%d, want 2/0/0", c.Won, c.Lost, c.Tied)
	}
	if c.PairedMeans != [2]float64{0.25, 1} || c.Tasks != 2 || c.PairedBy != "task index" || !slices.Equal(c.OnlyB, []string{"index:2"}) || len(c.OnlyA) != 0 {
		t.Errorf("paired means %v tasks %d by %q only A %v only B %v", c.PairedMeans, c.Tasks, c.PairedBy, c.OnlyA, c.OnlyB)
	}
	// Two tasks: a resample draws t0 (diff sum 2 over 2) and t1 (1 over 2) with replacement;
	// its mean is one of 1, 3/4, 1/2: the interval lies within [1/2, 1] and holds the mean.
	if c.CI95 == nil || c.CI95.Low < 0.5-1e-12 || c.CI95.High > 1+1e-12 || c.CI95.Low > 0.75 || c.CI95.High < 0.75 {
		t.Errorf("CI %+v", c.CI95)
	}
	if c.Sides[0].MeanReward != 0.25 || c.Sides[1].MeanReward != 1 || c.Sides[0].Scope != "A" {
		t.Errorf("sides %+v %+v", c.Sides[0], c.Sides[1])
	}
	if again := Compare(a, b, "A", "B", StatsOptions{CI: CIBootstrap, Seed: 3}); *again.CI95 != *c.CI95 {
		t.Error("the same seed gave another interval")
	}

	// A failure on side A: left out of the pairs, or paired as 0.
	a[3] = cmpRec(1, 1, 0, record.FailTimeout)
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
	if !strings.Contains(text.String(), "B − A: mean reward difference +0.7500 (std err 0.2500, 95% CI") || !strings.Contains(text.String(), "tasks won 2, lost 0, tied 0") {
		t.Errorf("text:\n%s", text.String())
	}
	if !strings.Contains(md.String(), "| metric | A | B |") || !strings.Contains(js.String(), `"mean_diff": 0.75`) {
		t.Errorf("markdown:\n%s\njson:\n%s", md.String(), js.String())
	}
	if c := Compare(a, nil, "A", "B", StatsOptions{}); c.Pairs != 0 || !strings.Contains(c.headline(), "no (task, repeat)") {
		t.Errorf("no pairs: %+v", c)
	}
}

// Tasks are paired by their id, whatever their order in each run's task file; without ids on
// every record, by index; tasks on one side only, or without a repeat scored on both sides,
// are listed and left out.
func TestComparePairsByTaskID(t *testing.T) {
	withID := func(id string, task, rollout int64, reward float64, class string) record.Record {
		r := cmpRec(task, rollout, reward, class)
		r.TaskID = id
		return r
	}
	// A: t-a at index 0 scores 1, t-b at 1 scores 0, t-c at 2 scores 0.5.
	a := []record.Record{withID("t-a", 0, 0, 1, ""), withID("t-b", 1, 0, 0, ""), withID("t-c", 2, 0, 0.5, "")}
	// B: the same tasks in another order (t-c, t-a, t-b), each scoring like in A, plus t-d.
	b := []record.Record{withID("t-c", 0, 0, 0.5, ""), withID("t-a", 1, 0, 1, ""), withID("t-b", 2, 0, 0, ""), withID("t-d", 3, 0, 1, "")}
	c := Compare(a, b, "A", "B", StatsOptions{Seed: 1})
	if c.PairedBy != "task id" || c.Pairs != 3 || c.MeanDiff != 0 || c.Tied != 3 || c.Won+c.Lost != 0 || !slices.Equal(c.OnlyB, []string{"id:t-d"}) {
		t.Errorf("by id: %+v", c)
	}
	// A record without id: by position, which pairs t-a with t-c (−0.5), t-b with t-a (+1),
	// t-c with t-b (−0.5): one won, two lost.
	a[0].TaskID = ""
	if c := Compare(a, b, "A", "B", StatsOptions{Seed: 1}); c.PairedBy != "task index" || c.Pairs != 3 || c.Won != 1 || c.Lost != 2 {
		t.Errorf("a record without id: paired by %q, %d pairs, won %d lost %d", c.PairedBy, c.Pairs, c.Won, c.Lost)
	}
	a[0].TaskID = "t-a"
	// An id that names two tasks of a side: by index.
	dup := append(slices.Clone(a), withID("t-a", 5, 0, 1, ""))
	if c := Compare(dup, b, "A", "B", StatsOptions{}); c.PairedBy != "task index" {
		t.Errorf("a repeated id: paired by %q", c.PairedBy)
	}
	// Every rollout of t-b failed on side B: t-b has no pair, and is listed; A's t-b and B's
	// t-d are the unpaired scored rollouts.
	b[2] = withID("t-b", 2, 0, 0, record.FailTimeout)
	c = Compare(a, b, "A", "B", StatsOptions{})
	if c.Pairs != 2 || !slices.Equal(c.NoPairs, []string{"id:t-b"}) || c.Sides[1].TasksAllFailed != 1 || c.Unpaired != 2 {
		t.Errorf("all-failed task: pairs %d, without pairs %v, B all failed %d, unpaired %d", c.Pairs, c.NoPairs, c.Sides[1].TasksAllFailed, c.Unpaired)
	}
	var text bytes.Buffer
	if err := c.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"paired by task id and repeat", "warning: the task sets differ: 1 tasks only in B: id:t-d",
		"warning: 1 tasks have no repeat scored on both sides (their rollouts failed): id:t-b", "mean reward over the pairs"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
}

// Rows without ids are matched by their content's hash (TaskHash), in any order; a record
// with neither id nor hash (an older run) falls back to the index.
func TestComparePairsByRowHash(t *testing.T) {
	withHash := func(hash string, task int64, reward float64) record.Record {
		r := cmpRec(task, 0, reward, "")
		r.TaskHash = hash
		return r
	}
	a := []record.Record{withHash("aaaa", 0, 1), withHash("bbbb", 1, 0), withHash("cccc", 2, 0)}
	b := []record.Record{withHash("cccc", 0, 1), withHash("aaaa", 1, 1), withHash("bbbb", 2, 0)}
	c := Compare(a, b, "A", "B", StatsOptions{})
	// By hash: aaaa 1→1 tied, bbbb 0→0 tied, cccc 0→1 won.
	if c.PairedBy != "task id or row hash" || c.Pairs != 3 || c.Won != 1 || c.Tied != 2 || c.Lost != 0 {
		t.Errorf("by row hash: %+v", c)
	}
	a[1].TaskHash = ""
	// By index: 1→1 tied, 0→1 won, 0→0 tied.
	if c := Compare(a, b, "A", "B", StatsOptions{}); c.PairedBy != "task index" || c.Won != 1 || c.Tied != 2 {
		t.Errorf("a record without id or hash: %+v", c)
	}
	// Two rows with the same content in one file: their hash names two tasks: by index.
	a[1].TaskHash = "aaaa"
	if c := Compare(a, b, "A", "B", StatsOptions{}); c.PairedBy != "task index" {
		t.Errorf("a hash naming two tasks: paired by %q", c.PairedBy)
	}
}

// Write of both results takes each format name to its own writer, and refuses any other name.
func TestWriteFormats(t *testing.T) {
	a := []record.Record{cmpRec(0, 0, 0, ""), cmpRec(1, 0, 1, "")}
	b := []record.Record{cmpRec(0, 0, 1, ""), cmpRec(1, 0, 1, "")}
	results := map[string]rendering{"comparison": Compare(a, b, "A", "B", StatsOptions{Seed: 1}), "evaluation": Evaluate(a, StatsOptions{Seed: 1})}
	for name, r := range results {
		for _, c := range []struct {
			format string
			direct func(io.Writer) error
		}{
			{"", r.WriteText}, {"text", r.WriteText}, {"json", r.WriteJSON}, {"markdown", r.WriteMarkdown}, {"md", r.WriteMarkdown},
		} {
			var got, want bytes.Buffer
			if err := write(&got, r, c.format); err != nil {
				t.Fatalf("%s %q: %v", name, c.format, err)
			}
			if err := c.direct(&want); err != nil {
				t.Fatal(err)
			}
			if got.Len() == 0 || got.String() != want.String() {
				t.Errorf("%s as %q:\n%s\nwant:\n%s", name, c.format, got.String(), want.String())
			}
		}
		for _, f := range []string{"yaml", "TEXT", "html"} {
			if err := write(&bytes.Buffer{}, r, f); !errors.Is(err, errFormat) || !strings.Contains(err.Error(), strconv.Quote(f)) {
				t.Errorf("%s as %q: %v, want errFormat naming the format", name, f, err)
			}
		}
	}
	// The exported methods are that same writer.
	var viaComparison, viaEvaluation bytes.Buffer
	if err := results["comparison"].(*Comparison).Write(&viaComparison, "md"); err != nil || !strings.Contains(viaComparison.String(), "| metric |") {
		t.Errorf("Comparison.Write md: %v\n%s", err, viaComparison.String())
	}
	if err := results["evaluation"].(*Evaluation).Write(&viaEvaluation, "yaml"); !errors.Is(err, errFormat) {
		t.Errorf("Evaluation.Write yaml: %v", err)
	}
}
