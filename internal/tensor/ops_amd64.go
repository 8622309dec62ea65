//go:build amd64 && !purego

package tensor

// Assembly in ops_amd64.s (AVX2 + FMA + F16C).

//go:noescape
func quantQ80AVX2(x *float32, q *int8, d *float32, s *int32, nb int, smul int32)

//go:noescape
func quantQ8KAVX2(x *float32, q *int8, d *float32, nb int)

//go:noescape
func roundF16AVX2(x *float32, h *uint16, f *float32, n int)

//go:noescape
func dotF16AVX2(a, b *uint16, n int) float32

//go:noescape
func axpyF16AVX2(dst *float32, a float32, x *uint16, n int)

//go:noescape
func dotF32AVX2(a, b *float32, n int) float32

//go:noescape
func axpyF32AVX2(dst *float32, a float32, x *float32, n int)

// hasAVX2 reports whether the AVX2 row kernels can run (read-only).
var hasAVX2 = cpuISA >= isaAVX2

func quantizeActQ80(q []int8, d []float32, s []int32, x []float32) {
	if !hasAVX2 || len(d) == 0 {
		quantizeActQ80Generic(q, d, s, x)
		return
	}
	nb := len(d)
	_, _, _ = q[nb*qk80-1], s[nb-1], x[nb*qk80-1]
	quantQ80AVX2(&x[0], &q[0], &d[0], &s[0], nb, -1)
}

func quantizeActQ8K(q []int8, d []float32, bs []int16, x []float32) {
	if !hasAVX2 || len(d) == 0 {
		quantizeActQ8KGeneric(q, d, bs, x)
		return
	}
	nb := len(d)
	_, _, _ = q[nb*qkK-1], bs[nb*16-1], x[nb*qkK-1]
	quantQ8KAVX2(&x[0], &q[0], &d[0], nb)
	blockSums16(bs[:nb*16], q[:nb*qkK])
}

func convertF16Act(h []uint16, f, x []float32) {
	n8 := len(x) &^ 7
	if hasAVX2 && n8 > 0 {
		_, _ = h[n8-1], f[n8-1]
		roundF16AVX2(&x[0], &h[0], &f[0], n8)
	} else {
		n8 = 0
	}
	convertF16ActGeneric(h[n8:len(x)], f[n8:len(x)], x[n8:])
}

func dotF16(a, b []uint16) float32 {
	n8 := len(a) &^ 7
	if !hasAVX2 || n8 == 0 {
		return dotF16Generic(a, b)
	}
	_ = b[n8-1]
	s := dotF16AVX2(&a[0], &b[0], n8)
	for i := n8; i < len(a); i++ {
		s += F16ToF32(a[i]) * F16ToF32(b[i])
	}
	return s
}

func axpyF16(dst []float32, a float32, x []uint16) {
	n8 := len(dst) &^ 7
	if hasAVX2 && n8 > 0 {
		_ = x[n8-1]
		axpyF16AVX2(&dst[0], a, &x[0], n8)
	} else {
		n8 = 0
	}
	axpyF16Generic(dst[n8:], a, x[n8:len(dst)])
}

func dotF32(a, b []float32) float32 {
	n8 := len(a) &^ 7
	if !hasAVX2 || n8 == 0 {
		return dotF32Generic(a, b)
	}
	_ = b[n8-1]
	s := dotF32AVX2(&a[0], &b[0], n8)
	for i := n8; i < len(a); i++ {
		s += a[i] * b[i]
	}
	return s
}

func axpyF32(dst []float32, a float32, x []float32) {
	n8 := len(dst) &^ 7
	if hasAVX2 && n8 > 0 {
		_ = x[n8-1]
		axpyF32AVX2(&dst[0], a, &x[0], n8)
	} else {
		n8 = 0
	}
	axpyF32Generic(dst[n8:], a, x[n8:len(dst)])
}
