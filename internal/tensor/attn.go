package tensor

import "fmt"

// Attention kernels. Attention reads a sequence's keys and values as rows of
// f16 spaced by a stride (one row per position, all KV heads interleaved),
// so the kernels take a first row and a stride instead of a slice per
// position: one call covers a whole block of positions.

// DotsF16 sets dst[j] to the dot product of q (already widened from f16,
// len(q) elements) with the f16 row at k[j*stride:], for j < len(dst),
// accumulating in f32.
func DotsF16(dst, q []float32, k []uint16, stride int) {
	if len(dst) == 0 {
		return
	}
	_ = k[(len(dst)-1)*stride+len(q)-1] // bounds, once
	dotsF16(dst, q, k, stride)
}

func dotsF16Generic(dst, q []float32, k []uint16, stride int) {
	for j := range dst {
		row := k[j*stride : j*stride+len(q)]
		var s0, s1, s2, s3 float32
		i := 0
		for ; i+4 <= len(q); i += 4 {
			s0 += q[i] * F16ToF32(row[i])
			s1 += q[i+1] * F16ToF32(row[i+1])
			s2 += q[i+2] * F16ToF32(row[i+2])
			s3 += q[i+3] * F16ToF32(row[i+3])
		}
		for ; i < len(q); i++ {
			s0 += q[i] * F16ToF32(row[i])
		}
		dst[j] = (s0 + s1) + (s2 + s3)
	}
}

// AxpysF16 adds to out, for j < len(p), p[j] times the f16 row at
// v[j*stride:] (len(out) elements): the weighted sum of value rows.
func AxpysF16(out, p []float32, v []uint16, stride int) {
	if len(p) == 0 {
		return
	}
	_ = v[(len(p)-1)*stride+len(out)-1]
	axpysF16(out, p, v, stride)
}

func axpysF16Generic(out, p []float32, v []uint16, stride int) {
	for j, w := range p {
		row := v[j*stride : j*stride+len(out)]
		for i, x := range row {
			out[i] += w * F16ToF32(x)
		}
	}
}

// PrefetchRows asks the processor to start loading into its caches the
// rows of rowBytes bytes at b[i*strideBytes:], for i < rows (rows that do
// not fit in b are left out). It changes nothing and returns at once: it
// is for data that will be read soon from scattered places the hardware
// prefetcher cannot predict, such as the next block of a sequence's keys
// and values during attention.
func PrefetchRows(b []byte, rows, rowBytes, strideBytes int) {
	if rows <= 0 || rowBytes <= 0 || strideBytes < 0 || len(b) < rowBytes {
		return
	}
	if strideBytes > 0 {
		rows = min(rows, (len(b)-rowBytes)/strideBytes+1)
	}
	prefetchRows(&b[0], rows, rowBytes, strideBytes)
}

// DotsF16Heads is DotsF16 for the len(q)/hd queries of a grouped-query
// attention group, which share their keys: for g < len(q)/hd and j < n it
// sets dst[g*ds+j] to the dot product of q[g*hd:(g+1)*hd] with the f16 row
// at k[j*stride:]. Every result equals DotsF16's bit for bit; the kernels
// just convert each key row once for several queries.
func DotsF16Heads(dst []float32, ds, n int, q []float32, hd int, k []uint16, stride int) {
	if n <= 0 || hd <= 0 || len(q) < hd {
		return
	}
	g := len(q) / hd
	_ = dst[(g-1)*ds+n-1]
	_ = k[(n-1)*stride+hd-1]
	dotsF16Heads(dst, ds, n, q[:g*hd], hd, k, stride)
}

func dotsF16HeadsGeneric(dst []float32, ds, n int, q []float32, hd int, k []uint16, stride int) {
	for g := 0; g*hd < len(q); g++ {
		dotsF16(dst[g*ds:g*ds+n], q[g*hd:(g+1)*hd], k, stride)
	}
}

