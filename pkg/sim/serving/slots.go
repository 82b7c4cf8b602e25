package serving

// slotCache is llama.cpp's llama-server cache, in blocks (tools/server/server-context.cpp,
// get_available_slot; server-task.cpp, server_prompt_cache): each slot keeps the prompt of the
// last sequence it ran. A request takes, among the idle slots that keep something, the one whose
// kept prefix in common with its prompt is the longest share of the prompt, if that share is
// more than the similarity threshold; else the idle slot least recently used. When the slot was
// chosen by age, or would keep less than half of what it holds, its sequence is saved to the host
// prompt cache (unless a saved one already contains it; saved ones it contains are dropped), and
// the saved sequence that keeps at least a quarter of itself and shares more with the prompt than
// the slot does is restored into the slot (and leaves the host cache). The oldest saved sequences
// go first when the host cache is full. The request finds cached the prefix its slot then shares
// with it.
type slotCache struct {
	slots      []slotState
	tick       int64
	similarity float64
	host       [][]uint64 // saved sequences, oldest first
	hostBlocks int        // the host cache's capacity (0: none)
}

type slotState struct {
	kept []uint64
	used int64
	busy bool
}

func newSlotCache(n, hostBlocks int, similarity float64) *slotCache {
	return &slotCache{slots: make([]slotState, n), similarity: similarity, hostBlocks: hostBlocks}
}

// common is the length of the longest common prefix of a and b.
func common(a, b []uint64) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// take gives the prompt an idle slot and returns it and the prompt's cached blocks. A slot must
// be idle (the caller admits at most len(slots) sequences).
func (c *slotCache) take(prompt []uint64) (slot, hit int) {
	best, bestSim := -1, 0.0
	if c.similarity > 0 && len(prompt) > 0 {
		for i := range c.slots {
			sl := &c.slots[i]
			if sl.busy || len(sl.kept) == 0 {
				continue
			}
			sim := float64(common(sl.kept, prompt)) / float64(len(prompt))
			if sim > bestSim && sim > c.similarity {
				best, bestSim = i, sim
			}
		}
	}
	update := false
	if best >= 0 {
		update = bestSim*float64(len(prompt))/float64(len(c.slots[best].kept)) < 0.5
	} else {
		for i := range c.slots {
			if !c.slots[i].busy && (best < 0 || c.slots[i].used <= c.slots[best].used) {
				best = i
			}
		}
		update = true
	}
	sl := &c.slots[best]
	if update && c.hostBlocks > 0 {
		c.save(sl.kept)
		sl.kept = c.load(sl.kept, prompt)
	}
	hit = common(sl.kept, prompt)
	sl.kept, sl.busy = prompt, true
	c.tick++
	sl.used = c.tick
	return best, hit
}

// release marks a slot idle.
func (c *slotCache) release(slot int) { c.slots[slot].busy = false }

// save keeps seq in the host cache.
func (c *slotCache) save(seq []uint64) {
	if len(seq) == 0 || len(seq) > c.hostBlocks {
		return
	}
	for _, s := range c.host {
		if common(s, seq) == len(seq) {
			return // already held
		}
	}
	kept := c.host[:0]
	size := 0
	for _, s := range c.host {
		if common(s, seq) == len(s) {
			continue // contained in seq
		}
		kept = append(kept, s)
		size += len(s)
	}
	clear(c.host[len(kept):])
	c.host = kept
	for len(c.host) > 0 && size+len(seq) > c.hostBlocks {
		size -= len(c.host[0])
		c.host = c.host[1:]
	}
	c.host = append(c.host, seq)
}

// load returns what the slot holds after looking in the host cache for a better start for
// prompt than cur: the best saved sequence, which leaves the cache, or cur.
func (c *slotCache) load(cur, prompt []uint64) []uint64 {
	lcp := common(cur, prompt)
	keepBest := -1.0
	if len(cur) > 0 {
		keepBest = float64(lcp) / float64(len(cur))
	}
	simBest := float64(lcp) / float64(max(1, len(prompt)))
	at := -1
	for i, s := range c.host {
		l := common(s, prompt)
		keep, sim := float64(l)/float64(len(s)), float64(l)/float64(max(1, len(prompt)))
		if keep < 0.25 {
			continue
		}
		if keepBest < keep && simBest < sim {
			keepBest, simBest, at = keep, sim, i
		}
	}
	if at < 0 {
		return cur
	}
	s := c.host[at]
	c.host = append(c.host[:at], c.host[at+1:]...)
	return s
}
