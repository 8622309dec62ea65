// Package kv manages the engine's KV memory as a pool of fixed-size blocks
// (PagedAttention): block tables per sequence, prefix sharing by chained
// block hashes, copy-on-write, eviction of cached blocks, and the events
// that tell routers which blocks a worker holds.
//
// Memory layout. The pool is one slab of NumBlocks blocks. A block holds
// BlockSize consecutive token positions for every layer:
//
//	block = [layer][K|V][token][kv head][head dim] in the pool's element type
//
// so one layer's keys of one block are contiguous (what attention streams
// through) and a block is copied or zeroed with one memmove.
//
// Block states. Every block is in exactly one state:
//
//	free    refs == 0, no hash         on the free list
//	active  refs >= 1                  in one or more block tables
//	cached  refs == 0, hash registered in the evictor: still findable by hash,
//	                                   reclaimed when space is needed
//
// Only full blocks get a hash. A hash is registered in the prefix index at
// most once: committing a block whose hash is already known hands back the
// existing block instead (de-duplication), so equal content is stored once.
// Each findable block knows the findable block it extends (its parent in
// the chain) and how many extend it: eviction cuts chains from the tail.
//
// What is kept (value.go): cached blocks are reclaimed leaves first, lowest
// retention class first, then least valuable; pinned blocks not before
// their expiry; a sequence's blocks from its first ephemeral one on are
// never cached. Where (host.go): with a host-memory tier (G2), evicted
// blocks move down and come back on a prefix hit; a block lives in one tier
// at a time.
//
// Concurrency: a Pool is safe for concurrent use; one mutex guards its
// metadata. Block contents are written only by the sequence that owns the
// block exclusively (refs == 1) during a forward pass, and shared blocks are
// read-only, so contents need no lock.
package kv

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/kvserve/kvserve/internal/kv/diskstore"
	"github.com/kvserve/kvserve/internal/tensor"
)

// BlockID indexes a block of the pool.
type BlockID int32

// ElemType is the element type of stored keys and values.
type ElemType uint8

// The KV element types. F16 is the default: half the memory of F32 at the
// precision llama.cpp uses by default; Q8_0 halves it again.
const (
	F16 ElemType = iota
	F32
	Q8_0
)

// DType is the tensor type of the elements.
func (t ElemType) DType() tensor.DType {
	switch t {
	case F32:
		return tensor.F32
	case Q8_0:
		return tensor.Q8_0
	}
	return tensor.F16
}

func (t ElemType) String() string { return t.DType().String() }

// ElemTypeOf maps a tensor type to the KV element type that stores it.
func ElemTypeOf(d tensor.DType) (ElemType, error) {
	switch d {
	case tensor.F16:
		return F16, nil
	case tensor.F32:
		return F32, nil
	case tensor.Q8_0:
		return Q8_0, nil
	}
	return 0, fmt.Errorf("kv: no KV cache type for %s (f16, f32, q8_0)", d)
}

// ParseElemType maps "f16", "f32" or "q8_0" to an ElemType.
func ParseElemType(s string) (ElemType, error) {
	switch s {
	case "f16", "F16", "":
		return F16, nil
	case "f32", "F32":
		return F32, nil
	case "q8_0", "Q8_0":
		return Q8_0, nil
	}
	return 0, fmt.Errorf("kv: unknown KV cache type %q (f16, f32, q8_0)", s)
}

// ErrNoSpace means no block is free or evictable.
var ErrNoSpace = errors.New("kv: no free block")

