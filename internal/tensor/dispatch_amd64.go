//go:build amd64 && !purego

package tensor

// amd64: assembly kernels selected at run time by CPU feature (phase 2).

func fastKernel(t DType) kernel { return nil }

func quantizeActQ80(q []int8, d []float32, s []int32, x []float32) {
	quantizeActQ80Generic(q, d, s, x)
}

func quantizeActQ8K(q []int8, d []float32, bs []int16, x []float32) {
	quantizeActQ8KGeneric(q, d, bs, x)
}

func convertF16Act(h []uint16, f, x []float32) { convertF16ActGeneric(h, f, x) }

func dotF16(a, b []uint16) float32 { return dotF16Generic(a, b) }

func axpyF16(dst []float32, a float32, x []uint16) { axpyF16Generic(dst, a, x) }
