//go:build amd64 && !purego

package tensor

import (
	"math/rand/v2"
	"testing"
)

// TestAttentionPagedLevels runs TestAttentionPaged's checks at every kernel
// level below this CPU's best, which the paged entry points reach by other
// paths (the AVX2 kernels block by block, the portable code).
func TestAttentionPagedLevels(t *testing.T) {
	best := cpuISA
	defer func() { cpuISA = best }()
	for level := isaPortable; level < best; level++ {
		cpuISA = level
		checkAttentionPaged(t, rand.New(rand.NewPCG(9, uint64(level))))
	}
}

// BenchmarkAttentionPaged times one KV head's attention products over 256
// positions in 16-row blocks (the server's), three query heads, as one
// paged call and as a call per block, at each kernel level this CPU runs.
func BenchmarkAttentionPaged(b *testing.B) {
	const hd, heads, rows, bs, stride = 64, 3, 256, 16, 192
	rng := rand.New(rand.NewPCG(1, 2))
	var blocks [][]uint16
	for range rows / bs {
		blk := make([]uint16, bs*stride)
		for i := range blk {
			blk[i] = F32ToF16(float32(rng.NormFloat64()))
		}
		blocks = append(blocks, blk)
	}
	q, scores, out := make([]float32, heads*hd), make([]float32, heads*rows), make([]float32, heads*hd)
	for i := range q {
		q[i] = float32(rng.NormFloat64())
	}
	for i := range scores {
		scores[i] = rng.Float32() / rows
	}
	best := cpuISA
	defer func() { cpuISA = best }()
	for level := isaAVX2; level <= best; level++ {
		cpuISA = level
		b.Run(level.String()+"/paged", func(b *testing.B) {
			for b.Loop() {
				DotsF16HeadsPaged(scores, rows, rows, q, hd, blocks, 0, bs, stride)
				AxpysF16HeadsPaged(out, hd, scores, rows, rows, blocks, 0, bs, stride)
			}
		})
		b.Run(level.String()+"/per-block", func(b *testing.B) {
			for b.Loop() {
				for i, blk := range blocks {
					DotsF16Heads(scores[i*bs:], rows, bs, q, hd, blk, stride)
				}
				for i, blk := range blocks {
					AxpysF16Heads(out, hd, scores[i*bs:], rows, bs, blk, stride)
				}
			}
		})
	}
}