// Config describes a pool. The zero value of a field means its default.
type Config struct {
	// NumBlocks is the pool size in blocks (required unless MemoryBytes is set).
	NumBlocks int
	// MemoryBytes, when NumBlocks is 0, sizes the pool to this many bytes.
	MemoryBytes int64
	// BlockSize is the number of token positions per block (default 16).
	BlockSize int
	// Layers and KVDim (kv heads × head dim) give the shape of one token's
	// keys (values have the same width) in one layer.
	Layers, KVDim int
	// Type is the element type of stored K and V (default F16).
	Type ElemType
	// Evictor chooses which cached block to reclaim (default: retention by
	// value: leaves first, lowest class, then least valuable; pinned blocks
	// kept until their expiry).
	Evictor Evictor
	// MaxPersistentPerOwner bounds the persistent blocks of one scope
	// (tenant): past it, blocks asked to be persistent are kept as session
	// blocks, so that one tenant's system prompts and tools cannot push out
	// every other tenant's (0: no bound).
	MaxPersistentPerOwner int
	// MaxPersistentShare, when MaxPersistentPerOwner is 0, sets it as this
	// share of the pool's blocks (0: no bound).
	MaxPersistentShare float64
	// LRU, with no Evictor given, evicts least recently released first
	// instead (the plain baseline, for comparisons).
	LRU bool
	// HostMemoryBytes is the budget of the host-memory tier (G2): blocks
	// evicted from the pool move there and come back on a prefix hit
	// instead of being recomputed (0: no G2, evicted blocks are dropped).
	HostMemoryBytes int64
	// DiskDir and DiskBytes configure the disk tier (G3): blocks leaving
	// memory are written, encrypted per scope, under DiskDir up to
	// DiskBytes, and found again by later prefix matches and by the next
	// process that opens the directory (0: no G3). Close the pool to
	// write what memory holds and release the directory. With NoStorage
	// G3 keeps its bookkeeping only (no directory).
	DiskDir   string
	DiskBytes int64
	// Logger receives the tiers' failures (default: discard).
	Logger *slog.Logger
	// Now is the pool's clock, for pins' expiry (default: time.Now; the
	// engine passes its own, so a simulation in virtual time expires pins
	// in that time).
	Now func() time.Time
	// Events receives stored/removed/cleared events (optional).
	Events *EventLog
	// DisableIndex turns prefix caching off: full blocks are never
	// registered, so nothing is shared and released blocks are freed at once.
	DisableIndex bool
	// NoStorage keeps the bookkeeping only (block states, tables, hashes,
	// eviction, events) without a slab: Layer returns nil. For forward
	// passes that compute nothing (the simulator), so a pool of tens of
	// millions of tokens fits in memory. Sizing by MemoryBytes still
	// counts the bytes a real slab would take.
	NoStorage bool
}

// BlockBytes is the size of one block under this configuration.
func (c *Config) BlockBytes() int64 {
	return int64(c.Layers) * 2 * int64(c.Type.DType().RowBytes(c.BlockSize*c.KVDim))
}

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.BlockSize == 0 {
		out.BlockSize = 16
	}
	if out.Layers <= 0 || out.KVDim <= 0 || out.BlockSize <= 0 {
		return out, fmt.Errorf("kv: invalid pool shape: %d layers, KV width %d, block size %d", out.Layers, out.KVDim, out.BlockSize)
	}
	switch out.Type {
	case F16, F32:
	case Q8_0:
		if out.KVDim%32 != 0 {
			return out, fmt.Errorf("kv: q8_0 KV needs a KV width that is a multiple of 32, not %d", out.KVDim)
		}
	default:
		return out, fmt.Errorf("kv: unknown KV element type %d (f16, f32, q8_0)", out.Type)
	}
	if out.NumBlocks == 0 && out.MemoryBytes > 0 {
		out.NumBlocks = int(out.MemoryBytes / out.BlockBytes())
	}
	if out.NumBlocks <= 0 {
		return out, fmt.Errorf("kv: pool has no blocks (memory %d bytes, %d bytes per block)", out.MemoryBytes, out.BlockBytes())
	}
	if out.NumBlocks > 1<<30 {
		return out, fmt.Errorf("kv: %d blocks is too many", out.NumBlocks)
	}
	if out.Now == nil {
		out.Now = defaultNow
	}
	if out.MaxPersistentPerOwner == 0 && out.MaxPersistentShare > 0 {
		out.MaxPersistentPerOwner = max(1, int(out.MaxPersistentShare*float64(out.NumBlocks)))
	}
	return out, nil
}

// Class is a block's retention class: how much it is worth keeping
// (DESIGN.md: pinned > persistent > session > ephemeral). The engine assigns
// the values, higher meaning worth keeping longer; 0 is unclassified. A
// findable block shared by several requests has the highest class any of
// them gave it. The pool records classes (per block, counted in Stats, sent
// with stored events); the tiering work's eviction policy will act on them.
type Class uint8

// NumClasses bounds the class values (0 ≤ Class < NumClasses).
const NumClasses = 8

// blockMeta is the pool's bookkeeping for one block.
type blockMeta struct {
	refs   int32
	hashed bool
	class  Class // of a hashed block
	hash   Hash
	// The chain, for the value evictor: the findable block this one
	// extends (-1: the first of its chain, or not hashed) and how many
	// findable blocks extend this one.
	parent   BlockID
	children int32
	// uses counts the prompts that held the block (its first store
	// included), across evictions while the value evictor's reuse model
	// remembers it; rclass is its reuse class at its last use, open that
	// no use has followed that one yet (reuseModel).
	uses   uint32
	rclass uint8
	open   bool
	// expiry of a pinned block (Unix nanoseconds; 0: none).
	expiry int64
	// owner is the scope (tenant) of the sequence that stored the block.
	owner uint32
	// lastUse is when the block was last released (the value evictor's
	// clock) and priority its key while it is a candidate.
	lastUse  uint64
	priority float64
}

