package report

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// coverageScenario draws one run's clusters: tasks tasks, repeats rollouts each, task success
// chances from draw; truth is the mean of the task chances' distribution.
type coverageScenario struct {
	name  string
	truth float64
	draw  func(r *rand.Rand) float64
	// reward draws one rollout's reward of a task whose draw was p; nil: 1 with chance p, else 0.
	reward func(r *rand.Rand, p float64) float64
	// unit says every reward is in [0, 1] (Wilson applies).
	unit bool
}

var coverageScenarios = []coverageScenario{
	{name: "symmetric p~U(0.2,0.8)", truth: 0.5, draw: func(r *rand.Rand) float64 { return 0.2 + 0.6*r.Float64() }, unit: true},
	// Skewed: most tasks almost never pass, a few often (Beta(0.3, 3), mean 0.3/3.3).
	{name: "skewed p~Beta(0.3,3)", truth: 0.3 / 3.3, draw: func(r *rand.Rand) float64 { return betaDraw(r, 0.3, 3) }, unit: true},
	// Partial credit: each rollout's reward is Beta-distributed around its task's mean q,
	// q ~ Beta(0.5, 2) (mean 0.2).
	{name: "partial credit q~Beta(0.5,2)", truth: 0.2, draw: func(r *rand.Rand) float64 { return betaDraw(r, 0.5, 2) },
		reward: func(r *rand.Rand, q float64) float64 { return betaDraw(r, 0.1+4*q, 0.1+4*(1-q)) }, unit: true},
	// A paired difference (what compare bootstraps): B − A of one repeat, each side passing
	// with its task's own chance, p_A ~ U(0.2, 0.8), p_B ~ U(0.3, 0.9): rewards −1, 0 or 1.
	{name: "paired difference", truth: 0.1, draw: func(r *rand.Rand) float64 { return r.Float64() },
		reward: func(r *rand.Rand, u float64) float64 {
			a, b := 0.2+0.6*u, 0.3+0.6*r.Float64()
			return b2f(r.Float64() < b) - b2f(r.Float64() < a)
		}},
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
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

// coverageMethod is one 95% interval under measure.
type coverageMethod struct {
	name     string
	unitOnly bool // only for rewards in [0, 1]
	interval func(cl []cluster, mean, least, most float64, seed uint64) (lo, hi float64)
}

var coverageMethods = []coverageMethod{
	{"percentile bootstrap", false, percentileInterval},
	{"BCa bootstrap", false, func(cl []cluster, mean, least, most float64, seed uint64) (float64, float64) {
		return bcaCI(cl, mean, 1000, seed)
	}},
	{"t", false, func(cl []cluster, mean, least, most float64, _ uint64) (float64, float64) {
		lo, hi := tCI(cl, mean)
		return max(lo, least), min(hi, most)
	}},
	{"Wilson", true, func(cl []cluster, mean, least, most float64, _ uint64) (float64, float64) { return wilsonCI(cl, mean) }},
}

// measureCoverage is, for each method, the share of reps runs whose interval holds the truth
// (NaN for a method that does not apply).
func measureCoverage(sc coverageScenario, tasks, repeats, reps int, methods []coverageMethod) []float64 {
	r := rand.New(rand.NewPCG(uint64(tasks), 7))
	covered := make([]int, len(methods))
	for rep := range reps {
		cl := make([]cluster, tasks)
		var sum float64
		least, most := math.Inf(1), math.Inf(-1)
		for i := range cl {
			p := sc.draw(r)
			for range repeats {
				var v float64
				if sc.reward != nil {
					v = sc.reward(r, p)
				} else {
					v = b2f(r.Float64() < p)
				}
				cl[i].sum += v
				least, most = min(least, v), max(most, v)
			}
			cl[i].n = repeats
			sum += cl[i].sum
		}
		mean := sum / float64(tasks*repeats)
		for m, method := range methods {
			if method.unitOnly && !sc.unit {
				continue
			}
			lo, hi := method.interval(cl, mean, least, most, uint64(rep))
			if lo <= sc.truth && sc.truth <= hi {
				covered[m]++
			}
		}
	}
	out := make([]float64, len(methods))
	for m, method := range methods {
		out[m] = float64(covered[m]) / float64(reps)
		if method.unitOnly && !sc.unit {
			out[m] = math.NaN()
		}
	}
	return out
}

func percentileInterval(cl []cluster, _, _, _ float64, seed uint64) (float64, float64) {
	return bootstrapCI(cl, 1000, seed)
}

// The 95% intervals' coverage, measured: 2000 simulated runs per row, 4 repeats a task, for
// the percentile bootstrap, BCa, the t interval and the Wilson score interval with the
// clustered effective sample size (the last only where every reward is in [0, 1]), and for the
// default (meanInterval under CIAuto: Wilson where every value is in [0, 1], t otherwise).
// The figures are logged for docs/statistics.md; the test holds what the docs claim of the
// default: it covers at least 0.92 of the runs of every row (3 to 50 tasks), and within
// 0.025 of 0.95 at 20 tasks and more, while the percentile bootstrap covers under 0.9 of
// symmetric runs of 5 tasks.
func TestIntervalCoverage(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates 40 000 runs")
	}
	const reps = 2000
	methods := append(coverageMethods, coverageMethod{"default", false, nil})
	for _, sc := range coverageScenarios {
		methods[len(methods)-1].interval = func(cl []cluster, mean, least, most float64, seed uint64) (float64, float64) {
			iv := meanInterval(cl, mean, least, most, sc.unit, StatsOptions{}.normalized())
			return iv.Low, iv.High
		}
		for _, tasks := range []int{3, 5, 10, 20, 50} {
			cov := measureCoverage(sc, tasks, 4, reps, methods)
			line := fmt.Sprintf("%-30s %3d tasks:", sc.name, tasks)
			for m, method := range methods {
				line += fmt.Sprintf(" %s %.3f", method.name, cov[m])
			}
			t.Log(line)
			def := cov[len(cov)-1]
			if def < 0.92 || tasks >= 20 && math.Abs(def-0.95) > 0.025 {
				t.Errorf("%s, %d tasks: the default interval covers %.3f; the docs claim at least 0.92, and 0.925-0.975 from 20 tasks", sc.name, tasks, def)
			}
			if sc.name == coverageScenarios[0].name && tasks == 5 && cov[0] >= 0.9 {
				t.Errorf("%s, %d tasks: the percentile bootstrap covers %.3f; the docs say under 0.9", sc.name, tasks, cov[0])
			}
		}
	}
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

// bcaCI is the 95% bias-corrected and accelerated bootstrap interval (Efron 1987) over the
// same resamples as bootstrapCI: the bias correction z0 from the share of resampled means
// below the mean (ties counted half), the acceleration from the leave-one-task-out jackknife.
func bcaCI(clusters []cluster, mean float64, b int, seed uint64) (lo, hi float64) {
	means := bootstrapMeans(clusters, b, seed)
	below := 0.0
	for _, m := range means {
		switch {
		case m < mean:
			below++
		case m == mean:
			below += 0.5
		}
	}
	phiInv := func(p float64) float64 { return math.Sqrt2 * math.Erfinv(2*p-1) }
	phi := func(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }
	p0 := min(max(below/float64(len(means)), 0.5/float64(len(means))), 1-0.5/float64(len(means)))
	z0 := phiInv(p0)
	var sum float64
	var n int
	for _, c := range clusters {
		sum += c.sum
		n += c.n
	}
	jack := make([]float64, len(clusters))
	var avg float64
	for i, c := range clusters {
		if n-c.n > 0 {
			jack[i] = (sum - c.sum) / float64(n-c.n)
		}
		avg += jack[i]
	}
	avg /= float64(len(clusters))
	var s2, s3 float64
	for _, j := range jack {
		d := avg - j
		s2 += d * d
		s3 += d * d * d
	}
	a := 0.0
	if s2 > 0 {
		a = s3 / (6 * math.Pow(s2, 1.5))
	}
	adj := func(z float64) float64 { return phi(z0 + (z0+z)/(1-a*(z0+z))) }
	return quantile(means, adj(-z975)), quantile(means, adj(z975))
}
