package tokenizer

import (
	"bytes"
	"testing"
)

func TestCodePointClasses(t *testing.T) {
	table := cpClassTable()
	for _, c := range []struct {
		cp    rune
		class uint8
		space bool
	}{
		{'a', classLetter, false},
		{'5', classNumber, false},
		{'~', classSymbol, false},
		{'_', classPunct, false},
		{' ', classSeparator, true},
		{'\n', classControl, true},
		{0x1C, classControl, false}, // not White_Space
		{0x85, classControl, true},
		{0xA0, classSeparator, true},
		{0x3000, classSeparator, true},
		{0x0663, classNumber, false}, // ٣
		{0x216B, classNumber, false}, // Ⅻ
		{0x0301, classMark, false},
		{0x200D, classControl, false},
		{0xE000, classControl, false}, // private use
		{0x0378, classUndefined, false},
		{0x2EBF0, classLetter, false}, // Unicode 15.1, patched
		{0x31EF, classSymbol, false},  // Unicode 15.1, patched
		{0x110000, classUndefined, false},
	} {
		f := cpFlags(table, c.cp)
		if f&classMask != c.class || (f&whiteSpace != 0) != c.space {
			t.Errorf("U+%04X: class %d space %v, want %d %v", c.cp, f&classMask, f&whiteSpace != 0, c.class, c.space)
		}
	}
}

func TestLenientUTF8(t *testing.T) {
	for _, c := range []struct {
		in   string
		cp   rune
		size int
	}{
		{"a", 'a', 1},
		{"é", 0xE9, 2},
		{"\xC0\x80", 0, 2},                // overlong, accepted as llama.cpp does
		{"\xED\xA0\x80", 0xD800, 3},       // surrogate, accepted
		{"\xF7\xBF\xBF\xBF", 0x1FFFFF, 4}, // beyond U+10FFFF, accepted
		{"\x80", 0xFFFD, 1},
		{"\xC3", 0xFFFD, 1},
		{"\xC3A", 0xFFFD, 1},
		{"\xF8\x80\x80\x80", 0xFFFD, 1},
	} {
		cp, n := decodeCodePoint(c.in, 0)
		if cp != c.cp || n != c.size {
			t.Errorf("decode %q = U+%04X/%d, want U+%04X/%d", c.in, cp, n, c.cp, c.size)
		}
	}
	for _, c := range []struct {
		cp   rune
		want string
	}{
		{'a', "a"}, {0xE9, "é"}, {0xD800, "\xED\xA0\x80"}, {0x1F999, "🦙"}, {0x1FFFFF, "\uFFFD"}, {-1, "\uFFFD"},
	} {
		if got := appendCodePoint(nil, c.cp); !bytes.Equal(got, []byte(c.want)) {
			t.Errorf("encode U+%04X = %q, want %q", c.cp, got, c.want)
		}
	}
}

func TestByteAlphabet(t *testing.T) {
	for b, want := range map[byte]rune{' ': 'Ġ', '\n': 'Ċ', 'a': 'a', 0: 0x100, 0xAD: 0x143, 0xFF: 0xFF} {
		if got := byteRunes[b]; got != want {
			t.Errorf("byte %#x → U+%04X, want U+%04X", b, got, want)
		}
	}
	seen := map[rune]bool{}
	for b, r := range byteRunes {
		if seen[r] || runeByte[r] != int16(b) {
			t.Fatalf("byte alphabet is not a bijection at %#x", b)
		}
		seen[r] = true
	}
	if got := appendByteDecoded(nil, []byte("ĠhiĊ")); string(got) != " hi\n" {
		t.Errorf("decoded %q", got)
	}
	if got := appendByteDecoded(nil, []byte("a→")); string(got) != "a[UNK_BYTE_0xe28692a→]" {
		t.Errorf("unknown code point rendered as %q", got)
	}
	for in, want := range map[string]byte{"<0x41>": 0x41, "<0xff>": 0xFF, "<0x>": 0, "<0": 0, "<0x-1>": 0xFF} {
		if got := byteTokenValue([]byte(in)); got != want {
			t.Errorf("byteTokenValue(%q) = %#x, want %#x", in, got, want)
		}
	}
}
