//go:build !amd64 || purego

package tensor

func dotsF16(dst, q []float32, k []uint16, stride int)  { dotsF16Generic(dst, q, k, stride) }
func axpysF16(out, p []float32, v []uint16, stride int) { axpysF16Generic(out, p, v, stride) }

func prefetchRows(b *byte, rows, rowBytes, strideBytes int) {}

func dotsF16Heads(dst []float32, ds, n int, q []float32, hd int, k []uint16, stride int) {
	dotsF16HeadsGeneric(dst, ds, n, q, hd, k, stride)
}

func axpysF16Heads(out []float32, hd int, p []float32, ps, n int, v []uint16, stride int) {
	axpysF16HeadsGeneric(out, hd, p, ps, n, v, stride)
}

func dotsF16HeadsPaged(dst []float32, ds, n int, q []float32, hd int, blocks [][]uint16, off, bs, stride int) {
	dotsF16HeadsPagedGeneric(dst, ds, n, q, hd, blocks, off, bs, stride)
}

func axpysF16HeadsPaged(out []float32, hd int, p []float32, ps, n int, blocks [][]uint16, off, bs, stride int) {
	axpysF16HeadsPagedGeneric(out, hd, p, ps, n, blocks, off, bs, stride)
}
