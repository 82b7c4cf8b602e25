package serving

import (
	"slices"
	"testing"
)

// seqOf is a block chain: the shared prefix's blocks 1..p, then the given blocks.
func seqOf(p int, rest ...uint64) []uint64 {
	var s []uint64
	for i := range p {
		s = append(s, uint64(i+1))
	}
	return append(s, rest...)
}

// llama-server's slot choice, step by step: the idle slot with the longest common prefix wins
// when it is more than the similarity share of the prompt (empty slots are not candidates),
// else the least recently used idle slot; a slot chosen by age, or keeping under half of its
// sequence, saves that sequence to the host cache and restores the best saved one.
func TestSlotCache(t *testing.T) {
	type step struct {
		take    []uint64 // a request's prompt; nil: release slot
		gen     int      // the tokens its answer will have
		release int
		slot    int // want
		hit     int // want
		genHit  int // want: generated tokens cached after the hit
	}
	a1 := seqOf(4, 100, 101)            // rollout A, round 1: the 4-block shared prefix and its own 2
	a2 := append(slices.Clone(a1), 102) // A's round 2
	b1 := seqOf(4, 200, 201)
	b2 := append(slices.Clone(b1), 202)
	long := func(r uint64) []uint64 { return seqOf(1, r, r+1, r+2, r+3, r+4, r+5, r+6, r+7) } // mostly its own
	for _, c := range []struct {
		name       string
		slots      int
		host       int
		similarity float64
		steps      []step
	}{
		{"each rollout back on its own slot", 2, 0, 0.1, []step{
			// Among slots of the same age the last is taken (llama-server's "<=").
			{take: a1, slot: 1, hit: 0}, {take: b1, slot: 0, hit: 0}, // slot 1 is busy: the empty slot 0, by age
			{take: nil, release: 0}, {take: nil, release: 1},
			{take: b2, slot: 0, hit: 6}, {take: a2, slot: 1, hit: 6},
		}},
		{"an idle slot with the shared prefix is taken before an empty one", 2, 0, 0.1, []step{
			{take: a1, slot: 1, hit: 0}, {take: nil, release: 1},
			{take: b1, slot: 1, hit: 4}, // A's slot, not the empty slot 0: A's context is gone
			{take: nil, release: 1},
			{take: a2, slot: 1, hit: 4},
		}},
		{"the host cache gives back what a slot gave up", 1, 100, 0.1, []step{
			{take: long(10), slot: 0, hit: 0}, {take: nil, release: 0},
			{take: long(20), slot: 0, hit: 1}, // keeps 1 of 9 blocks: saved to the host cache
			{take: nil, release: 0},
			{take: append(long(10), 99), slot: 0, hit: 9}, // restored from the host cache
		}},
		{"without a host cache it is lost", 1, 0, 0.1, []step{
			{take: long(10), slot: 0, hit: 0}, {take: nil, release: 0},
			{take: long(20), slot: 0, hit: 1}, {take: nil, release: 0},
			{take: append(long(10), 99), slot: 0, hit: 1},
		}},
		{"a slot's generated tokens but the last are cached when the prompt extends all it holds", 2, 0, 0.1, []step{
			{take: a1, gen: 5, slot: 1}, {take: nil, release: 1},
			{take: append(slices.Clone(a1), 102, 103, 104, 105, 106, 107), gen: 3, slot: 1, hit: 6, genHit: 4},
			{take: nil, release: 1},
			{take: append(slices.Clone(a1), 102, 103, 104, 105, 106, 107, 108), slot: 1, hit: 12, genHit: 1}, // capped by what the prompt adds
			{take: nil, release: 1},
			{take: b1, slot: 1, hit: 4, genHit: 0}, // shares only a part of what the slot holds
		}},
		{"similarity 0: by age only", 2, 0, 0, []step{
			{take: a1, slot: 1, hit: 0}, {take: nil, release: 1},
			{take: a2, slot: 0, hit: 0}, // slot 0 is older (never used)
			{take: nil, release: 0},
			{take: b2, slot: 1, hit: 4},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sc := newSlotCache(c.slots, c.host, c.similarity)
			for i, st := range c.steps {
				if st.take == nil {
					sc.release(st.release)
					continue
				}
				slot, hit, genHit := sc.take(st.take, st.gen)
				if slot != st.slot || hit != st.hit || genHit != st.genHit {
					t.Fatalf("step %d: slot %d hit %d+%d, want slot %d hit %d+%d", i, slot, hit, genHit, st.slot, st.hit, st.genHit)
				}
			}
		})
	}
}

