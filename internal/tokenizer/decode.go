package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// buildPieces renders every token's piece once, as llama.cpp's
// token_to_piece does with special tokens rendered: SPM pieces with ▁ turned
// back into spaces and byte tokens into their byte, BPE pieces mapped back
// from GPT-2's byte alphabet, control/user-defined/unknown tokens as their
// text, and unused or undefined tokens as nothing.
func (t *Tokenizer) buildPieces() {
	t.pieceOff = make([]uint32, t.n+1)
	t.pieces = make([]byte, 0, len(t.texts))
	for id := range t.n {
		text := t.text(int32(id))
		a := t.attrs[id]
		switch {
		case a&(attrUnknown|attrControl|attrUserDefined) != 0:
			t.pieces = append(t.pieces, text...)
		case a&attrNormal != 0 && t.kind == KindSPM:
			t.pieces = appendUnescaped(t.pieces, text)
		case a&attrNormal != 0:
			t.pieces = appendByteDecoded(t.pieces, text)
		case a&attrByte != 0 && t.kind == KindSPM:
			t.pieces = append(t.pieces, byteTokenValue(text))
		}
		t.pieceOff[id+1] = uint32(len(t.pieces))
	}
}

// appendUnescaped appends s with every ▁ (U+2581) replaced by a space.
func appendUnescaped(dst, s []byte) []byte {
	for {
		i := strings.Index(string(s), "\u2581")
		if i < 0 {
			return append(dst, s...)
		}
		dst = append(dst, s[:i]...)
		dst = append(dst, ' ')
		s = s[i+3:]
	}
}

// appendByteDecoded maps a BPE token text from GPT-2's byte alphabet back to
// bytes. A code point outside the alphabet is rendered the way llama.cpp
// does: "[UNK_BYTE_0x" + its UTF-8 in hex + the whole token text + "]".
func appendByteDecoded(dst, s []byte) []byte {
	str := string(s)
	for i := 0; i < len(str); {
		cp, n := decodeCodePoint(str, i)
		i += n
		if cp >= 0 && int(cp) < len(runeByte) && runeByte[cp] >= 0 {
			dst = append(dst, byte(runeByte[cp]))
			continue
		}
		const hex = "0123456789abcdef"
		dst = append(dst, "[UNK_BYTE_0x"...)
		for _, b := range appendCodePoint(nil, cp) {
			dst = append(dst, hex[b>>4], hex[b&15])
		}
		dst = append(dst, s...)
		dst = append(dst, ']')
	}
	return dst
}

// byteTokenValue parses the byte of an SPM byte token "<0xXX>" the way
// llama.cpp does (strtol on the two characters after "<0x").
func byteTokenValue(text []byte) byte {
	if len(text) <= 3 {
		return 0
	}
	s := text[3:min(len(text), 5)]
	i := 0
	for i < len(s) && isCSpace(s[i]) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	v := 0
	for ; i < len(s); i++ {
		c := s[i]
		var d int
		switch {
		case c >= '0' && c <= '9':
			d = int(c - '0')
		case c >= 'a' && c <= 'f':
			d = int(c-'a') + 10
		case c >= 'A' && c <= 'F':
			d = int(c-'A') + 10
		default:
			i = len(s)
			continue
		}
		v = v*16 + d
	}
	if neg {
		v = -v
	}
	return byte(v)
}

// piece returns the bytes a token renders to, or nil when it renders to
// nothing (ids out of range; control and unknown tokens unless special).
func (t *Tokenizer) piece(id int32, special bool) []byte {
	if !t.valid(id) {
		return nil
	}
	if !special && t.attrs[id]&(attrUnknown|attrControl) != 0 {
		return nil
	}
	return t.pieces[t.pieceOff[id]:t.pieceOff[id+1]]
}

// AppendPiece appends the raw bytes of one token's piece, as llama.cpp's
// token_to_piece renders it. A piece need not be valid UTF-8 on its own (a
// byte token is one byte of a character). Control and unknown tokens render
// as their text only when special is true; ids out of range render nothing.
func (t *Tokenizer) AppendPiece(dst []byte, id int32, special bool) []byte {
	return append(dst, t.piece(id, special)...)
}

