package tokenizer

import (
	"hash/maphash"
	"unicode/utf8"
)

// encodeState is the working memory of one Encode call. States are pooled
// per Tokenizer, so a steady stream of Encode calls reuses their buffers.
type encodeState struct {
	frags, frags2 []fragment
	occ           []bool
	buf           []byte // SPM: the escaped fragment; BPE: one word's bytes
	enc           []byte // BPE: one word in GPT-2's byte alphabet
	syms          []symbol
	spmHeap       []spmBigram
	bpeHeap       []bpeBigram
	split         splitText
	segs, segs2   []int

	wordHits, wordMisses uint64 // word cache counters, added to the cache's once per call
	// scope is the call's EncodeOptions.Scope and scopeMix its hash, mixed
	// into every word's: words are cached per scope.
	scope    string
	scopeMix uint64
}

// symbol is one piece of a fragment (SPM) or word (BPE) during merging.
// Merging folds the right symbol into the left one, so a symbol's start
// never moves; n = 0 marks a symbol that was merged away. prev and next
// link the live symbols.
type symbol struct {
	start, n   int32
	prev, next int32
	sid        int32 // BPE: symbol id of the piece's text, or -1
}

// Encode tokenises text. With addSpecial, BOS and EOS are added as the
// vocabulary's add_bos_token/add_eos_token say. With parseSpecial, the
// texts of control tokens (such as <|im_start|>) in text become those
// tokens; without it they are tokenised as ordinary text. User-defined
// tokens are always recognised, as in llama.cpp.
func (t *Tokenizer) Encode(text string, addSpecial, parseSpecial bool) []int32 {
	return t.AppendEncodeWith(nil, text, EncodeOptions{AddSpecial: addSpecial, ParseSpecial: parseSpecial})
}

// AppendEncode is Encode appending to dst, for callers that reuse buffers.
func (t *Tokenizer) AppendEncode(dst []int32, text string, addSpecial, parseSpecial bool) []int32 {
	return t.AppendEncodeWith(dst, text, EncodeOptions{AddSpecial: addSpecial, ParseSpecial: parseSpecial})
}

// EncodeOptions are the options of AppendEncodeWith.
type EncodeOptions struct {
	// AddSpecial adds BOS and EOS as the vocabulary's
	// add_bos_token/add_eos_token say.
	AddSpecial bool
	// ParseSpecial turns the texts of control tokens into those tokens.
	ParseSpecial bool
	// ReuseFragments lets the call reuse, and remember, the tokens of whole
	// text fragments (the texts between special tokens, of at least
	// MinFragmentBytes) encoded before in the same Scope. An agent's system
	// prompt, tools and earlier turns then cost a hash and a compare.
	ReuseFragments bool
	// Scope names whom the text belongs to (a tenant): words and fragments
	// remembered in one scope are never found from another, so a tenant
	// cannot learn by timing whether another tenant sent a word or a whole
	// text (a system prompt, a document). "" is a scope like any other.
	Scope string
}

