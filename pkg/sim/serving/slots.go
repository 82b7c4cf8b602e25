package serving

// slotCache is llama.cpp's llama-server cache, in blocks (tools/server/server-context.cpp,
// get_available_slot; server-task.cpp, server_prompt_cache): each slot keeps the prompt of the
// last sequence it ran. A request takes, among the idle slots that keep something, the one whose
// kept prefix in common with its prompt is the longest share of the prompt, if that share is
// more than the similarity threshold; else the idle slot least recently used. When the slot was
// chosen by age, or would keep less than half of what it holds, its sequence is saved to the host
// prompt cache (unless a saved one already contains it; saved ones it contains are dropped), and
// the saved sequence that keeps at least a quarter of itself and shares more with the prompt than
// the slot does is restored into the slot (and leaves the host cache). Once the request has its
// slot, every idle slot is saved too. The oldest saved sequences go first when the host cache is
// full. The request finds cached the prefix its slot then shares with it, and when that is all
// the slot holds, the tokens the slot generated after it too but the last (a slot keeps what it
// generated, and a conversation's next round sends the answer back as its assistant turn; the
// last token sampled was never evaluated).
type slotCache struct {
	slots      []slotState
	tick       int64
	similarity float64
	host       []kept // saved sequences, oldest first
	hostBlocks int    // the host cache's capacity (0: none)
}

// kept is a sequence a slot holds: its prompt's blocks, then gen generated tokens.
type kept struct {
	blocks []uint64
	gen    int
}

type slotState struct {
	kept
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

// take gives the prompt (whose answer will be gen tokens) an idle slot and returns it, the
// prompt's cached blocks, and the generated tokens cached after them. A slot must be idle (the
// caller admits at most len(slots) sequences).
func (c *slotCache) take(prompt []uint64, gen int) (slot, hit, genHit int) {
	best, bestSim := -1, 0.0
	if c.similarity > 0 && len(prompt) > 0 {
		for i := range c.slots {
			sl := &c.slots[i]
			if sl.busy || len(sl.blocks) == 0 {
				continue
			}
			sim := float64(common(sl.blocks, prompt)) / float64(len(prompt))
			if sim > bestSim && sim > c.similarity {
				best, bestSim = i, sim
			}
		}
	}
	update := false
	if best >= 0 {
		update = bestSim*float64(len(prompt))/float64(len(c.slots[best].blocks)) < 0.5
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
	hit = common(sl.blocks, prompt)
	if hit == len(sl.blocks) && hit > 0 && hit < len(prompt) {
		genHit = max(0, min(sl.gen-1, len(prompt)-hit))
	}
	sl.kept, sl.busy = kept{blocks: prompt, gen: gen}, true
	c.tick++
	sl.used = c.tick
	if c.hostBlocks > 0 {
		// A task that starts saves a copy of every idle slot to the host cache (llama-server's
		// --cache-idle-slots, on by default with a host cache): a conversation whose slot
		// another task takes later is kept even when that slot was chosen by similarity and
		// kept more than half of it.
		for i := range c.slots {
			if i != best && !c.slots[i].busy {
				c.save(c.slots[i].kept)
			}
		}
	}
	return best, hit, genHit
}

// release marks a slot idle.
func (c *slotCache) release(slot int) { c.slots[slot].busy = false }

// save keeps seq in the host cache.
func (c *slotCache) save(seq kept) {
	if len(seq.blocks) == 0 || len(seq.blocks) > c.hostBlocks {
		return
	}
	for _, s := range c.host {
		if common(s.blocks, seq.blocks) == len(seq.blocks) {
			return // already held
		}
	}
	held := c.host[:0]
	size := 0
	for _, s := range c.host {
		if common(s.blocks, seq.blocks) == len(s.blocks) {
			continue // contained in seq
		}
		held = append(held, s)
		size += len(s.blocks)
	}
	clear(c.host[len(held):])
	c.host = held
	for len(c.host) > 0 && size+len(seq.blocks) > c.hostBlocks {
		size -= len(c.host[0].blocks)
		c.host = c.host[1:]
	}
	c.host = append(c.host, seq)
}

// load returns what the slot holds after looking in the host cache for a better start for
// prompt than cur: the best saved sequence, which leaves the cache, or cur.
func (c *slotCache) load(cur kept, prompt []uint64) kept {
	lcp := common(cur.blocks, prompt)
	keepBest := -1.0
	if len(cur.blocks) > 0 {
		keepBest = float64(lcp) / float64(len(cur.blocks))
	}
	simBest := float64(lcp) / float64(max(1, len(prompt)))
	at := -1
	for i, s := range c.host {
		l := common(s.blocks, prompt)
		keep, sim := float64(l)/float64(len(s.blocks)), float64(l)/float64(max(1, len(prompt)))
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
