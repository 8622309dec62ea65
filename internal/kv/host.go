package kv

import "container/list"

// hostTier is G2: blocks evicted from the pool kept in host memory under a
// budget of their own, found by hash and copied back into the pool on a
// prefix hit (onboarding) instead of being recomputed. Blocks move between
// the tiers, never live in both: a block taken back leaves G2.
//
// On this CPU engine the pool is host memory too, so "moving" a block is
// one memmove of its bytes, done where the pool evicts or onboards it
// (under the pool's lock): there is no device transfer to overlap. The
// disk tier (G3), whose writes are slow, is the one that needs a queue.
//
// Within its budget G2 evicts the lowest class first, then the least
// recently stored. It is used with the pool's lock held.
type hostTier struct {
	budget, used int64 // bytes
	blockBytes   int64
	noStorage    bool
	byHash       map[Hash]*list.Element
	lists        [NumClasses]*list.List // per class, front = least recent
	stats        hostStats
	// spare holds the buffers of blocks that left G2, for the next ones
	// that come: a block moving up usually makes room by pushing another
	// down, and fresh memory costs page faults that dwarf the copy.
	spare [][]byte
}

// maxSpare bounds the recycled buffers kept.
const maxSpare = 64

type hostEntry struct {
	hash   Hash
	parent Hash // the chain's previous block (zero for the first)
	class  Class
	owner  uint32 // the scope's number in the pool
	data   []byte // nil without storage
}

// hostStats counts G2's traffic.
type hostStats struct {
	Stored, Onboarded, Evicted int64
}

// HostStats describes G2: the blocks it holds, and how many it took from
// the pool, gave back to it, and dropped for room.
type HostStats struct {
	Blocks                     int
	Stored, Onboarded, Evicted int64
	// ByClass counts the blocks by retention class.
	ByClass [NumClasses]int
}

func newHostTier(budget, blockBytes int64, noStorage bool) *hostTier {
	t := &hostTier{budget: budget, blockBytes: blockBytes, noStorage: noStorage, byHash: map[Hash]*list.Element{}}
	for c := range t.lists {
		t.lists[c] = list.New()
	}
	return t
}

// put stores a copy of an evicted block, making room by evicting G2's
// least valuable blocks, which it returns (their buffers the caller's, to
// move further down or recycle). A block worth less than everything G2
// holds, with G2 full, is dropped.
func (t *hostTier) put(h Hash, c Class, owner uint32, data []byte) (stored bool, evicted []*hostEntry) {
	if t.blockBytes > t.budget {
		return false, nil
	}
	if _, ok := t.byHash[h]; ok {
		return true, nil
	}
	for t.used+t.blockBytes > t.budget {
		victim := t.lowest()
		if victim == nil || victim.class > c {
			return false, evicted // everything here is worth more
		}
		evicted = append(evicted, victim)
		t.remove(victim.hash)
		t.stats.Evicted++
	}
	e := &hostEntry{hash: h, class: c, owner: owner}
	if !t.noStorage {
		if n := len(t.spare); n > 0 {
			e.data = append(t.spare[n-1][:0], data...)
			t.spare = t.spare[:n-1]
		} else {
			e.data = append([]byte(nil), data...)
		}
	}
	t.byHash[h] = t.lists[c].PushBack(e)
	t.used += t.blockBytes
	t.stats.Stored++
	return true, evicted
}

// lowest is the entry G2 evicts next.
func (t *hostTier) lowest() *hostEntry {
	for c := range t.lists {
		if f := t.lists[c].Front(); f != nil {
			return f.Value.(*hostEntry)
		}
	}
	return nil
}

// take removes a block for onboarding and returns it.
func (t *hostTier) take(h Hash) (*hostEntry, bool) {
	el, ok := t.byHash[h]
	if !ok {
		return nil, false
	}
	e := el.Value.(*hostEntry)
	t.remove(h)
	t.stats.Onboarded++
	return e, true
}

func (t *hostTier) remove(h Hash) {
	el, ok := t.byHash[h]
	if !ok {
		return
	}
	e := el.Value.(*hostEntry)
	t.lists[e.class].Remove(el)
	delete(t.byHash, h)
	t.used -= t.blockBytes
}

// recycle keeps a buffer that is no longer needed for a later put.
func (t *hostTier) recycle(b []byte) {
	if b != nil && len(t.spare) < maxSpare {
		t.spare = append(t.spare, b)
	}
}

// has reports whether G2 holds h.
func (t *hostTier) has(h Hash) bool {
	_, ok := t.byHash[h]
	return ok
}

// clear drops everything.
func (t *hostTier) clear() {
	for c := range t.lists {
		t.lists[c].Init()
	}
	clear(t.byHash)
	t.used = 0
}