// AppendEncodeWith tokenises text as Encode does, appending to dst. The
// tokens depend only on text, AddSpecial and ParseSpecial: the caches
// change the time it takes, never the result.
func (t *Tokenizer) AppendEncodeWith(dst []int32, text string, opts EncodeOptions) []int32 {
	st, _ := t.scratch.Get().(*encodeState)
	if st == nil {
		st = new(encodeState)
	}
	defer t.scratch.Put(st)

	if t.words != nil {
		t.words.ready()
		st.scope, st.scopeMix = opts.Scope, maphash.String(t.words.seed, opts.Scope)
	}
	if opts.AddSpecial && t.addBOS {
		dst = append(dst, t.bos)
	}
	var frags []fragment
	if text != "" {
		frags = t.partition(st, text, opts.ParseSpecial)
	}
	fc := t.frags
	if !opts.ReuseFragments {
		fc = nil
	}
	var fragHits, fragMisses uint64
	prevSpecial := true // SPM: a space is prefixed to text at the start and after special tokens
	for _, f := range frags {
		if f.tok >= 0 {
			dst = append(dst, f.tok)
			prevSpecial = true
			continue
		}
		frag := text[f.start:f.end]
		prefix := t.kind == KindSPM && t.addSpacePrefix && prevSpecial
		prevSpecial = false
		var h uint64
		if fc != nil && len(frag) >= MinFragmentBytes {
			h = fc.hash(opts.Scope, prefix, frag)
			if ids, ok := fc.get(h, opts.Scope, prefix, frag); ok {
				dst = append(dst, ids...)
				fragHits++
				continue
			}
			fragMisses++
		}
		start := len(dst)
		if t.kind == KindSPM {
			dst = t.encodeSPM(st, dst, frag, prefix)
		} else {
			dst = t.encodeBPE(st, dst, frag)
		}
		if fc != nil && len(frag) >= MinFragmentBytes {
			fc.put(h, opts.Scope, prefix, frag, dst[start:])
		}
	}
	if opts.AddSpecial && t.addEOS {
		dst = append(dst, t.eos)
	}
	if fc != nil {
		fc.hits.Add(fragHits)
		fc.misses.Add(fragMisses)
	}
	if c := t.words; c != nil && st.wordHits+st.wordMisses > 0 {
		c.hits.Add(st.wordHits)
		c.misses.Add(st.wordMisses)
		st.wordHits, st.wordMisses = 0, 0
	}
	return dst
}

// spmBigram is a candidate SPM merge of two adjacent symbols; size is the
// byte length of the merged text, used to detect stale candidates.
type spmBigram struct {
	score       float32
	left, right int32
	size        int32
}

// spmBefore orders the SPM work queue: highest score first, then leftmost.
func spmBefore(a, b *spmBigram) bool {
	return a.score > b.score || (a.score == b.score && a.left < b.left)
}

// encodeSPM tokenises one text fragment with the SentencePiece algorithm of
// llama.cpp: spaces become ▁, the text is split into UTF-8 characters, and
// the adjacent pair whose concatenation is the highest-scoring vocabulary
// token is merged until no pair is in the vocabulary. Pieces that are not
// tokens (single characters missing from the vocabulary) become byte
// tokens.
//
// With the word cache, the escaped text is first cut before each ▁ that no
// merge can cross (see spmJoins) and each piece is looked up, and merged
// on its own when missing; the result is the same as merging the whole.
func (t *Tokenizer) encodeSPM(st *encodeState, dst []int32, text string, prefix bool) []int32 {
	buf := st.buf[:0]
	if prefix {
		buf = append(buf, "\u2581"...)
	}
	for i := 0; i < len(text); i++ {
		if text[i] == ' ' {
			buf = append(buf, "\u2581"...)
		} else {
			buf = append(buf, text[i])
		}
	}
	st.buf = buf
	if len(buf) == 0 {
		return dst
	}
	if t.words == nil {
		return t.mergeSPM(st, dst, buf)
	}
	start, prev := 0, 0 // current piece, previous symbol
	for off := 0; off < len(buf); {
		n := min(utf8Len(buf[off]), len(buf)-off)
		if n == 3 && off > start && buf[off] == 0xE2 && buf[off+1] == 0x96 && buf[off+2] == 0x81 {
			if _, join := t.spmJoin[packSym(buf[prev:off])]; !join {
				dst = t.spmPiece(st, dst, buf[start:off])
				start = off
			}
		}
		prev = off
		off += n
	}
	return t.spmPiece(st, dst, buf[start:])
}

// spmPiece encodes one piece of SPM text through the word cache.
func (t *Tokenizer) spmPiece(st *encodeState, dst []int32, piece []byte) []int32 {
	h := maphash.Bytes(t.words.seed, piece) ^ st.scopeMix
	if ids, ok := lookupWord(t.words, h, st.scope, piece); ok {
		st.wordHits++
		return append(dst, ids...)
	}
	st.wordMisses++
	start := len(dst)
	dst = t.mergeSPM(st, dst, piece)
	t.words.insert(h, st.scope, piece, dst[start:])
	return dst
}

