package tensor

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
