//go:build amd64 && !purego

package tensor

// The AVX2 kernels of Q8_0 keys and values (kvq8_amd64.s): the same integer
// sums and the same float steps, in the same order, as the portable code,
// so the results are identical.

//go:noescape
func dotsQ80AVX2(dst *float32, n int, q *byte, nb int, k *byte, stride int)

//go:noescape
func axpysQ80AVX2(out *float32, nb int, p *float32, n int, v *byte, stride int)

// dotsQ80 takes the keys eight at a time, the rest one at a time.
func dotsQ80(dst []float32, q, k []byte, stride int) {
	n8 := len(dst) &^ 7
	if cpuISA == isaPortable {
		n8 = 0
	}
	if n8 > 0 {
		dotsQ80AVX2(&dst[0], n8, &q[0], len(q)/34, &k[0], stride)
	}
	if n8 < len(dst) {
		dotsQ80Generic(dst[n8:], q, k[n8*stride:], stride)
	}
}

func axpysQ80(out, p []float32, v []byte, stride int) {
	if cpuISA == isaPortable {
		axpysQ80Generic(out, p, v, stride)
		return
	}
	axpysQ80AVX2(&out[0], len(out)/qk80, &p[0], len(p), &v[0], stride)
}
