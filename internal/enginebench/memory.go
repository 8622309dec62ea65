package enginebench

import (
	"sync"
	"time"
)

// MemoryBandwidth measures this machine's memory bandwidth in GB/s with
// threads goroutines copying disjoint halves of two 512 MiB buffers (bytes
// read plus bytes written, like STREAM's copy), best of three runs. Decode
// is bound by it: tokens/s ≤ bandwidth ÷ weight bytes read per token.
func MemoryBandwidth(threads int) float64 {
	if threads <= 0 {
		threads = 1
	}
	const size = 512 << 20
	src, dst := make([]byte, size), make([]byte, size)
	for i := 0; i < size; i += 4096 { // fault the pages in first
		src[i], dst[i] = 1, 1
	}
	best := 0.0
	for run := 0; run < 3; run++ {
		start := time.Now()
		var wg sync.WaitGroup
		for t := 0; t < threads; t++ {
			lo, hi := size*t/threads, size*(t+1)/threads
			wg.Add(1)
			go func() {
				defer wg.Done()
				copy(dst[lo:hi], src[lo:hi])
			}()
		}
		wg.Wait()
		if gbs := 2 * size / time.Since(start).Seconds() / 1e9; gbs > best {
			best = gbs
		}
	}
	return best
}
