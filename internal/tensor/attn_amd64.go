//go:build amd64 && !purego

package tensor

// The attention kernels of the AVX2 (+FMA, F16C) level, 8 halves per
// conversion, and of the AVX-512 one (attn512_amd64.s, at the VNNI level,
// which has AVX512F), 16. They read rows from a table of blocks (a paged KV
// cache: row j at blocks[j/bs][off+(j%bs)·stride]); a contiguous run of rows
// is a table of one block. Dot products need rows a multiple of 8 long
// (AVX2) or 16 (AVX-512), weighted sums a multiple of 64 (8 YMM accumulators
// hold 64 outputs); other shapes take the portable path. The AVX-512
// weighted sums of three heads are bit-identical to the AVX2 ones, so the
// single-head weighted sums keep the AVX2 kernel; the dot products of one
// query get the same bits from the one-head and the three-head kernel of a
// level, not across levels.

//go:noescape
func dotsF16PagedAVX2(dst *float32, n int, q *float32, hd int, blocks *[]uint16, off, bs, strideBytes int)

//go:noescape
func dotsF16x3PagedAVX2(dst *float32, dstStride, n int, q *float32, qStride, hd int, blocks *[]uint16, off, bs, strideBytes int)

//go:noescape
func axpysF16PagedAVX2(out *float32, hd int, p *float32, n int, blocks *[]uint16, off, bs, strideBytes int)

//go:noescape
func axpysF16x3PagedAVX2(out *float32, outStride, hd int, p *float32, pStride, n int, blocks *[]uint16, off, bs, strideBytes int)

//go:noescape
func dotsF16PagedAVX512(dst *float32, n int, q *float32, hd int, blocks *[]uint16, off, bs, strideBytes int)

//go:noescape
func dotsF16x3PagedAVX512(dst *float32, dstStride, n int, q *float32, qStride, hd int, blocks *[]uint16, off, bs, strideBytes int)

//go:noescape
func axpysF16x3PagedAVX512(out *float32, outStride, hd int, p *float32, pStride, n int, blocks *[]uint16, off, bs, strideBytes int)

// prefetchRows issues a PREFETCHT0 for every 64-byte line of each row.
//
//go:noescape
func prefetchRows(b *byte, rows, rowBytes, strideBytes int)

// dotsAsm and axpysAsm report whether rows hd long take the assembly
// kernels.
func dotsAsm(hd int) bool  { return cpuISA != isaPortable && hd%8 == 0 && hd > 0 }
func axpysAsm(hd int) bool { return cpuISA != isaPortable && hd%64 == 0 && hd > 0 }

// dots512 reports whether the dot products of rows hd long take the
// AVX-512 kernels.
func dots512(hd int) bool { return cpuISA >= isaVNNI && hd%16 == 0 }

// The contiguous entry points call the kernels directly with a table of
// one block: attention on a cache of small blocks makes a call or two per
// block, and a layer of indirection per call shows in decode.

func dotsF16(dst, q []float32, k []uint16, stride int) {
	hd := len(q)
	if !dotsAsm(hd) {
		dotsF16Generic(dst, q, k, stride)
		return
	}
	tbl := [1][]uint16{k}
	if dots512(hd) {
		dotsF16PagedAVX512(&dst[0], len(dst), &q[0], hd, &tbl[0], 0, len(dst), 2*stride)
		return
	}
	dotsF16PagedAVX2(&dst[0], len(dst), &q[0], hd, &tbl[0], 0, len(dst), 2*stride)
}

func axpysF16(out, p []float32, v []uint16, stride int) {
	if !axpysAsm(len(out)) {
		axpysF16Generic(out, p, v, stride)
		return
	}
	tbl := [1][]uint16{v}
	axpysF16PagedAVX2(&out[0], len(out), &p[0], len(p), &tbl[0], 0, len(p), 2*stride)
}

