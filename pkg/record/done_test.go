package record

import (
	"math/rand/v2"
	"runtime"
	"testing"
)

// A Done answers as a map of the keys would, for the keys of its shard (bits), those of
// other shards, negative ones, too many (repeat, arm) pairs and ones too sparse for bits
// (the map), added in any order and more than once.
func TestDoneIsASet(t *testing.T) {
	for _, c := range []struct {
		name          string
		index, shards int
		key           func(r *rand.Rand) Key
	}{
		{"dense", 1, 4, func(r *rand.Rand) Key {
			return Key{Task: 1 + 4*r.Int64N(3000), Rollout: r.Int64N(4), Arm: []string{"single", "multi"}[r.IntN(2)]}
		}},
		{"whole run", 0, 0, func(r *rand.Rand) Key {
			return Key{Task: r.Int64N(5000), Rollout: r.Int64N(3), Arm: ""}
		}},
		{"other shards and negative", 2, 3, func(r *rand.Rand) Key {
			return Key{Task: r.Int64N(600) - 100, Rollout: r.Int64N(5) - 1, Arm: "a"}
		}},
		{"sparse", 0, 1, func(r *rand.Rand) Key {
			return Key{Task: r.Int64N(1 << 40), Rollout: r.Int64N(2), Arm: "a"}
		}},
		{"many planes", 0, 1, func(r *rand.Rand) Key {
			return Key{Task: r.Int64N(50), Rollout: r.Int64N(2 * maxDonePlanes), Arm: "a"}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, 2))
			s, m := NewDone(c.index, c.shards), map[Key]bool{}
			for range 20_000 {
				k := c.key(r)
				if got, want := s.Add(k), !m[k]; got != want {
					t.Fatalf("Add(%v) = %v, want %v", k, got, want)
				}
				m[k] = true
				if q := c.key(r); s.Has(q) != m[q] {
					t.Fatalf("Has(%v) = %v, want %v", q, s.Has(q), m[q])
				}
			}
			if s.Len() != len(m) {
				t.Errorf("Len %d, want %d", s.Len(), len(m))
			}
			for k := range m {
				if !s.Has(k) {
					t.Fatalf("Has(%v) false after Add", k)
				}
			}
		})
	}
}

// The keys of a shard take a bit each, not a map entry: 2^20 keys of shard 1 of 4 (4 repeats,
// 2 arms) allocate well under a megabyte, where a map takes some 50 MB; keys too sparse for
// bits do not make the bits grow past their bound.
func TestDoneOfAShardIsBits(t *testing.T) {
	alloc := func(add func(s *Done)) uint64 {
		var a, b runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&a)
		s := NewDone(1, 4)
		add(s)
		runtime.ReadMemStats(&b)
		runtime.KeepAlive(s)
		return b.TotalAlloc - a.TotalAlloc
	}
	arms := []string{"single", "multi"}
	dense := alloc(func(s *Done) {
		for i := range int64(1 << 17) {
			for k := range int64(4) {
				for _, arm := range arms {
					s.Add(Key{Task: 1 + 4*i, Rollout: k, Arm: arm})
				}
			}
		}
		if s.Len() != 1<<20 || s.other != nil {
			t.Errorf("dense: %d keys, %d in the map", s.Len(), len(s.other))
		}
	})
	if dense > 1<<20 {
		t.Errorf("2^20 keys of a shard allocated %d bytes", dense)
	}
	alloc(func(s *Done) {
		for i := range int64(1000) {
			s.Add(Key{Task: 1 + 4*i<<30, Arm: "a"})
		}
		if s.words*64 > doneBitsPerKey*s.n+doneSlack {
			t.Errorf("sparse: %d words of bits for %d keys", s.words, s.n)
		}
		if s.Len() != 1000 {
			t.Errorf("sparse: %d keys", s.Len())
		}
	})
}

func TestDoneEmpty(t *testing.T) {
	var nilDone *Done
	var zero Done
	for _, d := range []*Done{nilDone, &zero, new(Done)} {
		if d.Len() != 0 || d.Has(Key{}) {
			t.Errorf("%v: an empty set has a member or a length", d)
		}
	}
	if !zero.Add(Key{Task: 3, Arm: "x"}) || zero.Add(Key{Task: 3, Arm: "x"}) || zero.Len() != 1 {
		t.Error("the zero Done did not take a key once")
	}
	if zero.Has(Key{Task: 3}) || zero.Has(Key{Task: 2, Arm: "x"}) || !zero.Has(Key{Task: 3, Arm: "x"}) {
		t.Error("a set of one key answers for others")
	}
}

// BenchmarkDoneMemory reports the heap a set of n rollouts holds, against a map of keys (what a
// resume held, for the rest of the run, before): a whole run (tasks × repeats), and a sparse
// one (every 512th task).
func BenchmarkDoneMemory(b *testing.B) {
	const n = 1 << 20
	layouts := []struct {
		name string
		key  func(i int) Key
	}{
		{"dense-1-repeat", func(i int) Key { return Key{Task: int64(i)} }},
		{"dense-16-repeats", func(i int) Key { return Key{Task: int64(i / 16), Rollout: int64(i % 16)} }},
		{"sparse", func(i int) Key { return Key{Task: int64(i) * 512} }},
	}
	for _, l := range layouts {
		for _, impl := range []string{"done", "map"} {
			b.Run(l.name+"/"+impl, func(b *testing.B) {
				var keep any
				for range b.N {
					before := heapInUse()
					if impl == "done" {
						d := NewDone(0, 0)
						for i := range n {
							d.Add(l.key(i))
						}
						keep = d
					} else {
						m := map[Key]struct{}{}
						for i := range n {
							m[l.key(i)] = struct{}{}
						}
						keep = m
					}
					b.ReportMetric(float64(heapInUse()-before)/n, "B/rollout")
					runtime.KeepAlive(keep)
				}
			})
		}
	}
}

func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
