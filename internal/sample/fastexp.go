package sample

import "math"

// expCut is how far below the largest scaled logit a token may lie and still
// be counted, in natural-log units: e^-32 ≈ 1.3e-14, so even a vocabulary of
// a million tokens all sitting at the cut adds less than 1.3e-8 to a
// normalizer that is at least 1 — below float32 resolution. Tokens beyond it
// get probability 0 when sampling (they are still ranked for greedy and for
// top logprobs, which do not need their mass).
const expCut = 32

// Constants of exp32: ln2/64 split so that k·ln2by64Hi is exact in float32
// for every |k| < 2^13 (ln2by64Hi has 11 significant bits).
const (
	log2eBy64 = 64 * 1.4426950408889634074
	ln2by64Hi = 1420.0 / 131072
	ln2by64Lo = 0.693147180559945309417232121458/64 - ln2by64Hi
)

// exp2by64 holds the float32 bits of 2^(j/64) for j = 0..63.
var exp2by64 = func() (t [64]uint32) {
	for j := range t {
		t[j] = math.Float32bits(float32(math.Exp2(float64(j) / 64)))
	}
	return t
}()

// exp32 returns e^x for -87 ≤ x ≤ 0 with a relative error below 4e-7
// (checked against math.Exp in the tests). Callers guarantee the range: all
// of them cut at -expCut first. It exists because the samplers evaluate it up
// to twice per vocabulary entry per token (150k entries for Qwen-sized
// vocabularies), where math.Exp costs several times more.
//
// Method: x = (64m + j)·ln2/64 + r with |r| ≤ ln2/128, so e^x = 2^m · 2^(j/64)
// · e^r; 2^(j/64) comes from a table, 2^m goes straight into the exponent
// bits, and e^r ≈ 1 + r + r²/2 + r³/6 (truncation error r⁴/24 < 4e-11).
// The loops that call it are throughput bound at about 3 ns per call on
// this project's CPUs; rounding k with the 1.5·2^23 trick instead of two
// conversions measured slower.
func exp32(x float32) float32 {
	k := int32(x*log2eBy64 - 0.5) // round to nearest for x ≤ 0
	fk := float32(k)
	r := (x - fk*ln2by64Hi) - fk*ln2by64Lo
	p := (1 + r) + r*r*(0.5+r*(1.0/6))
	return p * math.Float32frombits(exp2by64[k&63]+uint32(k>>6)<<23)
}