// mergeSPM runs the SentencePiece merges over escaped text.
func (t *Tokenizer) mergeSPM(st *encodeState, dst []int32, buf []byte) []int32 {
	syms := st.syms[:0]
	for off := 0; off < len(buf); {
		n := min(utf8Len(buf[off]), len(buf)-off)
		i := int32(len(syms))
		syms = append(syms, symbol{start: int32(off), n: int32(n), prev: i - 1, next: i + 1})
		off += n
	}
	syms[len(syms)-1].next = -1
	st.syms = syms

	h := st.spmHeap[:0]
	for i := 1; i < len(syms); i++ {
		h = t.spmCandidate(h, buf, syms, int32(i-1), int32(i))
	}
	for len(h) > 0 {
		var bg spmBigram
		bg, h = spmPop(h)
		l, r := &syms[bg.left], &syms[bg.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != bg.size {
			continue // one side has changed since this candidate was queued
		}
		l.n += r.n
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = bg.left
		}
		h = t.spmCandidate(h, buf, syms, l.prev, bg.left)
		h = t.spmCandidate(h, buf, syms, bg.left, l.next)
	}
	st.spmHeap = h

	for i := int32(0); i >= 0; i = syms[i].next {
		s := buf[syms[i].start : syms[i].start+syms[i].n]
		if id, ok := t.tokenID[string(s)]; ok {
			dst = append(dst, id)
			continue
		}
		for _, b := range s {
			if id := t.byteToken[b]; id >= 0 {
				dst = append(dst, id)
			}
		}
	}
	return dst
}

func (t *Tokenizer) spmCandidate(h []spmBigram, buf []byte, syms []symbol, left, right int32) []spmBigram {
	if left < 0 || right < 0 {
		return h
	}
	l, r := &syms[left], &syms[right]
	id, ok := t.tokenID[string(buf[l.start:r.start+r.n])]
	if !ok {
		return h
	}
	return spmPush(h, spmBigram{score: t.scores[id], left: left, right: right, size: l.n + r.n})
}

