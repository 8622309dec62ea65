package router

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"sync"
	"time"

	"github.com/kvserve/kvserve/internal/kv"
)

// numTiers is the number of kv.Tier values the index tracks (pool, host,
// disk).
const numTiers = 3

// blockKey is the first 8 bytes of a block hash: a map keyed by it is
// smaller and faster to probe than one keyed by the whole hash. Two
// blocks sharing a key (about one pair in 10^7 among a million blocks)
// would make the router credit a worker with a block it may not hold: a
// worse placement, never a wrong answer, since each worker finds its
// blocks by their whole hash.
type blockKey uint64

func keyOf(h kv.Hash) blockKey { return blockKey(binary.LittleEndian.Uint64(h[:8])) }

// holder is one worker's copies of a block: a bit per tier (bit t-1 for
// kv.Tier t).
type holder struct {
	slot  int32
	tiers uint8
}

// Index is the global block index: for every block hash, the workers that
// can find it and in which tiers.
//
// Layout: one map from hash (blockKey: its first 8 bytes) to a short list of holders (a block is
// usually held by one worker or a few), and a slot per worker naming it
// in those lists. Scoring walks a request's chain with one map lookup per
// block; events change one holder each. Forgetting a worker (it left, died
// or resyncs from a snapshot) scans the whole map: rare, and it keeps
// nothing per worker beyond a count.
//
// Concurrency: every method may be called from any goroutine; lookups
// share a read lock, updates take the write lock.
type Index struct {
	now func() time.Time

	mu      sync.RWMutex
	blocks  map[blockKey][]holder
	slots   map[string]int32
	workers []workerState // by slot; id "" is a free slot
}

// workerState is what the index knows of one worker.
type workerState struct {
	id string
	// blocks counts the (hash, tier) pairs held.
	blocks int
	// updated is when the worker's last update was applied.
	updated time.Time
	// blockSize is the size of the worker's blocks (from its events; 0
	// until one says).
	blockSize int
	// seq is the sequence number of the last event applied (0: unknown,
	// as after a snapshot, whose events carry none).
	seq uint64
}

// NewIndex returns an empty index; now is its clock (nil: time.Now),
// used to tell how long a worker's events have been silent.
func NewIndex(now func() time.Time) *Index {
	if now == nil {
		now = time.Now
	}
	return &Index{now: now, blocks: map[blockKey][]holder{}, slots: map[string]int32{}}
}

// slot returns worker's slot, making one. Called with mu held for writing.
func (x *Index) slot(worker string) int32 {
	if s, ok := x.slots[worker]; ok {
		return s
	}
	s := int32(-1)
	for i := range x.workers {
		if x.workers[i].id == "" {
			s = int32(i)
			break
		}
	}
	if s < 0 {
		s = int32(len(x.workers))
		x.workers = append(x.workers, workerState{})
	}
	x.workers[s] = workerState{id: worker}
	x.slots[worker] = s
	return s
}

// Apply applies one worker's events, in order. With reset set (a
// snapshot), everything known of the worker is forgotten first.
func (x *Index) Apply(worker string, reset bool, events []kv.Event) {
	x.mu.Lock()
	defer x.mu.Unlock()
	s := x.slot(worker)
	if reset {
		x.forget(s, 0)
		x.workers[s].seq = 0
	}
	w := &x.workers[s]
	for i := range events {
		e := &events[i]
		w.seq = max(w.seq, e.Seq)
		if e.Tier < 1 || e.Tier > numTiers {
			continue // a tier this index does not know: ignored, not guessed at
		}
		bit := uint8(1) << (e.Tier - 1)
		switch e.Kind {
		case kv.BlockStored:
			if e.BlockSize > 0 {
				w.blockSize = e.BlockSize
			}
			for _, h := range e.Hashes {
				x.store(s, h, bit)
			}
		case kv.BlockRemoved:
			for _, h := range e.Hashes {
				x.remove(s, h, bit)
			}
		case kv.AllCleared:
			x.forget(s, bit)
		}
	}
	w.updated = x.now()
}

func (x *Index) store(s int32, h kv.Hash, bit uint8) {
	k := keyOf(h)
	hs := x.blocks[k]
	for i := range hs {
		if hs[i].slot == s {
			if hs[i].tiers&bit == 0 {
				hs[i].tiers |= bit
				x.workers[s].blocks++
			}
			return
		}
	}
	x.blocks[k] = append(hs, holder{slot: s, tiers: bit})
	x.workers[s].blocks++
}