// Pool is a fixed set of KV blocks.
type Pool struct {
	cfg        Config
	blockBytes int
	layerBytes int // one layer's K (or V) within a block
	slab       []byte

	mu      sync.Mutex
	meta    []blockMeta
	free    []BlockID // LIFO: recently freed blocks are warm in cache
	index   map[Hash]BlockID
	evictor Evictor
	value   *valueEvictor    // the evictor, when it is the value policy
	reuse   *reuseModel      // what the value evictor learns of reuse (nil with another evictor)
	host    *hostTier        // G2, when configured
	disk    *diskstore.Store // G3, when configured
	// owners numbers the scopes (tenants), scopes lists them by number;
	// pinnedBy counts each one's findable pinned blocks.
	owners   map[Hash]uint32
	scopes   []Hash
	pinnedBy map[uint32]int
	// persistentBy counts each owner's findable persistent blocks, bounded
	// by Config.MaxPersistentPerOwner.
	persistentBy map[uint32]int
	stats        Stats
	classes      [NumClasses]int // hashed blocks by class
}

// Stats counts blocks by state and prefix-cache traffic.
type Stats struct {
	Total, Free, Active, Cached int
	// Pinned counts the cached blocks kept until their pins expire (part of
	// Cached, not evictable).
	Pinned int
	// Host is G2's and Disk G3's (zero without one).
	Host HostStats
	Disk DiskStats
	// Queries and Hits count tokens looked up and found by MatchPrefix.
	QueryTokens, HitTokens int64
	Evictions              int64
	// ExportedBlocks and ImportedBlocks count blocks copied to and from
	// peer workers (Export, Sequence.Import).
	ExportedBlocks, ImportedBlocks int64
	// ByClass counts the findable (hashed) blocks, active or cached, by
	// retention class.
	ByClass [NumClasses]int
}

// NewPool allocates a pool.
func NewPool(cfg Config) (*Pool, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Pool{
		cfg:        c,
		blockBytes: int(c.BlockBytes()),
		layerBytes: c.Type.DType().RowBytes(c.BlockSize * c.KVDim),
		meta:       make([]blockMeta, c.NumBlocks),
		free:       make([]BlockID, c.NumBlocks),
		index:      make(map[Hash]BlockID),
		evictor:    c.Evictor,
	}
	for i := range p.meta {
		p.meta[i].parent = -1
	}
	p.owners, p.pinnedBy, p.persistentBy = map[Hash]uint32{}, map[uint32]int{}, map[uint32]int{}
	if c.HostMemoryBytes > 0 {
		p.host = newHostTier(c.HostMemoryBytes, int64(p.blockBytes), c.NoStorage)
	}
	if p.evictor == nil && c.LRU {
		p.evictor = NewLRU(c.NumBlocks)
		p.cfg.Evictor = p.evictor
	}
	if p.evictor == nil {
		v := newValueEvictor(p)
		p.evictor, p.value = v, v
		p.reuse = newReuseModel(c.NumBlocks)
		p.cfg.Evictor = v
	}
	total := int64(p.blockBytes) * int64(c.NumBlocks)
	if total > 1<<40 && !c.NoStorage {
		return nil, fmt.Errorf("kv: pool of %d bytes is too large", total)
	}
	if !c.NoStorage {
		p.slab = make([]byte, total)
		// Huge pages are an optimisation; a kernel that refuses them
		// serves the pool from small pages just as correctly.
		_, _ = adviseHuge(p.slab)
	}
	if c.DiskBytes > 0 {
		if err := p.openDisk(); err != nil {
			return nil, fmt.Errorf("kv: disk tier: %w", err)
		}
	}
	// Hand out low ids first.
	for i := range p.free {
		p.free[i] = BlockID(c.NumBlocks - 1 - i)
	}
	return p, nil
}

// Config returns the pool's configuration with defaults applied.
func (p *Pool) Config() Config { return p.cfg }

// BlockSize is the number of positions per block.
func (p *Pool) BlockSize() int { return p.cfg.BlockSize }

// NumBlocks is the pool's size in blocks.
func (p *Pool) NumBlocks() int { return p.cfg.NumBlocks }

// Layer returns the key and value storage of layer l in block id (nil in a
// pool without storage).
func (p *Pool) Layer(id BlockID, l int) (k, v []byte) {
	if p.slab == nil {
		return nil, nil
	}
	base := int(id)*p.blockBytes + 2*l*p.layerBytes
	return p.slab[base : base+p.layerBytes : base+p.layerBytes],
		p.slab[base+p.layerBytes : base+2*p.layerBytes : base+2*p.layerBytes]
}

