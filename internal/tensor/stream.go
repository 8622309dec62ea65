package tensor

import "encoding/binary"

// Streamed matrices: a type Widen converts (WidenedType) can also be
// computed in its own bytes, each work item widening its rows a few at a
// time into scratch that stays in cache and running the widened type's
// kernel on them. The model loader leaves a matrix so when widening every
// matrix would not fit in memory: it runs in the file's size, at the cost
// of decoding its rows again for every product (and every group of up to
// maxTokChunk prompt tokens).
//
// Where the CPU has a direct kernel for the type, it builds each block's
// widened bytes in registers instead, at a fraction of the widening's
// cost: the same bytes, so the same products. The IQ types' kernels
// (asmgen/iqdirect.go) build them from the grid tables for products of up
// to directTokens tokens (decode); Q5_0's, IQ4_NL's, Q4_1's and Q5_1's
// (asmgen/q80direct.go) unpack their nibbles, a few tokens at a time. Past
// directPackTokens tokens (Q4_1's and Q5_1's: past one pass of their rows
// kernels, eight), the rows are unpacked in registers into scratch in the
// packed Q8_0 layout (directPacker) once per work item, and the packed
// kernels pass over them once per 16 tokens, as over a widened copy; Q4_1's
// and Q5_1's minima are unpacked beside them and added after, in the
// direct kernels' steps (rowPacker.addMins).
//
// Every type streams to the widest of its targets, which holds all of its
// values exactly: the IQ types to Q8_K16 (whose kernels need no unpacking),
// Q5_0, IQ4_NL, Q4_1 and Q5_1 to Q8_0 (Q4_1's and Q5_1's minima added per
// block from the activations' block sums, as ggml_vec_dot_q4_1_q8_1 does).

// streamType is the type a streamed matrix of type t is computed as, and
// whether t streams.
func streamType(t DType) (DType, bool) {
	if _, ok := WidenedType(t); !ok {
		return t, false
	}
	if isIQGrid(t) {
		return Q8_K16, true
	}
	return Q8_0, true
}

// streamScratchBytes is how much of its rows a streaming work item widens at
// a time: with the item's activations, within a core's L2.
const streamScratchBytes = 64 << 10

// streamScratch is a thread's scratch for the streamed kernels (every
// kernel takes it; the Pool has one a thread): rows widened, and the Matrix
// viewing them (kept here so that passing it to a kernel allocates
// nothing).
type streamScratch struct {
	m    Matrix
	buf  []byte
	mins []float32 // Q4_1, Q5_1: the rows' block minima
	s1   []float32 // Q4_1, Q5_1: the activations' block sums for the direct kernels
	// rows holds a work item's rows packed (a prompt's streamed Q5_0,
	// IQ4_NL, Q4_1 and Q5_1), and rowMins their minima (rowPacker.pack),
	// which held says: kept for the thread's next items of the same rows
	// in the same product (the plan hands out a row range's token chunks
	// one after another), and forgotten when a product starts.
	rows    []byte
	rowMins []byte
	held    heldRows
	_       cacheLinePad // the threads' scratch side by side share no line
}

// heldRows names the rows a streamScratch holds packed: rows [r0, r1) of
// the matrix whose data starts at w, in the current product.
type heldRows struct {
	w      *byte
	r0, r1 int
}

// directTokens is the most tokens for which a streamed matrix of an IQ
// type is computed by its direct kernel: past that the kernels' decoding
// again for every four tokens costs more than widening once for all of a
// work item's (BenchmarkStreamedDirect).
const directTokens = 16

// directPackTokens is the most tokens for which a streamed Q5_0 or IQ4_NL
// matrix is computed by its direct kernels (directKernel): past that, unpacking and
// transposing each block again for every 16 tokens costs more than packing
// the rows once for all of a work item's (BenchmarkStreamedDirect; at 32
// they were even).
const directPackTokens = 32

// rowPacker writes a streamed type's rows in the packed layout of its
// streamType's kernels (Pack's of the rows widened), for a prompt's
// products to pass over them as over a widened copy.
type rowPacker struct {
	// pack writes rowBlocks blocks of eight rows of src (rowBytes each,
	// cols values) to dst, and for the types with minima (Q4_1, Q5_1)
	// the rows' block minima to mins: per pair of row blocks and block,
	// the 16 rows' f16 (a last row block without a pair takes the same
	// room).
	pack func(dst, mins, src []byte, rowBytes, rowBlocks, cols int)
	// addMins, for the types with minima, adds to tokens [t0, t1) of
	// rowBlocks blocks of eight rows of dst (holding the packed kernels'
	// products) the minima's part, in the direct kernels' steps.
	addMins func(dst []float32, ld int, mins []byte, rowBlocks, cols int, a *actBuf, t0, t1 int)
}

