package sim

import (
	"math/rand/v2"
	"strconv"
)

// Randomness without shared state: every decision is a hash of (Options.Seed, the
// conversation, the round, the decision's name and any extra numbers), so that it does not
// depend on which other conversations came first. FNV-1a over the inputs, then the splitmix64
// finalizer to spread the bits.

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func fnvUint(h, v uint64) uint64 {
	for range 8 {
		h ^= v & 0xff
		h *= fnvPrime
		v >>= 8
	}
	return h
}

func mix(z uint64) uint64 {
	z ^= z >> 30
	z *= 0xbf58476d1ce4e5b9
	z ^= z >> 27
	z *= 0x94d049bb133111eb
	z ^= z >> 31
	return z
}

// conversationHash identifies a conversation: the text of its first user message and the
// request's seed field, when it has one (the runner sends one per task and repeat).
func conversationHash(firstUser string, reqSeed *int64) uint64 {
	h := fnvString(fnvOffset, firstUser)
	h = fnvUint(h, 0xfeedface) // separator
	if reqSeed != nil {
		h = fnvUint(h, 1)
		h = fnvUint(h, uint64(*reqSeed))
	} else {
		h = fnvUint(h, 0)
	}
	return mix(h)
}

// drawer draws the decisions of one conversation.
type drawer struct {
	seed int64
	conv uint64
}

func (d drawer) u64(name string, round int, extra ...int) uint64 {
	h := fnvUint(fnvOffset, uint64(d.seed))
	h = fnvUint(h, d.conv)
	h = fnvUint(h, uint64(round))
	h = fnvString(h, name)
	for _, x := range extra {
		h = fnvUint(h, uint64(x))
	}
	return mix(h)
}

// float is uniform in [0, 1).
func (d drawer) float(name string, round int, extra ...int) float64 {
	return float64(d.u64(name, round, extra...)>>11) / (1 << 53)
}

// hit is true with probability p.
func (d drawer) hit(p float64, name string, round int, extra ...int) bool {
	switch {
	case p <= 0:
		return false
	case p >= 1:
		return true
	}
	return d.float(name, round, extra...) < p
}

// intn is uniform in [0, n); n > 0.
func (d drawer) intn(n int, name string, round int, extra ...int) int {
	return int(d.u64(name, round, extra...) % uint64(n))
}

// rand is a generator for a decision that needs many numbers (arguments from a schema).
func (d drawer) rand(name string, round int, extra ...int) *rand.Rand {
	return rand.New(rand.NewPCG(d.u64(name+"#0", round, extra...), d.u64(name+"#1", round, extra...)))
}

// idSuffix is the 8 hex digits that make a tool call id the simulator's own.
func (d drawer) idSuffix(kind string, a, b int) string {
	s := strconv.FormatUint(d.u64("id/"+kind, 0, a, b)&0xffffffff, 16)
	for len(s) < 8 {
		s = "0" + s
	}
	return s
}
