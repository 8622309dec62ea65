package kv

import (
	"container/heap"
	"time"
)

// The retention classes, lowest value first (DESIGN.md). The engine tags
// blocks with them; 0 is unclassified and evicted as ClassSession.
const (
	ClassDefault    Class = 0 // unclassified: evicted as ClassSession
	ClassEphemeral  Class = 1 // reasoning, one-shot scratch: never cached past its sequence
	ClassSession    Class = 2 // conversation history
	ClassPersistent Class = 3 // system prompts, tool definitions
	ClassPinned     Class = 4 // context caches: never evicted before their expiry
)

var classNames = [...]string{"default", "ephemeral", "session", "persistent", "pinned"}

func (c Class) String() string {
	if int(c) < len(classNames) {
		return classNames[c]
	}
	return "unknown"
}

// valueEvictor is the pool's default eviction policy: retention by value.
//
//   - Chains are cut from the tail. Only a leaf — a cached block no other
//     findable block extends — is a candidate: prefix matching stops at the
//     first miss, so a block evicted from the middle of a chain would make
//     every block after it worthless while they kept their space.
//   - The lowest class goes first: ephemeral, then session (and
//     unclassified), then persistent; pinned blocks are not candidates at all
//     until their expiry, and then become unclassified cached blocks.
//   - Within a class, the lowest value: recency and the odds of reuse. A
//     block's priority is the time of its last release (counted in
//     releases) plus reuseHorizon mean reuse gaps times the chance,
//     learned from the pool's own history (reuseModel), that a block like
//     it is used again: a block likely to be read again outlives fresher
//     ones that are likely dead writes, but not forever. With equal odds
//     this is LRU, tail first.
//
// It reads the pool's block metadata and is called with the pool's lock
// held.
type valueEvictor struct {
	p       *Pool
	classes [NumClasses]blockHeap // leaves by priority, per class
	pins    blockHeap             // cached pinned blocks before their expiry, by expiry
	held    int                   // cached blocks with cached children, not pinned
	where   []int32               // per block: index in its class heap or pins, -1 when not there
	inPins  []bool
	// timed holds the cached persistent blocks whose class has an expiry
	// (a TTL), candidates or held, soonest first: at it they become
	// unclassified.
	timed  blockHeap
	whereT []int32 // per block: index in timed, -1 when not there
	tick   uint64  // releases so far: the evictor's clock
	n      int     // cached blocks
}

var _ Evictor = (*valueEvictor)(nil)

func newValueEvictor(p *Pool) *valueEvictor {
	v := &valueEvictor{p: p, where: make([]int32, p.cfg.NumBlocks), inPins: make([]bool, p.cfg.NumBlocks),
		whereT: make([]int32, p.cfg.NumBlocks)}
	for i := range v.where {
		v.where[i], v.whereT[i] = -1, -1
	}
	for c := range v.classes {
		v.classes[c] = blockHeap{v: v, where: v.where, less: byPriority}
	}
	v.pins = blockHeap{v: v, where: v.where, less: byExpiry}
	v.timed = blockHeap{v: v, where: v.whereT, less: byExpiry}
	return v
}

func (v *valueEvictor) now() int64 { return v.p.cfg.Now().UnixNano() }

// evictClass is the class a cached block is evicted as (an unexpired pin
// is never a candidate).
func (v *valueEvictor) evictClass(m *blockMeta) Class {
	if m.class == 0 {
		return ClassSession
	}
	return m.class
}

// Add implements Evictor: id's last reference was dropped.
func (v *valueEvictor) Add(id BlockID) {
	v.n++
	v.tick++
	m := &v.p.meta[id]
	m.lastUse = v.tick
	if v.expired(m) {
		v.p.demoteLocked(id)
	}
	if m.class == ClassPersistent && m.expiry != 0 {
		heap.Push(&v.timed, id)
	}
	switch {
	case m.class == ClassPinned:
		v.inPins[id] = true
		heap.Push(&v.pins, id)
	case m.children > 0:
		v.held++
	default:
		v.push(id)
	}
}

// expired reports whether a block's class has run out: a pin past its
// expiry, or a persistent block past its TTL.
func (v *valueEvictor) expired(m *blockMeta) bool {
	switch m.class {
	case ClassPinned:
		return m.expiry <= v.now()
	case ClassPersistent:
		return m.expiry != 0 && m.expiry <= v.now()
	}
	return false
}

// push makes cached leaf id a candidate of its class.
func (v *valueEvictor) push(id BlockID) {
	m := &v.p.meta[id]
	if m.class == ClassPersistent && v.expired(m) {
		v.p.demoteLocked(id)
	}
	m.priority = float64(m.lastUse)
	if m.lastUse > 0 && v.p.reuse != nil { // 0: lowered, the first of its class to go
		m.priority += v.p.reuse.horizon(v.p.cfg.NumBlocks) * v.p.reuse.odds(m.rclass)
	}
	heap.Push(&v.classes[v.evictClass(m)], id)
}

// unqueue takes candidate id out of its class heap.
func (v *valueEvictor) unqueue(id BlockID) {
	heap.Remove(&v.classes[v.evictClass(&v.p.meta[id])], int(v.where[id]))
}

// untime takes id out of timed, if it is there.
func (v *valueEvictor) untime(id BlockID) {
	if v.whereT[id] >= 0 {
		heap.Remove(&v.timed, int(v.whereT[id]))
	}
}

