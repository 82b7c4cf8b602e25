package report

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// coverageScenario draws one run's clusters: tasks tasks, repeats rollouts each, task success
// chances from draw; truth is the mean of the task chances' distribution.
type coverageScenario struct {
	name  string
	truth float64
	draw  func(r *rand.Rand) float64
}

var coverageScenarios = []coverageScenario{
	{"symmetric p~U(0.2,0.8)", 0.5, func(r *rand.Rand) float64 { return 0.2 + 0.6*r.Float64() }},
	// Skewed: most tasks almost never pass, a few often (Beta(0.3, 3), mean 0.3/3.3).
	{"skewed p~Beta(0.3,3)", 0.3 / 3.3, func(r *rand.Rand) float64 { return betaDraw(r, 0.3, 3) }},
}

// betaDraw draws Beta(a, b) as X/(X+Y) of two gamma draws (Marsaglia–Tsang, with the a<1 boost).
func betaDraw(r *rand.Rand, a, b float64) float64 {
	x, y := gammaDraw(r, a), gammaDraw(r, b)
	return x / (x + y)
}

func gammaDraw(r *rand.Rand, a float64) float64 {
	if a < 1 {
		return gammaDraw(r, a+1) * math.Pow(r.Float64(), 1/a)
	}
	d := a - 1.0/3
	c := 1 / math.Sqrt(9*d)
	for {
		x := r.NormFloat64()
		v := 1 + c*x
		if v <= 0 {
			continue
		}
		v = v * v * v
		u := r.Float64()
		if math.Log(u) < 0.5*x*x+d-d*v+d*math.Log(v) {
			return d * v
		}
	}
}

// measureCoverage is the share of reps runs whose interval holds the truth.
func measureCoverage(sc coverageScenario, tasks, repeats, reps int, interval func(cl []cluster, mean float64, seed uint64) (lo, hi float64)) float64 {
	r := rand.New(rand.NewPCG(uint64(tasks), 7))
	covered := 0
	for rep := range reps {
		cl := make([]cluster, tasks)
		var sum float64
		for i := range cl {
			p := sc.draw(r)
			for range repeats {
				if r.Float64() < p {
					cl[i].sum++
				}
			}
			cl[i].n = repeats
			sum += cl[i].sum
		}
		mean := sum / float64(tasks*repeats)
		lo, hi := interval(cl, mean, uint64(rep))
		if lo <= sc.truth && sc.truth <= hi {
			covered++
		}
	}
	return float64(covered) / float64(reps)
}

func percentileInterval(cl []cluster, _ float64, seed uint64) (float64, float64) {
	return bootstrapCI(cl, 1000, seed)
}

func tInterval(cl []cluster, mean float64, _ uint64) (float64, float64) {
	return tCI(cl, mean)
}

// The 95% intervals' coverage, measured: 2000 simulated runs per row, 4 repeats a task, for
// the percentile bootstrap (CI95), the t interval and the Wilson score interval with the
// clustered effective sample size (wilsonCI, which CI95 uses where every reward is 0 or 1).
// The figures are logged for docs/statistics.md; the test holds the measured ranking: the
// bootstrap covers less than 93% of symmetric runs of 5 tasks, and Wilson at least 94% of
// every row.
func TestIntervalCoverage(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 44 000 runs")
	}
	const reps = 2000
	for _, sc := range coverageScenarios {
		for _, tasks := range []int{3, 5, 10, 20, 40} {
			pct := measureCoverage(sc, tasks, 4, reps, percentileInterval)
			tt := measureCoverage(sc, tasks, 4, reps, tInterval)
			wi := measureCoverage(sc, tasks, 4, reps, func(cl []cluster, mean float64, _ uint64) (float64, float64) { return wilsonCI(cl, mean) })
			t.Logf("%-24s %3d tasks: percentile bootstrap %.3f, t interval %.3f, wilson %.3f", sc.name, tasks, pct, tt, wi)
			if wi < 0.94 {
				t.Errorf("%s, %d tasks: Wilson covers %.3f, want >= 0.94", sc.name, tasks, wi)
			}
			if strings.HasPrefix(sc.name, "symmetric") && tasks == 5 && pct >= 0.93 {
				t.Errorf("%s, %d tasks: the bootstrap covers %.3f: SmallTasks and the docs say less", sc.name, tasks, pct)
			}
		}
	}
}

// tCI is the 95% t interval mean ± t975(G−1) · the task-clustered standard error, over G
// task clusters, within the range of the clusters' means (which a mean cannot leave); the
// mean itself below 2 clusters.
func tCI(clusters []cluster, mean float64) (lo, hi float64) {
	if len(clusters) < 2 {
		return mean, mean
	}
	least, most := math.Inf(1), math.Inf(-1)
	for _, c := range clusters {
		m := c.sum / float64(c.n)
		least, most = min(least, m), max(most, m)
	}
	h := t975(len(clusters)-1) * clusteredStdErr(clusters, mean)
	return max(least, mean-h), min(most, mean+h)
}

// t975 against an independent computation: the t density integrated numerically (Simpson's
// rule) from 0 to t975(df) is 0.475 for every df, table and expansion alike.
func TestT975(t *testing.T) {
	for df := 1; df <= 60; df++ {
		v := float64(df)
		lg1, _ := math.Lgamma((v + 1) / 2)
		lg2, _ := math.Lgamma(v / 2)
		c := math.Exp(lg1-lg2) / math.Sqrt(v*math.Pi)
		density := func(x float64) float64 { return c * math.Pow(1+x*x/v, -(v+1)/2) }
		q := t975(df)
		const n = 20000
		h := q / n
		sum := density(0) + density(q)
		for i := 1; i < n; i++ {
			w := 2.0
			if i%2 == 1 {
				w = 4
			}
			sum += w * density(float64(i)*h)
		}
		if got := sum * h / 3; math.Abs(got-0.475) > 2e-6 {
			t.Errorf("df %d: t975 %v holds %.7f of the density above 0, want 0.475", df, q, got)
		}
	}
}