// pairedMinsBytes is the size of rowPacker.pack's minima of rowBlocks
// blocks of eight rows of nb blocks.
func pairedMinsBytes(rowBlocks, nb int) int { return (rowBlocks + 1) / 2 * nb * 32 }

// streamKernel computes a matrix of type t (streamed) with inner, the
// kernel of its streamType on this level, or with direct (nil where there
// is none) for up to directMax tokens. pack, where not nil, writes the rows
// inner takes in blocks of eight packed, the rest widened, for products
// past directMax tokens (packedItem); else the rows are widened a step at
// a time.
func streamKernel(t DType, inner, direct kernel, directMax int, pack *rowPacker) kernel {
	wt, _ := streamType(t)
	return func(dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int, s *streamScratch) {
		if pack != nil && (direct == nil || a.n > directMax) {
			s.packedItem(t, inner, pack, dst, ld, w, r0, r1, a, t0, t1)
			return
		}
		if direct != nil && t1-t0 <= directMax {
			direct(dst, ld, w, r0, r1, a, t0, t1, s)
			return
		}
		rb, wrb := w.RowBytes(), wt.RowBytes(w.Cols)
		step := max(8, streamScratchBytes/wrb/8*8)
		for r := r0; r < r1; r += step {
			n := min(step, r1-r)
			s.buf = growBytes(s.buf, n*wrb)
			s.m = Matrix{Type: wt, Rows: n, Cols: w.Cols, Data: s.buf[:n*wrb]}
			s.widenRows(t, s.m.Data, w.Data[r*rb:(r+n)*rb], w.Cols)
			s.held = heldRows{} // s.mins may have held packed rows' tail
			inner(dst[r:], ld, &s.m, 0, n, a, t0, t1, nil)
			if t == Q4_1 || t == Q5_1 {
				s.addMins(dst[r:], ld, n, w.Cols, a, t0, t1)
			}
		}
		s.m = Matrix{}
	}
}

// packedItem computes a work item of a prompt's streamed matrix w of type
// t with inner on its rows packed by pack (the rows past the last eight
// widened), packing them only where the scratch does not hold them
// already: a row range's token chunks reuse them, so each row is unpacked
// about once per thread and product, however short the items' token
// chunks (an 8192-column matrix's are 16 tokens).
func (s *streamScratch) packedItem(t DType, inner kernel, pack *rowPacker, dst []float32, ld int, w *Matrix, r0, r1 int, a *actBuf, t0, t1 int) {
	wt, _ := streamType(t)
	n, rb, wrb := r1-r0, w.RowBytes(), wt.RowBytes(w.Cols)
	packed := n &^ 7
	mins := pack.addMins != nil
	if h := (heldRows{&w.Data[0], r0, r1}); s.held != h {
		s.rows = growBytes(s.rows, n*wrb)
		if mins {
			s.rowMins = growBytes(s.rowMins, pairedMinsBytes(packed/8, w.Cols/qk80))
		}
		src := w.Data[r0*rb : r1*rb]
		if packed > 0 {
			pack.pack(s.rows, s.rowMins, src, rb, packed/8, w.Cols)
		}
		s.widenRows(t, s.rows[packed*wrb:n*wrb], src[packed*rb:], w.Cols)
		s.held = h
	}
	s.m = Matrix{Type: wt, Rows: n, Cols: w.Cols, Data: s.rows[:n*wrb], packed: packed > 0}
	inner(dst[r0:], ld, &s.m, 0, n, a, t0, t1, nil)
	s.m = Matrix{}
	if mins {
		if packed > 0 {
			pack.addMins(dst[r0:], ld, s.rowMins, packed/8, w.Cols, a, t0, t1)
		}
		if n > packed { // the rows widened above, their minima in s.mins
			s.addMins(dst[r0+packed:], ld, n-packed, w.Cols, a, t0, t1)
		}
	}
}

// widenRows writes rows src of type t and cols values each into dst (as
// t's streamType), and for Q4_1 and Q5_1 their block minima into s.mins.
func (s *streamScratch) widenRows(t DType, dst, src []byte, cols int) {
	if isIQGrid(t) {
		bs := t.TypeSize()
		for k := range len(src) / bs {
			widenIQBlockQ8K16(t, dst[k*q8K16Size:(k+1)*q8K16Size], src[k*bs:(k+1)*bs])
		}
		return
	}
	bs := t.TypeSize()
	nb := len(src) / bs
	if t == Q4_1 || t == Q5_1 {
		s.mins = growF32(s.mins, nb)
		for b := range nb {
			s.mins[b] = f16At(src[b*bs:], 2)
		}
	}
	for b := range nb {
		widenQ80Block(t, dst[b*q80Size:(b+1)*q80Size], src[b*bs:(b+1)*bs])
	}
}

