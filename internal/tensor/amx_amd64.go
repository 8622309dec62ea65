//go:build amd64 && !purego

package tensor

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/cpu"
)

// AMX: the tile unit of Intel Xeons since Sapphire Rapids. Its INT8 dot
// products take the 16-token products of Q8_0 and Q4_0 weights (prompts,
// and batches of 16 sequences and more), packed (q80AMXP_16, q40AMXP_16)
// or as the file has them (q80AMXR_16, q40AMXR_16: the mapped file's
// weights), and of packed Q2_K to Q6_K and IQ4_XS weights (q4KAMXP_16,
// q5KAMXP_16, q6KAMXP_16, iq4XSAMXP_16, q3KAMXP_16, q2KAMXP_16: a tile
// product per 32- or 16-value sub-block, whose integer sums are the VNNI
// kernels'), the float steps staying the VNNI kernels' (bit-identical
// results, so batch invariance holds).
// Whether they are used is measured, not assumed: amxChoice times each
// against its VNNI kernel once per process.
//
// BF16 weights have a tile family of their own (bf16AMXR_16, bf16AMXR_32:
// asmgen/amxbf16.go), not a drop-in for 16 tokens: the vdpbf16ps kernels
// add each pair's two products to a lane in turn, rounding after each,
// where TDPBF16PS adds up the pairs of its K dimension in its own order
// before adding them to C, which no layout of A and B turns into the
// lanes' order. So a BF16 matrix the family takes (bf16OnTiles) has all
// its products on the tiles, decode too, whichever the placement (the
// mapping's rows and the private copy's tile layout give the same sums),
// and the family is used only if the probe finds it faster at prefill and
// not slower at decode. F16 stays off the tiles (AMX-FP16 is Granite
// Rapids' only).

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

// The process's switch of the tiles: DisableAMX sets amxOff before the
// decisions; amxDecided says one has been made (or is being made), after
// which the switch no longer moves.
var amxOff, amxDecided atomic.Bool

// DisableAMX keeps every product of this process off the AMX tiles, for a
// command told so (to compare with the tiles, or where a CPU's tiles cost
// its other cores their clock). It must come before the first product that
// could use them; after that it changes nothing and says so (unless they
// were already off).
func DisableAMX() error {
	if amxOff.Load() {
		return nil
	}
	if amxDecided.Load() {
		return errors.New("the AMX tiles were already chosen for this process's products")
	}
	amxOff.Store(true)
	return nil
}

// amxKernel is an AMX kernel of 16 tokens on weights of type typ, packed
// (q80AMXP_16, q40AMXP_16, q4KAMXP_16, q5KAMXP_16, q6KAMXP_16,
// iq4XSAMXP_16, q3KAMXP_16, q2KAMXP_16) or, with rows, as the file has
// them (q80AMXR_16, q40AMXR_16); slot is its place in amxDecision.use.
type amxKernel struct {
	typ  DType
	rows bool
	slot int
	// force: used whatever amxChoice decided (tests).
	force bool
}

var (
	q80AMX     = &amxKernel{typ: Q8_0, slot: 0}
	q40AMX     = &amxKernel{typ: Q4_0, slot: 1}
	q80AMXRows = &amxKernel{typ: Q8_0, rows: true, slot: 2}
	q40AMXRows = &amxKernel{typ: Q4_0, rows: true, slot: 3}
	q4KAMX     = &amxKernel{typ: Q4_K, slot: 4}
	q5KAMX     = &amxKernel{typ: Q5_K, slot: 5}
	q6KAMX     = &amxKernel{typ: Q6_K, slot: 6}
	iq4XSAMX   = &amxKernel{typ: IQ4_XS, slot: 7}
	q3KAMX     = &amxKernel{typ: Q3_K, slot: 8}
	q2KAMX     = &amxKernel{typ: Q2_K, slot: 9}
	amxKernels = [...]*amxKernel{q80AMX, q40AMX, q80AMXRows, q40AMXRows, q4KAMX, q5KAMX, q6KAMX, iq4XSAMX, q3KAMX, q2KAMX}
	// bf16AMX is the AMX-BF16 family as a whole (see above), decided by
	// bf16Choice.
	bf16AMX = &amxKernel{typ: BF16, slot: -1}
)

