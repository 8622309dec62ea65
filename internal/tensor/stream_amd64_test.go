//go:build amd64 && !purego

package tensor

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// BenchmarkStreamedDirect compares, per token count, a streamed type's
// direct kernel (its own bytes) with widening its rows to scratch first,
// and where the type has a packer with packing them to scratch by it: what
// directTokens and directPackTokens are chosen by. Metric: ns per 256
// weights per token.
func BenchmarkStreamedDirect(b *testing.B) {
	const rows, cols = 8192, 2048 // a work item of up to 64 tokens (matmul.go's plan)
	for _, typ := range []DType{IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, Q5_0, IQ4_NL, Q4_1, Q5_1} {
		direct, maxTokens := directKernel(typ, cpuISA)
		if direct == nil {
			b.Logf("%v: no direct kernel on this CPU (%v)", typ, cpuISA)
			continue
		}
		wt, _ := streamType(typ)
		inner := kernelAt(wt, cpuISA)
		kernels := []struct {
			name string
			k    kernel
		}{{"direct", direct}, {"widen", streamKernel(typ, inner, nil, 0, nil)}}
		if pack := directPacker(typ, cpuISA); pack != nil {
			kernels = append(kernels, struct {
				name string
				k    kernel
			}{"pack", streamKernel(typ, inner, nil, 0, pack)})
		}
		m := benchMatrix(b, typ, rows, cols)
		for _, n := range []int{1, 2, 4, 8, 16, 32, 64} {
			if n/4 > maxTokens {
				continue // far past where the widening path is faster
			}
			x := randVec(rand.New(rand.NewPCG(3, 4)), n*cols, 1)
			dst := make([]float32, n*rows)
			for _, k := range kernels {
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

// BenchmarkStreamedPrompt compares a prompt's product of a streamed Q5_0,
// IQ4_NL, Q4_1 or Q5_1 matrix (its rows packed once per thread and row range) with
// the direct rows kernels on every work item and with the matrix widened
// and packed at load, on two threads, on the shapes of Llama-3.2-1B's
// ffn_down (work items of 16 tokens) and ffn_up (of 64). Metric: ns per
// 256 weights per token.
func BenchmarkStreamedPrompt(b *testing.B) {
	const n = 512
	for _, typ := range []DType{Q5_0, IQ4_NL, Q4_1, Q5_1} {
		direct, _ := directKernel(typ, cpuISA)
		if direct == nil || directPacker(typ, cpuISA) == nil {
			b.Skipf("%v: no direct kernel and packer on this CPU (%v)", typ, cpuISA)
		}
		wt, _ := streamType(typ)
		for _, shape := range [][2]int{{2048, 8192}, {8192, 2048}} {
			rows, cols := shape[0], shape[1]
			m := benchMatrix(b, typ, rows, cols)
			widened := Pack(Widen(m))
			x := randVec(rand.New(rand.NewPCG(3, 4)), n*cols, 1)
			dst := make([]float32, n*rows)
			for _, c := range []struct {
				name string
				w    Matrix
				k    kernel
			}{
				{"streamed", m, kernelFor(typ)},
				{"rows", m, streamKernel(typ, kernelAt(wt, cpuISA), direct, math.MaxInt, nil)},
				{"widened", widened, kernelFor(wt)},
			} {
				b.Run(fmt.Sprintf("%v/%dx%d/%s", typ, rows, cols, c.name), func(b *testing.B) {
					p := NewPool(2)
					defer p.Close()
					for b.Loop() {
						p.matMul(dst, c.w, x, n, c.k)
					}
					blocks := float64(rows*cols/qkK) * float64(n)
					b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/blocks, "ns/block-token")
				})
			}
		}
	}
}

// TestIQDirectAVX2AtVNNI checks what a VNNI CPU without VBMI (Cascade Lake)
// runs for streamed IQ matrices at few tokens: the AVX2 direct kernels,
// whose results must be the VNNI level's Q8_K16 kernel's on the rows
// widened, bit for bit. It runs wherever the VNNI level does (the AVX2
// level's own check is TestStreamedAsWidened's).
func TestIQDirectAVX2AtVNNI(t *testing.T) {
	if cpuISA != isaVNNI {
		t.Skipf("this CPU's best level is %v, not %v: the AVX2 direct kernels are checked at their own level only", cpuISA, isaVNNI)
	}
	rng := rand.New(rand.NewPCG(45, 46))
	p := NewPool(2)
	defer p.Close()
	for _, typ := range slices.Sorted(maps.Keys(iqDirectAVX2Kernels)) {
		k := iqDirectAVX2Kernels[typ]
		for _, shape := range [][2]int{{27, 512}, {67, 1024}} {
			rows, cols := shape[0], shape[1]
			m, _ := randMatrix(t, rng, typ, rows, cols)
			for _, n := range []int{1, 2, 3, 4, 5, directTokens} {
				x := randVec(rng, n*cols, 1)
				got := make([]float32, n*rows)
				want := make([]float32, n*rows)
				p.matMul(got, m, x, n, streamKernel(typ, kernelAt(Q8_K16, isaVNNI), k.run, directTokens, nil))
				p.matMul(want, m, x, n, streamKernel(typ, kernelAt(Q8_K16, isaVNNI), nil, 0, nil))
				sameBitsOrFail(t, fmt.Sprintf("%v %dx%d n=%d", typ, rows, cols, n), got, want)
			}
		}
	}
}
