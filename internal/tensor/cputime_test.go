//go:build linux && kernelbench

package tensor

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// Per-thread kernel throughput measured in the thread's CPU time rather than
// wall time, so that numbers taken on a shared, busy machine (where a
// benchmark's thread is often descheduled) stay comparable:
//
//	go test -tags kernelbench -run KernelCPUTime -v ./internal/tensor
//
// n=1 rows report weight bytes streamed per CPU second (decode); n=64 rows
// report GFLOP per CPU second (prefill). The 49152-row matrices do not fit in
// the caches; the 1536-row ones do.

func threadCPUTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(1 /* RUSAGE_THREAD */, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func TestKernelCPUTime(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, typ := range kernelTypes {
		for _, sh := range []struct{ rows, cols int }{{49152, 768}, {1536, 768}} {
			m := benchMatrix(t, typ, sh.rows, sh.cols)
			x := randVec(rand.New(rand.NewPCG(3, 4)), sh.cols*64, 1)
			dst := make([]float32, sh.rows*64)
			p := NewPool(1)
			for _, n := range []int{1, 64} {
				p.MatMul(dst, m, x, n)
				best := 0.0
				for rep := 0; rep < 3; rep++ {
					c0 := threadCPUTime()
					calls := 0
					for threadCPUTime()-c0 < 300*time.Millisecond {
						p.MatMul(dst, m, x, n)
						calls++
					}
					sec := (threadCPUTime() - c0).Seconds()
					if n == 1 {
						best = max(best, float64(len(m.Data))*float64(calls)/sec/1e9)
					} else {
						best = max(best, 2*float64(sh.rows*sh.cols*n)*float64(calls)/sec/1e9)
					}
				}
				unit := "GB/s"
				if n > 1 {
					unit = "GFLOP/s"
				}
				fmt.Printf("%-5v %dx%-6d n=%-3d %7.1f %s per CPU second\n", typ, sh.cols, sh.rows, n, best, unit)
			}
			p.Close()
		}
	}
}

// TestPackedKernelCPUTime compares the kernels on packed weights (Pack)
// with the same weights unpacked, alternated in one process, per CPU
// second (decode in GB/s of weights, more tokens in GFLOP/s):
//
//	go test -tags kernelbench -run PackedKernelCPUTime -v ./internal/tensor
func TestPackedKernelCPUTime(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, typ := range []DType{F16, BF16} {
		if !packable(typ) {
			t.Logf("%v: no packed layout on this CPU", typ)
			continue
		}
		for _, sh := range []struct{ rows, cols int }{{16384, 2048}, {2048, 8192}, {1536, 768}} {
			m := benchMatrix(t, typ, sh.rows, sh.cols)
			pm := m
			pm.Data = append([]byte(nil), m.Data...)
			pm = Pack(pm)
			x := randVec(rand.New(rand.NewPCG(3, 4)), sh.cols*64, 1)
			dst := make([]float32, sh.rows*64)
			p := NewPool(1)
			for _, n := range []int{1, 2, 4, 64} {
				var best [2]float64
				for rep := 0; rep < 4; rep++ {
					for i, w := range []Matrix{m, pm} {
						s := cpuSecondsPerMatMul(p, dst, w, x, n, 200*time.Millisecond)
						v := 2 * float64(sh.rows*sh.cols*n) / s / 1e9
						if n == 1 {
							v = float64(len(w.Data)) / s / 1e9
						}
						best[i] = max(best[i], v)
					}
				}
				unit := "GB/s"
				if n > 1 {
					unit = "GFLOP/s"
				}
				fmt.Printf("%-5v %dx%-6d n=%-3d unpacked %7.1f  packed %7.1f %s per CPU second (%.2fx)\n", typ, sh.cols, sh.rows, n, best[0], best[1], unit, best[1]/best[0])
			}
			p.Close()
		}
	}
}

// llamaLayer lists the weight products of one Llama-3.2-1B layer (rows ×
// cols): Q, K, V, O, gate, up, down.
var llamaLayer = []struct {
	name       string
	rows, cols int
}{
	{"q", 2048, 2048}, {"k", 512, 2048}, {"v", 512, 2048}, {"o", 2048, 2048},
	{"gate", 8192, 2048}, {"up", 8192, 2048}, {"down", 2048, 8192},
}

// TestLayerPrefillCPUTime times one Llama-3.2-1B layer's products at 512
// tokens (a prefill's shape) on one thread, per CPU second, for each type
// with a packed layout on this CPU, its weights unpacked and packed
// alternated in one process (a shared machine's drift moves both alike):
//
//	go test -tags kernelbench -run LayerPrefillCPUTime -v ./internal/tensor
//
// Each matrix is timed alone, so the smaller ones are read from the
// last-level cache, as they are not in a model's forward pass.
func TestLayerPrefillCPUTime(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	const n = 512
	x := randVec(rand.New(rand.NewPCG(3, 4)), 8192*n, 1)
	dst := make([]float32, 8192*n)
	p := NewPool(1)
	defer p.Close()
	for _, typ := range []DType{F16, BF16} {
		if !packable(typ) {
			t.Logf("%v: no packed layout on this CPU", typ)
			continue
		}
		var layouts [2][]Matrix // unpacked, packed
		for _, s := range llamaLayer {
			m := benchMatrix(t, typ, s.rows, s.cols)
			pm := m
			pm.Data = append([]byte(nil), m.Data...)
			layouts[0] = append(layouts[0], m)
			layouts[1] = append(layouts[1], Pack(pm))
		}
		// best[l][i]: GFLOP per CPU second of product i (len(llamaLayer):
		// the layer) on layout l, the best of the repetitions.
		var best [2][]float64
		for rep := 0; rep < 4; rep++ {
			for l, ms := range layouts {
				if best[l] == nil {
					best[l] = make([]float64, len(ms)+1)
				}
				var sec, flops float64
				for i, m := range ms {
					s := cpuSecondsPerMatMul(p, dst, m, x[:n*m.Cols], n, 150*time.Millisecond)
					f := 2 * float64(m.Rows*m.Cols*n)
					best[l][i] = max(best[l][i], f/s/1e9)
					sec += s
					flops += f
				}
				best[l][len(ms)] = max(best[l][len(ms)], flops/sec/1e9)
			}
		}
		for l, name := range []string{"unpacked", "packed"} {
			fmt.Printf("%-5v %-8s", typ, name)
			for i, s := range llamaLayer {
				fmt.Printf(" %s %.1f", s.name, best[l][i])
			}
			fmt.Printf("  layer %.1f GFLOP/s per CPU second\n", best[l][len(llamaLayer)])
		}
	}
}

// cpuSecondsPerMatMul is the thread CPU time one product of w by n tokens
// of x takes, averaged over as many as fit in budget (after one to warm
// the caches).
func cpuSecondsPerMatMul(p *Pool, dst []float32, w Matrix, x []float32, n int, budget time.Duration) float64 {
	p.MatMul(dst, w, x, n)
	c0 := threadCPUTime()
	calls := 0
	for threadCPUTime()-c0 < budget {
		p.MatMul(dst, w, x, n)
		calls++
	}
	return (threadCPUTime() - c0).Seconds() / float64(calls)
}
