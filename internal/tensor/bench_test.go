package tensor

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Benchmark shapes: SmolLM2-135M's projections (cols x rows, i.e. GGUF
// ne0 x ne1) and one Llama-3.2-1B FFN matrix.
var benchShapes = []struct{ cols, rows int }{
	{576, 576}, {576, 1536}, {1536, 576}, {576, 49152}, {2048, 8192},
}

func benchMatrix(b testing.TB, typ DType, rows, cols int) Matrix {
	rng := rand.New(rand.NewPCG(1, 2))
	w := make([]float32, rows*cols)
	for i := range w {
		w[i] = float32(rng.NormFloat64() * 0.02)
	}
	if typ == Q8_K16 {
		iq := randIQBlocks(rng, IQ2_XS, rows*cols/qkK)
		m, err := NewMatrix(IQ2_XS, rows, cols, iq)
		if err != nil {
			b.Fatal(err)
		}
		return Widen(m)
	}
	if isIQGrid(typ) { // streamed (stream.go)
		m, err := NewMatrix(typ, rows, cols, randIQBlocks(rng, typ, rows*cols/qkK))
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	q, err := Quantize(typ, w)
	if err != nil {
		b.Fatal(err)
	}
	m, err := NewMatrix(typ, rows, cols, q)
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func benchThreads() []int { return []int{1, 2} }

// BenchmarkMatVec measures decode-shaped products (one token): the metric is
// weight bytes streamed per second.
func BenchmarkMatVec(b *testing.B) {
	for _, typ := range kernelTypes {
		for _, s := range benchShapes {
			if s.cols%typ.BlockSize() != 0 {
				continue // e.g. k-quants need rows of 256
			}
			b.Run(fmt.Sprintf("%v/%dx%d", typ, s.cols, s.rows), func(b *testing.B) {
				m := benchMatrix(b, typ, s.rows, s.cols)
				x := randVec(rand.New(rand.NewPCG(3, 4)), s.cols, 1)
				dst := make([]float32, s.rows)
				for _, th := range benchThreads() {
					b.Run(fmt.Sprintf("t%d", th), func(b *testing.B) {
						p := NewPool(th)
						defer p.Close()
						for b.Loop() {
							p.MatMul(dst, m, x, 1)
						}
						b.ReportMetric(float64(len(m.Data))*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
					})
				}
			})
		}
	}
}

// BenchmarkMatMul measures prefill-shaped products (64 tokens): the metric is
// GFLOP/s (2 flops per multiply-add).
func BenchmarkMatMul(b *testing.B) {
	const n = 64
	for _, typ := range kernelTypes {
		for _, s := range benchShapes {
			if s.cols%typ.BlockSize() != 0 {
				continue
			}
			b.Run(fmt.Sprintf("%v/%dx%d/n%d", typ, s.cols, s.rows, n), func(b *testing.B) {
				m := benchMatrix(b, typ, s.rows, s.cols)
				x := randVec(rand.New(rand.NewPCG(3, 4)), n*s.cols, 1)
				dst := make([]float32, n*s.rows)
				for _, th := range benchThreads() {
					b.Run(fmt.Sprintf("t%d", th), func(b *testing.B) {
						p := NewPool(th)
						defer p.Close()
						for b.Loop() {
							p.MatMul(dst, m, x, n)
						}
						b.ReportMetric(2*float64(s.rows)*float64(s.cols)*n*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					})
				}
			})
		}
	}
}

// smolLayer lists the projections of one SmolLM2-135M layer (cols x rows).
var smolLayer = []struct{ cols, rows int }{
	{576, 576}, {576, 192}, {576, 192}, {576, 576}, {576, 1536}, {576, 1536}, {1536, 576},
}

// BenchmarkSmolLM2Projections runs all weight products of one SmolLM2-135M
// token (30 layers plus the 49152-row output) with 2 threads: an upper
// bound on the model's decode (n=1), batch decode (n=16) and prefill
// (n=512, no output layer) token rates from the matrix products alone.
func BenchmarkSmolLM2Projections(b *testing.B) {
	for _, typ := range []DType{Q8_0, F32} {
		for _, n := range []int{1, 16, 512} {
			b.Run(fmt.Sprintf("%v/n%d/t2", typ, n), func(b *testing.B) {
				var layer []Matrix
				for _, s := range smolLayer {
					layer = append(layer, benchMatrix(b, typ, s.rows, s.cols))
				}
				// Distinct weights per layer so decode streams from memory
				// as the model does (30 layers exceed the caches).
				layers := make([][]Matrix, 30)
				for l := range layers {
					layers[l] = make([]Matrix, len(layer))
					for i, m := range layer {
						c := m
						c.Data = append([]byte(nil), m.Data...)
						layers[l][i] = c
					}
				}
				out := benchMatrix(b, typ, 49152, 576)
				x := randVec(rand.New(rand.NewPCG(5, 6)), n*1536, 1)
				dst := make([]float32, n*49152)
				p := NewPool(2)
				defer p.Close()
				for b.Loop() {
					for _, l := range layers {
						for _, m := range l {
							p.MatMul(dst, m, x, n)
						}
					}
					if n <= 16 {
						p.MatMul(dst, out, x, n)
					}
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tok/s")
			})
		}
	}
}

// BenchmarkSmolLM2Layer times the seven weight products of one SmolLM2-135M
// layer for 16 tokens (batch decode) on one thread, over 30 layers' distinct
// weights, as they are mapped ("natural") and packed (Pack; where the CPU
// has no packed layout both are the same), and reports the fastest layer
// and the 10th and 50th percentiles in µs. On a shared machine whose speed
// drifts for seconds at a time the fastest of many layers compares kernel
// variants far more steadily than the mean (ns/op):
//
//	go test ./internal/tensor -run '^$' -bench SmolLM2Layer -benchtime 3s
func BenchmarkSmolLM2Layer(b *testing.B) {
	for _, packed := range []bool{false, true} {
		name := "natural"
		if packed {
			name = "packed"
		}
		b.Run(name, func(b *testing.B) {
			layers := make([][]Matrix, 30)
			for l := range layers {
				for _, s := range smolLayer {
					m := benchMatrix(b, Q8_0, s.rows, s.cols)
					if packed {
						m = Pack(m)
					}
					layers[l] = append(layers[l], m)
				}
			}
			const n = 16
			x := randVec(rand.New(rand.NewPCG(5, 6)), n*1536, 1)
			dst := make([]float32, n*1536)
			p := NewPool(1)
			defer p.Close()
			var us []float64
			for b.Loop() {
				for _, l := range layers {
					start := time.Now()
					for _, m := range l {
						p.MatMul(dst, m, x, n)
					}
					us = append(us, float64(time.Since(start).Nanoseconds())/1e3)
				}
			}
			slices.Sort(us)
			b.ReportMetric(us[0], "min-µs")
			b.ReportMetric(us[len(us)/10], "p10-µs")
			b.ReportMetric(us[len(us)/2], "p50-µs")
		})
	}
}
