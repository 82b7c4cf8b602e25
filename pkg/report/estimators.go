package report

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// meanInterval is the 95% interval of a mean (in units of the reward scale) over clusters
// whose values lie in [least, most]: unit says every value is in [0, 1].
func meanInterval(clusters []cluster, mean, least, most float64, unit bool, o StatsOptions) *Interval {
	return intervalOf(len(clusters), clusteredStdErr(clusters, mean), clusters, mean, least, most, unit, o)
}

// intervalOf is meanInterval over g clusters whose clustered standard error is se; clusters
// may be nil past BootstrapMaxTasks, where they are not bootstrapped. By default (CIAuto) it
// is the Wilson score interval with the task-clustered effective sample size
// (wilsonInterval) where unit, and the t interval mean ± t975(g−1)·se otherwise, cut to
// [least, most] (a mean cannot leave its values' range): TestIntervalCoverage measured both
// near 95% from 3 to 50 tasks, where the bootstrap covers 0.56-0.88 at 3-5 tasks. CIBootstrap
// is the percentile bootstrap (Wilson where every value is 0 or every one is 1, where the
// bootstrap is a point; normal past BootstrapMaxTasks tasks).
func intervalOf(g int, se float64, clusters []cluster, mean, least, most float64, unit bool, o StatsOptions) *Interval {
	var lo, hi float64
	iv := &Interval{Method: CIBootstrap}
	switch {
	case unit && (o.CI != CIBootstrap || (mean == 0 || mean == 1) && se == 0):
		lo, hi = wilsonInterval(g, se, mean)
		iv.Method = "wilson"
	case o.CI != CIBootstrap:
		lo, hi = tInterval(g, se, mean)
		lo, hi = max(lo, least), min(hi, most)
		iv.Method = "t"
	case g > BootstrapMaxTasks:
		lo, hi = normalCI(mean, se)
		iv.Normal = true
	default:
		lo, hi = bootstrapCI(clusters, o.Bootstrap, o.Seed)
	}
	iv.Low, iv.High, iv.Point = lo, hi, lo == hi
	return iv
}

// tInterval is the 95% t interval mean ± t975(g−1)·se over g task clusters whose clustered
// standard error is se; the mean itself below 2 clusters.
func tInterval(g int, se, mean float64) (lo, hi float64) {
	if g < 2 {
		return mean, mean
	}
	h := t975(g-1) * se
	return mean - h, mean + h
}

// tCI is tInterval over clusters.
func tCI(clusters []cluster, mean float64) (lo, hi float64) {
	return tInterval(len(clusters), clusteredStdErr(clusters, mean), mean)
}

// scaleFor is the power of two that scores divide rewards by, for their largest magnitude
// most: 1 when they are all within [−1, 1].
func scaleFor(most float64) float64 {
	if most <= 1 || math.IsInf(most, 0) || math.IsNaN(most) {
		return 1
	}
	_, exp := math.Frexp(most) // 2^(exp−1) <= most < 2^exp; 2^exp may not be a float64
	return math.Ldexp(1, exp-1)
}

// clusteredStdErr is the task-clustered (cluster-robust) standard error of a mean of
// rewards, a ratio of their sum to their count: with G clusters, N rewards and S_g the sum of
// cluster g's n_g rewards, sqrt(G/(G−1) · Σ_g (S_g − mean·n_g)²) / N; 0 below 2 clusters.
func clusteredStdErr(clusters []cluster, mean float64) float64 {
	g := len(clusters)
	if g < 2 {
		return 0
	}
	var ss float64
	var n int64
	for _, c := range clusters {
		d := c.sum - mean*float64(c.n)
		ss += d * d
		n += int64(c.n)
	}
	return math.Sqrt(float64(g)/float64(g-1)*ss) / float64(n)
}

// z975 is the 97.5% quantile of the standard normal distribution.
const z975 = 1.959963984540054

// normalCI is the 95% normal interval mean ± z975·se.
func normalCI(mean, se float64) (lo, hi float64) { return mean - z975*se, mean + z975*se }

// cluster is one task's scored rollouts: their count and the sum of their rewards.
type cluster struct {
	n   int
	sum float64
	// first is the number of the task's first row in its scope, while the clusters are
	// gathered.
	first int
}

// bootstrapSeq is the base of the PCG streams of the bootstrap (any constant: the seed is
// the knob).
const bootstrapSeq = 0x726f6c6c6f7574 // "rollout"

// bootstrapChunk is how many resamples one PCG stream draws. Chunks run in parallel; each
// has its own stream (seed, bootstrapSeq + chunk number), so the resamples are the same at
// any parallelism.
const bootstrapChunk = 100

// bootstrapCI is the 95% percentile interval of the mean reward over b resamples of the
// clusters: each resample draws len(clusters) clusters with replacement, each bringing all
// its rollouts, and its mean is the sum of their rewards over the count of their rollouts.
// The interval is the 2.5% and 97.5% quantiles of the b means, interpolated linearly
// between order statistics (quantile p at position p·(b−1) of the sorted means).
func bootstrapCI(clusters []cluster, b int, seed uint64) (lo, hi float64) {
	means := bootstrapMeans(clusters, b, seed)
	return quantile(means, 0.025), quantile(means, 0.975)
}

