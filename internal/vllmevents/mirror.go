package vllmevents

import (
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kvserve/kvserve/internal/kv"
)

// MirrorConfig configures a Mirror.
type MirrorConfig struct {
	// Secret and ModelID hash blocks as kvserve's workers do (the
	// cluster's secret, engine.Config.ModelID); Secret is required.
	Secret  []byte
	ModelID string
	// BlockSize is the worker's block size; it must equal the vLLM
	// server's (--block-size there): events of another size are counted
	// and skipped.
	BlockSize int
	// MaxBlocks bounds the blocks mirrored (default 1<<21); past it new
	// blocks are counted and skipped.
	MaxBlocks int
	// Events receives the mirrored blocks as kvserve's KV events
	// (optional).
	Events *kv.EventLog
	// Logger receives what an operator should know (default: discard).
	Logger *slog.Logger
}

// node is one block the vLLM server holds in at least one tier.
type node struct {
	parent BlockHash // "" for a sequence's first block
	tokens []int32
	// salt is the cache_salt of the block's sequence ("" without one).
	salt string
	// resolved says kvHash and parentKV are known: the salt's tenant is
	// known and so is every block before this one.
	resolved bool
	kvHash   kv.Hash
	parentKV kv.Hash // zero for a sequence's first block
	tiers    uint8   // bit 1<<tier for each tier holding it
}

// Mirror is the set of blocks a vLLM server holds, from its events, as
// kvserve's blocks. A block's kvserve hash needs its tenant: vLLM's
// sequences carry the cache_salt kvserve sent (Register maps each salt to
// its tenant) in their first block's extra keys. Blocks of sequences with
// no salt or a salt kvserve did not send (another client of the server)
// are not kvserve's tenants' and are never published; blocks whose salt
// becomes known later (after a worker restart, the tenant's next request)
// are published then.
type Mirror struct {
	cfg    MirrorConfig
	hasher *kv.Hasher

	mu    sync.Mutex
	nodes map[BlockHash]*node
	salts map[string]string // cache_salt → scope
	held  [kv.TierDisk + 1]int

	skipped    atomic.Int64 // blocks not mirrored: another block size, an adapter, another group, a full mirror
	unresolved atomic.Int64 // blocks stored with no known tenant
	clears     atomic.Int64 // times the mirror was emptied (AllBlocksCleared, a publisher restart, an unrecoverable gap)
	warnedSize atomic.Bool
}

