package kv

import (
	"fmt"
	"math"
)

// Peer transfer: a worker chosen for a request whose prefix another worker
// holds copies those blocks from it instead of computing them again. The
// holder exports them by hash (Export); the chosen worker imports them into
// its pool as cached blocks of the request's chain (Sequence.Import), where
// the request's prefix match then finds them. Both must run the same model
// with the same block geometry and secret (the hashes say the scope and the
// model, the caller checks the geometry).

// importedUse marks a commit that is not a use of the block: an imported
// block is used by the request it was imported for when that request
// matches it, so the reuse model counts it once.
const importedUse = math.MinInt32

// Export returns the contents of the leading blocks of hashes that memory
// holds (the pool or host memory), in order, stopping at the first block
// neither holds: what a peer imports with Sequence.Import. With NoStorage
// the slices are nil (the count is what matters). The pool blocks are
// copied outside the pool's lock, held by a reference meanwhile; reading
// them counts as a use for recency (a peer's request is about to need
// them), not for the reuse odds.
func (p *Pool) Export(hashes []Hash) [][]byte {
	if p.cfg.DisableIndex || len(hashes) == 0 {
		return nil
	}
	out := make([][]byte, 0, len(hashes))
	var held []BlockID
	type copyJob struct {
		dst int
		id  BlockID
	}
	var jobs []copyJob
	p.mu.Lock()
	for _, h := range hashes {
		if id, ok := p.index[h]; ok {
			p.acquireLocked(id)
			held = append(held, id)
			var buf []byte
			if p.slab != nil {
				buf = make([]byte, p.blockBytes)
				jobs = append(jobs, copyJob{len(out), id})
			}
			out = append(out, buf)
			continue
		}
		if p.host == nil {
			break
		}
		el, ok := p.host.byHash[h]
		if !ok {
			break
		}
		var buf []byte
		if e := el.Value.(*hostEntry); e.data != nil {
			buf = append([]byte(nil), e.data...)
		}
		out = append(out, buf)
	}
	p.stats.ExportedBlocks += int64(len(out))
	p.mu.Unlock()
	// A referenced block's contents do not change: only a sequence that
	// holds it alone writes into a block (Reserve copies a shared one).
	for _, j := range jobs {
		copy(out[j.dst], p.blockData(j.id))
	}
	if len(held) > 0 {
		p.mu.Lock()
		for i := len(held) - 1; i >= 0; i-- {
			p.releaseLocked(held[i])
		}
		p.mu.Unlock()
	}
	return out
}

// Import adds blocks of prompt computed elsewhere (a peer's Export) to the
// pool as cached blocks of this sequence's chain, with the classes, owners
// and expiries the sequence gives its blocks: data[j] holds full block
// from+j, hashes are the prompt's (PromptHashes). Blocks [0, from) must be
// in memory already (Held; those in host memory are brought up into the
// pool), or nothing is imported (a prefix match stops at the
// first missing block, so blocks after a hole could never be found). A
// block the pool gained meanwhile is kept, not overwritten. Import stops
// where the pool has no room and at the prompt's last full block that
// leaves a token to compute, and returns how many blocks of data it
// stored. The sequence must be empty; it is empty again afterwards.
func (s *Sequence) Import(prompt []int32, hashes []Hash, from int, data [][]byte) (int, error) {
	if len(s.tokens) != 0 || len(s.blocks) != 0 {
		panic("kv: Import on a non-empty sequence")
	}
	p := s.pool
	bs := p.cfg.BlockSize
	limit := min((len(prompt)-1)/bs, len(hashes), from+len(data))
	if p.cfg.DisableIndex || from < 0 || from >= limit {
		return 0, nil
	}
	if p.slab != nil {
		for j := range data[:limit-from] {
			if len(data[j]) != p.blockBytes {
				return 0, fmt.Errorf("kv: imported block %d has %d bytes, the pool's blocks %d", from+j, len(data[j]), p.blockBytes)
			}
		}
	}
	stored := 0
	p.mu.Lock()
	for i := 0; i < limit; i++ {
		if id, _, ok := s.findLocked(i, hashes[i]); ok { // held here already, or up from host memory
			s.blocks = append(s.blocks, id)
			s.hashes = append(s.hashes, hashes[i])
			continue
		}
		if i < from {
			break // a hole before the imported blocks
		}
		id, err := p.allocLocked()
		if err != nil {
			break // no room: keep what was stored
		}
		if d := data[i-from]; d != nil {
			copy(p.blockData(id), d)
		}
		parent := s.chainParent(0, Hash{})
		if i > 0 {
			parent = hashes[i-1]
		}
		id = p.commitLocked(id, hashes[i], parent, prompt[i*bs:(i+1)*bs], s.classOf(i), s.expiryOf(i), s.ownerOf(i), importedUse)
		s.blocks = append(s.blocks, id)
		s.hashes = append(s.hashes, hashes[i])
		stored++
	}
	p.stats.ImportedBlocks += int64(stored)
	p.mu.Unlock()
	s.tokens = append(s.tokens, prompt[:len(s.blocks)*bs]...)
	s.Release()
	return stored, nil
}

// Held is how many leading blocks of hashes the pool or host memory holds.
func (p *Pool) Held(hashes []Hash) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, h := range hashes {
		if _, ok := p.index[h]; ok {
			continue
		}
		if p.host != nil && p.host.has(h) {
			continue
		}
		return i
	}
	return len(hashes)
}
