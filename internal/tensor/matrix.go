package tensor

import (
	"encoding/binary"
	"fmt"
)

// Matrix is a read-only, row-major 2-D weight viewed in place: Rows rows of
// Cols elements of Type, each row RowBytes(Cols) bytes, rows back to back.
// Data usually points into a memory-mapped GGUF file and is never written.
// A GGUF tensor with dims [ne0, ne1] is a Matrix with Cols = ne0, Rows = ne1.
//
// A Matrix returned by Pack holds its rows in blocks of eight in the layout
// its kernel reads fastest instead (same size; the rows after the last
// block of eight stay as they were): only the kernels and DequantizeRow
// read it.
type Matrix struct {
	Type       DType
	Rows, Cols int
	Data       []byte

	packed bool // Data's full blocks of eight rows are in the packed layout
	// oneStream: one-token products read each work item's packed blocks
	// as one stream even where a two-stream kernel could split it
	// (OneStream).
	oneStream bool

	// mins, for Q4_1 and Q5_1 weights widened to Q8_0 (Widen), holds each
	// block's minimum m as an F16 matrix of Rows × minsCols(Cols): products
	// add m times the activations' Q8_1 block sums, as ggml's do.
	mins *Matrix
}

// NewMatrix validates a weight's layout and returns a view of it: the type
// must be one the kernels support, Cols a multiple of its block size and data
// exactly rows*RowBytes(cols) bytes long.
func NewMatrix(t DType, rows, cols int, data []byte) (Matrix, error) {
	if !t.Supported() {
		return Matrix{}, fmt.Errorf("tensor: matrix of type %v: type not supported", t)
	}
	if rows <= 0 || cols <= 0 {
		return Matrix{}, fmt.Errorf("tensor: matrix %dx%d: dimensions must be positive", rows, cols)
	}
	if cols%t.BlockSize() != 0 {
		return Matrix{}, fmt.Errorf("tensor: matrix %dx%d of %v: row length is not a multiple of the block size %d", rows, cols, t, t.BlockSize())
	}
	rb := t.RowBytes(cols)
	if rb > 0 && rows > int(^uint(0)>>1)/rb {
		return Matrix{}, fmt.Errorf("tensor: matrix %dx%d of %v: too large", rows, cols, t)
	}
	if need := rows * rb; len(data) != need {
		return Matrix{}, fmt.Errorf("tensor: matrix %dx%d of %v: need %d bytes, have %d", rows, cols, t, need, len(data))
	}
	return Matrix{Type: t, Rows: rows, Cols: cols, Data: data}, nil
}

// RowBytes returns the byte length of one row.
func (m Matrix) RowBytes() int { return m.Type.RowBytes(m.Cols) }

// Row returns the bytes of row r. It panics for a row in a packed block.
func (m Matrix) Row(r int) []byte {
	if m.packed && r < m.packedRows() {
		panic(fmt.Sprintf("tensor: Row %d of a packed matrix", r))
	}
	rb := m.RowBytes()
	return m.Data[r*rb : (r+1)*rb : (r+1)*rb]
}

// DequantizeRow converts row r to float32 into dst[:Cols] (an embedding
// lookup). It panics if r is out of range or dst is shorter than a row, as a
// slice index would.
func (m Matrix) DequantizeRow(dst []float32, row int) {
	if row < 0 || row >= m.Rows {
		panic(fmt.Sprintf("tensor: DequantizeRow: row %d out of range [0,%d)", row, m.Rows))
	}
	rb := m.RowBytes()
	if m.packed && bf16OnTiles(m) { // tiles of 16 rows; BF16 has no minima
		dequantizeBF16TileRow(dst[:m.Cols], m.Data[row&^15*rb:(row|15+1)*rb], row&15)
		return
	}
	if m.packed && row < m.packedRows() {
		blk := m.Data[row&^7*rb : (row|7+1)*rb]
		switch m.Type {
		case Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL:
			dequantizePackedQ4(m.Type, dst[:m.Cols], blk, row&7)
		case Q8_0:
			dequantizePackedQ80(dst[:m.Cols], blk, row&7)
		case Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS:
			dequantizePackedK45(m.Type, dst[:m.Cols], blk, row&7)
		default:
			dequantizePackedHalf(m.Type, dst[:m.Cols], blk, row&7)
		}
	} else {
		dequantize(m.Type, dst[:m.Cols], m.Row(row))
	}
	if m.mins != nil {
		// d·q + m, as dequantize_row_q4_1 and _q5_1 round it.
		for b := range m.Cols / qk80 {
			mb := m.mins.halfAt(row, b)
			for i := range dst[b*qk80 : (b+1)*qk80] {
				dst[b*qk80+i] += mb
			}
		}
	}
}

