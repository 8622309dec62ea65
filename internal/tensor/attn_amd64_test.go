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