// amxBF16CPU reports whether the CPU has the tiles' BF16 products, and
// the AVX512-BF16 kernels the probe weighs them against.
func amxBF16CPU() bool { return amxCPU() && cpu.X86.HasAMXBF16 && hasBF16 }

// bf16OnTiles says whether m's products are all computed by the AMX-BF16
// family: BF16 of whole 16-row tiles and 32-column chunks, the family
// chosen by bf16Choice. Pack then lays such a matrix out in the tile
// layout (bf16TileOffset), never in the zmm kernels'.
func bf16OnTiles(m Matrix) bool {
	return m.Type == BF16 && m.Rows%16 == 0 && m.Cols%32 == 0 && bf16AMX.on()
}

// bf16AMXRun computes rows [r0, r1) (whole tiles) of BF16 matrix w, in
// the file's layout or packed in the tile layout, for tokens [t0, t1) on
// the tiles, 32 tokens a call.
func bf16AMXRun(dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int) {
	if r1 <= r0 {
		return
	}
	s := new(amxScratch) // on the stack: the kernels keep no pointer
	rb := w.RowBytes()
	rowStride, chunkStep := rb, 64
	if w.packed {
		rowStride, chunkStep = 64, 1024
	}
	for t := t0; t < t1; {
		T := min(32, t1-t)
		p, act, out := &w.Data[r0*rb], &a.t[4*t], &dst[t*ld+r0]
		if T > 16 { // direct calls: a func value would move s to the heap
			bf16AMXR_32(p, rowStride, chunkStep, 16*rb, (r1-r0)/16, act, 4*a.n, w.Cols/32, out, ld*4, T, &s[0])
		} else {
			bf16AMXR_16(p, rowStride, chunkStep, 16*rb, (r1-r0)/16, act, 4*a.n, w.Cols/32, out, ld*4, T, &s[0])
		}
		t += T
	}
}

// on says whether x computes 16-token products (bf16AMX: all products of
// the matrices it takes): amxChoice's decision (bf16Choice's).
func (x *amxKernel) on() bool {
	switch {
	case x == nil:
		return false
	case x.force:
		return true
	case x == bf16AMX:
		return bf16Choice().use
	}
	return amxChoice().use[x.slot]
}

// amxRowsFor is the row kernel for weights of type t, nil if none.
func amxRowsFor(t DType) *amxKernel {
	switch t {
	case Q8_0:
		return q80AMXRows
	case Q4_0:
		return q40AMXRows
	}
	return nil
}

// amxIndexable says whether the row kernels' dword gather and scatter
// indices (15 rows or 15 tokens on) reach rows rowBytes and outputs
// ldBytes apart.
func amxIndexable(rowBytes, ldBytes int) bool {
	return 15*rowBytes < 1<<31 && 15*ldBytes < 1<<31
}

// amxTiled says whether the conversion for products of ws on n tokens
// fills the tile layout (BF16: the pair layout): where one of them is on
// the BF16 tiles, or has 16 unpacked rows or more that a row kernel in use
// takes.
func amxTiled(ws []Matrix, n int) bool {
	for _, w := range ws {
		if bf16OnTiles(w) {
			return true
		}
	}
	if n < 16 {
		return false
	}
	for _, w := range ws {
		if !w.packed && w.Rows >= 16 && amxRowsFor(w.Type).on() && amxIndexable(w.RowBytes(), 4*w.Rows) {
			return true
		}
	}
	return false
}

// amxScratch is the AMX kernels' scratch: per block in flight, its tile of
// sums and Q4_0's unpacked weights (asmgen/amx.go).
type amxScratch [amxScratchBytes]byte

