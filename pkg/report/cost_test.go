package report

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/rollout-dev/rollout/pkg/record"
)

func costRec(task, rollout int64, prompt, completion int64, ms float64, class string) record.Record {
	r := cmpRec(task, rollout, 1, class)
	r.PromptTokens, r.CompletionTokens, r.LatencyMs = prompt, completion, ms
	return r
}

// The comparison's cost line, paired and hand-computed. A: 1000 and 3000 tokens, 100 and 300
// ms; B: 500 and 700 tokens, 220 ms each. Per pair B − A: tokens −500 and −2300 (mean −1400;
// task-clustered std err sqrt(2/1 · (900² + 900²)) / 2 = 900), latency +120 and −80 (mean +20,
// std err sqrt(2 · (100² + 100²)) / 2 = 100). With 2 tasks every bootstrap mean lies between the
// two tasks' differences, so the CI is within [−2300, −500] and [−80, +120]. B's failed rollout
// of task 2 has no partner and is in no figure.
func TestCompareCostLine(t *testing.T) {
	a := []record.Record{costRec(0, 0, 900, 100, 100, ""), costRec(1, 0, 2800, 200, 300, "")}
	b := []record.Record{costRec(0, 0, 450, 50, 220, ""), costRec(1, 0, 650, 50, 220, ""), costRec(2, 0, 99999, 1, 99999, record.FailTimeout)}
	c := Compare(a, b, "arm=full", "arm=window:2", StatsOptions{Seed: 1})
	if p := c.Tokens; p == nil || p.Pairs != 2 || p.Tasks != 2 || p.MeanDiff != -1400 || math.Abs(p.StdErr-900) > 1e-9 ||
		p.Means != [2]float64{2000, 600} || p.CI95 == nil || p.CI95.Low < -2300 || p.CI95.High > -500 {
		t.Errorf("paired tokens %+v (CI %+v)", p, p.CI95)
	}
	if p := c.LatencyMs; p == nil || p.MeanDiff != 20 || math.Abs(p.StdErr-100) > 1e-9 || p.Means != [2]float64{200, 220} || p.CI95.Low < -80 || p.CI95.High > 120 {
		t.Errorf("paired latency %+v", p)
	}
	want := "arm=window:2 − arm=full a paired rollout (2 pairs without failure in 2 tasks): tokens -1400.0 (std err 900.0, 95% CI "
	got := c.cost()
	if !strings.HasPrefix(got, want) || !strings.Contains(got, "; 600.0 vs 2000.0), latency +20.0 ms (std err 100.0, 95% CI ") {
		t.Fatalf("cost line\n got %q\nwant %q...", got, want)
	}
	for _, write := range []func(*bytes.Buffer) error{
		func(b *bytes.Buffer) error { return c.WriteText(b) },
		func(b *bytes.Buffer) error { return c.WriteMarkdown(b) },
	} {
		var buf bytes.Buffer
		if err := write(&buf); err != nil || !strings.Contains(buf.String(), got) {
			t.Errorf("%v: the output lacks the cost line:\n%s", err, buf.String())
		}
	}
	// A side without a rollout that ended well has no cost line.
	if got := Compare(a, []record.Record{costRec(0, 0, 1, 1, 1, record.FailTimeout)}, "A", "B", StatsOptions{}).cost(); got != "" {
		t.Fatalf("cost line without pairs: %q", got)
	}
}

// Identical paired rollouts cost nothing more, whatever else each side holds: the unpaired
// and failed rollouts that moved the old per-side means (the "tokens -15.6%") are out.
func TestCompareCostIdenticalPairs(t *testing.T) {
	var a, b []record.Record
	for task := range int64(6) {
		for k := range int64(3) {
			r := costRec(task, k, 1000+100*task, 50*k, 200+float64(task), "")
			a, b = append(a, r), append(b, r)
		}
	}
	b = append(b, costRec(6, 0, 90000, 1, 5000, ""))                    // only in B
	a = append(a, costRec(7, 0, 10, 1, 1, record.FailTimeout))          // a failure, only in A
	b = append(b, costRec(7, 0, 70000, 9000, 9000, record.FailTimeout)) // and its failed partner
	c := Compare(a, b, "A", "B", StatsOptions{})
	if c.Tokens.MeanDiff != 0 || c.Tokens.StdErr != 0 || c.Tokens.CI95.Low != 0 || c.Tokens.CI95.High != 0 || c.Tokens.Pairs != 18 || c.LatencyMs.MeanDiff != 0 {
		t.Errorf("identical pairs: tokens %+v, latency %+v", c.Tokens, c.LatencyMs)
	}
	if got := c.cost(); !strings.Contains(got, "tokens +0.0 (std err 0.0, 95% CI +0.0 to +0.0;") {
		t.Errorf("cost line %q", got)
	}
}