// NewMirror returns an empty mirror.
func NewMirror(cfg MirrorConfig) *Mirror {
	if cfg.MaxBlocks <= 0 {
		cfg.MaxBlocks = 1 << 21
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Mirror{cfg: cfg, hasher: kv.NewHasher([]byte(cfg.ModelID)), nodes: map[BlockHash]*node{}, salts: map[string]string{}}
}

// tier maps vLLM's medium to kvserve's tier (0: not one kvserve knows).
func tier(medium string) kv.Tier {
	switch medium {
	case "GPU", "gpu", "":
		return kv.TierPool
	case "CPU", "cpu", "CPU_TIER":
		return kv.TierHost
	case "DISK", "disk":
		return kv.TierDisk
	}
	return 0
}

// Register says that cache_salt salt is scope's; blocks already mirrored
// under it are published now.
func (m *Mirror) Register(salt, scope string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.salts[salt]; ok && old == scope {
		return
	}
	if len(m.salts) >= 1<<16 {
		// Forgetting a salt only stops publishing its tenant's new
		// sequences until its next request registers it again.
		clear(m.salts)
	}
	m.salts[salt] = scope
	var stored []kv.Event
	for _, n := range m.nodes {
		if !n.resolved && n.salt == salt {
			stored = m.resolve(n, stored)
		}
	}
	m.publish(stored)
}

// resolve computes n's kvserve hash (and its ancestors' first), appending
// a stored event for each block resolved in each tier holding it. Called
// with mu held.
func (m *Mirror) resolve(n *node, out []kv.Event) []kv.Event {
	var chain []*node
	for cur := n; cur != nil && !cur.resolved; {
		if len(chain) > len(m.nodes) {
			return out // parents in a cycle: a broken stream, never hashed
		}
		chain = append(chain, cur)
		if cur.parent == "" {
			break
		}
		cur = m.nodes[cur.parent]
		if cur == nil {
			return out // an ancestor is gone: it cannot be hashed
		}
	}
	if len(chain) == 0 {
		return out
	}
	first := chain[len(chain)-1]
	var parentKV kv.Hash
	if first.parent == "" {
		scope, ok := m.salts[first.salt]
		if !ok || first.salt == "" {
			return out
		}
		parentKV = kv.ScopeSalt(m.cfg.Secret, scope)
	} else {
		parentKV = m.nodes[first.parent].kvHash
	}
	root := first.parent == ""
	for i := len(chain) - 1; i >= 0; i-- {
		c := chain[i]
		c.kvHash = m.hasher.Block(parentKV, c.tokens)
		if !root || i != len(chain)-1 {
			c.parentKV = parentKV
		}
		c.resolved = true
		parentKV = c.kvHash
		for t := kv.TierPool; t <= kv.TierDisk; t++ {
			if c.tiers&(1<<t) != 0 {
				m.held[t]++
				out = append(out, m.storedEvent(c, t))
			}
		}
	}
	return out
}

func (m *Mirror) storedEvent(n *node, t kv.Tier) kv.Event {
	return kv.Event{Kind: kv.BlockStored, Tier: t, Hashes: []kv.Hash{n.kvHash}, Parent: n.parentKV,
		Tokens: n.tokens, BlockSize: m.cfg.BlockSize, Class: kv.ClassEphemeral}
}

func (m *Mirror) publish(events []kv.Event) {
	if m.cfg.Events == nil {
		return
	}
	for _, e := range events {
		m.cfg.Events.Publish(e)
	}
}

// Apply mirrors one batch's events.
func (m *Mirror) Apply(b Batch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []kv.Event
	for i := range b.Events {
		e := &b.Events[i]
		switch e.Kind {
		case BlockStored:
			out = m.stored(e, out)
		case BlockRemoved:
			out = m.removed(e, out)
		case AllBlocksCleared:
			out = m.clearLocked(out)
		}
	}
	m.publish(out)
}

// usable says whether e's blocks are ones kvserve's requests made, in a
// tier it knows, hashed as it hashes.
func (m *Mirror) usable(e *Event) (kv.Tier, bool) {
	t := tier(e.Medium)
	if t == 0 || e.LoRA || e.Group != 0 {
		return 0, false
	}
	return t, true
}

func (m *Mirror) stored(e *Event, out []kv.Event) []kv.Event {
	t, ok := m.usable(e)
	if ok && e.BlockSize != m.cfg.BlockSize {
		ok = false
		if !m.warnedSize.Swap(true) {
			m.cfg.Logger.Error("vllm events: the server's blocks are not this worker's size: set the worker's --block-size to the server's",
				"server_block_size", e.BlockSize, "worker_block_size", m.cfg.BlockSize)
		}
	}
	if !ok {
		m.skipped.Add(int64(len(e.Hashes)))
		return out
	}
	parent := e.Parent
	for i, h := range e.Hashes {
		n := m.nodes[h]
		if n == nil {
			if len(m.nodes) >= m.cfg.MaxBlocks {
				m.skipped.Add(int64(len(e.Hashes) - i))
				return out
			}
			// A copy: a node may outlive the batch by hours.
			n = &node{parent: parent, tokens: slices.Clone(e.Tokens[i*e.BlockSize : (i+1)*e.BlockSize])}
			if parent == "" {
				if i < len(e.ExtraKeys) {
					for _, k := range e.ExtraKeys[i] {
						if _, ok := m.salts[k]; ok {
							n.salt = k
							break
						}
					}
					if n.salt == "" && len(e.ExtraKeys[i]) > 0 {
						// Not a salt kvserve sent yet: keep the last string
						// (vLLM appends the salt after multimodal keys), so
						// that a later Register can claim it.
						n.salt = e.ExtraKeys[i][len(e.ExtraKeys[i])-1]
					}
				}
			} else if p := m.nodes[parent]; p != nil {
				n.salt = p.salt
			}
			m.nodes[h] = n
		}
		parent = h
		if n.tiers&(1<<t) != 0 {
			continue
		}
		n.tiers |= 1 << t
		if n.resolved {
			m.held[t]++
			out = append(out, m.storedEvent(n, t))
			continue
		}
		before := len(out)
		out = m.resolve(n, out)
		if len(out) == before {
			m.unresolved.Add(1)
		}
	}
	return out
}

func (m *Mirror) removed(e *Event, out []kv.Event) []kv.Event {
	t := tier(e.Medium)
	if t == 0 || e.Group != 0 {
		return out
	}
	for _, h := range e.Hashes {
		n := m.nodes[h]
		if n == nil || n.tiers&(1<<t) == 0 {
			continue
		}
		n.tiers &^= 1 << t
		if n.resolved {
			m.held[t]--
			out = append(out, kv.Event{Kind: kv.BlockRemoved, Tier: t, Hashes: []kv.Hash{n.kvHash}})
		}
		if n.tiers == 0 {
			delete(m.nodes, h)
		}
	}
	return out
}

// Clear empties the mirror, publishing that every tier was cleared: the
// server restarted, or events were lost that no replay could recover (what
// they removed cannot be known, and a block kept by mistake would draw
// requests to a server that no longer holds it).
func (m *Mirror) Clear() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.publish(m.clearLocked(nil))
}

func (m *Mirror) clearLocked(out []kv.Event) []kv.Event {
	m.clears.Add(1)
	for t := kv.TierPool; t <= kv.TierDisk; t++ {
		if m.held[t] > 0 {
			out = append(out, kv.Event{Kind: kv.AllCleared, Tier: t})
		}
	}
	clear(m.nodes)
	m.held = [kv.TierDisk + 1]int{}
	return out
}

// Snapshot lists every published block as stored events, and the sequence
// number the event log gives next (as kv.Pool.Snapshot).
func (m *Mirror) Snapshot() (events []kv.Event, next uint64) {
	if m.cfg.Events != nil {
		next = m.cfg.Events.Next()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.nodes {
		if !n.resolved {
			continue
		}
		for t := kv.TierPool; t <= kv.TierDisk; t++ {
			if n.tiers&(1<<t) != 0 {
				events = append(events, m.storedEvent(n, t))
			}
		}
	}
	return events, next
}

// Held returns how many published blocks each tier holds (index kv.Tier).
func (m *Mirror) Held() [kv.TierDisk + 1]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.held
}

// Counts returns the blocks skipped (another block size, an adapter,
// another KV group, a full mirror), the blocks stored with no known tenant,
// and how many times the mirror was emptied.
func (m *Mirror) Counts() (skipped, unresolved, clears int64) {
	return m.skipped.Load(), m.unresolved.Load(), m.clears.Load()
}
