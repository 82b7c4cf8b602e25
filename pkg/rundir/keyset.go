package rundir

import (
	"math/bits"

	"github.com/rollout-dev/rollout/pkg/record"
)

// keySet is a set of the rollout keys of one shard's records, a bit a key where it can: a
// shard's tasks are index, index+shards, index+2·shards…, its repeats 0…R−1 and its arms a
// few, so each (repeat, arm) pair has a bitset over the shard's task ordinals
// ((task−index)/shards), grown as larger ones come. A key outside that (a task of another
// shard, a negative index, more than maxKeyPlanes pairs), or one whose bit would make the sets
// hold more than keySetBitsPerKey bits a key, is kept in a map instead. A set of 10^7 keys of
// a run takes about 1.2 MB, where a map takes ~50 bytes a key and twice that while it grows.
type keySet struct {
	index, shards int64
	planes        []keyPlane
	byPlane       map[planeKey]int
	last          int // the plane of the last key, or -1
	words         int // the planes' words, all together
	n             int
	other         map[record.Key]struct{}
}

type planeKey struct {
	rollout int64
	arm     string
}

type keyPlane struct {
	planeKey
	bits []uint64
}

const (
	// maxKeyPlanes is the most (repeat, arm) pairs that get a bitset.
	maxKeyPlanes = 1 << 12
	// keySetBitsPerKey bounds the planes' bits by the keys in the set (and keySetSlack): keys
	// too sparse for a bitset go to the map, which costs several hundred bits a key.
	keySetBitsPerKey = 64
	keySetSlack      = 1 << 22
)

// newKeySet is an empty set for the keys of shard index of shards (shards 0: a whole run).
func newKeySet(index, shards int) *keySet {
	return &keySet{index: int64(index), shards: int64(max(shards, 1)), byPlane: map[planeKey]int{}, last: -1}
}

// Len is the number of keys in the set.
func (s *keySet) Len() int { return s.n }

// Has reports whether k is in the set.
func (s *keySet) Has(k record.Key) bool {
	if p, o, ok := s.find(k, false); ok && o < len(s.planes[p].bits)*64 && s.planes[p].bits[o/64]&(1<<(o%64)) != 0 {
		return true
	}
	_, ok := s.other[k]
	return ok
}

// Add puts k in the set; it reports false when k was in it already.
func (s *keySet) Add(k record.Key) bool {
	if s.Has(k) {
		return false
	}
	s.n++
	if p, o, ok := s.find(k, true); ok {
		pl := &s.planes[p]
		if need := o/64 + 1 - len(pl.bits); need > 0 {
			// Doubled, as append does, within the bound of bits a key.
			if room := (keySetBitsPerKey*s.n+keySetSlack)/64 - s.words; need <= room {
				grow := min(max(need, len(pl.bits)), room)
				pl.bits = append(pl.bits, make([]uint64, grow)...)
				s.words += grow
			}
		}
		if w := o / 64; w < len(pl.bits) {
			pl.bits[w] |= 1 << (o % 64)
			return true
		}
	}
	if s.other == nil {
		s.other = map[record.Key]struct{}{}
	}
	s.other[k] = struct{}{}
	return true
}

// find is k's plane and bit (its task's ordinal in the shard); ok is false for a key that has
// no bit, or, unless add, whose plane does not exist yet.
func (s *keySet) find(k record.Key, add bool) (plane, bit int, ok bool) {
	t := k.Task - s.index
	if t < 0 || t%s.shards != 0 || k.Rollout < 0 || t/s.shards >= 1<<(bits.UintSize-2) {
		return 0, 0, false
	}
	pk := planeKey{k.Rollout, k.Arm}
	if s.last >= 0 && s.planes[s.last].planeKey == pk {
		return s.last, int(t / s.shards), true
	}
	p, ok := s.byPlane[pk]
	if !ok {
		if !add || len(s.planes) >= maxKeyPlanes {
			return 0, 0, false
		}
		p = len(s.planes)
		s.planes = append(s.planes, keyPlane{planeKey: pk})
		s.byPlane[pk] = p
	}
	s.last = p
	return p, int(t / s.shards), true
}