// When the sides fail at different rates and failures are left out, the comparison says so
// next to the difference and gives it with failures scored 0, checked against a direct
// computation over every (task, repeat) with failed rollouts as 0.
func TestCompareFailureRates(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var a, b []record.Record
	for task := range int64(12) {
		for k := range int64(4) {
			ra, rb := float64(rng.IntN(2)), float64(rng.IntN(2))
			classA, classB := "", ""
			if rng.Float64() < 0.2 {
				classA = record.FailTimeout
			}
			if rng.Float64() < 0.6 {
				classB = record.FailModelError
			}
			a = append(a, cmpRec(task, k, ra, classA))
			b = append(b, cmpRec(task, k, rb, classB))
		}
	}
	// The direct computation: every pair, failures as 0, clustered by task.
	var sum float64
	taskSums := make([]float64, 12)
	for i := range a {
		va, vb := a[i].Reward, b[i].Reward
		if a[i].FailureClass != "" {
			va = 0
		}
		if b[i].FailureClass != "" {
			vb = 0
		}
		sum += vb - va
		taskSums[a[i].TaskIndex] += vb - va
	}
	mean := sum / 48
	var ss float64
	for _, s := range taskSums {
		ss += (s - 4*mean) * (s - 4*mean)
	}
	se := math.Sqrt(12.0/11*ss) / 48

	c := Compare(a, b, "A", "B", StatsOptions{})
	z := c.FailuresAsZero
	if z == nil || z.Pairs != 48 || z.Tasks != 12 || math.Abs(z.MeanDiff-mean) > 1e-12 || math.Abs(z.StdErr-se) > 1e-12 || z.CI95 == nil {
		t.Fatalf("failures as zero %+v, want mean %v, std err %v over 48 pairs", z, mean, se)
	}
	// The same figure is what --score-failures-as-zero gives as the difference itself.
	if zc := Compare(a, b, "A", "B", StatsOptions{ScoreFailuresAsZero: true}); math.Abs(zc.MeanDiff-mean) > 1e-12 || zc.FailuresAsZero != nil {
		t.Errorf("--score-failures-as-zero: difference %v (want %v), extra %+v", zc.MeanDiff, mean, zc.FailuresAsZero)
	}
	var buf bytes.Buffer
	c.WriteText(&buf)
	lines := strings.Split(buf.String(), "\n")
	fa, fb := 0, 0
	for i := range a {
		if a[i].FailureClass != "" {
			fa++
		}
		if b[i].FailureClass != "" {
			fb++
		}
	}
	wantNote := fmt.Sprintf("warning: the sides fail at different rates (A %.1f%% (%d of 48), B %.1f%% (%d of 48))", 100*float64(fa)/48, fa, 100*float64(fb)/48, fb)
	if !strings.HasPrefix(lines[1], wantNote) || !strings.Contains(lines[1], fmt.Sprintf("with failures scored 0 the difference is %+.4f (std err %.4f", mean, se)) {
		t.Errorf("the line under the headline, want %q...:\n%s", wantNote, buf.String())
	}
	// Equal rates: no note.
	if c := Compare(a, a, "A", "A2", StatsOptions{}); c.FailuresAsZero != nil || c.failureNote() != "" {
		t.Errorf("equal failure rates: %+v", c.FailuresAsZero)
	}
}

// compare's pass@k rows say over how many tasks each k is, as report's do.
func TestComparePassKTasks(t *testing.T) {
	var a, b []record.Record
	for task := range int64(3) {
		for k := range int64(2) {
			a = append(a, cmpRec(task, k, 1, ""))
			class := ""
			if task == 2 && k == 1 {
				class = record.FailTimeout // B's task 2 has 1 scored rollout: not in pass@2
			}
			b = append(b, cmpRec(task, k, 0, class))
		}
	}
	c := Compare(a, b, "A", "B", StatsOptions{})
	var buf bytes.Buffer
	c.WriteText(&buf)
	rows := map[string][]string{}
	for _, line := range strings.Split(buf.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "pass@") {
			rows[f[0]] = f[1:]
		}
	}
	want := map[string][]string{"pass@1": {"1.0000", "(3", "tasks)", "0.0000", "(3", "tasks)"}, "pass@2": {"1.0000", "(3", "tasks)", "0.0000", "(2/3", "tasks)"}}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("pass@k rows %q, want %q\n%s", rows, want, buf.String())
	}
}
