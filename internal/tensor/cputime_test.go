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
	for _, typ := range allTypes {
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
						p.MatMul(dst, w, x, n)
						c0 := threadCPUTime()
						calls := 0
						for threadCPUTime()-c0 < 200*time.Millisecond {
							p.MatMul(dst, w, x, n)
							calls++
						}
						sec := (threadCPUTime() - c0).Seconds()
						v := 2 * float64(sh.rows*sh.cols*n) * float64(calls) / sec / 1e9
						if n == 1 {
							v = float64(len(w.Data)) * float64(calls) / sec / 1e9
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
