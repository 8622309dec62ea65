//go:build amd64 && !purego

package tensor

// The AVX2 (+FMA, F16C) attention kernels: 8 halves per conversion, so the
// row length must be a multiple of 8 (dots) or of 64 (axpys: 8 YMM
// accumulators hold 64 outputs); other shapes take the portable path.

//go:noescape
func dotsF16AVX2(dst *float32, n int, q *float32, hd int, k *uint16, strideBytes int)

//go:noescape
func axpysF16AVX2(out *float32, hd int, p *float32, n int, v *uint16, strideBytes int)

// The AVX-512 kernels (attn512_amd64.s), at the VNNI level, which has
// AVX512F: dot products for rows a multiple of 16 long, and the weighted
// sums of three heads (bit-identical to the AVX2 ones, so the single-head
// weighted sums keep the AVX2 kernel). They read rows from a table of
// blocks (a paged KV cache: row j at blocks[j/bs][off+(j%bs)·stride]); a
// contiguous run of rows is a table of one block (oneBlock).

//go:noescape
func dotsF16PagedAVX512(dst *float32, n int, q *float32, hd int, blocks *[]uint16, off, bs, strideBytes int)

//go:noescape
func dotsF16x3PagedAVX512(dst *float32, dstStride, n int, q *float32, qStride, hd int, blocks *[]uint16, off, bs, strideBytes int)

//go:noescape
func axpysF16x3PagedAVX512(out *float32, outStride, hd int, p *float32, pStride, n int, blocks *[]uint16, off, bs, strideBytes int)

// dots512 reports whether the dot products of rows hd long take the
// AVX-512 kernels (one query gets the same bits from the one-head and the
// three-head kernel of a level, not across levels).
func dots512(hd int) bool { return cpuISA >= isaVNNI && hd%16 == 0 }

func dotsF16(dst, q []float32, k []uint16, stride int) {
	if cpuISA == isaPortable || len(q)%8 != 0 || len(q) == 0 {
		dotsF16Generic(dst, q, k, stride)
		return
	}
	if dots512(len(q)) {
		tbl := [1][]uint16{k}
		dotsF16PagedAVX512(&dst[0], len(dst), &q[0], len(q), &tbl[0], 0, len(dst), 2*stride)
		return
	}
	dotsF16AVX2(&dst[0], len(dst), &q[0], len(q), &k[0], 2*stride)
}

func axpysF16(out, p []float32, v []uint16, stride int) {
	if cpuISA == isaPortable || len(out)%64 != 0 || len(out) == 0 {
		axpysF16Generic(out, p, v, stride)
		return
	}
	axpysF16AVX2(&out[0], len(out), &p[0], len(p), &v[0], 2*stride)
}

// prefetchRows issues a PREFETCHT0 for every 64-byte line of each row.
//
//go:noescape
func prefetchRows(b *byte, rows, rowBytes, strideBytes int)

//go:noescape
func dotsF16x3AVX2(dst *float32, dstStride, n int, q *float32, qStride, hd int, k *uint16, strideBytes int)

//go:noescape
func axpysF16x3AVX2(out *float32, outStride, hd int, p *float32, pStride, n int, v *uint16, strideBytes int)

// dotsF16Heads takes the queries three at a time, the rest one at a time.
func dotsF16Heads(dst []float32, ds, n int, q []float32, hd int, k []uint16, stride int) {
	if dots512(hd) {
		tbl := [1][]uint16{k}
		dotsF16Heads512(dst, ds, n, q, hd, tbl[:], 0, n, stride)
		return
	}
	if cpuISA == isaPortable || hd%8 != 0 {
		dotsF16HeadsGeneric(dst, ds, n, q, hd, k, stride)
		return
	}
	g := 0
	for ; (g+3)*hd <= len(q); g += 3 {
		dotsF16x3AVX2(&dst[g*ds], 4*ds, n, &q[g*hd], 4*hd, hd, &k[0], 2*stride)
	}
	for ; g*hd < len(q); g++ {
		dotsF16AVX2(&dst[g*ds], n, &q[g*hd], hd, &k[0], 2*stride)
	}
}

// dotsF16HeadsPaged is dotsF16Heads over a table of blocks: one call of the
// AVX-512 kernels for all of them, else block by block.
func dotsF16HeadsPaged(dst []float32, ds, n int, q []float32, hd int, blocks [][]uint16, off, bs, stride int) {
	if dots512(hd) {
		dotsF16Heads512(dst, ds, n, q, hd, blocks, off, bs, stride)
		return
	}
	dotsF16HeadsPagedGeneric(dst, ds, n, q, hd, blocks, off, bs, stride)
}

// dotsF16Heads512 runs the AVX-512 dot products, three queries at a time,
// the rest one at a time.
func dotsF16Heads512(dst []float32, ds, n int, q []float32, hd int, blocks [][]uint16, off, bs, stride int) {
	g := 0
	for ; (g+3)*hd <= len(q); g += 3 {
		dotsF16x3PagedAVX512(&dst[g*ds], 4*ds, n, &q[g*hd], 4*hd, hd, &blocks[0], 2*off, bs, 2*stride)
	}
	for ; g*hd < len(q); g++ {
		dotsF16PagedAVX512(&dst[g*ds], n, &q[g*hd], hd, &blocks[0], 2*off, bs, 2*stride)
	}
}

// axpysF16Heads takes the outputs three at a time, the rest one at a time.
func axpysF16Heads(out []float32, hd int, p []float32, ps, n int, v []uint16, stride int) {
	if cpuISA == isaPortable || hd%64 != 0 {
		axpysF16HeadsGeneric(out, hd, p, ps, n, v, stride)
		return
	}
	tbl := [1][]uint16{v}
	axpysF16HeadsPaged(out, hd, p, ps, n, tbl[:], 0, n, stride)
}

// axpysF16HeadsPaged is axpysF16Heads over a table of blocks: one call of
// the three-head AVX-512 kernel for all of them, else block by block.
func axpysF16HeadsPaged(out []float32, hd int, p []float32, ps, n int, blocks [][]uint16, off, bs, stride int) {
	if cpuISA == isaPortable || hd%64 != 0 { // as axpysF16: identical FMAs
		axpysF16HeadsPagedGeneric(out, hd, p, ps, n, blocks, off, bs, stride)
		return
	}
	g := 0
	for ; (g+3)*hd <= len(out); g += 3 {
		if cpuISA >= isaVNNI {
			axpysF16x3PagedAVX512(&out[g*hd], 4*hd, hd, &p[g*ps], 4*ps, n, &blocks[0], 2*off, bs, 2*stride)
			continue
		}
		for i, j := 0, 0; j < n; i, j = i+1, j+bs {
			axpysF16x3AVX2(&out[g*hd], 4*hd, hd, &p[g*ps+j], 4*ps, min(bs, n-j), &blocks[i][off], 2*stride)
		}
	}
	for ; g*hd < len(out); g++ {
		for i, j := 0, 0; j < n; i, j = i+1, j+bs {
			axpysF16(out[g*hd:(g+1)*hd], p[g*ps+j:g*ps+min(j+bs, n)], blocks[i][off:], stride)
		}
	}
}
