package kv

import (
	"fmt"
	"time"
)

// Sequence is one sequence's block table: the blocks holding the KV of its
// positions, in order. It is used by one goroutine at a time (the engine's
// step loop); the pool it draws from is shared.
//
// Positions [0, Len()) hold computed KV. Reserve makes room for more, the
// forward pass writes them, Commit records them (hashing the blocks that
// became full), Release gives everything back.
type Sequence struct {
	pool   *Pool
	hasher *Hasher
	scope  Hash
	blocks []BlockID
	hashes []Hash  // hashes of blocks[0:len(hashes)], all full and committed
	tokens []int32 // the tokens at positions [0, Len())
	known  []Hash  // precomputed hashes of the prompt's full blocks (MatchPrefixHashes)
	// classes[i] is the retention class of full block i, rest that of the
	// blocks beyond (SetClasses).
	classes []Class
	rest    Class
	// owner numbers scope in the pool (ownerLocked).
	owner uint32
	// pinUntil is when the blocks this sequence pins (ClassPinned) may be
	// evicted again (Unix nanoseconds).
	pinUntil int64
	// persistUntil is when the blocks it makes persistent lose that class
	// (Unix nanoseconds; 0: never).
	persistUntil int64
	// onboarded counts the matched blocks brought up from G2 and G3 (the
	// rest of the match was in the pool), for usage by tier.
	onboarded struct{ host, disk int }
	matched   int // blocks MatchPrefixHashes matched
	promptLen int // the prompt's length, from MatchPrefixHashes (0: not told)
	// shared is the salt of a scope published for sharing whose prefix the
	// first sharedBlocks blocks are (SetShared), sharedOwner its number.
	shared       Hash
	sharedBlocks int
	sharedOwner  uint32
}

// NewSequence starts an empty sequence whose block hashes are salted with
// scope and bound to extra (model identity).
func (p *Pool) NewSequence(scope Hash, extra []byte) *Sequence {
	p.mu.Lock()
	owner := p.ownerLocked(scope)
	p.mu.Unlock()
	return &Sequence{pool: p, hasher: NewHasher(extra), scope: scope, owner: owner}
}

// SetShared makes the sequence's first blocks full blocks of a prefix
// published to the shared scope salted shared: they are hashed in that
// scope and owned by it (its quotas, its disk key), and the blocks after
// them chain from it in the sequence's own scope (Continue). Call it before
// matching, on an empty sequence.
func (s *Sequence) SetShared(shared Hash, blocks int) {
	if len(s.blocks) != 0 {
		panic("kv: SetShared on a non-empty sequence")
	}
	s.shared, s.sharedBlocks = shared, max(0, blocks)
	if s.sharedBlocks > 0 {
		s.pool.mu.Lock()
		s.sharedOwner = s.pool.ownerLocked(shared)
		s.pool.mu.Unlock()
	}
}

// ownerOf is the owner of the sequence's full block i: the shared scope's
// for a shared prefix's blocks, the sequence's otherwise.
func (s *Sequence) ownerOf(i int) uint32 {
	if i < s.sharedBlocks {
		return s.sharedOwner
	}
	return s.owner
}

// chainParent is the parent hash block i's hash chains from, given the
// hash of block i-1 (ignored for i = 0).
func (s *Sequence) chainParent(i int, prev Hash) Hash {
	switch {
	case i == 0 && s.sharedBlocks > 0:
		return s.shared
	case i == 0:
		return s.scope
	case i == s.sharedBlocks:
		return Continue(prev, s.scope)
	}
	return prev
}

// SetClasses sets the retention classes the sequence gives its full
// blocks: perBlock[i] for block i, rest for the blocks past perBlock. A
// block found in or committed to the prefix index takes the higher of its
// class and the sequence's. Call it before MatchPrefix so the blocks it
// finds are classed too. Classes ≥ NumClasses count as NumClasses-1.
func (s *Sequence) SetClasses(perBlock []Class, rest Class) {
	s.classes = s.classes[:0]
	for _, c := range perBlock {
		s.classes = append(s.classes, min(c, NumClasses-1))
	}
	s.rest = min(rest, NumClasses-1)
}

// PinUntil sets when the blocks the sequence gives ClassPinned expire:
// until then the pool never evicts them (a block pinned by several
// sequences keeps the latest expiry).
func (s *Sequence) PinUntil(t time.Time) { s.pinUntil = t.UnixNano() }

// PersistUntil gives the blocks the sequence makes persistent a TTL: at t
// they become unclassified (the zero time: they stay persistent). A block
// persistent without a TTL for any sequence keeps none.
func (s *Sequence) PersistUntil(t time.Time) {
	s.persistUntil = 0
	if !t.IsZero() {
		s.persistUntil = t.UnixNano()
	}
}

// expiryOf is the expiry the sequence gives its full block i's class.
func (s *Sequence) expiryOf(i int) int64 {
	switch s.classOf(i) {
	case ClassPinned:
		return s.pinUntil
	case ClassPersistent:
		return s.persistUntil
	}
	return 0
}