// bootstrapMeans are the sorted means of b resamples of the clusters (see bootstrapCI).
func bootstrapMeans(clusters []cluster, b int, seed uint64) []float64 {
	t := len(clusters)
	type sn struct {
		sum float64
		n   int64
	}
	packed := make([]sn, t) // one cache line per draw
	for i, c := range clusters {
		packed[i] = sn{c.sum, int64(c.n)}
	}
	means := make([]float64, b)
	chunks := (b + bootstrapChunk - 1) / bootstrapChunk
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), chunks) {
		wg.Go(func() {
			for {
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				pcg := rand.NewPCG(seed, bootstrapSeq+uint64(c))
				for i := c * bootstrapChunk; i < min(b, (c+1)*bootstrapChunk); i++ {
					var sum float64
					var n int64
					for range t {
						// An index in [0, t): the high word of a 64×64-bit product
						// (Lemire), whose bias, under t/2^64, is nil for any t here.
						j, _ := bits.Mul64(pcg.Uint64(), uint64(t))
						sum += packed[j].sum
						n += packed[j].n
					}
					means[i] = sum / float64(n)
				}
			}
		})
	}
	wg.Wait()
	slices.Sort(means)
	return means
}

// quantile is the p-quantile of sorted xs, interpolated linearly (Hyndman and Fan's type 7).
func quantile(xs []float64, p float64) float64 {
	h := p * float64(len(xs)-1)
	i := int(math.Floor(h))
	if i+1 >= len(xs) {
		return xs[len(xs)-1]
	}
	return xs[i] + (h-float64(i))*(xs[i+1]-xs[i])
}

// PassAt is the unbiased estimator of pass@k for a task with n tries of which c succeeded:
// 1 − C(n−c, k)/C(n, k), the chance that k tries drawn without replacement include a
// success. The ratio of binomials is computed as the product over i < k of (n−c−i)/(n−i),
// which neither overflows nor loses precision to cancellation. k must be in 1..n.
func PassAt(n, c, k int) float64 {
	if n-c < k {
		return 1
	}
	q := 1.0
	for i := range k {
		q *= float64(n-c-i) / float64(n-i)
	}
	return 1 - q
}

// PassHat is pass^k for a task with n tries of which c succeeded: C(c, k)/C(n, k), the
// chance that k tries drawn without replacement all succeed, as the product over i < k of
// (c−i)/(n−i). k must be in 1..n.
func PassHat(n, c, k int) float64 {
	if c < k {
		return 0
	}
	q := 1.0
	for i := range k {
		q *= float64(c-i) / float64(n-i)
	}
	return q
}

// t975Table is the 97.5% quantile of Student's t distribution for 1 to 30 degrees of freedom.
var t975Table = [...]float64{12.706204736, 4.302652730, 3.182446305, 2.776445105, 2.570581836, 2.446911851,
	2.364624252, 2.306004135, 2.262157163, 2.228138852, 2.200985160, 2.178812830, 2.160368656, 2.144786688,
	2.131449546, 2.119905299, 2.109815578, 2.100922040, 2.093024054, 2.085963447, 2.079613845, 2.073873068,
	2.068657610, 2.063898562, 2.059538553, 2.055529439, 2.051830516, 2.048407142, 2.045229642, 2.042272456}

// t975 is the 97.5% quantile of Student's t distribution with df degrees of freedom: the
// table to 30, then the Cornish–Fisher expansion around z975 (error under 1e-5 there).
func t975(df int) float64 {
	if df < 1 {
		return math.Inf(1)
	}
	if df <= len(t975Table) {
		return t975Table[df-1]
	}
	z, v := z975, float64(df)
	z3, z5, z7 := z*z*z, z*z*z*z*z, z*z*z*z*z*z*z
	return z + (z3+z)/(4*v) + (5*z5+16*z3+3*z)/(96*v*v) + (3*z7+19*z5+17*z3-15*z)/(384*v*v*v)
}

// wilsonCI is the 95% Wilson score interval of a mean of rewards in [0, 1] over G task
// clusters, with the effective sample size n = p(1−p)/se² of the clustered standard error se
// (G when se is 0: every task the same, or every reward 0 or 1) and the quantile t975(G−1).
// At p = 0 (no success) it is [0, q²/(G+q²)], the Wilson upper bound.
func wilsonCI(clusters []cluster, mean float64) (lo, hi float64) {
	return wilsonInterval(len(clusters), clusteredStdErr(clusters, mean), mean)
}

// wilsonInterval is wilsonCI over g clusters whose clustered standard error is se.
func wilsonInterval(g int, se, mean float64) (lo, hi float64) {
	q := t975(g - 1)
	if g < 2 {
		q = t975(1)
	}
	n := float64(g)
	if v := mean * (1 - mean); se > 0 && v > 0 {
		n = v / (se * se)
	}
	q2 := q * q
	center := (mean + q2/(2*n)) / (1 + q2/n)
	half := q / (1 + q2/n) * math.Sqrt(mean*(1-mean)/n+q2/(4*n*n))
	return max(0, center-half), min(1, center+half)
}
