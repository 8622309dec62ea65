package kv

import "encoding/binary"

// reuseModel learns from the pool's own history how likely a block is to
// be asked for again, given what is known of it when it is used: how many
// earlier prompts held it, and how far before its prompt's end it sat (or
// that it was generated). Most written blocks are never read again, and
// which ones are depends on the workload (a conversation's next turn reads
// all of its previous prompt; questions over one document read the
// document, never the last question), so the odds are counted, not
// assumed.
//
// A use is credited to the class the block had at its previous use, so
// each class's rate estimates "used again" for a block in it. Blocks
// evicted from every tier are remembered by hash for a while (the ghost),
// with their count and class: a block computed again after it was dropped
// still counts as used again, else the rates would only measure what the
// current policy already keeps.
//
// It is called with the pool's lock held.
type reuseModel struct {
	seen, again [reuseClasses]float64
	// gaps and gapN sum the time from a block's last release to its next
	// use, over the uses counted: how long a block worth keeping has to be
	// kept (in the evictor's ticks).
	gaps, gapN float64
	total      float64 // uses counted (the sum of seen)
	window     float64 // halve the counts past this many uses, so they follow a changing workload

	ghost map[uint64]ghostBlock
	ring  []uint64 // ghost keys in the order they were forgotten; ring[next] is the oldest
	next  int
}

// ghostBlock is what the model keeps of a dropped block.
type ghostBlock struct {
	uses    uint32
	class   uint8
	open    bool   // its last use is not yet followed by another
	at      int32  // its slot in ring
	lastUse uint64 // when it was last released
}

const (
	reuseUseBuckets = 4 // held by 0, 1, 2, 3 or more earlier prompts
	reuseEndBuckets = 5 // < 512, < 2,048, < 8,192, ≥ 8,192 prompt tokens after it; not in a prompt
	reuseClasses    = reuseUseBuckets * reuseEndBuckets
)

// reuseClass is the class of a block used for the uses-th time (0: stored
// for the first time), after tokens prompt tokens of the prompt holding
// it (negative: a generated block, or a prompt the pool was not told).
func reuseClass(uses uint32, after int) uint8 {
	u := min(int(uses), reuseUseBuckets-1)
	var e int
	switch {
	case after < 0:
		e = 4
	case after < 512:
		e = 0
	case after < 2048:
		e = 1
	case after < 8192:
		e = 2
	default:
		e = 3
	}
	return uint8(u*reuseEndBuckets + e)
}

func newReuseModel(blocks int) *reuseModel {
	n := 8 * blocks
	return &reuseModel{window: float64(n), ghost: make(map[uint64]ghostBlock), ring: make([]uint64, 0, min(n, 1<<16))}
}

// ghostCap is how many dropped blocks the model remembers.
func (r *reuseModel) ghostCap() int { return int(r.window) }

func ghostKey(h Hash) uint64 { return binary.LittleEndian.Uint64(h[:8]) }

// use records a use of block m (stored, matched, or found computed by
// another sequence) after tokens prompt tokens, at tick now.
func (r *reuseModel) use(m *blockMeta, after int, now uint64) {
	if m.open {
		r.again[m.rclass]++
		if now > m.lastUse {
			r.gaps += float64(now - m.lastUse)
			r.gapN++
		}
	}
	c := reuseClass(m.uses, after)
	m.rclass, m.open = c, true
	m.uses++
	r.seen[c]++
	r.total++
	if r.total >= r.window {
		for i := range r.seen {
			r.seen[i] /= 2
			r.again[i] /= 2
		}
		r.total /= 2
		r.gaps /= 2
		r.gapN /= 2
	}
}

// odds is the estimated chance that a block of class c is used again,
// each class pulled towards the overall rate while it has few uses.
func (r *reuseModel) odds(c uint8) float64 {
	var again float64
	for _, a := range r.again {
		again += a
	}
	prior := 0.5
	if r.total > 0 {
		prior = again / r.total
	}
	const weight = 4 // uses the prior counts for
	return (r.again[c] + weight*prior) / (r.seen[c] + weight)
}

// forget remembers dropped block m, hashed h.
func (r *reuseModel) forget(h Hash, m *blockMeta) {
	k := ghostKey(h)
	g := ghostBlock{uses: m.uses, class: m.rclass, open: m.open, lastUse: m.lastUse}
	if len(r.ring) < r.ghostCap() {
		g.at = int32(len(r.ring))
		r.ring = append(r.ring, k)
	} else {
		old := r.ring[r.next]
		if og, ok := r.ghost[old]; ok && int(og.at) == r.next {
			delete(r.ghost, old)
		}
		g.at = int32(r.next)
		r.ring[r.next] = k
		r.next = (r.next + 1) % len(r.ring)
	}
	r.ghost[k] = g
}

// recall gives block m, stored again under hash h, the history the model
// kept of it.
func (r *reuseModel) recall(h Hash, m *blockMeta) {
	m.uses, m.rclass, m.open = 0, 0, false
	k := ghostKey(h)
	g, ok := r.ghost[k]
	if !ok {
		return
	}
	delete(r.ghost, k)
	m.uses, m.rclass, m.open, m.lastUse = g.uses, g.class, g.open, g.lastUse
}

// horizon is how long, in ticks, a block certain to be used again is
// worth keeping over one that is not: reuseHorizon mean gaps between a
// block's release and its next use (so it follows the workload's pace,
// not the pool's size); before any reuse is seen, one turnover of a pool
// of blocks.
func (r *reuseModel) horizon(blocks int) float64 {
	if r.gapN < 1 {
		return float64(blocks)
	}
	return reuseHorizon * r.gaps / r.gapN
}

// ReuseOdds is one class of the value evictor's reuse model: blocks held by
// Uses earlier prompts ("0", "1", "2", "3+") that sat Place before their
// prompt's end ("<512", "<2048", "<8192", ">=8192" tokens after them, or
// "generated"), and the learned chance that such a block is used again.
type ReuseOdds struct {
	Uses, Place string
	Odds        float64
	Seen        float64 // uses counted in the class (halved as the counts age)
}

var (
	reuseUseNames   = [reuseUseBuckets]string{"0", "1", "2", "3+"}
	reusePlaceNames = [reuseEndBuckets]string{"<512", "<2048", "<8192", ">=8192", "generated"}
)

// ReuseOdds returns what the value evictor has learned of reuse, one entry
// per class (nil with another evictor).
func (p *Pool) ReuseOdds() []ReuseOdds {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reuse == nil {
		return nil
	}
	out := make([]ReuseOdds, reuseClasses)
	for c := range out {
		out[c] = ReuseOdds{Uses: reuseUseNames[c/reuseEndBuckets], Place: reusePlaceNames[c%reuseEndBuckets],
			Odds: p.reuse.odds(uint8(c)), Seen: p.reuse.seen[c]}
	}
	return out
}
