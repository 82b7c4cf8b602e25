package fleet

import (
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"
)

// Route is how a Pool picks the endpoint of a model request.
type Route string

const (
	// Affinity keeps every round of a rollout on one endpoint and the repeats of a task
	// together: consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam 2018),
	// keyed on the task; an endpoint past LoadFactor times its share of the requests in
	// flight passes the task on to the next endpoint on the ring.
	Affinity Route = "affinity"
	// LeastOutstanding sends each request to the endpoint with the fewest requests in flight
	// for its weight; ties go to the heavier endpoint, then the first listed.
	LeastOutstanding Route = "least-outstanding"
	// RoundRobin sends requests to the endpoints in turn.
	RoundRobin Route = "round-robin"
)

// Routes lists the routing policies, the default first.
var Routes = []Route{Affinity, LeastOutstanding, RoundRobin}

// ParseRoute reads a --route value.
func ParseRoute(s string) (Route, error) {
	for _, r := range Routes {
		if string(r) == s {
			return r, nil
		}
	}
	names := make([]string, len(Routes))
	for i, r := range Routes {
		names[i] = string(r)
	}
	return "", fmt.Errorf("unknown route %q: want %s", s, strings.Join(names, ", "))
}

// DefaultLoadFactor is the bound of affinity routing: an endpoint takes a new task while its
// requests in flight stay within 1.25 times its weighted share of all requests in flight.
const DefaultLoadFactor = 1.25

// vnodesPerWeight is the number of points an endpoint of weight 1 has on the ring: enough
// that each endpoint's share of the keys is within a few percent of its weight's.
const vnodesPerWeight = 160

// ring is the consistent-hashing ring of the endpoints: points sorted by hash, each naming
// its endpoint.
type ring struct {
	hashes []uint64
	owner  []int
}

func newRing(names []string, weights []float64) *ring {
	type point struct {
		h uint64
		e int
	}
	var pts []point
	for e, name := range names {
		n := max(1, int(math.Round(weights[e]*vnodesPerWeight)))
		for v := range n {
			pts = append(pts, point{hash64(fmt.Sprintf("%s#%d", name, v)), e})
		}
	}
	slices.SortFunc(pts, func(a, b point) int {
		if a.h != b.h {
			if a.h < b.h {
				return -1
			}
			return 1
		}
		return a.e - b.e
	})
	r := &ring{hashes: make([]uint64, len(pts)), owner: make([]int, len(pts))}
	for i, p := range pts {
		r.hashes[i], r.owner[i] = p.h, p.e
	}
	return r
}

// walk calls visit with the endpoints in ring order from key's point, each once, until visit
// returns true; it returns that endpoint, or -1.
func (r *ring) walk(key string, n int, visit func(e int) bool) int {
	if len(r.hashes) == 0 {
		return -1
	}
	h := hash64(key)
	i, _ := slices.BinarySearch(r.hashes, h)
	var seenBuf [64]bool
	seen := seenBuf[:0]
	if n <= len(seenBuf) {
		seen = seenBuf[:n]
	} else {
		seen = make([]bool, n)
	}
	left := n
	for k := 0; k < len(r.hashes) && left > 0; k++ {
		e := r.owner[(i+k)%len(r.hashes)]
		if seen[e] {
			continue
		}
		seen[e] = true
		left--
		if visit(e) {
			return e
		}
	}
	return -1
}

// hash64 is FNV-1a of s, mixed (splitmix64's finalizer) so that near keys spread over the ring.
func hash64(s string) uint64 {
	f := fnv.New64a()
	f.Write([]byte(s))
	x := f.Sum64()
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// TaskKey is the task part of a rollout id (arm/file/task/repeat, as the runner writes it):
// file/task, which the repeats and the arms of a task share. An id of another shape is its
// own key.
func TaskKey(rolloutID string) string {
	parts := strings.Split(rolloutID, "/")
	if len(parts) != 4 {
		return rolloutID
	}
	return parts[1] + "/" + parts[2]
}

// boundedPick is affinity's choice for a new key: the first endpoint on the ring from the key
// that is eligible and whose load stays within the bound, ceil(factor * (m+1) * w / W), where
// m is the requests in flight on the eligible endpoints and W their total weight. Some eligible
// endpoint is always within it (the bounds add up to more than m+1); -1 when none is eligible.
func boundedPick(r *ring, key string, loads []int, weights []float64, eligible []bool, factor float64) int {
	m, w := 0, 0.0
	for e := range loads {
		if eligible[e] {
			m += loads[e]
			w += weights[e]
		}
	}
	if w == 0 {
		return -1
	}
	return r.walk(key, len(loads), func(e int) bool {
		return eligible[e] && float64(loads[e]+1) <= Bound(factor, m, weights[e], w)
	})
}

// Bound is affinity's load bound of an endpoint of weight w (of W in all) when m requests are in
// flight: ceil(factor * (m+1) * w / W).
func Bound(factor float64, m int, w, total float64) float64 {
	return math.Ceil(factor * float64(m+1) * w / total)
}

// leastOutstanding is the eligible endpoint with the fewest requests in flight for its weight;
// ties go to the heavier one, then the first; -1 when none is eligible.
func leastOutstanding(loads []int, weights []float64, eligible []bool) int {
	best := -1
	for e := range loads {
		if !eligible[e] {
			continue
		}
		if best < 0 {
			best = e
			continue
		}
		a, b := float64(loads[e])/weights[e], float64(loads[best])/weights[best]
		if a < b || a == b && weights[e] > weights[best] {
			best = e
		}
	}
	return best
}