func (p *Pool) blockData(id BlockID) []byte {
	if p.slab == nil {
		return nil
	}
	base := int(id) * p.blockBytes
	return p.slab[base : base+p.blockBytes]
}

// Stats returns a snapshot of the pool's counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Total = p.cfg.NumBlocks
	s.Free = len(p.free)
	s.Cached = p.evictorHolds()
	s.Active = s.Total - s.Free - s.Cached
	if p.host != nil {
		s.Host = HostStats{Blocks: len(p.host.byHash), Stored: p.host.stats.Stored,
			Onboarded: p.host.stats.Onboarded, Evicted: p.host.stats.Evicted}
		for c := range p.host.lists {
			s.Host.ByClass[c] = p.host.lists[c].Len()
		}
	}
	if p.disk != nil {
		s.Disk = p.disk.Stats()
	}
	if p.value != nil {
		p.value.expire()
		s.Pinned = len(p.value.pins.ids)
	}
	s.ByClass = p.classes
	return s
}

// Class returns a block's retention class (0 unless it is findable).
func (p *Pool) Class(id BlockID) Class {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.meta[id].class
}

// raiseLocked lifts a findable, referenced block's class to at least c
// and, for a pin, its expiry to at least expiry.
func (p *Pool) raiseLocked(id BlockID, c Class, expiry int64) {
	m := &p.meta[id]
	if !m.hashed {
		return
	}
	c = p.allowedLocked(c, m.owner)
	switch {
	case c > m.class:
		p.countLocked(id, -1)
		m.class, m.expiry = c, classExpiry(c, expiry)
		p.countLocked(id, +1)
	case c == m.class && c == ClassPinned:
		m.expiry = max(m.expiry, expiry)
	case c == m.class && c == ClassPersistent && m.expiry != 0:
		// Persistent without a TTL (0) outlasts any TTL.
		if expiry == 0 || expiry > m.expiry {
			m.expiry = expiry
		}
	}
}

// classExpiry is the expiry a block of class c keeps: a pin's, or a
// persistent block's TTL (0: none); other classes have none.
func classExpiry(c Class, expiry int64) int64 {
	if c == ClassPinned || c == ClassPersistent {
		return expiry
	}
	return 0
}

// countLocked adds delta to the counts of findable block id's class (and,
// for a pin, its owner's pins).
func (p *Pool) countLocked(id BlockID, delta int) {
	m := &p.meta[id]
	p.classes[m.class] += delta
	switch m.class {
	case ClassPinned:
		p.pinnedBy[m.owner] += delta
	case ClassPersistent:
		p.persistentBy[m.owner] += delta
	}
}

// allowedLocked is the class a block of owner may take when c is asked:
// persistent only within the owner's quota (past it, session), so one
// tenant's persistent blocks cannot crowd out every other tenant's.
func (p *Pool) allowedLocked(c Class, owner uint32) Class {
	if c == ClassPersistent && p.cfg.MaxPersistentPerOwner > 0 && p.persistentBy[owner] >= p.cfg.MaxPersistentPerOwner {
		return ClassSession
	}
	return c
}

// ownerLocked is the small number that stands for scope in the blocks'
// metadata (for counting each tenant's pins).
func (p *Pool) ownerLocked(scope Hash) uint32 {
	o, ok := p.owners[scope]
	if !ok {
		o = uint32(len(p.owners))
		p.owners[scope] = o
		p.scopes = append(p.scopes, scope)
	}
	return o
}

// PinnedBy is the number of findable pinned blocks of the sequences of
// scope (a tenant).
func (p *Pool) PinnedBy(scope Hash) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.value != nil {
		p.value.expire()
	}
	o, ok := p.owners[scope]
	if !ok {
		return 0
	}
	return p.pinnedBy[o]
}

// demoteLocked makes an expired pin, or a persistent block past its TTL,
// an unclassified block.
func (p *Pool) demoteLocked(id BlockID) {
	m := &p.meta[id]
	p.countLocked(id, -1)
	m.class, m.expiry = 0, 0
	p.countLocked(id, +1)
}

// CountPinned is how many of the chain's blocks are findable in the pool
// and pinned.
func (p *Pool) CountPinned(chain []Hash) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.value != nil {
		p.value.expire()
	}
	n := 0
	for _, h := range chain {
		if id, ok := p.index[h]; ok && p.meta[id].class == ClassPinned {
			n++
		}
	}
	return n
}

// Pinned is the number of findable blocks of ClassPinned (held by their
// pins, or in use past their expiry until released).
func (p *Pool) Pinned() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.value != nil {
		p.value.expire()
	}
	return p.classes[ClassPinned]
}

