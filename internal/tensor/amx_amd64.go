//go:build amd64 && !purego

package tensor

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/sys/cpu"
)

// AMX: the tile unit of Intel Xeons since Sapphire Rapids. Its INT8 dot
// products take the 16-token packed Q8_0 products of prompts (and of
// batches of 16 and more), the per-block float steps staying the VNNI
// kernels' (q80AMXP_16: bit-identical results). Whether it is used is
// measured, not assumed: amxChoice times both kernels once per process.

// amxCPU reports whether the CPU has the tiles and their INT8 products
// beside the VNNI level the kernel's float steps use.
func amxCPU() bool {
	return cpuISA == isaVNNI && cpu.X86.HasAMXTile && cpu.X86.HasAMXInt8
}

// amxPermit asks the OS, once, for the tile state (Linux keeps it from a
// process until it asks: the first tile instruction would fault otherwise).
var amxPermit = sync.OnceValue(func() error {
	if !amxCPU() {
		return errNoAMX
	}
	return requestAMX()
})

var errNoAMX = fmt.Errorf("the CPU has no AMX-INT8 (or no AVX512-VNNI)")

// amxDecision is what amxChoice found: whether the tiles are used, and the
// probe's times per product of each kernel.
type amxDecision struct {
	use        bool
	err        error // the tiles could not be had
	amx, vnni  time.Duration
	probeShape string
}

// amxChoice decides once whether the 16-token packed Q8_0 products run on
// the tiles: where the OS grants them, it times q80AMXP_16 against
// q80VNNIP_16 on a packed matrix of probe size, alternated, best of
// several, and keeps the tiles if they are at least 5% faster.
var amxChoice = sync.OnceValue(func() amxDecision {
	if err := amxPermit(); err != nil {
		return amxDecision{err: err}
	}
	a, v, shape := probeAMX()
	return amxDecision{use: a*105 <= v*100, amx: a, vnni: v, probeShape: shape}
})

// AMX says, for the load line, whether and why the tile unit computes
// prompts' Q8_0 products on this CPU; "" where the CPU has none.
func AMX() string {
	if !amxCPU() {
		return ""
	}
	d := amxChoice()
	switch {
	case d.err != nil:
		return "AMX-INT8 present but not granted by the OS (" + d.err.Error() + ")"
	case d.use:
		return fmt.Sprintf("AMX-INT8 tiles for 16-token Q8_0 products (a probe of %s: %v against the VNNI kernels' %v)", d.probeShape, d.amx, d.vnni)
	default:
		return fmt.Sprintf("AMX-INT8 not used (a probe of %s: %v against the VNNI kernels' %v)", d.probeShape, d.amx, d.vnni)
	}
}

// amxScratch is q80AMXP_16's scratch: two blocks' tile of sums.
type amxScratch [1024]byte

// probeAMX times a 16-token product of a packed 256 × 2048 Q8_0 matrix
// (its weights, 0.5 MiB, in L2 as a work item's are) on each kernel.
func probeAMX() (amxT, vnniT time.Duration, shape string) {
	const rows, cols, T = 256, 2048, 16
	nb := cols / qk80
	w := make([]byte, rows*nb*q80Size)
	act := make([]byte, nb*T*q80BlockBytes)
	for i := range w {
		w[i] = byte(i*7 + i>>9)
	}
	for b := 0; b < rows*nb; b++ { // small f16 scales, finite products
		w[b*q80Size], w[b*q80Size+1] = 0x00, 0x20
	}
	for i := range act {
		act[i] = byte(i * 13)
	}
	for b := 0; b < nb*T; b++ {
		o := b * q80BlockBytes
		act[o+q80BlockScale], act[o+q80BlockScale+1], act[o+q80BlockScale+2], act[o+q80BlockScale+3] = 0, 0, 0x80, 0x3b
	}
	packQ80(w, nb*q80Size)
	dst := make([]float32, T*rows)
	var s amxScratch
	best := func(f func()) time.Duration {
		start := time.Now()
		f()
		return time.Since(start)
	}
	amxT, vnniT = time.Hour, time.Hour
	for range 7 {
		amxT = min(amxT, best(func() {
			q80AMXP_16(&w[0], rows/8, &act[0], T*q80BlockBytes, nb, &dst[0], rows*4, &s[0])
		}))
		vnniT = min(vnniT, best(func() {
			q80VNNIP_16(&w[0], q80PackedPrefetchRows*nb*q80Size, rows/8, &act[0], T*q80BlockBytes, nb, &dst[0], rows*4)
		}))
	}
	return amxT, vnniT, fmt.Sprintf("%d×%d×%d", rows, cols, T)
}
