package main

import (
	"strings"
	"testing"
)

// TestVDPBF16PSEncoding compares the hand-made encoding with GNU as output
// for register combinations covering every extension bit.
func TestVDPBF16PSEncoding(t *testing.T) {
	tests := []struct {
		dst, src1, src2 int
		want            string // bytes from `as`, for vdpbf16ps %ymm<src2>, %ymm<src1>, %ymm<dst>
	}{
		{1, 2, 3, "62 f2 6e 28 52 cb"},
		{0, 18, 19, "62 b2 6e 20 52 c3"},
		{15, 28, 5, "62 72 1e 20 52 fd"},
		{8, 16, 31, "62 12 7e 20 52 c7"},
		{11, 10, 9, "62 52 2e 28 52 d9"},
	}
	for _, tc := range tests {
		var a asm
		vdpbf16ps(&a, tc.dst, tc.src1, tc.src2)
		line := a.b.String()
		var got []string
		for _, f := range strings.Split(strings.SplitN(line, "//", 2)[0], ";") {
			f = strings.TrimSpace(f)
			got = append(got, strings.TrimPrefix(f, "BYTE $0x"))
		}
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("vdpbf16ps Y%d, Y%d, Y%d: %s, want %s", tc.dst, tc.src1, tc.src2, g, tc.want)
		}
	}
}
