//go:build !amd64 || purego

package tensor

// Portable build: every kernel is the reference Go implementation.

func (i isa) String() string { return "portable" }

// q80RowLayout says the Q8_0 conversion must fill the row layout of the
// amd64 kernels (it need not here).
const q80RowLayout = false

// amxTiled says whether the Q8_0 conversion for products of ws fills the
// tile layout of amd64's AMX kernels: never here.
func amxTiled([]Matrix, int) bool { return false }

// packable says whether Pack has a layout for weights of type t: none here.
func packable(DType) bool { return false }

// q80PackedXor is unused here (nothing is packed).
func q80PackedXor() byte { return 0x80 }

// tileTokens is the number of tokens a kernel tile takes at once (the
// portable kernels have no tiles; four as on amd64's quantized kernels).
func tileTokens(*Matrix) int { return 4 }

// bf16OnTiles says whether m's products are computed on amd64's AMX-BF16
// tiles: never here.
func bf16OnTiles(Matrix) bool { return false }

// cpuISA is the only level of the portable build.
const cpuISA = isaPortable

// kernelAt returns the portable kernel of type t.
func kernelAt(t DType, _ isa) kernel { return portableKernel(t) }

func quantizeActQ80(q []int8, d []float32, s []int32, x []float32) {
	quantizeActQ80Generic(q, d, s, x)
}

func quantizeActQ8K(q []int8, d []float32, bs []int16, x []float32) {
	quantizeActQ8KGeneric(q, d, bs, x)
}

func convertF16Act(h []uint16, f, x []float32) { convertF16ActGeneric(h, f, x) }

func dotF16(a, b []uint16) float32 { return dotF16Generic(a, b) }

func dotF32(a, b []float32) float32 { return dotF32Generic(a, b) }

func axpyF32(dst []float32, a float32, x []float32) { axpyF32Generic(dst, a, x) }

func axpyF16(dst []float32, a float32, x []uint16) { axpyF16Generic(dst, a, x) }

func softmaxFast(x []float32) { softmaxGeneric(x) }

func softmaxWeightsF16(x []float32, s float32) { softmaxWeightsF16Generic(x, s) }

func scale(x []float32, s float32) {
	for i := range x {
		x[i] *= s
	}
}

func sumSquares(x []float32) float64 { return sumSquaresGeneric(x) }

func scaleMul(dst, x, w []float32, s float32) { scaleMulGeneric(dst, x, w, s) }

func swiglu(dst, gate, up []float32) {
	for i, g := range gate {
		dst[i] = silu(g) * up[i]
	}
}

func f32ToF16Slice(dst []uint16, src []float32) {
	for i, v := range src {
		dst[i] = F32ToF16(v)
	}
}

func f16ToF32Slice(dst []float32, src []uint16) {
	for i, v := range src {
		dst[i] = F16ToF32(v)
	}
}

func roundF16(x []float32) {
	for i, v := range x {
		x[i] = F16ToF32(F32ToF16(v))
	}
}

func expVec(x []float32) {
	for i, v := range x {
		x[i] = expf(v)
	}
}

// packedF16ReadsHalf is unused here (nothing is packed).
const packedF16ReadsHalf = false

// zmmRowStep is unused here (nothing is packed).
func zmmRowStep(DType) int { return 0 }

// directKernel returns no kernel: the portable kernels compute every type
// in its own bytes.
func directKernel(DType, isa) (kernel, int) { return nil, 0 }

// directPacker: none in the portable build.
func directPacker(DType, isa) *rowPacker { return nil }

// AMX says whether the tile unit computes products here: never in the
// portable build.
func AMX() string { return "" }

// DisableAMX: there are no tiles to keep out here.
func DisableAMX() error { return nil }

// AMXBF16: no AMX-BF16 family here.
func AMXBF16() string { return "" }

// splitKernel: no two-stream one-token kernels without the assembly.
func splitKernel(DType) bool { return false }