// addMins adds to rows [0, n) of dst (tokens [t0, t1)) the minima's part of
// Q4_1's and Q5_1's product: per block, m·s1, s1 the activations' Q8_1
// block sum (ggml_vec_dot_q4_1_q8_1's summs).
func (s *streamScratch) addMins(dst []float32, ld, n, cols int, a *actBuf, t0, t1 int) {
	nb := cols / qk80
	for r := range n {
		m := s.mins[r*nb : (r+1)*nb]
		for t := t0; t < t1; t++ {
			s1 := a.s1[t*nb : (t+1)*nb]
			var sum float32
			for b, v := range m {
				// Rounded before the sum (never fused): the direct
				// kernels' steps.
				sum += float32(v * s1[b])
			}
			dst[t*ld+r] += sum
		}
	}
}

// widenQ80Block writes a block of 32 values of Q5_0, IQ4_NL, Q4_1 or Q5_1
// as a Q8_0 block of the same d (Q4_1's and Q5_1's without their minimum,
// whose q, 0-31, fit a byte as they are), eight values a word: the low
// nibbles of the 16 bytes of values are values 0-15, the high ones 16-31;
// Q5_0's and Q5_1's fifth bits (bit j of qh, value j's) become 0x10 bytes
// through signMasks. A Q5_0 value is q−16: the nibble alone where the fifth
// bit is set, the nibble with 0xf0 (−16 in a byte) where it is not.
func widenQ80Block(t DType, o, in []byte) {
	o = o[:q80Size]
	o[0], o[1] = in[0], in[1]
	const lo4, hi4, bit4 = 0x0f0f0f0f0f0f0f0f, 0xf0f0f0f0f0f0f0f0, 0x1010101010101010
	switch t {
	case Q5_0:
		qh := binary.LittleEndian.Uint32(in[2:])
		x0, x1 := binary.LittleEndian.Uint64(in[6:]), binary.LittleEndian.Uint64(in[14:])
		binary.LittleEndian.PutUint64(o[2:], x0&lo4|hi4&^signMasks[qh&0xff])
		binary.LittleEndian.PutUint64(o[10:], x1&lo4|hi4&^signMasks[qh>>8&0xff])
		binary.LittleEndian.PutUint64(o[18:], x0>>4&lo4|hi4&^signMasks[qh>>16&0xff])
		binary.LittleEndian.PutUint64(o[26:], x1>>4&lo4|hi4&^signMasks[qh>>24])
	case Q5_1:
		qh := binary.LittleEndian.Uint32(in[4:])
		x0, x1 := binary.LittleEndian.Uint64(in[8:]), binary.LittleEndian.Uint64(in[16:])
		binary.LittleEndian.PutUint64(o[2:], x0&lo4|bit4&signMasks[qh&0xff])
		binary.LittleEndian.PutUint64(o[10:], x1&lo4|bit4&signMasks[qh>>8&0xff])
		binary.LittleEndian.PutUint64(o[18:], x0>>4&lo4|bit4&signMasks[qh>>16&0xff])
		binary.LittleEndian.PutUint64(o[26:], x1>>4&lo4|bit4&signMasks[qh>>24])
	case Q4_1:
		x0, x1 := binary.LittleEndian.Uint64(in[4:]), binary.LittleEndian.Uint64(in[12:])
		binary.LittleEndian.PutUint64(o[2:], x0&lo4)
		binary.LittleEndian.PutUint64(o[10:], x1&lo4)
		binary.LittleEndian.PutUint64(o[18:], x0>>4&lo4)
		binary.LittleEndian.PutUint64(o[26:], x1>>4&lo4)
	case IQ4_NL:
		for j := range 16 {
			v := iq4NLPairs[in[2+j]]
			o[2+j], o[18+j] = byte(v), byte(v>>8)
		}
	}
}

// iq4NLPairs[b] holds the IQ4_NL values of byte b's low nibble (low byte)
// and high nibble (high byte) (read-only).
var iq4NLPairs = func() (p [256]uint16) {
	for b := range p {
		p[b] = uint16(uint8(kvaluesIQ4NL[b&0xf])) | uint16(uint8(kvaluesIQ4NL[b>>4]))<<8
	}
	return p
}()
