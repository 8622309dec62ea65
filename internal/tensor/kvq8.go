package tensor

import (
	"encoding/binary"
	"math"
)

// Q8_0 key/value rows. With a Q8_0 KV cache, keys and values are stored as
// Q8_0 blocks (32 values: an f16 scale and 32 int8), quantized the way ggml's
// CPU backend copies f32 into a Q8_0 cache (its quantize_row_q8_0: d =
// amax/127, values rounded half to even). Attention dots a query quantized
// the same way with each key block in integers, as ggml's
// vec_dot_q8_0_q8_0 does, and weights dequantized value rows.

// QuantizeQ80 writes src (a multiple of 32 values) as Q8_0 blocks into dst
// (34 bytes per block).
func QuantizeQ80(dst []byte, src []float32) {
	nb := len(src) / qk80
	_ = dst[nb*34-1]
	for b := 0; b < nb; b++ {
		x := src[b*qk80 : (b+1)*qk80]
		var amax float32
		for _, v := range x {
			amax = max(amax, abs32(v))
		}
		d := amax / 127
		id := float32(0)
		if amax != 0 {
			id = 127 / amax
		}
		blk := dst[b*34 : (b+1)*34]
		binary.LittleEndian.PutUint16(blk, F32ToF16(d))
		for i, v := range x {
			blk[2+i] = byte(int8(math.RoundToEven(float64(v * id))))
		}
	}
}

// DotsQ80 sets dst[j] to the dot product of q with the row of Q8_0 blocks at
// k[j*stride:], where q and the rows hold len(q)/34 blocks and stride is in
// bytes. Each block's integer sum is scaled by both blocks' scales and the
// blocks are added in order. The quantized values must be in [-127, 127],
// as QuantizeQ80 writes them (the fast kernel's sign trick cannot negate
// -128).
func DotsQ80(dst []float32, q []byte, k []byte, stride int) {
	nb := len(q) / 34
	if len(dst) == 0 || nb == 0 {
		clear(dst)
		return
	}
	_ = k[(len(dst)-1)*stride+nb*34-1] // bounds, once
	dotsQ80(dst, q[:nb*34], k, stride)
}

func dotsQ80Generic(dst []float32, q []byte, k []byte, stride int) {
	nb := len(q) / 34
	for j := range dst {
		row := k[j*stride : j*stride+nb*34]
		var sum float32
		for b := 0; b < nb; b++ {
			qa, ka := q[b*34:(b+1)*34], row[b*34:(b+1)*34]
			var isum int32
			for i := 2; i < 34; i++ {
				isum += int32(int8(qa[i])) * int32(int8(ka[i]))
			}
			// Rounded before the add (never fused), as the kernel does.
			sum += float32(float32(isum) * (f16At(qa, 0) * f16At(ka, 0)))
		}
		dst[j] = sum
	}
}

// AxpysQ80 adds to out, for j < len(p), p[j] times the dequantized row of
// Q8_0 blocks at v[j*stride:] (len(out) values, a multiple of 32; stride in
// bytes).
func AxpysQ80(out, p []float32, v []byte, stride int) {
	nb := len(out) / qk80
	if len(p) == 0 || nb == 0 {
		return
	}
	_ = v[(len(p)-1)*stride+nb*34-1] // bounds, once
	axpysQ80(out[:nb*qk80], p, v, stride)
}

func axpysQ80Generic(out, p []float32, v []byte, stride int) {
	nb := len(out) / qk80
	for j, w := range p {
		row := v[j*stride : j*stride+nb*34]
		for b := 0; b < nb; b++ {
			blk := row[b*34 : (b+1)*34]
			s := w * f16At(blk, 0)
			o := out[b*qk80 : (b+1)*qk80]
			for i := range o {
				o[i] += float32(s * float32(int8(blk[2+i]))) // rounded before the add
			}
		}
	}
}
