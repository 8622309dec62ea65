package kv

import (
	"context"

	"github.com/kvserve/kvserve/internal/kv/diskstore"
)

// The disk tier (G3) is a diskstore.Store under the pool: blocks leaving
// memory (G2's victims, or the pool's own without G2) are queued to it, and
// a prefix that continues on disk is loaded by Fetch before its request is
// admitted, then onboarded like a G2 hit. Unlike G2 it keeps its copy when
// a block goes back up: disk is cheap, and the block need not be written
// again when it next leaves memory.

// DiskStats describes G3 (zero without one).
type DiskStats = diskstore.Stats

// openDisk opens G3 for a pool.
func (p *Pool) openDisk() error {
	c := p.cfg
	staging := min(int64(p.blockBytes)*int64(c.NumBlocks), c.DiskBytes, 1<<30)
	d, err := diskstore.Open(diskstore.Config{
		Dir: c.DiskDir, Budget: c.DiskBytes, Staging: staging, Logger: c.Logger,
		IndexOnly: c.NoStorage, BlockBytes: int64(p.blockBytes),
		Events: func(stored bool, class uint8, hashes []diskstore.Hash) {
			if c.Events == nil {
				return
			}
			ev := Event{Kind: BlockRemoved, Tier: TierDisk, BlockSize: c.BlockSize, Class: Class(class)}
			if stored {
				ev.Kind = BlockStored
			}
			for _, h := range hashes {
				ev.Hashes = append(ev.Hashes, Hash(h))
			}
			c.Events.Publish(ev)
		},
	})
	if err != nil {
		return err
	}
	p.disk = d
	return nil
}

// spillLocked passes G2's victims on to G3, or recycles their buffers.
func (p *Pool) spillLocked(victims []*hostEntry) {
	for _, v := range victims {
		if p.cfg.Events != nil {
			p.cfg.Events.Publish(Event{Kind: BlockRemoved, Tier: TierHost, Hashes: []Hash{v.hash}, BlockSize: p.cfg.BlockSize})
		}
		if !p.toDiskLocked(v.hash, v.parent, v.class, v.owner, v.data, false) {
			p.host.recycle(v.data)
		}
	}
}

// toDiskLocked queues a block for G3 and reports whether G3 took data
// (copied first when clone is set, as for a pool block about to be reused).
// The block's ancestors that G3 lacks go with it (ancestorsToDiskLocked).
func (p *Pool) toDiskLocked(h, parent Hash, c Class, owner uint32, data []byte, clone bool) bool {
	if p.disk == nil {
		return false
	}
	b := diskstore.Block{Hash: h, Scope: p.scopes[owner], Class: uint8(min(c, diskstore.NumClasses-1))}
	if p.disk.Has(h) || data == nil { // known already, or a pool without storage (the disk tier is index-only)
		p.disk.Put(b) // marks it used
		return false
	}
	b.Data = data
	took := false
	if clone {
		p.disk.PutCopy(b)
	} else {
		took = p.disk.Put(b)
	}
	p.ancestorsToDiskLocked(parent)
	return took
}

// Bounds on the ancestors one block takes down with it: how far up the
// chain to look, and how many to copy (the rest go with a later block).
const (
	maxAncestorSteps  = 4096
	maxAncestorWrites = 64
)

// ancestorsToDiskLocked queues the ancestors (from parent up) of a block
// bound for G3 that G3 lacks, copied from the pool or G2: a block on disk
// is of use only after its whole prefix, and the prefix is what stays in
// memory (chains are cut from the tail), so after a crash, which loses
// memory, the disk would otherwise hold tails that nothing can reach. It
// walks up past ancestors the disk has while memory knows their parents.
func (p *Pool) ancestorsToDiskLocked(parent Hash) {
	writes := 0
	for range maxAncestorSteps {
		if parent.IsZero() || writes == maxAncestorWrites {
			return
		}
		onDisk := p.disk.Has(parent)
		if id, ok := p.index[parent]; ok {
			m := &p.meta[id]
			if !onDisk {
				b := diskstore.Block{Hash: m.hash, Scope: p.scopes[m.owner], Class: uint8(offloadClass(m.class))}
				if p.slab != nil { // else the disk tier is index-only
					b.Data = p.blockData(id)
				}
				p.disk.PutCopy(b)
				writes++
			}
			parent = Hash{}
			if m.parent >= 0 {
				parent = p.meta[m.parent].hash
			}
			continue
		}
		if p.host == nil {
			return
		}
		el, ok := p.host.byHash[parent]
		if !ok {
			return // on disk only: what precedes it went down with it
		}
		e := el.Value.(*hostEntry)
		if !onDisk {
			p.disk.PutCopy(diskstore.Block{Hash: e.hash, Scope: p.scopes[e.owner], Class: uint8(e.class), Data: e.data})
			writes++
		}
		parent = e.parent
	}
}