// When a task starts, every idle slot is saved to the host cache (llama-server's
// --cache-idle-slots): a conversation survives its slot being taken later by similarity
// (which saves nothing when the slot keeps more than half).
func TestSlotCacheSavesIdleSlots(t *testing.T) {
	a1, b1 := seqOf(4, 100, 101), seqOf(4, 200, 201)
	b2 := append(slices.Clone(b1), 202)
	for _, host := range []int{100, 0} {
		sc := newSlotCache(2, host, 0.1)
		sc.take(a1, 3) // slot 1
		sc.take(b1, 3) // slot 0
		sc.release(1)
		sc.release(0)
		if slot, _, _ := sc.take(b2, 3); slot != 0 {
			t.Fatalf("host %d: b2 took slot %d, want 0 (its own)", host, slot)
		}
		var saved [][]uint64
		for _, k := range sc.host {
			saved = append(saved, k.blocks)
		}
		if want := [][]uint64{a1}; host > 0 && !slices.EqualFunc(saved, want, slices.Equal) || host == 0 && len(saved) > 0 {
			t.Fatalf("host %d: saved %v, want A's idle slot (%v) with a host cache, nothing without", host, saved, a1)
		}
		if host > 0 {
			sc.take(seqOf(4, 300, 301), 3) // C takes A's idle slot by similarity, keeping 4 of 6: no save on take
			sc.release(1)
			sc.release(0)
			// A's next round: slot 0 (b2) wins the tie; it keeps 4 of 7 (not under half), so
			// no restore, but A's saved copy is still there for a slot chosen by age.
			if len(sc.host) == 0 || !slices.Equal(sc.host[0].blocks, a1) {
				t.Fatalf("A's conversation left the host cache: %v", sc.host)
			}
		}
	}
}

// A prompt counted as rendered: role, text, each call's name and arguments; call ids and
// wrapper fields do not count and do not change the blocks (a chat template does not render
// them), and the assistant turn is as long as the simulator's completion_tokens for it.
func TestPromptBlocksRendered(t *testing.T) {
	req := func(id string) []byte {
		return []byte(`{"tools":[{"type":"function","function":{"name":"get"}}],"messages":[` +
			`{"role":"user","content":"find the figure"},` +
			`{"role":"assistant","content":null,"tool_calls":[{"id":"` + id + `","type":"function","function":{"name":"get","arguments":"{\"id\": \"R-1\"}"}}]},` +
			`{"role":"tool","tool_call_id":"` + id + `","content":"{\"value\": 7}"}]}`)
	}
	tools := `[{"type":"function","function":{"name":"get"}}]`
	rendered := tools + "user" + "find the figure" + "assistant" + "get" + `{"id": "R-1"}` + "tool" + `{"value": 7}`
	a, na := promptBlocks(req("call_a"), 1, true)
	b, nb := promptBlocks(req("call_bbbbbbbbbbbbbbbb"), 1, true)
	if na != len(rendered)/bytesPerToken || nb != na || !slices.Equal(a, b) {
		t.Fatalf("rendered: %d and %d tokens (blocks equal %v), want %d and the same blocks", na, nb, slices.Equal(a, b), len(rendered)/bytesPerToken)
	}
	if _, raw := promptBlocks(req("call_a"), 1, false); raw <= na {
		t.Fatalf("as sent: %d tokens, want more than rendered %d (the JSON's ids and fields)", raw, na)
	}
}
