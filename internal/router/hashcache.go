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
	shards   [hashCacheShards]hashShard
}

const hashCacheShards = 32

type hashShard struct {
	mu       sync.Mutex
	cur, old map[uint64]kv.Hash
}

func newHashCache(blocks int) *hashCache {
	c := &hashCache{seed: maphash.MakeSeed(), perShard: max(blocks/hashCacheShards/2, 16)}
	for i := range c.shards {
		c.shards[i].cur = make(map[uint64]kv.Hash)
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
	s := &c.shards[k%hashCacheShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.cur[k]
	if !ok {
		if h, ok = s.old[k]; ok {
			s.putLocked(c.perShard, k, h)
		}
	}
	return h, ok
}

func (c *hashCache) put(k uint64, h kv.Hash) {
	s := &c.shards[k%hashCacheShards]
	s.mu.Lock()
	s.putLocked(c.perShard, k, h)
	s.mu.Unlock()
}

func (s *hashShard) putLocked(limit int, k uint64, h kv.Hash) {
	if len(s.cur) >= limit {
		s.old, s.cur = s.cur, make(map[uint64]kv.Hash, limit)
	}
	s.cur[k] = h
}