// Available is the number of blocks that can be allocated now: free plus
// evictable.
func (p *Pool) Available() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.free) + p.evictor.Len()
}

// allocLocked takes a free block, or reclaims the least valuable cached one.
func (p *Pool) allocLocked() (BlockID, error) {
	if n := len(p.free); n > 0 {
		id := p.free[n-1]
		p.free = p.free[:n-1]
		p.meta[id].refs = 1
		return id, nil
	}
	id, ok := p.evictor.Victim()
	if !ok {
		return -1, ErrNoSpace
	}
	m := &p.meta[id]
	if m.refs != 0 || !m.hashed {
		panic(fmt.Sprintf("kv: evictor returned block %d with refs %d hashed %v", id, m.refs, m.hashed))
	}
	p.offloadLocked(id)
	p.unindexLocked(id)
	p.stats.Evictions++
	m.refs = 1
	return id, nil
}

// offloadLocked copies an evicted block down: to G2 if there is one (G2's
// own victims spilling on to G3), else to G3 if there is one.
func (p *Pool) offloadLocked(id BlockID) {
	m := &p.meta[id]
	c := offloadClass(m.class)
	var parent Hash
	if m.parent >= 0 {
		parent = p.meta[m.parent].hash
	}
	if p.host == nil {
		p.toDiskLocked(m.hash, parent, c, m.owner, p.blockData(id), true)
		return
	}
	stored, evicted := p.host.put(m.hash, c, m.owner, p.blockData(id))
	if stored {
		p.host.byHash[m.hash].Value.(*hostEntry).parent = parent
	}
	p.spillLocked(evicted)
	if p.cfg.Events == nil {
		return
	}
	if stored {
		p.cfg.Events.Publish(Event{Kind: BlockStored, Tier: TierHost, Hashes: []Hash{m.hash}, Parent: parent,
			BlockSize: p.cfg.BlockSize, Class: c})
	}
}

// onboardLocked brings block h back from G2, or from G3's memory (staged
// by Fetch, or still queued for writing), into a pool block, registered
// under its hash after parent (the chain's previous block, -1 for the
// first), with one reference for the caller. It reports false when
// neither holds h there or the pool has no room. tier says which held it.
func (p *Pool) onboardLocked(h Hash, parent BlockID, class Class, expiry int64, owner uint32) (BlockID, Tier, bool) {
	if p.cfg.DisableIndex {
		return -1, 0, false
	}
	var (
		id   BlockID
		from Class
		tier Tier
	)
	switch {
	case p.host != nil && p.host.has(h):
		// Out of G2 first: making room in the pool may push blocks down
		// into G2 and, G2 being full, push this one out of it.
		e, _ := p.host.take(h)
		var err error
		if id, err = p.allocLocked(); err != nil {
			if stored, _ := p.host.put(e.hash, e.class, e.owner, e.data); stored { // back where it was: its room is still free
				p.host.stats.Stored--
			}
			p.host.stats.Onboarded--
			return -1, 0, false
		}
		if e.data != nil {
			copy(p.blockData(id), e.data)
			p.host.recycle(e.data)
		}
		from, tier = e.class, TierHost
	case p.disk != nil:
		if len(p.free)+p.evictor.Len() == 0 {
			return -1, 0, false
		}
		data, c, ok := p.disk.Take(p.scopes[owner], h)
		if !ok {
			return -1, 0, false
		}
		var err error
		if id, err = p.allocLocked(); err != nil { // cannot happen: room was checked
			return -1, 0, false
		}
		copy(p.blockData(id), data)
		from, tier = Class(c), TierDisk
	default:
		return -1, 0, false
	}
	m := &p.meta[id]
	class = p.allowedLocked(class, owner)
	m.hashed, m.hash, m.class, m.owner = true, h, max(class, p.allowedLocked(from, owner)), owner
	if m.class == class {
		m.expiry = classExpiry(class, expiry)
	}
	m.parent = parent
	var parentHash Hash
	if parent >= 0 {
		p.meta[parent].children++
		parentHash = p.meta[parent].hash
	}
	p.countLocked(id, +1)
	p.index[h] = id
	if p.reuse != nil {
		p.reuse.recall(h, m)
	}
	if p.cfg.Events != nil {
		if tier == TierHost { // G3 keeps its copy
			p.cfg.Events.Publish(Event{Kind: BlockRemoved, Tier: TierHost, Hashes: []Hash{h}, BlockSize: p.cfg.BlockSize})
		}
		p.cfg.Events.Publish(Event{Kind: BlockStored, Tier: TierPool, Hashes: []Hash{h}, Parent: parentHash,
			BlockSize: p.cfg.BlockSize, Class: m.class})
	}
	return id, tier, true
}