// classOf is the class the sequence gives its full block i.
func (s *Sequence) classOf(i int) Class {
	if i < len(s.classes) {
		return s.classes[i]
	}
	return s.rest
}

// Len is the number of positions with computed KV.
func (s *Sequence) Len() int { return len(s.tokens) }

// Tokens returns the tokens at positions [0, Len()); the caller must not
// modify them.
func (s *Sequence) Tokens() []int32 { return s.tokens }

// NumBlocks is the number of blocks in the table.
func (s *Sequence) NumBlocks() int { return len(s.blocks) }

// BlockSize implements model.Cache.
func (s *Sequence) BlockSize() int { return s.pool.cfg.BlockSize }

// Block implements model.Cache: layer l of logical block b.
func (s *Sequence) Block(l, b int) (k, v []byte) { return s.pool.Layer(s.blocks[b], l) }

// BlockHashes returns the hashes of the committed full blocks.
func (s *Sequence) BlockHashes() []Hash { return s.hashes }

// MatchPrefix reuses the cached blocks that hold a prefix of prompt, for a
// sequence that is still empty, and returns how many tokens they cover. It
// always leaves at least the last prompt token to compute, because its
// logits are needed.
func (s *Sequence) MatchPrefix(prompt []int32) int {
	return s.MatchPrefixHashes(prompt, s.PromptHashes(prompt))
}

// PromptHashes returns the chained hashes of prompt's full blocks in this
// sequence's scope (what MatchPrefix looks up), so callers that need them
// too hash once.
func (s *Sequence) PromptHashes(prompt []int32) []Hash {
	return s.hasher.SplitChain(nil, s.shared, s.sharedBlocks, s.scope, prompt, s.pool.cfg.BlockSize)
}

// MatchPrefixHashes is MatchPrefix with the prompt's block hashes (from
// PromptHashes) already computed.
func (s *Sequence) MatchPrefixHashes(prompt []int32, hashes []Hash) int {
	if len(s.tokens) != 0 || len(s.blocks) != 0 {
		panic("kv: MatchPrefix on a non-empty sequence")
	}
	bs := s.pool.cfg.BlockSize
	limit := min((len(prompt)-1)/bs, len(hashes)) // full blocks that leave ≥ 1 token
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.QueryTokens += int64(len(prompt))
	for i := 0; i < limit; i++ {
		id, tier, ok := s.findLocked(i, hashes[i])
		if !ok {
			break
		}
		switch tier {
		case TierHost:
			s.onboarded.host++
		case TierDisk:
			s.onboarded.disk++
		}
		p.usedLocked(id, len(prompt)-(i+1)*bs)
		s.blocks = append(s.blocks, id)
		s.hashes = append(s.hashes, hashes[i])
	}
	n := len(s.blocks) * bs
	s.matched = len(s.blocks)
	s.promptLen = len(prompt)
	s.tokens = append(s.tokens, prompt[:n]...)
	s.known = hashes
	p.stats.HitTokens += int64(n)
	return n
}

// findLocked takes a reference for the sequence on its full block i, hash
// h (the previous blocks its own already), from the pool or brought up
// from host memory or the disk tier's staging (tier says which), with the
// sequence's class; false when none holds it or the pool has no room.
func (s *Sequence) findLocked(i int, h Hash) (BlockID, Tier, bool) {
	p := s.pool
	if id, ok := p.index[h]; ok {
		p.acquireLocked(id)
		p.raiseLocked(id, s.classOf(i), s.expiryOf(i))
		return id, TierPool, true
	}
	parent := BlockID(-1)
	if i > 0 {
		parent = s.blocks[i-1]
	}
	return p.onboardLocked(h, parent, s.classOf(i), s.expiryOf(i), s.ownerOf(i))
}

// MatchedFrom splits the tokens MatchPrefixHashes matched by the tier they
// were found in: the pool (G1), host memory (G2) and disk (G3).
func (s *Sequence) MatchedFrom() (pool, host, disk int) {
	bs := s.pool.cfg.BlockSize
	host, disk = s.onboarded.host*bs, s.onboarded.disk*bs
	return s.matched*bs - host - disk, host, disk
}

// blocksNeeded is how many new blocks Reserve(n) must take: blocks to cover
// n positions plus a private copy of the block to be written next if it is
// shared.
func (s *Sequence) blocksNeededLocked(n int) (grow int, cow bool) {
	bs := s.pool.cfg.BlockSize
	grow = max(0, (n+bs-1)/bs-len(s.blocks))
	if b := len(s.tokens) / bs; b < len(s.blocks) && len(s.tokens) < n && s.pool.meta[s.blocks[b]].refs > 1 {
		cow = true
	}
	return grow, cow
}