// kernel computes rows [r0, r0+8·rowBlocks) of packed w for the 16 tokens
// from t.
func (x *amxKernel) kernel(dst []float32, ld int, w *Matrix, r0, rowBlocks int, a *actBuf, t int, s *amxScratch) {
	p, out := &w.Data[r0*w.RowBytes()], &dst[t*ld+r0]
	// Direct calls: a func value would move s to the heap.
	switch x.typ {
	case Q4_0:
		q40AMXP_16(p, rowBlocks, &a.g[t*q80BlockBytes], a.gs, w.Cols/32, out, ld*4, &s[0])
	case Q8_0:
		q80AMXP_16(p, rowBlocks, &a.g[t*q80BlockBytes], a.gs, w.Cols/32, out, ld*4, &s[0])
	case Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS:
		cols := w.Cols
		nb := cols / qkK
		y, d, bs := &a.q[t*cols], &a.d[t*nb], &a.bs[t*cols/16]
		switch x.typ {
		case Q4_K:
			q4KAMXP_16(p, rowBlocks, y, cols, d, nb*4, bs, nb*32, nb, out, ld*4, 16, &s[0])
		case Q5_K:
			q5KAMXP_16(p, rowBlocks, y, cols, d, nb*4, bs, nb*32, nb, out, ld*4, 16, &s[0])
		case IQ4_XS:
			iq4XSAMXP_16(p, rowBlocks, y, cols, d, nb*4, bs, nb*32, nb, out, ld*4, 16, &s[0])
		case Q3_K:
			q3KAMXP_16(p, rowBlocks, y, cols, d, nb*4, bs, nb*32, nb, out, ld*4, 16, &s[0])
		case Q2_K:
			q2KAMXP_16(p, rowBlocks, y, cols, d, nb*4, bs, nb*32, nb, out, ld*4, 16, &s[0])
		default:
			q6KAMXP_16(p, rowBlocks, y, cols, d, nb*4, bs, nb*32, nb, out, ld*4, 16, &s[0])
		}
	}
}

// rowsKernel computes rows [r0, r0+16·rowTiles) of w as the file has them
// for the 16 tokens from t, from a's tile layout.
func (x *amxKernel) rowsKernel(dst []float32, ld int, w *Matrix, r0, rowTiles int, a *actBuf, t int, s *amxScratch) {
	rb := w.RowBytes()
	p, act, out := &w.Data[r0*rb], &a.t[4*t], &dst[t*ld+r0]
	if x.typ == Q4_0 { // direct calls: a func value would move s to the heap
		q40AMXR_16(p, rb, rowTiles, act, 4*a.n, w.Cols/32, out, ld*4, &s[0])
		return
	}
	q80AMXR_16(p, rb, rowTiles, act, 4*a.n, w.Cols/32, out, ld*4, &s[0])
}

// amxDecision is what amxChoice found: whether each AMX kernel is used
// (amxKernels' order), and the probe's times.
type amxDecision struct {
	use   [len(amxKernels)]bool
	off   bool  // DisableAMX
	err   error // the tiles could not be had
	probe string
}

// amxChoice decides once whether the 16-token products of each type and
// layout with an AMX kernel run on the tiles: where the OS
// grants them, it times each AMX kernel against its VNNI kernel on a
// matrix of that type and layout, alternated, best of several, and keeps
// the tiles for it if they are at least 5% faster. The BF16 family is
// decided apart (bf16Choice), only when a BF16 matrix asks.
//
// It is set in init: the probes pack matrices, Pack asks bf16OnTiles,
// and amxKernel.on, which that calls, asks amxChoice for the other kernels
// (Go would call that an initialization cycle; at run time the probes
// pack no BF16 matrix).
var amxChoice func() amxDecision

func init() { amxChoice = sync.OnceValue(decideAMX) }

// decideAMX is amxChoice's work.
func decideAMX() amxDecision {
	amxDecided.Store(true)
	if amxOff.Load() {
		return amxDecision{off: true}
	}
	if err := amxPermit(); err != nil {
		return amxDecision{err: err}
	}
	var d amxDecision
	var parts []string
	for i, x := range amxKernels {
		at, vt := x.probe()
		d.use[i] = at*105 <= vt*100
		verdict := "used"
		if !d.use[i] {
			verdict = "not used"
		}
		layout := "packed"
		if x.rows {
			layout = "as in the file"
		}
		parts = append(parts, fmt.Sprintf("%v %s %s (%v against the VNNI kernel's %v)", x.typ, layout, verdict, at, vt))
	}
	d.probe = strings.Join(parts, ", ")
	return d
}

