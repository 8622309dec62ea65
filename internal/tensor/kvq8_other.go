//go:build !amd64 || purego

package tensor

func dotsQ80(dst []float32, q, k []byte, stride int) { dotsQ80Generic(dst, q, k, stride) }

func axpysQ80(out, p []float32, v []byte, stride int) { axpysQ80Generic(out, p, v, stride) }
