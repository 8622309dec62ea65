//go:build amd64 && !purego

package tensor

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/cpu"
)

// AMX: the tile unit of Intel Xeons since Sapphire Rapids. Its INT8 dot
// products take the 16-token products of packed Q8_0 and Q4_0 weights
// (prompts, and batches of 16 sequences and more), the per-block float
// steps staying the VNNI kernels' (q80AMXP_16, q40AMXP_16: bit-identical
// results, so batch invariance holds). Whether they are used is measured,
// not assumed: amxChoice times them against the VNNI kernels once per
// process.
//
// Not on the tiles: the k-quants, F16 and BF16, whose VNNI kernels keep
// partial sums in lanes that a tile's whole-row dot products cannot
// reproduce bit for bit (their results would then depend on the batch).

// amxCPU reports whether the CPU has the tiles and their INT8 products
// beside the VNNI level the kernels' float steps use.
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

// amxPacked is an AMX kernel of 16 tokens on packed weights of type typ
// (Q8_0: q80AMXP_16, Q4_0: q40AMXP_16), slot its place in amxDecision.use.
type amxPacked struct {
	typ  DType
	slot int
	// force: used whatever amxChoice decided (tests).
	force bool
}

var (
	q80AMX = &amxPacked{typ: Q8_0, slot: 0}
	q40AMX = &amxPacked{typ: Q4_0, slot: 1}
)

// on says whether x computes 16-token products: amxChoice's decision.
func (x *amxPacked) on() bool { return x != nil && (x.force || amxChoice().use[x.slot]) }

// amxScratch is the AMX kernels' scratch: per block in flight, its tile of
// sums and Q4_0's unpacked weights (asmgen/amx.go).
type amxScratch [amxScratchBytes]byte

// kernel computes rows [r0, r0+8·rowBlocks) of packed w for the 16 tokens
// from t.
func (x *amxPacked) kernel(dst []float32, ld int, w *Matrix, r0, rowBlocks int, a *actBuf, t int, s *amxScratch) {
	p, act, out := &w.Data[r0*w.RowBytes()], &a.g[t*q80BlockBytes], &dst[t*ld+r0]
	if x.typ == Q4_0 { // direct calls: a func value would move s to the heap
		q40AMXP_16(p, rowBlocks, act, a.gs, w.Cols/32, out, ld*4, &s[0])
		return
	}
	q80AMXP_16(p, rowBlocks, act, a.gs, w.Cols/32, out, ld*4, &s[0])
}

// amxDecision is what amxChoice found: whether the tiles are used for
// Q8_0 and Q4_0, and the probe's times of each kernel.
type amxDecision struct {
	use   [2]bool
	err   error // the tiles could not be had
	probe string
}

// amxChoice decides once whether the 16-token products of packed Q8_0 and
// Q4_0 weights run on the tiles: where the OS grants them, it times each
// AMX kernel against its VNNI kernel on a packed matrix, alternated, best
// of several, and keeps the tiles for a type if they are at least 5%
// faster.
var amxChoice = sync.OnceValue(func() amxDecision {
	if err := amxPermit(); err != nil {
		return amxDecision{err: err}
	}
	var d amxDecision
	var parts []string
	for i, x := range []*amxPacked{q80AMX, q40AMX} {
		at, vt := x.probe()
		d.use[i] = at*105 <= vt*100
		verdict := "used"
		if !d.use[i] {
			verdict = "not used"
		}
		parts = append(parts, fmt.Sprintf("%v %s (%v against the VNNI kernel's %v)", x.typ, verdict, at, vt))
	}
	d.probe = strings.Join(parts, ", ")
	return d
})

// AMX says, for the load line, whether and why the tile unit computes
// prompts' Q8_0 and Q4_0 products on this CPU; "" where it has none.
func AMX() string {
	if !amxCPU() {
		return ""
	}
	d := amxChoice()
	if d.err != nil {
		return "AMX-INT8 present but not granted by the OS (" + d.err.Error() + ")"
	}
	return "AMX-INT8 tiles for 16-token products, by a probe of 256×2048×16: " + d.probe
}

// probe times a 16-token product of a packed 256 × 2048 matrix of x's type
// (its weights in L2, as a work item's are) on the AMX kernel and on the
// VNNI one.
func (x *amxPacked) probe() (amxT, vnniT time.Duration) {
	const rows, cols, T = 256, 2048, 16
	nb := cols / 32
	bs := x.typ.TypeSize()
	w := make([]byte, rows*nb*bs)
	for i := range w {
		w[i] = byte(i*7 + i>>9)
	}
	for b := 0; b < rows*nb; b++ { // small f16 scales: finite products
		w[b*bs], w[b*bs+1] = 0x00, 0x20
	}
	pack, vnni := packQ80, q80VNNIP_16
	if x.typ == Q4_0 {
		pack, vnni = packQ40, q40VNNIP_16
	}
	pack(w, nb*bs)
	m := Matrix{Type: x.typ, Rows: rows, Cols: cols, Data: w, packed: true}
	a := &actBuf{g: make([]byte, nb*T*q80BlockBytes), gs: T * q80BlockBytes}
	for i := range a.g {
		a.g[i] = byte(i * 13)
	}
	for b := 0; b < nb*T; b++ {
		o := b*q80BlockBytes + q80BlockScale
		a.g[o], a.g[o+1], a.g[o+2], a.g[o+3] = 0, 0, 0x80, 0x3b
	}
	dst := make([]float32, T*rows)
	s := new(amxScratch)
	timed := func(f func()) time.Duration {
		start := time.Now()
		f()
		return time.Since(start)
	}
	amxT, vnniT = time.Hour, time.Hour
	for range 7 {
		amxT = min(amxT, timed(func() { x.kernel(dst, rows, &m, 0, rows/8, a, 0, s) }))
		vnniT = min(vnniT, timed(func() {
			vnni(&w[0], q80PackedPrefetchRows*nb*bs, rows/8, &a.g[0], a.gs, nb, &dst[0], rows*4)
		}))
	}
	return amxT, vnniT
}