func dotsF16Heads(dst []float32, ds, n int, q []float32, hd int, k []uint16, stride int) {
	if !dotsAsm(hd) {
		dotsF16HeadsGeneric(dst, ds, n, q, hd, k, stride)
		return
	}
	tbl := [1][]uint16{k}
	g := 0
	if dots512(hd) {
		for ; (g+3)*hd <= len(q); g += 3 {
			dotsF16x3PagedAVX512(&dst[g*ds], 4*ds, n, &q[g*hd], 4*hd, hd, &tbl[0], 0, n, 2*stride)
		}
		for ; g*hd < len(q); g++ {
			dotsF16PagedAVX512(&dst[g*ds], n, &q[g*hd], hd, &tbl[0], 0, n, 2*stride)
		}
		return
	}
	for ; (g+3)*hd <= len(q); g += 3 {
		dotsF16x3PagedAVX2(&dst[g*ds], 4*ds, n, &q[g*hd], 4*hd, hd, &tbl[0], 0, n, 2*stride)
	}
	for ; g*hd < len(q); g++ {
		dotsF16PagedAVX2(&dst[g*ds], n, &q[g*hd], hd, &tbl[0], 0, n, 2*stride)
	}
}

func axpysF16Heads(out []float32, hd int, p []float32, ps, n int, v []uint16, stride int) {
	if !axpysAsm(hd) {
		axpysF16HeadsGeneric(out, hd, p, ps, n, v, stride)
		return
	}
	tbl := [1][]uint16{v}
	g := 0
	for ; (g+3)*hd <= len(out); g += 3 {
		if cpuISA >= isaVNNI {
			axpysF16x3PagedAVX512(&out[g*hd], 4*hd, hd, &p[g*ps], 4*ps, n, &tbl[0], 0, n, 2*stride)
		} else {
			axpysF16x3PagedAVX2(&out[g*hd], 4*hd, hd, &p[g*ps], 4*ps, n, &tbl[0], 0, n, 2*stride)
		}
	}
	for ; g*hd < len(out); g++ {
		axpysF16PagedAVX2(&out[g*hd], hd, &p[g*ps], n, &tbl[0], 0, n, 2*stride)
	}
}

// dotsF16HeadsPaged takes the queries three at a time, the rest one at a
// time, all the blocks in each call.
func dotsF16HeadsPaged(dst []float32, ds, n int, q []float32, hd int, blocks [][]uint16, off, bs, stride int) {
	if !dotsAsm(hd) {
		dotsF16HeadsPagedGeneric(dst, ds, n, q, hd, blocks, off, bs, stride)
		return
	}
	x3, x1 := dotsF16x3PagedAVX2, dotsF16PagedAVX2
	if dots512(hd) {
		x3, x1 = dotsF16x3PagedAVX512, dotsF16PagedAVX512
	}
	g := 0
	for ; (g+3)*hd <= len(q); g += 3 {
		x3(&dst[g*ds], 4*ds, n, &q[g*hd], 4*hd, hd, &blocks[0], 2*off, bs, 2*stride)
	}
	for ; g*hd < len(q); g++ {
		x1(&dst[g*ds], n, &q[g*hd], hd, &blocks[0], 2*off, bs, 2*stride)
	}
}

// axpysF16HeadsPaged takes the outputs three at a time, the rest one at a
// time, all the blocks in each call.
func axpysF16HeadsPaged(out []float32, hd int, p []float32, ps, n int, blocks [][]uint16, off, bs, stride int) {
	if !axpysAsm(hd) { // as axpysF16: identical FMAs
		axpysF16HeadsPagedGeneric(out, hd, p, ps, n, blocks, off, bs, stride)
		return
	}
	x3 := axpysF16x3PagedAVX2
	if cpuISA >= isaVNNI {
		x3 = axpysF16x3PagedAVX512
	}
	g := 0
	for ; (g+3)*hd <= len(out); g += 3 {
		x3(&out[g*hd], 4*hd, hd, &p[g*ps], 4*ps, n, &blocks[0], 2*off, bs, 2*stride)
	}
	for ; g*hd < len(out); g++ {
		axpysF16PagedAVX2(&out[g*hd], hd, &p[g*ps], n, &blocks[0], 2*off, bs, 2*stride)
	}
}
