//go:build !amd64 || purego

package tensor

func dotsF16(dst, q []float32, k []uint16, stride int)  { dotsF16Generic(dst, q, k, stride) }
func axpysF16(out, p []float32, v []uint16, stride int) { axpysF16Generic(out, p, v, stride) }
