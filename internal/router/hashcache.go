package router

import (
	"encoding/binary"
	"hash/maphash"
	"sync"

	"github.com/kvserve/kvserve/internal/kv"
)

// hashCache remembers the block hashes of prompts the router has seen, so
// a prompt that shares a long prefix with an earlier one (the case the
// router exists for) costs a cheap hash per block instead of a SHA-256.
//
// It is keyed by a 64-bit chained maphash of the same blocks (seeded with
// the scope salt and the block size): h_i = maphash(h_{i-1} ‖ tokens_i).
// Two chains with equal keys but different tokens (a 64-bit collision,
// vanishingly rare at the cache's size) would make the router score one
// prompt as another: a worse placement, never a wrong answer, since every
// worker hashes its own blocks.
//
// Bounded by generations: each shard fills a current map; when it is full
// it becomes the old one and the older is dropped; a hit in the old map is
// copied to the current one, so what is used stays. Shards keep
// concurrent decisions from contending on one lock.
type hashCache struct {
	seed     maphash.Seed
	perShard int
	shards   [hashCacheShards]genShard[kv.Hash]
	// rev maps a block hash's index key (keyOf) back to its cheap key,
	// so that the blocks a worker stores after one the router has hashed
	// get their cheap keys from the event's tokens (learn), without a
	// SHA-256.
	rev [hashCacheShards]genShard[uint64]
}

const hashCacheShards = 32

// genShard is one shard of a map bounded by generations.
type genShard[V any] struct {
	mu       sync.Mutex
	cur, old map[uint64]V
}

func newHashCache(blocks int) *hashCache {
	c := &hashCache{seed: maphash.MakeSeed(), perShard: max(blocks/hashCacheShards/2, 16)}
	for i := range c.shards {
		c.shards[i].cur = make(map[uint64]kv.Hash)
		c.rev[i].cur = make(map[uint64]uint64)
	}
	return c
}

// start returns the key before a chain's first block.
func (c *hashCache) start(salt kv.Hash, blockSize int, buf []byte) (uint64, []byte) {
	buf = append(append(buf[:0], salt[:]...), byte(blockSize), byte(blockSize>>8), byte(blockSize>>16))
	return maphash.Bytes(c.seed, buf), buf
}

// next returns the key of the block of tokens after the one keyed prev.
func (c *hashCache) next(prev uint64, tokens []int32, buf []byte) (uint64, []byte) {
	buf = binary.LittleEndian.AppendUint64(buf[:0], prev)
	for _, t := range tokens {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(t))
	}
	return maphash.Bytes(c.seed, buf), buf
}

func (c *hashCache) get(k uint64) (kv.Hash, bool) {
	return c.shards[k%hashCacheShards].get(c.perShard, k)
}

// put remembers that the block keyed k hashes to h, both ways.
func (c *hashCache) put(k uint64, h kv.Hash) {
	c.shards[k%hashCacheShards].put(c.perShard, k, h)
	r := uint64(keyOf(h))
	c.rev[r%hashCacheShards].put(c.perShard, r, k)
}

// keyFor returns the cheap key of the block hashing to h, if remembered.
func (c *hashCache) keyFor(h kv.Hash) (uint64, bool) {
	r := uint64(keyOf(h))
	return c.rev[r%hashCacheShards].get(c.perShard, r)
}

// learn remembers the cheap keys of the blocks a stored event names,
// from its tokens, when the block before them is remembered (the router
// hashed it placing a request, or learnt it from an earlier event): the
// next request continuing them finds their hashes without a SHA-256. An
// event's first block with no parent is known only if the router hashed
// it. Events without tokens (snapshots) teach nothing.
func (c *hashCache) learn(e *kv.Event, buf []byte) []byte {
	bs := e.BlockSize
	if e.Kind != kv.BlockStored || bs <= 0 || len(e.Hashes) == 0 || len(e.Tokens) != bs*len(e.Hashes) {
		return buf
	}
	first := 0
	var key uint64
	var ok bool
	if e.Parent.IsZero() {
		key, ok = c.keyFor(e.Hashes[0])
		first = 1
	} else {
		key, ok = c.keyFor(e.Parent)
	}
	if !ok {
		return buf
	}
	for i := first; i < len(e.Hashes); i++ {
		key, buf = c.next(key, e.Tokens[i*bs:(i+1)*bs], buf)
		c.put(key, e.Hashes[i])
	}
	return buf
}

func (s *genShard[V]) get(limit int, k uint64) (V, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.cur[k]
	if !ok {
		if v, ok = s.old[k]; ok {
			s.putLocked(limit, k, v)
		}
	}
	return v, ok
}

func (s *genShard[V]) put(limit int, k uint64, v V) {
	s.mu.Lock()
	s.putLocked(limit, k, v)
	s.mu.Unlock()
}

func (s *genShard[V]) putLocked(limit int, k uint64, v V) {
	if len(s.cur) >= limit {
		s.old, s.cur = s.cur, make(map[uint64]V, limit)
	}
	s.cur[k] = v
}
