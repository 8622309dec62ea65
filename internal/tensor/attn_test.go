package tensor

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestAttentionKernels compares the attention kernels with their portable
// versions on random inputs of many shapes (including ones the fast paths
// hand back to the portable code).
func TestAttentionKernels(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, hd := range []int{8, 16, 24, 64, 128, 72} {
		for _, n := range []int{1, 2, 3, 4, 5, 7, 16, 33} {
			stride := hd*3 + 8*rng.IntN(3)
			k := make([]uint16, n*stride+hd)
			for i := range k {
				k[i] = F32ToF16(float32(rng.NormFloat64()))
			}
			q := make([]float32, hd)
			for i := range q {
				q[i] = F16ToF32(F32ToF16(float32(rng.NormFloat64())))
			}
			got, want := make([]float32, n), make([]float32, n)
			DotsF16(got, q, k, stride)
			dotsF16Generic(want, q, k, stride)
			for j := range got {
				if d := math.Abs(float64(got[j] - want[j])); d > 1e-4*math.Sqrt(float64(hd)) {
					t.Fatalf("DotsF16 hd %d n %d row %d: %v vs portable %v", hd, n, j, got[j], want[j])
				}
			}
			p := make([]float32, n)
			for i := range p {
				p[i] = rng.Float32()
			}
			o1, o2 := make([]float32, hd), make([]float32, hd)
			for i := range o1 {
				o1[i] = float32(rng.NormFloat64())
				o2[i] = o1[i]
			}
			AxpysF16(o1, p, k, stride)
			axpysF16Generic(o2, p, k, stride)
			for i := range o1 {
				if d := math.Abs(float64(o1[i] - o2[i])); d > 1e-4*math.Sqrt(float64(n)) {
					t.Fatalf("AxpysF16 hd %d n %d out %d: %v vs portable %v", hd, n, i, o1[i], o2[i])
				}
			}
		}
	}
}

// TestAttentionHeads checks that the grouped-query kernels give every
// query head exactly (bit for bit) what the one-head kernels give it, for
// groups of one to seven heads, so that grouping cannot change results.
func TestAttentionHeads(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, hd := range []int{8, 24, 64, 128, 96, 72} {
		for _, n := range []int{1, 3, 4, 5, 16, 33} {
			for g := 1; g <= 7; g++ {
				stride := hd*3 + 8*rng.IntN(3)
				k := make([]uint16, n*stride+hd)
				for i := range k {
					k[i] = F32ToF16(float32(rng.NormFloat64()))
				}
				q := make([]float32, g*hd)
				for i := range q {
					q[i] = F16ToF32(F32ToF16(float32(rng.NormFloat64())))
				}
				ds := n + rng.IntN(3)
				got := make([]float32, g*ds)
				DotsF16Heads(got, ds, n, q, hd, k, stride)
				for h := 0; h < g; h++ {
					want := make([]float32, n)
					DotsF16(want, q[h*hd:(h+1)*hd], k, stride)
					for j := range want {
						if math.Float32bits(got[h*ds+j]) != math.Float32bits(want[j]) {
							t.Fatalf("DotsF16Heads hd %d n %d heads %d: head %d row %d: %v, DotsF16 %v", hd, n, g, h, j, got[h*ds+j], want[j])
						}
					}
				}
				p, ps, out := randAxpysInputs(rng, g, n, hd)
				want := append([]float32(nil), out...)
				AxpysF16Heads(out, hd, p, ps, n, k, stride)
				for h := 0; h < g; h++ {
					AxpysF16(want[h*hd:(h+1)*hd], p[h*ps:h*ps+n], k, stride)
				}
				for i := range out {
					if math.Float32bits(out[i]) != math.Float32bits(want[i]) {
						t.Fatalf("AxpysF16Heads hd %d n %d heads %d: out %d: %v, AxpysF16 %v", hd, n, g, i, out[i], want[i])
					}
				}
			}
		}
	}
}

// TestAttentionPaged checks that the paged kernels give every query head
// and output exactly (bit for bit) what the kernels give on the same rows
// in one contiguous run, for blocks of one row up to more than a call's
// quad of rows, partial last blocks, offsets into the blocks and padding
// between them.
func TestAttentionPaged(t *testing.T) {
	checkAttentionPaged(t, rand.New(rand.NewPCG(7, 8)))
}