// halfAt is value (row, col) of an F16 or BF16 matrix, packed or not — in
// packHalf's or packSteps' layout: it reads widened matrices' F16 minima;
// a BF16 matrix in the AMX tiles' layout is read by DequantizeRow.
func (m Matrix) halfAt(row, col int) float32 {
	var off int
	switch {
	case m.packed && row < m.packedRows():
		off = row&^7*m.RowBytes() + halfPackedOffset(m.Type, m.RowBytes(), row&7, col)
	default:
		off = row*m.RowBytes() + 2*col
	}
	h := binary.LittleEndian.Uint16(m.Data[off:])
	if m.Type == F16 {
		return F16ToF32(h)
	}
	return BF16ToF32(h)
}

// minsCols is the row length of a widened matrix's minima (Widen) for
// cols columns: one per block, padded with zeros to a multiple of eight,
// so that the F16 kernels take the rows in whole steps and may pack them.
func minsCols(cols int) int { return (cols/qk80 + 7) &^ 7 }

// Bytes is the memory m's weights take: its data, and a widened matrix's
// block minima.
func (m Matrix) Bytes() int {
	n := len(m.Data)
	if m.mins != nil {
		n += len(m.mins.Data)
	}
	return n
}

// Pack rewrites m's data in place into the layout its kernel on this CPU
// reads fastest, if that kernel has one, and returns the Matrix viewing
// it; otherwise it returns m as it is. m.Data must be writable (weights in
// private memory, not a read-only mapping), and no Matrix that views it
// unpacked may be used afterwards (pack a shared weight, like tied
// embeddings, once and share the result). Products are bit-identical
// either way.
//
// The packed layouts are Q8_0's for each level (asmgen/q80rows.go,
// asmgen/q40avx2.go), Q4_0's (the same for both levels), Q4_1's, Q5_0's,
// Q5_1's and IQ4_NL's for the AVX2 level (Q4_0's with the fifth bits and
// minima beside, q4PackedLayout), Q2_K's to Q6_K's
// and IQ4_XS's for the VNNI level (asmgen/q4kpacked.go, q6kpacked.go,
// q3kpacked.go, q2kpacked.go, iq4xspacked.go: the rows' blocks with a row
// in each lane, the scales still packed), and F16's and BF16's
// (asmgen/floatpacked.go: two half blocks for the AVX2 kernels,
// steps of eight rows for the zmm ones, zmmRowStep): each block of eight
// rows as the kernel's registers hold it (Q4_0's nibbles still packed), so
// that it skips a transpose per block and reads the weights front to back:
// one stream (two for the AVX2 F16 and BF16 kernels, a half block each)
// where the rows would be eight. BF16 matrices the AMX-BF16 tiles compute
// (bf16OnTiles) take the tiles' layout instead (bf16TileOffset).
func Pack(m Matrix) Matrix {
	if m.packed || !packable(m.Type) || m.packedRows() == 0 {
		return m
	}
	if m.mins != nil {
		mins := Pack(*m.mins)
		m.mins = &mins
	}
	data := m.Data[:m.packedRows()*m.RowBytes()]
	switch m.Type {
	case Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL:
		packQ4(m.Type, data, m.RowBytes())
	case Q8_0:
		packQ80(data, m.RowBytes())
	case Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS:
		packK45(m.Type, data, m.RowBytes())
	case F16, BF16:
		if bf16OnTiles(m) {
			packBF16Tiles(data, m.RowBytes())
			break
		}
		if m.Cols%8 != 0 { // the layout has whole 8-column steps only
			return m
		}
		if rs := zmmRowStep(m.Type); rs > 0 {
			if m.RowBytes()%rs != 0 {
				return m
			}
			packSteps(data, m.RowBytes(), rs)
			break
		}
		packHalf(m.Type, data, m.RowBytes())
	}
	m.packed = true
	return m
}