// unindexLocked removes a block's hash from the prefix index.
func (p *Pool) unindexLocked(id BlockID) {
	m := &p.meta[id]
	if !m.hashed {
		return
	}
	delete(p.index, m.hash)
	p.countLocked(id, -1)
	m.class = 0
	if p.cfg.Events != nil {
		p.cfg.Events.Publish(Event{Kind: BlockRemoved, Tier: TierPool, Hashes: []Hash{m.hash}, BlockSize: p.cfg.BlockSize})
	}
	if p.reuse != nil {
		p.reuse.forget(m.hash, m)
	}
	m.hashed = false
	m.hash = Hash{}
	m.uses, m.expiry, m.rclass, m.open = 0, 0, 0, false
	if par := m.parent; par >= 0 {
		m.parent = -1
		pm := &p.meta[par]
		pm.children--
		if pm.children == 0 && pm.refs == 0 && pm.hashed && p.value != nil {
			p.value.leaf(par)
		}
	}
}

// usedLocked records that a prompt holds block id (matched, stored, or
// found stored by another sequence), after tokens of that prompt
// (negative: a generated block).
func (p *Pool) usedLocked(id BlockID, after int) {
	m := &p.meta[id]
	if p.reuse == nil {
		m.uses++
		return
	}
	p.reuse.use(m, after, p.value.tick) // a reuse model comes with the value evictor
}

// acquireLocked adds a reference to a block that is active or cached.
func (p *Pool) acquireLocked(id BlockID) {
	m := &p.meta[id]
	if m.refs == 0 {
		p.evictor.Remove(id)
	}
	m.refs++
}

// releaseLocked drops a reference. An unreferenced block with a hash stays
// findable (cached) until evicted; one without goes back to the free list.
func (p *Pool) releaseLocked(id BlockID) {
	m := &p.meta[id]
	if m.refs <= 0 {
		panic(fmt.Sprintf("kv: release of block %d with refs %d", id, m.refs))
	}
	m.refs--
	if m.refs > 0 {
		return
	}
	if m.hashed {
		p.evictor.Add(id)
		return
	}
	p.free = append(p.free, id)
}

// commitLocked registers a full block's hash. If a block with that hash is
// already known, the caller's block is released and the known one returned
// with a reference taken, so equal content is kept once.
func (p *Pool) commitLocked(id BlockID, h Hash, parent Hash, tokens []int32, class Class, expiry int64, owner uint32, after int) BlockID {
	if p.cfg.DisableIndex {
		return id
	}
	if other, ok := p.index[h]; ok {
		if other != id {
			p.acquireLocked(other) // before raising: a cached block's class places it in the evictor
			p.releaseLocked(id)
		}
		p.raiseLocked(other, class, expiry)
		if after != importedUse {
			p.usedLocked(other, after)
		}
		return other
	}
	m := &p.meta[id]
	if m.hashed {
		panic(fmt.Sprintf("kv: block %d committed twice", id))
	}
	class = p.allowedLocked(class, owner)
	m.hashed, m.hash, m.class, m.owner = true, h, class, owner
	m.expiry = classExpiry(class, expiry)
	if par, ok := p.index[parent]; ok {
		m.parent = par
		p.meta[par].children++
	}
	p.countLocked(id, +1)
	p.index[h] = id
	if p.reuse != nil {
		p.reuse.recall(h, m)
	}
	if after != importedUse {
		p.usedLocked(id, after)
	}
	if p.host != nil && p.host.has(h) {
		// Computed again (its prefix was matched short of it): the fresh
		// copy in the pool replaces G2's.
		p.host.remove(h)
		if p.cfg.Events != nil {
			p.cfg.Events.Publish(Event{Kind: BlockRemoved, Tier: TierHost, Hashes: []Hash{h}, BlockSize: p.cfg.BlockSize})
		}
	}
	if p.cfg.Events != nil {
		if parent == p.scopes[owner] { // the first block of its chain: no parent (as vLLM says it)
			parent = Hash{}
		}
		p.cfg.Events.Publish(Event{Kind: BlockStored, Tier: TierPool, Hashes: []Hash{h}, Parent: parent,
			Tokens: append([]int32(nil), tokens...), BlockSize: p.cfg.BlockSize, Class: class})
	}
	return id
}