func spmPush(h []spmBigram, x spmBigram) []spmBigram {
	h = append(h, x)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !spmBefore(&h[i], &h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func spmPop(h []spmBigram) (spmBigram, []spmBigram) {
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if c+1 < len(h) && spmBefore(&h[c+1], &h[c]) {
			c++
		}
		if !spmBefore(&h[c], &h[i]) {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	return top, h
}

// bpeBigram is a candidate BPE merge; result is the merged symbol's id.
type bpeBigram struct {
	rank        int32
	left, right int32
	size        int32
	result      int32
}

// bpeBefore orders the BPE work queue: lowest rank first, then leftmost.
func bpeBefore(a, b *bpeBigram) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.left < b.left)
}

// encodeBPE tokenises one text fragment with byte-level BPE: the
// pre-tokenizer splits it into words and each word is merged on its own,
// or found in the word cache.
func (t *Tokenizer) encodeBPE(st *encodeState, dst []int32, text string) []int32 {
	sp := &st.split
	sp.reset(text, cpClassTable())
	segs := append(st.segs[:0], len(sp.cps))
	for _, s := range t.splitters {
		out := s.split(sp, segs, st.segs2[:0])
		st.segs2 = segs
		segs = out
	}
	st.segs = segs
	wc := t.words
	// Valid UTF-8 re-encodes to itself, so a word's bytes are a substring
	// of text; otherwise they are rebuilt from the decoded code points,
	// which is where U+FFFD replaces invalid bytes.
	valid := wc != nil && utf8.ValidString(text)
	pos := 0
	for _, n := range segs {
		if valid {
			word := text[sp.offs[pos]:sp.offs[pos+n]]
			pos += n
			h := maphash.String(wc.seed, word) ^ st.scopeMix
			if ids, ok := lookupWord(wc, h, st.scope, word); ok {
				st.wordHits++
				dst = append(dst, ids...)
				continue
			}
			st.wordMisses++
			st.buf = append(st.buf[:0], word...)
			start := len(dst)
			dst = t.encodeWord(st, dst, st.buf)
			wc.insert(h, st.scope, st.buf, dst[start:])
			continue
		}
		word := st.buf[:0]
		for _, cp := range sp.cps[pos : pos+n] {
			word = appendCodePoint(word, cp)
		}
		pos += n
		st.buf = word
		if wc == nil {
			dst = t.encodeWord(st, dst, word)
			continue
		}
		h := maphash.Bytes(wc.seed, word) ^ st.scopeMix
		if ids, ok := lookupWord(wc, h, st.scope, word); ok {
			st.wordHits++
			dst = append(dst, ids...)
			continue
		}
		st.wordMisses++
		start := len(dst)
		dst = t.encodeWord(st, dst, word)
		wc.insert(h, st.scope, word, dst[start:])
	}
	return dst
}

// encodeWord merges one pre-tokenized word. Each byte starts as its own
// symbol (the byte's GPT-2 code point); the adjacent pair with the
// lowest-ranked merge rule is merged until no rule applies. A final piece
// that is not a token is emitted byte by byte, as llama.cpp does, which in
// practice drops it.
func (t *Tokenizer) encodeWord(st *encodeState, dst []int32, word []byte) []int32 {
	if len(word) == 0 {
		return dst
	}
	if t.ignoreMerges {
		enc := st.enc[:0]
		for _, b := range word {
			enc = append(enc, t.byteText[b]...)
		}
		st.enc = enc
		if id, ok := t.tokenID[string(enc)]; ok {
			return append(dst, id)
		}
	}
	syms := st.syms[:0]
	for i, b := range word {
		syms = append(syms, symbol{start: int32(i), n: 1, prev: int32(i) - 1, next: int32(i) + 1, sid: t.byteSid[b]})
	}
	syms[len(syms)-1].next = -1
	st.syms = syms

	h := st.bpeHeap[:0]
	for i := 1; i < len(syms); i++ {
		h = t.bpeCandidate(h, syms, int32(i-1), int32(i))
	}
	for len(h) > 0 {
		var bg bpeBigram
		bg, h = bpePop(h)
		l, r := &syms[bg.left], &syms[bg.right]
		if l.n == 0 || r.n == 0 || l.n+r.n != bg.size {
			continue
		}
		l.n += r.n
		l.sid = bg.result
		r.n = 0
		l.next = r.next
		if r.next >= 0 {
			syms[r.next].prev = bg.left
		}
		h = t.bpeCandidate(h, syms, l.prev, bg.left)
		h = t.bpeCandidate(h, syms, bg.left, l.next)
	}
	st.bpeHeap = h

	for i := int32(0); i >= 0; i = syms[i].next {
		s := &syms[i]
		if s.sid >= 0 && int(s.sid) < t.n {
			dst = append(dst, s.sid)
			continue
		}
		for _, b := range word[s.start : s.start+s.n] {
			txt := t.byteText[b]
			for k := 0; k < len(txt); k++ {
				if id := t.rawByte[txt[k]]; id >= 0 {
					dst = append(dst, id)
				}
			}
		}
	}
	return dst
}

func (t *Tokenizer) bpeCandidate(h []bpeBigram, syms []symbol, left, right int32) []bpeBigram {
	if left < 0 || right < 0 {
		return h
	}
	l, r := &syms[left], &syms[right]
	if l.sid < 0 || r.sid < 0 {
		return h
	}
	m, ok := t.merges[uint64(uint32(l.sid))<<32|uint64(uint32(r.sid))]
	if !ok {
		return h
	}
	return bpePush(h, bpeBigram{rank: m.rank, left: left, right: right, size: l.n + r.n, result: m.result})
}

func bpePush(h []bpeBigram, x bpeBigram) []bpeBigram {
	h = append(h, x)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !bpeBefore(&h[i], &h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func bpePop(h []bpeBigram) (bpeBigram, []bpeBigram) {
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for i := 0; ; {
		c := 2*i + 1
		if c >= len(h) {
			break
		}
		if c+1 < len(h) && bpeBefore(&h[c+1], &h[c]) {
			c++
		}
		if !bpeBefore(&h[c], &h[i]) {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	return top, h
}