// Packed reports whether m is in a packed layout (Pack).
func (m Matrix) Packed() bool { return m.packed }

// OneStream returns m with its one-token products (decode) reading each
// work item's packed blocks as one stream (on) or, the default, as two
// where the CPU has a two-stream kernel for its type and the item's halves
// lie far enough apart. Which is faster depends on the
// CPU's memory system; the load probe measures it. The results are the
// same bits.
func (m Matrix) OneStream(on bool) Matrix {
	m.oneStream = on
	return m
}

// TwoStreams reports whether one-token products of m can read it in two
// streams: packed, of a type with a two-stream kernel on this CPU, and
// not set to one stream.
func (m Matrix) TwoStreams() bool { return m.packed && !m.oneStream && splitKernel(m.Type) }

// TwoStreamKernel reports whether this CPU has a one-token kernel that
// reads packed weights of type t in two streams (Matrix.TwoStreams).
func TwoStreamKernel(t DType) bool { return splitKernel(t) }

// packedRows is the number of rows in packed blocks.
func (m Matrix) packedRows() int { return m.Rows &^ 7 }

// The packed Q8_0 layout: per block of eight rows and block b of columns,
// q80PackedBytes at b·q80PackedBytes — eight 32-byte vectors, vector k
// holding dword k (values 4k..4k+3) of rows 0-7, each value xor
// q80PackedXor() (0x80 for the VNNI kernels, which take it plus 128 as an
// unsigned byte; 0 for the AVX2 ones), then the eight rows' f16 scales.
const (
	q80PackedBytes = 8 * q80Size
	q80PackedScale = 256
)

// packQ80 rewrites data, whole blocks of eight Q8_0 rows of rb bytes each,
// into the packed layout.
func packQ80(data []byte, rb int) {
	x := uint32(q80PackedXor()) * 0x01010101
	tmp := make([]byte, 8*rb)
	for base := 0; base < len(data); base += 8 * rb {
		blk := data[base : base+8*rb]
		copy(tmp, blk)
		for b := 0; b < rb/q80Size; b++ {
			out := blk[b*q80PackedBytes : (b+1)*q80PackedBytes]
			for r := 0; r < 8; r++ {
				in := tmp[r*rb+b*q80Size : r*rb+(b+1)*q80Size]
				out[q80PackedScale+2*r], out[q80PackedScale+2*r+1] = in[0], in[1]
				for k := 0; k < 8; k++ {
					v := binary.LittleEndian.Uint32(in[2+4*k:])
					binary.LittleEndian.PutUint32(out[32*k+4*r:], v^x)
				}
			}
		}
	}
}

// dequantizePackedQ80 converts row r (0-7) of a packed block of eight Q8_0
// rows into dst.
func dequantizePackedQ80(dst []float32, blk []byte, r int) {
	x := q80PackedXor()
	for b := 0; b < len(dst)/qk80; b++ {
		in := blk[b*q80PackedBytes : (b+1)*q80PackedBytes]
		d := f16At(in, q80PackedScale+2*r)
		y := dst[b*qk80 : (b+1)*qk80]
		for k := 0; k < 8; k++ {
			for j := 0; j < 4; j++ {
				y[4*k+j] = float32(int8(in[32*k+4*r+j]^x)) * d
			}
		}
	}
}