// DecodeOptions selects how ids are rendered as text. The zero value is what
// llama-server sends for generated tokens.
type DecodeOptions struct {
	// Special renders control and unknown tokens as their text
	// ("<|im_end|>", "<s>"); by default they render as nothing.
	Special bool
	// Detokenize inverts Encode the way llama.cpp's llama_detokenize does
	// for a whole tokenised text: it drops the space that SPM's
	// add_space_prefix put before the first piece (unless the ids start
	// with a token other than a text piece, such as BOS) and, for
	// vocabularies that ask for it, applies clean_up_tokenization_spaces
	// (" ." → ".", " 's" → "'s", ...). Without it, pieces are simply
	// concatenated, which is right for continuing generated text.
	Detokenize bool
	// RemoveSpecial, with Detokenize, drops a leading BOS and a trailing
	// EOS when the vocabulary adds them (llama.cpp's remove_special).
	RemoveSpecial bool
}

// Decode renders ids as text by concatenating their pieces, with control
// tokens rendering as nothing: what llama-server returns for generated ids.
// Bytes that do not form valid UTF-8 are replaced, each by U+FFFD, so the
// result equals the concatenated output of a StreamDecoder after Flush.
func (t *Tokenizer) Decode(ids []int32) string {
	return t.DecodeWith(ids, DecodeOptions{})
}

// DecodeWith renders ids as text with the given options; invalid UTF-8 is
// replaced as in Decode.
func (t *Tokenizer) DecodeWith(ids []int32, o DecodeOptions) string {
	raw := t.AppendDecodeRaw(nil, ids, o)
	return string(appendValidUTF8(make([]byte, 0, len(raw)+8), raw))
}

// AppendDecodeRaw appends the rendered bytes of ids without repairing
// invalid UTF-8, exactly as llama.cpp produces them.
func (t *Tokenizer) AppendDecodeRaw(dst []byte, ids []int32, o DecodeOptions) []byte {
	if !o.Detokenize {
		for _, id := range ids {
			dst = append(dst, t.piece(id, o.Special)...)
		}
		return dst
	}
	start := len(dst)
	removeSpace := t.addSpacePrefix
	if o.RemoveSpecial && t.addBOS && len(ids) > 0 && ids[0] == t.bos {
		removeSpace = false
		ids = ids[1:]
	}
	if o.RemoveSpecial && t.addEOS && len(ids) > 0 && ids[len(ids)-1] == t.eos {
		ids = ids[:len(ids)-1]
	}
	for _, id := range ids {
		p := t.piece(id, o.Special)
		if removeSpace && len(p) > 0 && p[0] == ' ' {
			p = p[1:]
		}
		removeSpace = false
		dst = append(dst, p...)
	}
	if t.cleanSpaces {
		dst = append(dst[:start], cleanSpaces(dst[start:])...)
	}
	return dst
}

// cleanSpaces applies llama.cpp's three clean_up_tokenization_spaces passes
// in place and returns the shortened slice. Each pass reads the previous
// pass's output; the second pass marks the space it swallows after an
// isolated apostrophe as NUL, which the next character then sees as its
// predecessor, as in llama.cpp.
func cleanSpaces(text []byte) []byte {
	if len(text) == 0 {
		return text
	}
	// Pass 1: drop the space before ? ! . ,
	out := 1
	for i := 1; i < len(text); i++ {
		x := text[i]
		if text[i-1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',') {
			out--
		}
		text[out] = x
		out++
	}
	text = text[:out]

	// Pass 2: " ' " becomes "'".
	out = 1
	for i := 1; i < len(text); i++ {
		x := text[i]
		if x == '\'' && i+1 < len(text) && text[i-1] == ' ' && text[i+1] == ' ' {
			out--
			i++
			text[i] = 0
		}
		text[out] = x
		out++
	}
	text = text[:out]

	// Pass 3: drop the space before 's 'm 're 've.
	out = 1
	for i := 1; i < len(text); i++ {
		x := text[i]
		if text[i-1] == ' ' && x == '\'' && i+1 < len(text) {
			x1 := text[i+1]
			switch {
			case x1 == 's' || x1 == 'm':
				out--
			case x1 == 't' || x1 == 'd':
			case i+2 < len(text):
				x2 := text[i+2]
				if (x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e') {
					out--
				}
			}
		}
		text[out] = x
		out++
	}
	return text[:out]
}

