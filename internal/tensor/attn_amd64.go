//go:build amd64 && !purego

package tensor

// The AVX2 (+FMA, F16C) attention kernels: 8 halves per conversion, so the
// row length must be a multiple of 8 (dots) or of 64 (axpys: 8 YMM
// accumulators hold 64 outputs); other shapes take the portable path.

//go:noescape
func dotsF16AVX2(dst *float32, n int, q *float32, hd int, k *uint16, strideBytes int)

//go:noescape
func axpysF16AVX2(out *float32, hd int, p *float32, n int, v *uint16, strideBytes int)

func dotsF16(dst, q []float32, k []uint16, stride int) {
	if cpuISA == isaPortable || len(q)%8 != 0 || len(q) == 0 {
		dotsF16Generic(dst, q, k, stride)
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