// The packed Q4_0 layout: per block of eight rows and block b of columns,
// 8·q40Size bytes at b times that — four 32-byte vectors, vector m
// holding bytes 4m..4m+3 of the eight rows' 16 nibble bytes (values
// 4m..4m+3 in the low nibbles, 16+4m..16+4m+3 in the high ones; row r at
// 4r), then the eight rows' f16 scales. The AVX2 level packs Q4_1, Q5_0,
// Q5_1 and IQ4_NL (whose nibbles index its table) the same way, each block of eight rows in its rows' size
// (q4PackedLayout): Q5_0's and Q5_1's fifth bits after the nibbles as bit
// planes (byte i of the 32 holds in bit k the fifth bit of the value whose
// nibble vector k's byte i holds: dword k of the unpacked vectors is
// values 4k..4k+3), then the scales, then Q4_1's and Q5_1's f16 minima.
const q40PackedScale = 128

// q4PackedLayout is where the packed layout of Q4_0, Q4_1, Q5_0, Q5_1 or
// IQ4_NL (AVX2 level) keeps a block of eight rows' scales, minima and
// fifth bits (-1: none).
func q4PackedLayout(t DType) (scales, mins, fifth int) {
	scales, mins, fifth = q40PackedScale, -1, -1
	if t == Q5_0 || t == Q5_1 {
		scales, fifth = q40PackedScale+32, q40PackedScale
	}
	if t == Q4_1 || t == Q5_1 {
		mins = scales + 16
	}
	return scales, mins, fifth
}

// packQ4 rewrites data, whole blocks of eight Q4_0, Q4_1, Q5_0, Q5_1 or IQ4_NL
// rows of rb bytes each, into the packed layout (the same size).
func packQ4(t DType, data []byte, rb int) {
	tmp := make([]byte, 8*rb)
	for base := 0; base < len(data); base += 8 * rb {
		blk := data[base : base+8*rb]
		copy(tmp, blk)
		packQ4Rows(t, blk, tmp, rb)
	}
}

// packQ4Rows writes src, whole blocks of eight Q4_0, Q4_1, Q5_0, Q5_1 or IQ4_NL
// rows of rb bytes each, to dst (as long, not overlapping it) in the
// packed layout. In the rows' blocks the nibbles are the last 16 bytes,
// Q5_0's and Q5_1's fifth bits the four before them (bit v: value v), and
// Q4_1's and Q5_1's minimum follows the scale.
func packQ4Rows(t DType, dst, src []byte, rb int) {
	bs, qs := t.TypeSize(), t.TypeSize()-16
	scales, mins, fifth := q4PackedLayout(t)
	for base := 0; base < len(src); base += 8 * rb {
		blk, tmp := dst[base:base+8*rb], src[base:base+8*rb]
		for b := 0; b < rb/bs; b++ {
			out := blk[8*b*bs : 8*(b+1)*bs]
			if fifth >= 0 {
				clear(out[fifth : fifth+32])
			}
			for r := 0; r < 8; r++ {
				in := tmp[r*rb+b*bs : r*rb+(b+1)*bs]
				copy(out[scales+2*r:][:2], in[0:2])
				if mins >= 0 {
					copy(out[mins+2*r:][:2], in[2:4])
				}
				for m := 0; m < 4; m++ {
					copy(out[32*m+4*r:32*m+4*r+4], in[qs+4*m:qs+4*m+4])
				}
				if fifth >= 0 {
					qh := binary.LittleEndian.Uint32(in[qs-4:])
					for k := range 8 {
						for j := range 4 {
							out[fifth+4*r+j] |= byte(qh>>(4*k+j)&1) << k
						}
					}
				}
			}
		}
	}
}

