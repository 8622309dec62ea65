package model

import (
	"fmt"

	"github.com/kvserve/kvserve/internal/batch"

	"github.com/kvserve/kvserve/internal/tensor"
)

// Cache is one sequence's key/value memory as the model sees it (see
// package batch for its layout and contract).
type Cache = batch.Cache

// SeqCache is a simple growable Cache owned by one sequence: blocks are
// allocated as the sequence grows and never shared. The paged block pool of
// the engine replaces it for serving; it serves single-sequence generation
// and tests.
type SeqCache struct {
	blockSize  int
	blockBytes int          // one layer's K (or V) of one block
	layers     [][]seqBlock // [layer][block]
}

type seqBlock struct{ k, v []byte }

// NewSeqCache returns an empty cache for a model with the given config,
// holding K and V as kvType (F16, F32 or Q8_0: the Runner's KVType).
func NewSeqCache(c *Config, kvType tensor.DType, blockSize int) *SeqCache {
	if blockSize <= 0 {
		blockSize = 256
	}
	return &SeqCache{blockSize: blockSize, blockBytes: kvType.RowBytes(blockSize * c.KVDim()), layers: make([][]seqBlock, c.Layers)}
}

// BlockSize implements Cache.
func (s *SeqCache) BlockSize() int { return s.blockSize }

// Block implements Cache.
func (s *SeqCache) Block(layer, b int) (k, v []byte) {
	blk := s.layers[layer][b]
	return blk.k, blk.v
}

// Capacity is the number of positions the cache can hold without growing.
func (s *SeqCache) Capacity() int { return len(s.layers[0]) * s.blockSize }

// Reserve grows the cache to hold at least n positions.
func (s *SeqCache) Reserve(n int) {
	for s.Capacity() < n {
		for l := range s.layers {
			s.layers[l] = append(s.layers[l], seqBlock{
				k: make([]byte, s.blockBytes),
				v: make([]byte, s.blockBytes),
			})
		}
	}
}

// Truncate drops the blocks past the first n positions (their contents are
// not needed again).
func (s *SeqCache) Truncate(n int) {
	keep := (n + s.blockSize - 1) / s.blockSize
	for l := range s.layers {
		if len(s.layers[l]) > keep {
			s.layers[l] = s.layers[l][:keep]
		}
	}
}

func (s *SeqCache) String() string {
	return fmt.Sprintf("SeqCache{%d blocks of %d}", len(s.layers[0]), s.blockSize)
}