// appendValidUTF8 appends s with every byte that is not part of a valid
// UTF-8 sequence replaced by U+FFFD (one per byte, as ranging over a Go
// string decodes it).
func appendValidUTF8(dst, s []byte) []byte {
	for len(s) > 0 {
		if s[0] < utf8.RuneSelf {
			dst = append(dst, s[0])
			s = s[1:]
			continue
		}
		r, n := utf8.DecodeRune(s)
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, "\uFFFD"...)
		} else {
			dst = append(dst, s[:n]...)
		}
		s = s[n:]
	}
	return dst
}

// StreamDecoder turns generated ids into text one id at a time without ever
// emitting part of a UTF-8 character: bytes that may still become a
// character (a lead byte from a byte token, waiting for its continuation
// bytes) are held back until it completes or cannot. Bytes that can never
// form a character come out as U+FFFD, one per byte. The concatenation of
// everything Add and Flush return equals Decode (or DecodeWith, for the
// Special option) of the same ids.
//
// A StreamDecoder belongs to one sequence and is not safe for concurrent
// use; it holds at most three pending bytes.
type StreamDecoder struct {
	t       *Tokenizer
	special bool
	pending [utf8.UTFMax]byte
	np      int
	buf     []byte
}

// NewStreamDecoder returns a decoder for generated text, rendering control
// tokens as nothing (like Decode).
func (t *Tokenizer) NewStreamDecoder() *StreamDecoder {
	return &StreamDecoder{t: t}
}

// NewStreamDecoderWith returns a decoder that renders control and unknown
// tokens as their text when special is true.
func (t *Tokenizer) NewStreamDecoderWith(special bool) *StreamDecoder {
	return &StreamDecoder{t: t, special: special}
}

// Add decodes one more id and returns the text it completes, possibly "".
func (d *StreamDecoder) Add(id int32) string {
	d.buf = d.AppendAdd(d.buf[:0], id)
	return string(d.buf)
}

// AppendAdd is Add appending to dst instead of allocating a string.
func (d *StreamDecoder) AppendAdd(dst []byte, id int32) []byte {
	p := d.t.piece(id, d.special)
	for len(p) > 0 {
		// Complete the pending character first, one byte at a time.
		if d.np > 0 {
			d.pending[d.np] = p[0]
			d.np++
			p = p[1:]
			dst = d.drain(dst, false)
			continue
		}
		// Fast path: copy everything up to an incomplete tail.
		n := 0
		for n < len(p) {
			if p[n] < utf8.RuneSelf {
				n++
				continue
			}
			if !utf8.FullRune(p[n:]) {
				break
			}
			r, size := utf8.DecodeRune(p[n:])
			if r == utf8.RuneError && size == 1 {
				dst = append(dst, p[:n]...)
				dst = append(dst, "\uFFFD"...)
				p = p[n+1:]
				n = 0
				continue
			}
			n += size
		}
		dst = append(dst, p[:n]...)
		p = p[n:]
		if len(p) > 0 { // an incomplete character: hold it back
			d.np = copy(d.pending[:], p)
			p = nil
		}
	}
	return dst
}

// drain emits what the pending bytes have become: a whole character, or
// U+FFFD for a byte that cannot start one (then the rest is re-examined).
// With final, incomplete characters are emitted as U+FFFD too.
func (d *StreamDecoder) drain(dst []byte, final bool) []byte {
	for d.np > 0 {
		b := d.pending[:d.np]
		if !final && !utf8.FullRune(b) {
			return dst
		}
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, "\uFFFD"...)
		} else {
			dst = append(dst, b[:size]...)
		}
		d.np = copy(d.pending[:], b[size:])
	}
	return dst
}

// Flush returns whatever is held back, with bytes that did not complete a
// character replaced by U+FFFD, and resets the decoder.
func (d *StreamDecoder) Flush() string {
	d.buf = d.drain(d.buf[:0], true)
	return string(d.buf)
}

// Pending reports whether bytes are held back waiting for more ids.
func (d *StreamDecoder) Pending() bool { return d.np > 0 }