// Remove implements Evictor: id is referenced again.
func (v *valueEvictor) Remove(id BlockID) {
	v.n--
	v.untime(id)
	switch {
	case v.inPins[id]:
		heap.Remove(&v.pins, int(v.where[id]))
		v.inPins[id] = false
	case v.where[id] >= 0:
		v.unqueue(id)
	default:
		v.held--
	}
}

// leaf is called by the pool when cached block id lost its last cached
// child: it becomes a candidate.
func (v *valueEvictor) leaf(id BlockID) {
	if v.inPins[id] || v.where[id] >= 0 {
		return
	}
	v.held--
	v.push(id)
}

// expire moves the pins whose time has come among the candidates, and
// the persistent candidates whose TTL has run out among the unclassified.
func (v *valueEvictor) expire() {
	now := v.now()
	for len(v.timed.ids) > 0 {
		id := v.timed.ids[0]
		if v.p.meta[id].expiry > now {
			break
		}
		heap.Pop(&v.timed)
		if v.where[id] < 0 { // held by its children: it stays held
			v.p.demoteLocked(id)
			continue
		}
		v.unqueue(id)
		v.p.demoteLocked(id)
		v.push(id)
	}
	for len(v.pins.ids) > 0 {
		id := v.pins.ids[0]
		m := &v.p.meta[id]
		if m.expiry > now {
			return
		}
		heap.Pop(&v.pins)
		v.inPins[id] = false
		v.p.demoteLocked(id)
		if m.children > 0 {
			v.held++
			continue
		}
		v.push(id)
	}
}

// Victim implements Evictor.
func (v *valueEvictor) Victim() (BlockID, bool) {
	v.expire()
	for c := range v.classes {
		h := &v.classes[c]
		if len(h.ids) == 0 {
			continue
		}
		id := heap.Pop(h).(BlockID)
		v.untime(id)
		v.n--
		return id, true
	}
	return -1, false
}

// Len implements Evictor: the blocks that can be reclaimed now (cached and
// not pinned; those held by their children come free after them).
func (v *valueEvictor) Len() int {
	v.expire()
	return v.n - len(v.pins.ids)
}

// blockHeap is a heap of blocks that records each block's index in
// valueEvictor.where (so any block can be removed in O(log n)). less
// orders two blocks.
type blockHeap struct {
	v     *valueEvictor
	ids   []BlockID
	where []int32 // each block's index in ids (shared by heaps no block is in twice)
	less  func(a, b *blockMeta, ida, idb BlockID) bool
}

func (h *blockHeap) Len() int { return len(h.ids) }
func (h *blockHeap) Less(i, j int) bool {
	a, b := h.ids[i], h.ids[j]
	return h.less(&h.v.p.meta[a], &h.v.p.meta[b], a, b)
}
func (h *blockHeap) Swap(i, j int) {
	h.ids[i], h.ids[j] = h.ids[j], h.ids[i]
	h.where[h.ids[i]], h.where[h.ids[j]] = int32(i), int32(j)
}
func (h *blockHeap) Push(x any) {
	id := x.(BlockID)
	h.where[id] = int32(len(h.ids))
	h.ids = append(h.ids, id)
}
func (h *blockHeap) Pop() any {
	id := h.ids[len(h.ids)-1]
	h.ids = h.ids[:len(h.ids)-1]
	h.where[id] = -1
	return id
}

// byPriority orders a class's candidates: lowest priority first, then
// block id (a fixed order for equal priorities).
func byPriority(a, b *blockMeta, ida, idb BlockID) bool {
	if a.priority != b.priority {
		return a.priority < b.priority
	}
	return ida < idb
}

// byExpiry orders pins, or timed persistent blocks: the soonest to expire
// first.
func byExpiry(a, b *blockMeta, _, _ BlockID) bool { return a.expiry < b.expiry }

// defaultNow is the pool's clock when Config.Now is not set.
func defaultNow() time.Time { return time.Now() }

// lower makes candidate id the first of its class to go (its recency and
// hits forgotten).
func (v *valueEvictor) lower(id BlockID) {
	if v.inPins[id] {
		return
	}
	m := &v.p.meta[id]
	if v.where[id] < 0 { // held by its children: its turn comes after them
		m.lastUse, m.uses = 0, 0
		return
	}
	v.unqueue(id)
	m.lastUse, m.uses = 0, 0
	v.push(id)
}

// Unpin ends now the pins of the chain's findable blocks (a deleted
// context cache's) and returns how many it ended. A pin does not record
// who holds it: a block another request pinned too loses its pin as well,
// and that request's next use pins it again. Blocks in use keep their
// class until they are released.
func (p *Pool) Unpin(chain []Hash) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.value
	if v == nil {
		return 0
	}
	now := v.now()
	n := 0
	for _, h := range chain {
		id, ok := p.index[h]
		if !ok {
			continue
		}
		m := &p.meta[id]
		if m.class != ClassPinned || m.expiry <= now {
			continue
		}
		m.expiry = now
		if v.inPins[id] {
			heap.Fix(&v.pins, int(v.where[id]))
		}
		n++
	}
	v.expire()
	return n
}

// reuseHorizon is how many mean reuse gaps (reuseModel.horizon) a certain
// reuse is worth against recency: several, so that the odds of reuse rank
// blocks before their age does, yet finite, so that a block likely to be
// reused that never is still goes. Measured in gaps rather than turnovers
// of the pool, so a large pool does not hold likely blocks long past any
// reuse (docs/performance.md has the values tried).
const reuseHorizon = 5