// dequantizePackedQ4 converts row r (0-7) of a packed block of eight Q4_0,
// Q4_1, Q5_0 or Q5_1 rows into dst, as dequantize does for the row
// unpacked.
func dequantizePackedQ4(t DType, dst []float32, blk []byte, r int) {
	var row [q51Size]byte
	bs, qs := t.TypeSize(), t.TypeSize()-16
	scales, mins, fifth := q4PackedLayout(t)
	for b := 0; b < len(dst)/qk40; b++ {
		in := blk[8*b*bs : 8*(b+1)*bs]
		copy(row[0:2], in[scales+2*r:])
		if mins >= 0 {
			copy(row[2:4], in[mins+2*r:])
		}
		for m := 0; m < 4; m++ {
			copy(row[qs+4*m:qs+4*m+4], in[32*m+4*r:32*m+4*r+4])
		}
		if fifth >= 0 {
			var qh uint32
			for k := range 8 {
				for j := range 4 {
					qh |= uint32(in[fifth+4*r+j]>>k&1) << (4*k + j)
				}
			}
			binary.LittleEndian.PutUint32(row[qs-4:], qh)
		}
		dequantize(t, dst[b*qk40:(b+1)*qk40], row[:bs])
	}
}

// The packed Q4_K and Q5_K layouts (asmgen/q4kpacked.go): per block of
// eight rows and block b of 256 columns, the eight rows' blocks (8·144 or
// 8·176 bytes at b times that) with a row in each dword lane of every 32
// bytes: vector 8c+k holds bytes 4k..4k+3 of each row's qs chunk c
// (sub-blocks 2c and 2c+1), Q5_K's next eight vectors dword k of its qh,
// the next three the rows' 12 scale bytes, four each, then the rows' f16 d
// and dmin. Q6_K's (asmgen/q6kpacked.go): 32 vectors of ql dwords, 16 of
// qh, four of the int8 scales, then the rows' f16 d. IQ4_XS's
// (asmgen/iq4xspacked.go): 32 vectors of qs dwords (vector 4j+k: bytes
// 4k..4k+3 of sub-block j's 16), one of the scales_l dwords, then the rows'
// scales_h and f16 d, eight of each. Q3_K's (asmgen/q3kpacked.go): 16
// vectors of qs dwords, 8 of hmask, three of the scale bytes, then the
// rows' f16 d. Q2_K's (asmgen/q2kpacked.go): four vectors of the scale
// bytes, 16 of qs dwords, then the rows' f16 d and dmin. The same bytes as
// the rows', moved.

// kPackedOffset is where byte i of row r's block of type t (Q2_K to Q6_K
// or IQ4_XS) goes in its packed block of eight rows.
func kPackedOffset(t DType, i, r int) int {
	switch t {
	case Q6_K: // ql, qh, scales: 32, 16 and 4 vectors of dwords; d
		if i >= 208 {
			return 1664 + 2*r + i - 208
		}
		return 32*(i/4) + 4*r + i%4
	case Q2_K: // scales, qs: 4 and 16 vectors of dwords; d, dmin
		switch {
		case i < 16:
			return 32*(i/4) + 4*r + i%4
		case i < 80:
			return 128 + 32*((i-16)/4) + 4*r + i%4
		}
		return 640 + 16*((i-80)/2) + 2*r + i%2
	case Q3_K: // hmask, qs, scales: 8, 16 and 3 vectors of dwords; d
		switch {
		case i < 32:
			return 512 + 32*(i/4) + 4*r + i%4
		case i < 96:
			return 32*((i-32)/4) + 4*r + i%4
		case i < 108:
			return 768 + 32*((i-96)/4) + 4*r + i%4
		}
		return 864 + 2*r + i - 108
	case IQ4_XS: // d, scales_h, scales_l, qs
		switch {
		case i < 2:
			return 1072 + 2*r + i
		case i < 4:
			return 1056 + 2*r + i - 2
		case i < 8:
			return 1024 + 4*r + i - 4
		}
		q := i - 8
		return 32*(q/4) + 4*r + q%4
	}
	qh, scales := 0, 1024
	qsAt := 16 // the row's qs
	if t == Q5_K {
		qh, scales, qsAt = 1024, 1280, 48
	}
	switch {
	case i < 4: // d, dmin
		return scales + 96 + 16*(i/2) + 2*r + i%2
	case i < 16: // scales
		s := i - 4
		return scales + 32*(s/4) + 4*r + s%4
	case i < qsAt: // Q5_K's qh
		h := i - 16
		return qh + 32*(h/4) + 4*r + h%4
	}
	q := i - qsAt
	return 32*(8*(q/32)+q%32/4) + 4*r + q%4
}

