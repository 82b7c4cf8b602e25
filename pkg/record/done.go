package record

import "math/bits"

// Done is a set of rollout keys: the rollouts that have a record, which a resume skips and
// de-duplication keeps the first line of. It takes a bit a key where it can: a
// shard's tasks are index, index+shards, index+2·shards…, its repeats 0…R−1 and its arms a
// few, so each (repeat, arm) pair has a bitset over the shard's task ordinals
// ((task−index)/shards), grown as larger ones come. A key outside that (a task of another
// shard, a negative index, more than maxDonePlanes pairs), or one whose bit would make the sets
// hold more than doneBitsPerKey bits a key, is kept in a map instead. A set of 10^7 keys of
// a run takes about 1.2 MB, where a map takes ~100 bytes a key and more while it grows.
//
// The zero Done is an empty set of a whole run's keys, and a nil *Done an empty set that Has
// and Len answer for. A Done is not safe for concurrent use: Has moves its cursor.
type Done struct {
	index, shards int64
	planes        []keyPlane
	byPlane       map[planeKey]int
	last          int // the plane of the last key plus one, or 0
	words         int // the planes' words, all together
	n             int
	other         map[Key]struct{}
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
	// maxDonePlanes is the most (repeat, arm) pairs that get a bitset.
	maxDonePlanes = 1 << 12
	// doneBitsPerKey bounds the planes' bits by the keys in the set (and doneSlack): keys
	// too sparse for a bitset go to the map, which costs several hundred bits a key.
	doneBitsPerKey = 64
	doneSlack      = 1 << 22
)

// NewDone is an empty set for the keys of shard index of shards (shards 0: a whole run); the
// keys of other shards are members too, at a map entry each.
func NewDone(index, shards int) *Done {
	return &Done{index: int64(index), shards: int64(max(shards, 1))}
}

// Len is the number of keys in the set.
func (s *Done) Len() int {
	if s == nil {
		return 0
	}
	return s.n
}

// Has reports whether k is in the set.
func (s *Done) Has(k Key) bool {
	if s == nil || s.n == 0 {
		return false
	}
	if p, o, ok := s.find(k, false); ok && o < len(s.planes[p].bits)*64 && s.planes[p].bits[o/64]&(1<<(o%64)) != 0 {
		return true
	}
	_, ok := s.other[k]
	return ok
}

// Add puts k in the set; it reports false when k was in it already.
func (s *Done) Add(k Key) bool {
	if s.Has(k) {
		return false
	}
	s.n++
	if p, o, ok := s.find(k, true); ok {
		pl := &s.planes[p]
		if need := o/64 + 1 - len(pl.bits); need > 0 {
			// Doubled, as append does, within the bound of bits a key.
			if room := (doneBitsPerKey*s.n+doneSlack)/64 - s.words; need <= room {
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
		s.other = map[Key]struct{}{}
	}
	s.other[k] = struct{}{}
	return true
}

// find is k's plane and bit (its task's ordinal in the shard); ok is false for a key that has
// no bit, or, unless add, whose plane does not exist yet.
func (s *Done) find(k Key, add bool) (plane, bit int, ok bool) {
	shards := max(s.shards, 1)
	t := k.Task - s.index
	if t < 0 || t%shards != 0 || k.Rollout < 0 || t/shards >= 1<<(bits.UintSize-2) {
		return 0, 0, false
	}
	pk := planeKey{k.Rollout, k.Arm}
	if s.last > 0 && s.planes[s.last-1].planeKey == pk {
		return s.last - 1, int(t / shards), true
	}
	p, ok := s.byPlane[pk]
	if !ok {
		if !add || len(s.planes) >= maxDonePlanes {
			return 0, 0, false
		}
		p = len(s.planes)
		s.planes = append(s.planes, keyPlane{planeKey: pk})
		if s.byPlane == nil {
			s.byPlane = map[planeKey]int{}
		}
		s.byPlane[pk] = p
	}
	s.last = p + 1
	return p, int(t / shards), true
}