// offloadClass is the class a block leaving the pool keeps below it: an
// unclassified block, or a pin (evicted only once expired), as session.
func offloadClass(c Class) Class {
	if c == ClassDefault || c == ClassPinned {
		return ClassSession
	}
	return c
}

// Fetch starts moving the blocks of a prompt's chain that only G3 holds
// up into memory, so that a prefix match can onboard them, and calls done
// when they have arrived. It returns how many blocks are on their way; 0
// means nothing to wait for (done is not called). scope is the chain's
// scope salt. With ahead set the blocks are a guess (no request asks for
// them yet), loaded only into half of G3's staging area.
func (p *Pool) Fetch(scope Hash, chain []Hash, ahead bool, done func()) int {
	if p.disk == nil || p.cfg.DisableIndex {
		return 0
	}
	p.mu.Lock()
	i := 0
	for ; i < len(chain); i++ {
		if _, ok := p.index[chain[i]]; ok {
			continue
		}
		if p.host != nil && p.host.has(chain[i]) {
			continue
		}
		break
	}
	p.mu.Unlock()
	if i == len(chain) {
		return 0
	}
	rest := make([]diskstore.Hash, len(chain)-i)
	for j, h := range chain[i:] {
		rest[j] = h
	}
	if ahead {
		return p.disk.FetchAhead(scope, rest, done)
	}
	return p.disk.Fetch(scope, rest, done)
}

// HasDisk reports whether the pool has a disk tier.
func (p *Pool) HasDisk() bool { return p.disk != nil }

// Close writes the blocks held in memory (the pool's findable blocks and
// G2's) to G3, so the next process finds them, waits for G3's queue (until
// ctx ends) and closes it. The pool must no longer be in use. Without G3 it
// does nothing.
func (p *Pool) Close(ctx context.Context) error {
	if p.disk == nil {
		return nil
	}
	p.mu.Lock()
	var blocks []diskstore.Block
	if p.slab != nil {
		for i := range p.meta {
			m := &p.meta[i]
			if !m.hashed || p.disk.Has(m.hash) {
				continue
			}
			c := m.class
			if c == ClassDefault {
				c = ClassSession
			}
			blocks = append(blocks, diskstore.Block{Hash: m.hash, Scope: p.scopes[m.owner], Class: uint8(c), Data: p.blockData(BlockID(i))})
		}
		if p.host != nil {
			for _, el := range p.host.byHash {
				e := el.Value.(*hostEntry)
				if e.data != nil && !p.disk.Has(e.hash) {
					blocks = append(blocks, diskstore.Block{Hash: e.hash, Scope: p.scopes[e.owner], Class: uint8(e.class), Data: e.data})
				}
			}
		}
	}
	p.mu.Unlock()
	var werr error
	for _, b := range blocks {
		if ctx.Err() != nil {
			break
		}
		if err := p.disk.Write(b); err != nil && werr == nil {
			werr = err
		}
	}
	err := p.disk.Close(ctx)
	if err == nil {
		err = werr
	}
	return err
}

// ForgetScope drops every block of a scope (a deleted tenant) from every
// tier: cached pool blocks are freed, ones in use lose their hash (freed
// when released), G2's copies are dropped, and G3 destroys the scope's key
// with its files (crypto-shredding).
func (p *Pool) ForgetScope(scope Hash) error {
	p.mu.Lock()
	if o, ok := p.owners[scope]; ok {
		for i := range p.meta {
			id, m := BlockID(i), &p.meta[i]
			if !m.hashed || m.owner != o {
				continue
			}
			if m.refs == 0 {
				p.evictor.Remove(id)
				p.unindexLocked(id)
				p.free = append(p.free, id)
				continue
			}
			p.unindexLocked(id)
		}
		if p.host != nil {
			var gone []Hash
			for h, el := range p.host.byHash {
				if e := el.Value.(*hostEntry); e.owner == o {
					gone = append(gone, h)
				}
			}
			for _, h := range gone {
				p.host.remove(h)
			}
			if len(gone) > 0 && p.cfg.Events != nil {
				p.cfg.Events.Publish(Event{Kind: BlockRemoved, Tier: TierHost, Hashes: gone, BlockSize: p.cfg.BlockSize})
			}
		}
	}
	p.mu.Unlock()
	if p.disk != nil {
		return p.disk.ForgetScope(scope)
	}
	return nil
}