// packK45 rewrites data, whole blocks of eight Q2_K to Q6_K or IQ4_XS rows of
// rb bytes each, into the packed layout.
func packK45(t DType, data []byte, rb int) {
	tmp := make([]byte, 8*rb)
	for base := 0; base < len(data); base += 8 * rb {
		blk := data[base : base+8*rb]
		copy(tmp, blk)
		packK45Rows(t, blk, tmp, rb, 1)
	}
}

// packK45Rows writes groups blocks of eight rows of src (type t, rb bytes
// each) to dst in the packed layout, four bytes at a time where
// kPackedOffset keeps them together, else two.
func packK45Rows(t DType, dst, src []byte, rb, groups int) {
	// The moves of row 0; row r's go 4r (two-byte moves: 2r) further.
	type move struct{ from, to, n int }
	var moves [64]move
	bs := t.TypeSize()
	nm := 0
	for i := 0; i < bs; nm++ {
		n := 2
		if i+4 <= bs && kPackedOffset(t, i+3, 0) == kPackedOffset(t, i, 0)+3 {
			n = 4
		}
		moves[nm] = move{i, kPackedOffset(t, i, 0), n}
		i += n
	}
	le := binary.LittleEndian
	for g := range groups {
		for b := range rb / bs {
			out := dst[g*8*rb+b*8*bs:][:8*bs]
			for r := range 8 {
				in := src[(8*g+r)*rb+b*bs:][:bs]
				for _, m := range moves[:nm] {
					if m.n == 4 {
						le.PutUint32(out[m.to+4*r:], le.Uint32(in[m.from:]))
					} else {
						le.PutUint16(out[m.to+2*r:], le.Uint16(in[m.from:]))
					}
				}
			}
		}
	}
}

// dequantizePackedK45 converts row r (0-7) of a packed block of eight Q2_K
// to Q6_K or IQ4_XS rows into dst, as dequantize does for the row
// unpacked.
func dequantizePackedK45(t DType, dst []float32, blk []byte, r int) {
	bs := t.TypeSize()
	var buf [q6KSize]byte
	row := buf[:bs]
	for b := 0; b < len(dst)/qkK; b++ {
		in := blk[b*8*bs : (b+1)*8*bs]
		for i := range row {
			row[i] = in[kPackedOffset(t, i, r)]
		}
		dequantize(t, dst[b*qkK:(b+1)*qkK], row)
	}
}

// The packed F16 and BF16 layouts: per block of eight rows, rows 0-3 in
// its first half and rows 4-7 in its second, each half a step of eight
// columns after another, halfPackedStep bytes each. F16: row r's eight
// values of the step at 16·(r mod 4), as in the row (vcvtph2ps widens them
// in one instruction). BF16: rows 2p and 2p+1 in the 32 bytes at
// 32·(p mod 2), column k's values in dword k, row 2p's in its low half — one
// load, and a shift and a mask make the two rows' eight f32 each. Either
// way the kernels' vectors hold a row's eight consecutive columns, as they
// do on the rows unpacked, so packed and unpacked products add the same
// products in the same order.
const halfPackedStep = 64

// packHalf rewrites data, whole blocks of eight F16 or BF16 rows of rb
// bytes each (a multiple of 16), into the packed layout.
func packHalf(t DType, data []byte, rb int) {
	tmp := make([]byte, 8*rb)
	for base := 0; base < len(data); base += 8 * rb {
		blk := data[base : base+8*rb]
		copy(tmp, blk)
		for s := 0; s < rb/16; s++ {
			for h := 0; h < 2; h++ {
				out := blk[h*4*rb+s*halfPackedStep:][:halfPackedStep]
				if t == F16 {
					for r := 0; r < 4; r++ {
						copy(out[16*r:16*r+16], tmp[(4*h+r)*rb+16*s:])
					}
					continue
				}
				for p := 0; p < 2; p++ {
					lo, hi := tmp[(4*h+2*p)*rb+16*s:], tmp[(4*h+2*p+1)*rb+16*s:]
					for k := 0; k < 8; k++ {
						v := uint32(binary.LittleEndian.Uint16(lo[2*k:])) | uint32(binary.LittleEndian.Uint16(hi[2*k:]))<<16
						binary.LittleEndian.PutUint32(out[32*p+4*k:], v)
					}
				}
			}
		}
	}
}