// AMX says, for the load line, whether and why the tile unit computes
// prompts' products on this CPU, for each type and layout it has a kernel
// for; "" where it has none.
func AMX() string {
	if !amxCPU() {
		return ""
	}
	d := amxChoice()
	if d.off {
		return "AMX-INT8 present, turned off"
	}
	if d.err != nil {
		return "AMX-INT8 present but not granted by the OS (" + d.err.Error() + ")"
	}
	return fmt.Sprintf("AMX-INT8 tiles for 16-token products, by a probe of %d×%d×%d: %s", amxProbeRows, amxProbeCols, amxProbeTokens, d.probe)
}

// bf16Decision is what bf16Choice found: whether the AMX-BF16 family is
// used, and the load line's words on it.
type bf16Decision struct {
	use  bool
	line string
}

// bf16Choice decides once, when the first BF16 matrix asks (the probe
// takes two 32 MiB matrices a moment, which models without BF16 need not
// pay), whether the AMX-BF16 family computes BF16 products (probeBF16).
var bf16Choice = sync.OnceValue(func() bf16Decision {
	amxDecided.Store(true)
	if !amxBF16CPU() {
		return bf16Decision{}
	}
	if amxOff.Load() {
		return bf16Decision{line: "AMX-BF16 present, turned off"}
	}
	if err := amxPermit(); err != nil {
		return bf16Decision{line: "AMX-BF16 present but not granted by the OS (" + err.Error() + ")"}
	}
	use, line := probeBF16()
	return bf16Decision{use: use, line: line}
})

// AMXBF16 says, for the load line of a file with BF16 matrices, whether
// and why the AMX-BF16 tiles compute them on this CPU; "" where it has
// none.
func AMXBF16() string { return bf16Choice().line }

// The probes' product: 16 tokens of a 256 × 2048 matrix, its weights in
// L2 as a work item's are.
const amxProbeRows, amxProbeCols, amxProbeTokens = 256, 2048, 16

// probeWeights is a probe matrix of type t as a file has it, with small
// f16 scales (the k-quants' d and dmin) so that the products stay finite.
func probeWeights(t DType) []byte {
	bs := t.TypeSize()
	w := make([]byte, amxProbeRows*amxProbeCols/t.BlockSize()*bs)
	for i := range w {
		w[i] = byte(i*7 + i>>9)
	}
	scales := []int{0} // where a block's f16 scales are
	switch t {
	case Q4_K, Q5_K:
		scales = []int{0, 2}
	case Q6_K, Q3_K:
		scales = []int{bs - 2}
	case Q2_K:
		scales = []int{bs - 4, bs - 2}
	}
	for b := 0; b < len(w)/bs; b++ {
		for _, o := range scales {
			w[b*bs+o], w[b*bs+o+1] = 0x00, 0x20
		}
	}
	return w
}

// bestTimes runs a and b alternately seven times and returns the best
// time of each.
func bestTimes(a, b func()) (at, bt time.Duration) {
	timed := func(f func()) time.Duration {
		start := time.Now()
		f()
		return time.Since(start)
	}
	at, bt = time.Hour, time.Hour
	for range 7 {
		at, bt = min(at, timed(a)), min(bt, timed(b))
	}
	return at, bt
}

// probe times the probe product of x's type and layout on the AMX kernel
// and on the VNNI one.
func (x *amxKernel) probe() (amxT, vnniT time.Duration) {
	if x.rows {
		return x.probeRows()
	}
	if x.typ.BlockSize() == qkK {
		return x.probeK()
	}
	const rows, T, nb = amxProbeRows, amxProbeTokens, amxProbeCols / 32
	bs := x.typ.TypeSize()
	w := probeWeights(x.typ)
	vnni := q80VNNIP_16
	if x.typ == Q4_0 {
		packQ4(Q4_0, w, nb*bs)
		vnni = q40VNNIP_16
	} else {
		packQ80(w, nb*bs)
	}
	m := Matrix{Type: x.typ, Rows: rows, Cols: amxProbeCols, Data: w, packed: true}
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
	return bestTimes(func() { x.kernel(dst, rows, &m, 0, rows/8, a, 0, s) }, func() {
		vnni(&w[0], q80PackedPrefetchRows*nb*bs, rows/8, &a.g[0], a.gs, nb, &dst[0], rows*4)
	})
}

// probeActs is the probes' activations: n tokens of cols values converted
// to vt (with the tile layout where tiled).
func probeActs(vt DType, cols, n int, tiled bool) *actBuf {
	xs := make([]float32, n*cols)
	for i := range xs {
		xs[i] = float32(i%97) - 48
	}
	a := new(actBuf)
	a.prepare(vt, cols, n, tiled)
	a.convertTokens(vt, xs, 0, n)
	return a
}

