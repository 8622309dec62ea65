package tokenizer

import (
	"sync"
	"unicode"
)

// Code point classes as the pre-tokenizers see them. Every code point has
// exactly one general-category class (its Unicode general category folded to
// the first letter: L, N, M, P, S, Z, C; unassigned code points are
// classUndefined), plus an independent White_Space bit. The value 0 is never
// a valid class: the splitters use it for "outside the segment".
const (
	classUndefined uint8 = 1 + iota
	classNumber          // \p{N}
	classLetter          // \p{L}
	classSeparator       // \p{Z}
	classMark            // \p{M}
	classPunct           // \p{P}
	classSymbol          // \p{S}
	classControl         // \p{C} (Cc, Cf, Co, Cs)

	classMask  uint8 = 0x0f
	whiteSpace uint8 = 0x80 // the Unicode White_Space property (what \s means here)
)

const maxCodePoint = 0x10FFFF

// cpClassTable returns one byte per code point 0..U+10FFFF: its class and
// White_Space bit. It is built once, on first use, from Go's unicode tables
// and is read-only afterwards.
var cpClassTable = sync.OnceValue(func() []uint8 {
	t := make([]uint8, maxCodePoint+1)
	for i := range t {
		t[i] = classUndefined
	}
	fill := func(rt *unicode.RangeTable, c uint8) {
		for _, r := range rt.R16 {
			for x := uint32(r.Lo); x <= uint32(r.Hi); x += uint32(r.Stride) {
				t[x] = c
			}
		}
		for _, r := range rt.R32 {
			for x := r.Lo; x <= r.Hi; x += r.Stride {
				t[x] = c
			}
		}
	}
	fill(unicode.L, classLetter)
	fill(unicode.N, classNumber)
	fill(unicode.M, classMark)
	fill(unicode.P, classPunct)
	fill(unicode.S, classSymbol)
	fill(unicode.Z, classSeparator)
	fill(unicode.Cc, classControl)
	fill(unicode.Cf, classControl)
	fill(unicode.Co, classControl)
	fill(unicode.Cs, classControl)
	// Go's tables are Unicode 15.0; llama.cpp's are 15.1, which added
	// these code points (CJK Extension I and ideographic description
	// characters). Patch them so both classify every code point alike.
	for x := 0x2EBF0; x <= 0x2EE5D; x++ {
		t[x] = classLetter
	}
	for _, x := range []int{0x2FFC, 0x2FFD, 0x2FFE, 0x2FFF, 0x31EF} {
		t[x] = classSymbol
	}
	for _, r := range unicode.White_Space.R16 {
		for x := uint32(r.Lo); x <= uint32(r.Hi); x += uint32(r.Stride) {
			t[x] |= whiteSpace
		}
	}
	for _, r := range unicode.White_Space.R32 {
		for x := r.Lo; x <= r.Hi; x += r.Stride {
			t[x] |= whiteSpace
		}
	}
	return t
})

// cpFlags returns the class byte of a code point; code points beyond
// U+10FFFF (which llama.cpp's lenient decoder can produce) are undefined.
func cpFlags(table []uint8, cp rune) uint8 {
	if uint32(cp) > maxCodePoint {
		return classUndefined
	}
	return table[cp]
}

// utf8Len is the sequence length that a lead byte announces, the way
// llama.cpp's SPM and BPE symbol splitting reads it: by the high nibble only,
// so continuation bytes and 0xF8..0xFF count as 1 and 4 respectively.
func utf8Len(b byte) int {
	switch b >> 4 {
	case 0xC, 0xD:
		return 2
	case 0xE:
		return 3
	case 0xF:
		return 4
	}
	return 1
}

// decodeCodePoint decodes one code point at s[i:] with llama.cpp's lenient
// rules: it checks lead and continuation bit patterns and lengths but not
// overlong forms or surrogates. An invalid byte decodes as U+FFFD and
// consumes one byte. It returns the code point and the number of bytes used.
func decodeCodePoint(s string, i int) (rune, int) {
	b0 := s[i]
	if b0 < 0x80 {
		return rune(b0), 1
	}
	cont := func(k int) bool { return i+k < len(s) && s[i+k]&0xC0 == 0x80 }
	switch {
	case b0&0x40 == 0:
		return 0xFFFD, 1
	case b0&0x20 == 0:
		if !cont(1) {
			return 0xFFFD, 1
		}
		return rune(b0&0x1F)<<6 | rune(s[i+1]&0x3F), 2
	case b0&0x10 == 0:
		if !cont(1) || !cont(2) {
			return 0xFFFD, 1
		}
		return rune(b0&0x0F)<<12 | rune(s[i+1]&0x3F)<<6 | rune(s[i+2]&0x3F), 3
	case b0&0x08 == 0:
		if !cont(1) || !cont(2) || !cont(3) {
			return 0xFFFD, 1
		}
		return rune(b0&0x07)<<18 | rune(s[i+1]&0x3F)<<12 | rune(s[i+2]&0x3F)<<6 | rune(s[i+3]&0x3F), 4
	}
	return 0xFFFD, 1
}

// appendCodePoint appends the UTF-8 encoding of cp the way llama.cpp
// writes it (surrogates are encoded like any other 3-byte code point).
// Code points beyond U+10FFFF, where llama.cpp throws, become U+FFFD.
func appendCodePoint(dst []byte, cp rune) []byte {
	switch {
	case cp < 0:
		return append(dst, 0xEF, 0xBF, 0xBD)
	case cp <= 0x7F:
		return append(dst, byte(cp))
	case cp <= 0x7FF:
		return append(dst, 0xC0|byte(cp>>6), 0x80|byte(cp&0x3F))
	case cp <= 0xFFFF:
		return append(dst, 0xE0|byte(cp>>12), 0x80|byte(cp>>6&0x3F), 0x80|byte(cp&0x3F))
	case cp <= maxCodePoint:
		return append(dst, 0xF0|byte(cp>>18), 0x80|byte(cp>>12&0x3F), 0x80|byte(cp>>6&0x3F), 0x80|byte(cp&0x3F))
	}
	return append(dst, 0xEF, 0xBF, 0xBD)
}

// byteRunes is GPT-2's byte-to-unicode table: every byte value gets a
// printable code point, so byte-level BPE vocabularies can be stored as
// text. Printable Latin-1 bytes map to themselves; the others, in order, to
// U+0100, U+0101, ...
var byteRunes = func() (t [256]rune) {
	n := rune(0)
	for b := 0; b < 256; b++ {
		if (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			t[b] = rune(b)
		} else {
			t[b] = 256 + n
			n++
		}
	}
	return t
}()

// runeByte inverts byteRunes: the byte for code points below 0x144, or -1.
var runeByte = func() (t [0x144]int16) {
	for i := range t {
		t[i] = -1
	}
	for b, r := range byteRunes {
		t[r] = int16(b)
	}
	return t
}()

// isCSpace reports whether b is whitespace for C's isspace in the "C" locale.
func isCSpace(b byte) bool {
	return b == ' ' || (b >= '\t' && b <= '\r')
}