// The packed F16 and BF16 layouts of the zmm kernels (zmmRowStep;
// asmgen/floatpacked.go): per block of eight rows, steps of rs bytes of
// each row (F16: 16, eight columns; BF16: 32, the 16 columns of a
// vdpbf16ps step), row r's at rs·r of the step — one stream, rows 2p and
// 2p+1 one zmm register, each half as the unpacked kernels' ymm holds a
// row.

// packSteps rewrites data, whole blocks of eight rows of rb bytes each (a
// multiple of rs), into the zmm kernels' layout.
func packSteps(data []byte, rb, rs int) {
	tmp := make([]byte, 8*rb)
	for base := 0; base < len(data); base += 8 * rb {
		blk := data[base : base+8*rb]
		copy(tmp, blk)
		for s := 0; s < rb/rs; s++ {
			for r := 0; r < 8; r++ {
				copy(blk[(8*s+r)*rs:][:rs], tmp[r*rb+rs*s:])
			}
		}
	}
}

// halfPackedOffset is where, within a packed block of eight F16 or BF16
// rows of rb bytes, row r's (0-7) value in column c is.
func halfPackedOffset(t DType, rb, r, c int) int {
	if rs := zmmRowStep(t); rs > 0 {
		cs := rs / 2 // columns a step
		return (8*(c/cs)+r)*rs + 2*(c%cs)
	}
	off := r/4*4*rb + c/8*halfPackedStep
	if t == F16 {
		return off + 16*(r%4) + 2*(c%8)
	}
	return off + 32*(r%4/2) + 4*(c%8) + 2*(r%2)
}

// The tile layout of BF16 weights on the AMX-BF16 tiles (bf16OnTiles;
// asmgen/amxbf16.go): per tile of 16 rows, chunk c of 32 columns at
// 1024·c, its 16 rows of 64 bytes in order — a tile load of 64-byte rows
// 64 apart, and one stream a row tile where the file's layout has 16.
func bf16TileOffset(r, c int) int { return c/32*1024 + 64*r + 2*(c%32) }

// packBF16Tiles rewrites data, whole tiles of 16 BF16 rows of rb bytes
// each (a multiple of 64), into the tile layout.
func packBF16Tiles(data []byte, rb int) {
	tmp := make([]byte, 16*rb)
	for base := 0; base < len(data); base += 16 * rb {
		blk := data[base : base+16*rb]
		copy(tmp, blk)
		for r := 0; r < 16; r++ {
			for c := 0; c < rb/64; c++ {
				copy(blk[1024*c+64*r:][:64], tmp[r*rb+64*c:])
			}
		}
	}
}

// dequantizeBF16TileRow converts row r (0-15) of a tile of 16 BF16 rows in
// the tile layout into dst.
func dequantizeBF16TileRow(dst []float32, blk []byte, r int) {
	for c := range dst {
		dst[c] = BF16ToF32(binary.LittleEndian.Uint16(blk[bf16TileOffset(r, c):]))
	}
}

// dequantizePackedHalf converts row r (0-7) of a packed block of eight F16
// or BF16 rows into dst.
func dequantizePackedHalf(t DType, dst []float32, blk []byte, r int) {
	rb := len(blk) / 8
	for c := range dst {
		h := binary.LittleEndian.Uint16(blk[halfPackedOffset(t, rb, r, c):])
		if t == F16 {
			dst[c] = F16ToF32(h)
		} else {
			dst[c] = BF16ToF32(h)
		}
	}
}