func checkAttentionPaged(t *testing.T, rng *rand.Rand) {
	t.Helper()
	for _, hd := range []int{8, 16, 24, 64, 128, 72} {
		for _, bs := range []int{1, 3, 4, 5, 16} {
			for _, n := range []int{1, 4, 7, 16, 33} {
				g := 1 + rng.IntN(7)
				stride := hd*3 + 8*rng.IntN(3)
				off := hd * rng.IntN(3)
				// The rows in one run, and the same rows in blocks
				// allocated apart, each with its own padding.
				k := make([]uint16, n*stride+off+hd)
				for i := range k {
					k[i] = F32ToF16(float32(rng.NormFloat64()))
				}
				var blocks [][]uint16
				for j := 0; j < n; j += bs {
					rows := min(bs, n-j)
					b := make([]uint16, off+(rows-1)*stride+hd+rng.IntN(2)*stride)
					copy(b[off:], k[off+j*stride:off+(j+rows-1)*stride+hd])
					blocks = append(blocks, b)
				}
				label := fmt.Sprintf("%v hd %d bs %d n %d heads %d", cpuISA, hd, bs, n, g)
				q := make([]float32, g*hd)
				for i := range q {
					q[i] = F16ToF32(F32ToF16(float32(rng.NormFloat64())))
				}
				ds := n + rng.IntN(3)
				got, want := make([]float32, g*ds), make([]float32, g*ds)
				DotsF16HeadsPaged(got, ds, n, q, hd, blocks, off, bs, stride)
				DotsF16Heads(want, ds, n, q, hd, k[off:], stride)
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("DotsF16HeadsPaged %s: score %d: %v, DotsF16Heads %v", label, i, got[i], want[i])
					}
				}
				p, ps, out := randAxpysInputs(rng, g, n, hd)
				wantOut := append([]float32(nil), out...)
				AxpysF16HeadsPaged(out, hd, p, ps, n, blocks, off, bs, stride)
				AxpysF16Heads(wantOut, hd, p, ps, n, k[off:], stride)
				for i := range out {
					if math.Float32bits(out[i]) != math.Float32bits(wantOut[i]) {
						t.Fatalf("AxpysF16HeadsPaged %s: out %d: %v, AxpysF16Heads %v", label, i, out[i], wantOut[i])
					}
				}
			}
		}
	}
}

// randAxpysInputs returns random weights for g heads of n positions (head
// h's at p[h*ps:], ps a little more than n) and g outputs of hd values to
// add to.
func randAxpysInputs(rng *rand.Rand, g, n, hd int) (p []float32, ps int, out []float32) {
	ps = n + rng.IntN(3)
	p = make([]float32, g*ps)
	for i := range p {
		p[i] = rng.Float32()
	}
	out = make([]float32, g*hd)
	for i := range out {
		out[i] = float32(rng.NormFloat64())
	}
	return p, ps, out
}

// TestAttentionPagedBounds checks that the paged kernels refuse a table
// whose blocks cannot hold the rows asked for, before reading them.
func TestAttentionPagedBounds(t *testing.T) {
	const hd, stride, bs = 16, 48, 4
	full := make([]uint16, (bs-1)*stride+hd)
	q, dst := make([]float32, hd), make([]float32, 9)
	tests := []struct {
		name   string
		blocks [][]uint16
		n, off int
	}{
		{"too few blocks", [][]uint16{full, full}, 9, 0},
		{"short block", [][]uint16{full, full[:len(full)-1], full}, 9, 0},
		{"short last block", [][]uint16{full, full, full[:hd-1]}, 9, 0},
		{"offset past the rows", [][]uint16{full, full, full}, 9, stride},
	}
	for _, tc := range tests {
		for name, call := range map[string]func(){
			"dots":  func() { DotsF16HeadsPaged(dst, 9, tc.n, q, hd, tc.blocks, tc.off, bs, stride) },
			"axpys": func() { AxpysF16HeadsPaged(q, hd, dst, 9, tc.n, tc.blocks, tc.off, bs, stride) },
		} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s %s: no panic", name, tc.name)
					}
				}()
				call()
			}()
		}
	}
}

// TestPrefetchRows runs the prefetch on edge shapes (it has no visible
// effect; it must just not fault or read out of bounds).
func TestPrefetchRows(t *testing.T) {
	b := make([]byte, 1000)
	for _, c := range []struct{ rows, rowBytes, stride int }{
		{0, 64, 64}, {1, 1, 0}, {3, 128, 384}, {100, 128, 384}, {2, 1000, 0}, {2, 1001, 10}, {5, 64, -1}, {-1, 64, 64},
	} {
		PrefetchRows(b, c.rows, c.rowBytes, c.stride)
		PrefetchRows(nil, c.rows, c.rowBytes, c.stride)
	}
}

func BenchmarkDotsF16(b *testing.B) {
	const hd, kvDim, n = 64, 192, 512
	k := make([]uint16, n*kvDim)
	q := make([]float32, hd)
	dst := make([]float32, n)
	for b.Loop() {
		DotsF16(dst, q, k, kvDim)
	}
	b.ReportMetric(float64(n*hd*2)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

func BenchmarkAxpysF16(b *testing.B) {
	const hd, kvDim, n = 64, 192, 512
	v := make([]uint16, n*kvDim)
	p := make([]float32, n)
	out := make([]float32, hd)
	for b.Loop() {
		AxpysF16(out, p, v, kvDim)
	}
	b.ReportMetric(float64(n*hd*2)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}