// probeRows is probe for a row kernel: the matrix as a file has it, the
// activations converted with their tile layout.
func (x *amxKernel) probeRows() (amxT, vnniT time.Duration) {
	const rows, T, nb = amxProbeRows, amxProbeTokens, amxProbeCols / 32
	m := Matrix{Type: x.typ, Rows: rows, Cols: amxProbeCols, Data: probeWeights(x.typ)}
	vnni := q80VNNIR_16
	if x.typ == Q4_0 {
		vnni = q40VNNIR_16
	}
	a := probeActs(Q8_0, amxProbeCols, amxProbeTokens, true)
	dst := make([]float32, T*rows)
	s := new(amxScratch)
	rb := m.RowBytes()
	return bestTimes(func() { x.rowsKernel(dst, rows, &m, 0, rows/16, a, 0, s) }, func() {
		vnni(&m.Data[0], rb, q80PrefetchRows*rb, rows, &a.g[0], a.gs, nb, &dst[0], rows*4)
	})
}

// probeK is probe for the packed k-quant kernels, against their VNNI
// kernels (q4KVNNIP, …: kPackedFor).
func (x *amxKernel) probeK() (amxT, vnniT time.Duration) {
	const rows, T, cols = amxProbeRows, amxProbeTokens, amxProbeCols
	m := Pack(Matrix{Type: x.typ, Rows: rows, Cols: cols, Data: probeWeights(x.typ)})
	vnni := kPackedFor(x).p
	a := probeActs(Q8_K, amxProbeCols, amxProbeTokens, false)
	dst := make([]float32, T*rows)
	s := new(amxScratch)
	const nb = cols / qkK
	return bestTimes(func() { x.kernel(dst, rows, &m, 0, rows/8, a, 0, s) }, func() {
		vnni(&m.Data[0], rows/8, &a.q[0], cols, &a.d[0], nb*4, &a.bs[0], nb*32, nb, &dst[0], rows*4, T)
	})
}

// probeBF16 decides the AMX-BF16 family: it times prefill (32 tokens of a
// 256 × 2048 matrix, in L2 as a work item's rows are) and decode (one
// token of a 4096 × 4096 matrix, 32 MiB, from memory) on the tiles and on
// the AVX512-BF16 kernels, each on its private copy's layout, alternated,
// best of several, and keeps the tiles if they are at least 5% faster at
// prefill and at most 3% slower at decode. It returns the decision and its
// part of the load line.
func probeBF16() (bool, string) {
	run := func(rows, cols, T int) (tiles, vec time.Duration) {
		tiled := Matrix{Type: BF16, Rows: rows, Cols: cols, Data: make([]byte, rows*cols*2), packed: true}
		for i := 0; i < len(tiled.Data); i += 2 {
			// Values of magnitude 1/128 to 1/32: sums stay finite.
			tiled.Data[i], tiled.Data[i+1] = byte(i*7+i>>11), 0x3c|byte(i>>1)&0x80
		}
		packed := tiled
		packed.Data = append([]byte(nil), tiled.Data...)
		// Not Pack: it would ask bf16Choice, which is deciding. Either
		// layout of the same bytes times alike.
		packSteps(packed.Data, packed.RowBytes(), zmmRowStep(BF16))
		a := probeActs(BF16, cols, T, true)
		dst := make([]float32, T*rows)
		return bestTimes(func() { bf16AMXRun(dst, rows, &tiled, 0, rows, a, 0, T) },
			func() { bf16DP.run(dst, rows, &packed, 0, rows, a, 0, T, nil) })
	}
	pt, pv := run(256, 2048, 32)
	dt, dv := run(4096, 4096, 1)
	use := pt*105 <= pv*100 && dt*100 <= dv*103
	verdict := "used"
	if !use {
		verdict = "not used"
	}
	return use, fmt.Sprintf("BF16 on AMX-BF16 tiles for all products %s (32-token prefill %v against the AVX512-BF16 kernel's %v, one-token decode of 32 MiB %v against %v)", verdict, pt, pv, dt, dv)
}
