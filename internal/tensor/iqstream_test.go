package tensor

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestWidenIQBlockQ8K16 checks the word-at-a-time widening of every IQ
// type against iqBlock's value-by-value decode, on random blocks (every bit
// pattern is a valid block).
func TestWidenIQBlockQ8K16(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for _, typ := range []DType{IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S} {
		bs := typ.TypeSize()
		const n = 2000
		src := randIQBlocks(rng, typ, n)
		// Some blocks of all ones and all zeros: the extreme codes, signs
		// and scales.
		for i := range bs {
			src[i] = 0xff
			src[bs+i] = 0
		}
		want, have := make([]byte, q8K16Size), make([]byte, q8K16Size)
		var b iqBlock
		for k := range n {
			blk := src[k*bs : (k+1)*bs]
			b.decode(typ, blk)
			b.putQ8K16(want)
			widenIQBlockQ8K16(typ, have, blk)
			if !bytes.Equal(want, have) {
				i := 0
				for want[i] == have[i] {
					i++
				}
				t.Fatalf("%v block %d: byte %d is %#x, the decode's %#x", typ, k, i, have[i], want[i])
			}
		}
	}
}