// Reserve makes sure blocks cover positions [0, n) and that the block the
// next position is written into is owned by this sequence alone (copying a
// shared, partly filled block first). It takes all the blocks it needs or
// none, returning ErrNoSpace.
func (s *Sequence) Reserve(n int) error {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	grow, cow := s.blocksNeededLocked(n)
	need := grow
	if cow {
		need++
	}
	if need == 0 {
		return nil
	}
	if need > len(p.free)+p.evictor.Len() {
		return ErrNoSpace
	}
	if cow {
		b := len(s.tokens) / p.cfg.BlockSize
		old := s.blocks[b]
		id, err := p.allocLocked()
		if err != nil {
			return err
		}
		copy(p.blockData(id), p.blockData(old))
		p.releaseLocked(old)
		s.blocks[b] = id
	}
	for i := 0; i < grow; i++ {
		id, err := p.allocLocked()
		if err != nil {
			return err // cannot happen: counted above
		}
		s.blocks = append(s.blocks, id)
	}
	return nil
}

// BlocksFor is the number of blocks Reserve(n) would take now.
func (s *Sequence) BlocksFor(n int) int {
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	grow, cow := s.blocksNeededLocked(n)
	if cow {
		grow++
	}
	return grow
}

// Commit records that the KV of tokens has been written at positions
// [Len(), Len()+len(tokens)) and registers every block that became full in
// the prefix index (taking an identical block already there instead, if
// any).
func (s *Sequence) Commit(tokens []int32) {
	bs := s.pool.cfg.BlockSize
	if len(s.tokens)+len(tokens) > len(s.blocks)*bs {
		panic(fmt.Sprintf("kv: commit of %d tokens past the %d reserved positions", len(s.tokens)+len(tokens), len(s.blocks)*bs))
	}
	s.tokens = append(s.tokens, tokens...)
	full := len(s.tokens) / bs
	if full == len(s.hashes) {
		return
	}
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(s.hashes); i < full; i++ {
		// parent links the chain (the previous block, or the scope's salt
		// for the first); the hash chains from chainParent, which differs
		// where a shared prefix ends.
		parent := s.chainParent(0, Hash{})
		if i > 0 {
			parent = s.hashes[i-1]
		}
		blockTokens := s.tokens[i*bs : (i+1)*bs]
		var h Hash
		if i < len(s.known) {
			h = s.known[i] // the prompt's own block, hashed at admission
		} else {
			h = s.hasher.Block(s.chainParent(i, parent), blockTokens)
		}
		after := -1 // generated, or a prompt the sequence was not told
		if end := (i + 1) * bs; end <= s.promptLen {
			after = s.promptLen - end
		}
		s.blocks[i] = p.commitLocked(s.blocks[i], h, parent, blockTokens, s.classOf(i), s.expiryOf(i), s.ownerOf(i), after)
		s.hashes = append(s.hashes, h)
	}
}

// Fork returns a new sequence sharing all of this one's blocks (O(blocks)
// reference increments, no copying). The first write into a shared partly
// filled block copies it.
func (s *Sequence) Fork() *Sequence {
	p := s.pool
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range s.blocks {
		p.acquireLocked(id)
	}
	return &Sequence{
		pool:     p,
		hasher:   NewHasher(s.hasher.extra),
		scope:    s.scope,
		blocks:   append([]BlockID(nil), s.blocks...),
		hashes:   append([]Hash(nil), s.hashes...),
		tokens:   append([]int32(nil), s.tokens...),
		known:    s.known,
		classes:  append([]Class(nil), s.classes...),
		rest:     s.rest,
		owner:    s.owner,
		pinUntil: s.pinUntil, persistUntil: s.persistUntil, promptLen: s.promptLen,
		shared: s.shared, sharedBlocks: s.sharedBlocks, sharedOwner: s.sharedOwner,
	}
}

// Release returns every block to the pool, tail first, so the tail of the
// sequence is evicted before its prefix. Full blocks stay findable until
// their space is needed — except from the first ephemeral block on: a
// turn's reasoning, which the chat template drops from the next turn's
// prompt, and everything after it in the chain can never be matched again,
// so they are freed now rather than cached (admission, not only eviction).
// The sequence is empty afterwards.
func (s *Sequence) Release() {
	p := s.pool
	p.mu.Lock()
	dead := len(s.blocks)
	for i, id := range s.blocks {
		if m := &p.meta[id]; m.hashed && m.class == ClassEphemeral {
			dead = i
			break
		}
	}
	for i := len(s.blocks) - 1; i >= 0; i-- {
		id := s.blocks[i]
		p.releaseLocked(id)
		if m := &p.meta[id]; i >= dead && m.refs == 0 && m.hashed && m.children == 0 {
			p.evictor.Remove(id)
			p.unindexLocked(id)
			p.free = append(p.free, id)
		}
	}
	p.mu.Unlock()
	s.blocks, s.hashes, s.tokens, s.known = s.blocks[:0], s.hashes[:0], s.tokens[:0], nil
	s.classes, s.rest = s.classes[:0], 0
	s.onboarded.host, s.onboarded.disk, s.matched, s.promptLen = 0, 0, 0, 0
	s.shared, s.sharedBlocks, s.sharedOwner = Hash{}, 0, 0
}