func (x *Index) remove(s int32, h kv.Hash, bit uint8) {
	k := keyOf(h)
	hs := x.blocks[k]
	for i := range hs {
		if hs[i].slot != s {
			continue
		}
		if hs[i].tiers&bit == 0 {
			return
		}
		x.workers[s].blocks--
		if hs[i].tiers &^= bit; hs[i].tiers == 0 {
			hs[i] = hs[len(hs)-1]
			if hs = hs[:len(hs)-1]; len(hs) == 0 {
				delete(x.blocks, k)
			} else {
				x.blocks[k] = hs
			}
		}
		return
	}
}

// forget drops slot s's blocks in the tiers of mask (0: every tier).
func (x *Index) forget(s int32, mask uint8) {
	if mask == 0 {
		mask = 1<<numTiers - 1
	}
	if x.workers[s].blocks == 0 {
		return
	}
	for h, hs := range x.blocks { // deleting during range is allowed
		for i := range hs {
			if hs[i].slot != s {
				continue
			}
			x.workers[s].blocks -= bits.OnesCount8(hs[i].tiers & mask)
			if hs[i].tiers &^= mask; hs[i].tiers == 0 {
				hs[i] = hs[len(hs)-1]
				if hs = hs[:len(hs)-1]; len(hs) == 0 {
					delete(x.blocks, h)
				} else {
					x.blocks[h] = hs
				}
			}
			break
		}
	}
}

// Remove forgets worker: it left or died.
func (x *Index) Remove(worker string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	s, ok := x.slots[worker]
	if !ok {
		return
	}
	x.forget(s, 0)
	x.workers[s] = workerState{}
	delete(x.slots, worker)
}

// Blocks returns how many (block, tier) pairs worker holds.
func (x *Index) Blocks(worker string) int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if s, ok := x.slots[worker]; ok {
		return x.workers[s].blocks
	}
	return 0
}

// Len returns how many (block, tier) pairs the index holds, over every
// worker.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := 0
	for i := range x.workers {
		n += x.workers[i].blocks
	}
	return n
}

// Tiers returns the tiers in which worker holds h (none: nil).
func (x *Index) Tiers(worker string, h kv.Hash) []kv.Tier {
	x.mu.RLock()
	defer x.mu.RUnlock()
	s, ok := x.slots[worker]
	if !ok {
		return nil
	}
	var out []kv.Tier
	for _, hd := range x.blocks[keyOf(h)] {
		if hd.slot == s {
			for t := kv.Tier(1); t <= numTiers; t++ {
				if hd.tiers&(1<<(t-1)) != 0 {
					out = append(out, t)
				}
			}
		}
	}
	return out
}

// Workers returns the ids of the workers the index knows.
func (x *Index) Workers() []string {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]string, 0, len(x.slots))
	for id := range x.slots {
		out = append(out, id)
	}
	return out
}

// Updated returns when worker's last update was applied (zero: never).
func (x *Index) Updated(worker string) time.Time {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if s, ok := x.slots[worker]; ok {
		return x.workers[s].updated
	}
	return time.Time{}
}

// checkInvariants verifies the counts against the map (tests).
func (x *Index) checkInvariants() error {
	x.mu.RLock()
	defer x.mu.RUnlock()
	counts := make([]int, len(x.workers))
	for h, hs := range x.blocks {
		if len(hs) == 0 {
			return fmt.Errorf("block %v has an empty holder list", h)
		}
		seen := map[int32]bool{}
		for _, hd := range hs {
			if hd.tiers == 0 || hd.tiers >= 1<<numTiers {
				return fmt.Errorf("block %v: slot %d has tiers %b", h, hd.slot, hd.tiers)
			}
			if seen[hd.slot] {
				return fmt.Errorf("block %v: slot %d listed twice", h, hd.slot)
			}
			seen[hd.slot] = true
			if int(hd.slot) >= len(x.workers) || x.workers[hd.slot].id == "" {
				return fmt.Errorf("block %v: slot %d is free", h, hd.slot)
			}
			counts[hd.slot] += bits.OnesCount8(hd.tiers)
		}
	}
	for s, w := range x.workers {
		if w.blocks != counts[s] {
			return fmt.Errorf("slot %d (%q) counts %d blocks, holds %d", s, w.id, w.blocks, counts[s])
		}
		if w.id != "" && x.slots[w.id] != int32(s) {
			return fmt.Errorf("slot %d (%q) is not its worker's", s, w.id)
		}
	}
	return nil
}
