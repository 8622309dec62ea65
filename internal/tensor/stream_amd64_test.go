//go:build amd64 && !purego

package tensor

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// BenchmarkStreamedDirect compares, per token count, a streamed type's
// direct kernel (its own bytes) with widening its rows to scratch first:
// what directTokens and q80Direct's maxTokens are chosen by. Metric: ns per 256
// weights per token.
func BenchmarkStreamedDirect(b *testing.B) {
	const rows, cols = 2048, 8192
	for _, typ := range []DType{IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, Q5_0, IQ4_NL, Q4_1, Q5_1} {
		direct, maxTokens := directKernel(typ, cpuISA)
		if direct == nil {
			b.Logf("%v: no direct kernel on this CPU (%v)", typ, cpuISA)
			continue
		}
		wt, _ := streamType(typ)
		widen := streamKernel(typ, kernelAt(wt, cpuISA), nil, 0)
		m := benchMatrix(b, typ, rows, cols)
		for _, n := range []int{1, 2, 4, 8, 16, 64} {
			if n/4 > maxTokens {
				continue // far past where the widening path is faster
			}
			x := randVec(rand.New(rand.NewPCG(3, 4)), n*cols, 1)
			dst := make([]float32, n*rows)
			for _, k := range []struct {
				name string
				k    kernel
			}{{"direct", direct}, {"widen", widen}} {
				b.Run(fmt.Sprintf("%v/n%d/%s", typ, n, k.name), func(b *testing.B) {
					p := NewPool(1)
					defer p.Close()
					for b.Loop() {
						p.matMul(dst, m, x, n, k.k)
					}
					blocks := float64(rows*cols/qkK) * float64(n)
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/blocks, "ns/block-token")
				})
			}
		}
	}
}