// AxpysF16Heads is AxpysF16 for the len(out)/hd outputs of a grouped-query
// attention group, which share their values: for g < len(out)/hd it adds
// to out[g*hd:(g+1)*hd], for j < n, p[g*ps+j] times the f16 row at
// v[j*stride:]. Every result equals AxpysF16's bit for bit.
func AxpysF16Heads(out []float32, hd int, p []float32, ps, n int, v []uint16, stride int) {
	if n <= 0 || hd <= 0 || len(out) < hd {
		return
	}
	g := len(out) / hd
	_ = p[(g-1)*ps+n-1]
	_ = v[(n-1)*stride+hd-1]
	axpysF16Heads(out[:g*hd], hd, p, ps, n, v, stride)
}

func axpysF16HeadsGeneric(out []float32, hd int, p []float32, ps, n int, v []uint16, stride int) {
	for g := 0; g*hd < len(out); g++ {
		axpysF16(out[g*hd:(g+1)*hd], p[g*ps:g*ps+n], v, stride)
	}
}

// DotsF16HeadsPaged is DotsF16Heads over rows kept in blocks of bs rows (a
// paged KV cache): row j is at blocks[j/bs][off+(j%bs)*stride:]. Every
// result equals DotsF16Heads' on the same rows laid out in one run, bit for
// bit; one call covers many blocks, so the caller's per-block work and the
// kernels' setup are paid once for them all.
func DotsF16HeadsPaged(dst []float32, ds, n int, q []float32, hd int, blocks [][]uint16, off, bs, stride int) {
	if n <= 0 || hd <= 0 || len(q) < hd {
		return
	}
	g := len(q) / hd
	_ = dst[(g-1)*ds+n-1]
	checkPaged(blocks, n, off, bs, stride, hd)
	dotsF16HeadsPaged(dst, ds, n, q[:g*hd], hd, blocks, off, bs, stride)
}

// AxpysF16HeadsPaged is AxpysF16Heads over rows kept in blocks, as
// DotsF16HeadsPaged reads them; every result equals AxpysF16Heads' bit for
// bit (each output's FMAs come in the rows' order, block after block).
func AxpysF16HeadsPaged(out []float32, hd int, p []float32, ps, n int, blocks [][]uint16, off, bs, stride int) {
	if n <= 0 || hd <= 0 || len(out) < hd {
		return
	}
	g := len(out) / hd
	_ = p[(g-1)*ps+n-1]
	checkPaged(blocks, n, off, bs, stride, hd)
	axpysF16HeadsPaged(out[:g*hd], hd, p, ps, n, blocks, off, bs, stride)
}

// checkPaged panics unless blocks hold n rows of hd elements, bs a block,
// at off and stride apart, as the paged kernels read them.
func checkPaged(blocks [][]uint16, n, off, bs, stride, hd int) {
	if bs <= 0 || off < 0 || stride < 0 {
		panic(fmt.Sprintf("tensor: paged rows: block of %d rows at offset %d, stride %d", bs, off, stride))
	}
	for i, j := 0, 0; j < n; i, j = i+1, j+bs {
		_ = blocks[i][off+(min(bs, n-j)-1)*stride+hd-1]
	}
}

func dotsF16HeadsPagedGeneric(dst []float32, ds, n int, q []float32, hd int, blocks [][]uint16, off, bs, stride int) {
	for i, j := 0, 0; j < n; i, j = i+1, j+bs {
		dotsF16HeadsGeneric(dst[j:], ds, min(bs, n-j), q, hd, blocks[i][off:], stride)
	}
}

func axpysF16HeadsPagedGeneric(out []float32, hd int, p []float32, ps, n int, blocks [][]uint16, off, bs, stride int) {
	for i, j := 0, 0; j < n; i, j = i+1, j+bs {
		axpysF16HeadsGeneric(out, hd, p[j:], ps, min(bs, n-j), blocks[i][off:], stride)
	}
}