// Clear drops every cached block from the index (active blocks keep their
// contents but lose their hashes, so they are freed when released).
func (p *Pool) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range p.meta {
		id, m := BlockID(i), &p.meta[i]
		if !m.hashed {
			continue
		}
		if m.refs == 0 { // cached: free it
			p.evictor.Remove(id)
			p.free = append(p.free, id)
		}
		delete(p.index, m.hash)
		*m = blockMeta{refs: m.refs, parent: -1}
	}
	p.classes = [NumClasses]int{}
	clear(p.pinnedBy)
	clear(p.persistentBy)
	if p.host != nil {
		p.host.clear()
		if p.cfg.Events != nil {
			p.cfg.Events.Publish(Event{Kind: AllCleared, Tier: TierHost, BlockSize: p.cfg.BlockSize})
		}
	}
	if p.cfg.Events != nil {
		p.cfg.Events.Publish(Event{Kind: AllCleared, Tier: TierPool, BlockSize: p.cfg.BlockSize})
	}
}

// Lookup reports whether a block with hash h is in the pool, without taking
// a reference (for routers and tests).
func (p *Pool) Lookup(h Hash) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.index[h]
	return ok
}

// CheckInvariants verifies the pool's bookkeeping: every block in exactly one
// state, reference counts non-negative, the index and the hashed blocks in
// agreement. Tests call it after every operation; it is O(blocks).
func (p *Pool) CheckInvariants() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	onFree := make([]bool, len(p.meta))
	for _, id := range p.free {
		if onFree[id] {
			return fmt.Errorf("kv: block %d twice on the free list", id)
		}
		onFree[id] = true
	}
	free, active, cached := 0, 0, 0
	var classes [NumClasses]int
	for i := range p.meta {
		id, m := BlockID(i), &p.meta[i]
		if m.hashed {
			classes[m.class]++
		} else if m.class != 0 {
			return fmt.Errorf("kv: unhashed block %d has class %d", id, m.class)
		}
		switch {
		case m.refs < 0:
			return fmt.Errorf("kv: block %d has %d references", id, m.refs)
		case onFree[id]:
			if m.refs != 0 || m.hashed {
				return fmt.Errorf("kv: free block %d has refs %d, hashed %v", id, m.refs, m.hashed)
			}
			free++
		case m.refs > 0:
			active++
		case m.hashed:
			cached++
		default:
			return fmt.Errorf("kv: block %d is unreferenced, unhashed and not free (leaked)", id)
		}
		if m.hashed {
			if got, ok := p.index[m.hash]; !ok || got != id {
				return fmt.Errorf("kv: block %d's hash %s is not indexed to it", id, m.hash)
			}
		}
	}
	if held := p.evictorHolds(); cached != held {
		return fmt.Errorf("kv: %d cached blocks but the evictor holds %d", cached, held)
	}
	if err := p.checkChainsLocked(); err != nil {
		return err
	}
	if t := p.host; t != nil {
		if t.used != int64(len(t.byHash))*t.blockBytes || t.used > t.budget {
			return fmt.Errorf("kv: G2 uses %d bytes for %d blocks of %d (budget %d)", t.used, len(t.byHash), t.blockBytes, t.budget)
		}
		n := 0
		for c := range t.lists {
			n += t.lists[c].Len()
		}
		if n != len(t.byHash) {
			return fmt.Errorf("kv: G2 lists hold %d blocks, its index %d", n, len(t.byHash))
		}
		for h := range t.byHash {
			if _, ok := p.index[h]; ok {
				return fmt.Errorf("kv: block %s is in both the pool and G2", h)
			}
		}
	}
	if len(p.index) != cached+countHashedActive(p.meta) {
		return fmt.Errorf("kv: index has %d entries for %d hashed blocks", len(p.index), cached+countHashedActive(p.meta))
	}
	if free+active+cached != len(p.meta) {
		return fmt.Errorf("kv: free %d + active %d + cached %d != total %d", free, active, cached, len(p.meta))
	}
	if classes != p.classes {
		return fmt.Errorf("kv: hashed blocks by class %v, counted %v", classes, p.classes)
	}
	for _, c := range []struct {
		class   Class
		counted map[uint32]int
	}{{ClassPinned, p.pinnedBy}, {ClassPersistent, p.persistentBy}} {
		has := map[uint32]int{}
		for i := range p.meta {
			if m := &p.meta[i]; m.hashed && m.class == c.class {
				has[m.owner]++
			}
		}
		for o, n := range c.counted {
			if has[o] != n {
				return fmt.Errorf("kv: owner %d counted %d %s blocks, has %d", o, n, c.class, has[o])
			}
		}
		for o, n := range has {
			if c.counted[o] != n {
				return fmt.Errorf("kv: owner %d has %d %s blocks, counted %d", o, n, c.class, c.counted[o])
			}
			if c.class == ClassPersistent && p.cfg.MaxPersistentPerOwner > 0 && n > p.cfg.MaxPersistentPerOwner {
				return fmt.Errorf("kv: owner %d has %d persistent blocks, over its bound of %d", o, n, p.cfg.MaxPersistentPerOwner)
			}
		}
	}
	return nil
}