// WidenedType is the type Widen converts weights of type t to, if it
// converts them: Q5_0, Q4_1, Q5_1 and IQ4_NL to Q8_0, whose kernels are the
// fastest there are; the IQ1 and IQ3 types to Q6_K and the IQ2 types to
// Q8_K16, whose kernels stream them faster than any lookup in the types'
// grids could decode them (to Q8_K16 instead in the rare matrix Q6_K
// cannot hold exactly, see widenIQ). The products are the original type's
// bit for bit (Q4_1's and Q5_1's with their block minima beside, see
// Widen).
func WidenedType(t DType) (DType, bool) {
	switch t {
	case Q5_0, Q4_1, Q5_1, IQ4_NL:
		return Q8_0, true
	case IQ3_S, IQ3_XXS, IQ1_S, IQ1_M:
		return Q6_K, true
	case IQ2_XXS, IQ2_XS, IQ2_S:
		return Q8_K16, true
	}
	return t, false
}

// WidenedRowBytes is the memory Widen's copy of a row of cols values of
// type t takes (0 if t is not widened): the widened type's, and for Q4_1
// and Q5_1 the blocks' f16 minima.
func WidenedRowBytes(t DType, cols int) int {
	wt, ok := WidenedType(t)
	if !ok {
		return 0
	}
	n := wt.RowBytes(cols)
	if t == Q4_1 || t == Q5_1 {
		n += 2 * minsCols(cols)
	}
	return n
}

// Widen returns m converted to WidenedType(m.Type) in a new allocation, or
// m itself if its type is not widened.
//
// A Q5_0 value q−16 fits a byte, and ggml_vec_dot_q5_0_q8_0 takes the same
// integer sums and float steps as ggml_vec_dot_q8_0_q8_0, so the widened
// matrix's products are Q5_0's, at 34 bytes a block of 32 instead of 22.
// IQ4_NL's table values fit a byte too: ggml_vec_dot_iq4_nl_q8_0 is the
// Q8_0 product on them (34 bytes instead of 18).
//
// Q4_1's and Q5_1's x = d·q + m become Q8_0 blocks of d and q (0-31 fits
// a byte) and an F16 matrix of the minima m (minsCols):
// ggml_vec_dot_q5_1_q8_1 sums, per block, (d·dy)·Σq·qy as the Q8_0 product
// does plus m·s1, where s1 is the Q8_1 activations' block sum, f16-exact,
// so an F16 product of the minima with s1 has the same terms (MatMul adds
// the two). About 36 bytes a block of 32 instead of 20 or 24.
//
// The IQ types' values below 4 bits are d·sc·q with small integers
// (iqBlock): Q6_K holds the IQ1 and IQ3 types' (210 bytes a block of 256
// instead of 50 to 110) and Q8_K16 the IQ2 types' (276 instead of 66 to
// 82), each with the integer sums of ggml's vec_dot_iq*_q8_K.
func Widen(m Matrix) Matrix {
	wt, ok := WidenedType(m.Type)
	if !ok || m.packed {
		return m
	}
	if isIQGrid(m.Type) {
		return widenIQ(m)
	}
	out := Matrix{Type: wt, Rows: m.Rows, Cols: m.Cols}
	nb := m.Rows * m.Cols / qk80
	out.Data = make([]byte, nb*q80Size)
	bs := m.Type.TypeSize()
	for b := 0; b < nb; b++ {
		widenQ80Block(m.Type, out.Data[b*q80Size:(b+1)*q80Size], m.Data[b*bs:(b+1)*bs])
	}
	if m.Type == Q4_1 || m.Type == Q5_1 {
		mc := minsCols(m.Cols)
		mins := Matrix{Type: F16, Rows: m.Rows, Cols: mc, Data: make([]byte, 2*mc*m.Rows)}
		rowBlocks := m.Cols / qk80
		for b := 0; b < nb; b++ {
			mo := 2 * (b/rowBlocks*mc + b%rowBlocks)
			mins.Data[mo], mins.Data[mo+1] = m.Data[b*bs+2], m.Data[b*bs+3]
		}
		out.mins = &mins
	}
	return out
}
