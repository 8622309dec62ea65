package kv

// Evictor keeps the cached blocks (unreferenced, still findable by hash) and
// chooses which one to reclaim when the pool needs space. The pool calls it
// with its lock held, so implementations need no locking of their own.
type Evictor interface {
	// Add makes a block evictable (its last reference was dropped).
	Add(id BlockID)
	// Remove takes a block out (it is referenced again).
	Remove(id BlockID)
	// Victim removes and returns the next block to reclaim.
	Victim() (BlockID, bool)
	// Len is the number of evictable blocks.
	Len() int
}

// LRU evicts the least recently released block first. Sequences release
// their blocks tail first, so within one sequence the tail blocks — useless
// without the blocks before them — go before the prefix they extend.
//
// It is an intrusive doubly linked list over arrays indexed by block id: no
// allocation after construction, O(1) per operation.
type LRU struct {
	prev, next []BlockID
	in         []bool
	head, tail BlockID // head: least recent; -1 when empty
	n          int
}

var _ Evictor = (*LRU)(nil)

// NewLRU returns an LRU evictor for a pool of n blocks.
func NewLRU(n int) *LRU {
	return &LRU{prev: make([]BlockID, n), next: make([]BlockID, n), in: make([]bool, n), head: -1, tail: -1}
}

// Add implements Evictor: the block becomes the most recent.
func (l *LRU) Add(id BlockID) {
	if l.in[id] {
		l.Remove(id)
	}
	l.in[id] = true
	l.prev[id], l.next[id] = l.tail, -1
	if l.tail >= 0 {
		l.next[l.tail] = id
	} else {
		l.head = id
	}
	l.tail = id
	l.n++
}

// Remove implements Evictor.
func (l *LRU) Remove(id BlockID) {
	if !l.in[id] {
		return
	}
	p, n := l.prev[id], l.next[id]
	if p >= 0 {
		l.next[p] = n
	} else {
		l.head = n
	}
	if n >= 0 {
		l.prev[n] = p
	} else {
		l.tail = p
	}
	l.in[id] = false
	l.n--
}

// Victim implements Evictor.
func (l *LRU) Victim() (BlockID, bool) {
	if l.head < 0 {
		return -1, false
	}
	id := l.head
	l.Remove(id)
	return id, true
}

// Len implements Evictor.
func (l *LRU) Len() int { return l.n }