func countHashedActive(meta []blockMeta) int {
	n := 0
	for i := range meta {
		if meta[i].refs > 0 && meta[i].hashed {
			n++
		}
	}
	return n
}

// Refs returns a block's reference count (tests and metrics).
func (p *Pool) Refs(id BlockID) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return int(p.meta[id].refs)
}

// evictorHolds is how many cached blocks the evictor keeps, evictable now
// or not.
func (p *Pool) evictorHolds() int {
	if p.value != nil {
		return p.value.n
	}
	return p.evictor.Len()
}

// checkChainsLocked verifies the chain links: each findable block's parent
// is findable, children counts match, and the value evictor places every
// cached block by its state (a pin before its expiry, held by its
// children, or a candidate of its class).
func (p *Pool) checkChainsLocked() error {
	children := make([]int32, len(p.meta))
	for i := range p.meta {
		m := &p.meta[i]
		if m.parent < 0 {
			continue
		}
		if !m.hashed || !p.meta[m.parent].hashed {
			return fmt.Errorf("kv: block %d (hashed %v) links to parent %d (hashed %v)", i, m.hashed, m.parent, p.meta[m.parent].hashed)
		}
		children[m.parent]++
	}
	for i := range p.meta {
		if children[i] != p.meta[i].children {
			return fmt.Errorf("kv: block %d counts %d children, has %d", i, p.meta[i].children, children[i])
		}
	}
	v := p.value
	if v == nil {
		return nil
	}
	pins, held, cands := 0, 0, 0
	for i := range p.meta {
		id, m := BlockID(i), &p.meta[i]
		if m.refs != 0 || !m.hashed {
			if v.inPins[id] || v.where[id] >= 0 {
				return fmt.Errorf("kv: block %d (refs %d, hashed %v) is in the evictor", id, m.refs, m.hashed)
			}
			continue
		}
		switch {
		case v.inPins[id]:
			pins++
			if m.class != ClassPinned {
				return fmt.Errorf("kv: block %d of class %d is among the pins", id, m.class)
			}
		case v.where[id] >= 0:
			cands++
			if m.children != 0 {
				return fmt.Errorf("kv: block %d has %d children but is a candidate", id, m.children)
			}
		default:
			held++
			if m.children == 0 && !(m.class == ClassPinned) {
				return fmt.Errorf("kv: cached leaf %d is not a candidate", id)
			}
		}
	}
	nc, timed := 0, 0
	for c := range v.classes {
		nc += len(v.classes[c].ids)
	}
	for i := range p.meta {
		id, m := BlockID(i), &p.meta[i]
		want := m.refs == 0 && m.hashed && m.class == ClassPersistent && m.expiry != 0
		if got := v.whereT[id] >= 0; got != want {
			return fmt.Errorf("kv: block %d (class %d, expiry %d, refs %d) timed %v", id, m.class, m.expiry, m.refs, got)
		}
		if want {
			timed++
		}
	}
	if timed != len(v.timed.ids) {
		return fmt.Errorf("kv: %d cached persistent blocks with a TTL, the timed heap holds %d", timed, len(v.timed.ids))
	}
	if pins != len(v.pins.ids) || cands != nc || held != v.held {
		return fmt.Errorf("kv: evictor counts pins %d, candidates %d, held %d; blocks say %d, %d, %d",
			len(v.pins.ids), nc, v.held, pins, cands, held)
	}
	return nil
}

// Demote moves a finished conversation's blocks down: the cached blocks of
// the chain hashes (a sequence's BlockHashes) go to G2 (G3 without G2)
// now, tail first, instead of waiting to be evicted; without either they
// become the first of their class to be evicted. It stops at a block still
// in use (its prefix is in use too) and leaves pinned blocks alone. It
// returns how many blocks moved down and how many were lowered.
func (p *Pool) Demote(hashes []Hash) (moved, lowered int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(hashes) - 1; i >= 0; i-- {
		id, ok := p.index[hashes[i]]
		if !ok {
			continue // evicted already
		}
		m := &p.meta[id]
		if m.refs > 0 {
			break
		}
		if m.class == ClassPinned {
			continue
		}
		if p.host == nil && p.disk == nil {
			if p.value != nil {
				p.value.lower(id)
				lowered++
			}
			continue
		}
		if m.children > 0 { // another branch extends it: it stays
			continue
		}
		p.evictor.Remove(id)
		p.offloadLocked(id)
		p.unindexLocked(id)
		p.free = append(p.free, id)
		moved++
	}
	return moved, lowered
}
