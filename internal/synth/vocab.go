package synth

import (
	"container/heap"
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// Vocabulary is a generated tokenizer: what goes into the tokenizer.ggml.*
// metadata of a synthetic model.
type Vocabulary struct {
	Tokens []string
	Types  []TokenType
	Scores []float32 // SentencePiece only
	Merges []string  // BPE only, in rank order
}

// BuildVocabulary generates the vocabulary of a shape: exactly s.Vocab
// tokens, the special tokens at their real ids.
//
// For a BPE ("gpt2") tokenizer the regular tokens are the 256 byte tokens in
// GPT-2's byte→unicode order followed by merged tokens, and every merged
// token is reachable: byte-level BPE with the merges before it splits its
// text into exactly the two halves of its own merge (see bpeMerges). Ids no
// real token occupies (Qwen's padding rows) become "[PADn]" tokens of type
// UNUSED, as llama.cpp's converter writes them. The vocabulary depends only on
// the shape, not on the weight seed.
func BuildVocabulary(s *Shape) (*Vocabulary, error) {
	switch s.Tokenizer.Model {
	case "llama":
		return placeholderSPM(s.Vocab)
	case "gpt2":
		return byteLevelBPE(s)
	}
	return nil, fmt.Errorf("synth: shape %s: unknown tokenizer model %q", s.Name, s.Tokenizer.Model)
}

// placeholderSPM builds the vocabulary of models/README.md "Placeholder
// tokenizer": <unk>, <s>, </s>, byte tokens <0x00>..<0x7F>, then "▁" + the id
// in base 26 (a–z) with score −(id−131).
func placeholderSPM(n int) (*Vocabulary, error) {
	const firstPiece = 3 + 128
	if n < firstPiece {
		return nil, fmt.Errorf("synth: placeholder vocabulary needs at least %d tokens, not %d", firstPiece, n)
	}
	v := &Vocabulary{Tokens: make([]string, n), Types: make([]TokenType, n), Scores: make([]float32, n)}
	v.Tokens[0], v.Types[0] = "<unk>", TokenUnknown
	v.Tokens[1], v.Types[1] = "<s>", TokenControl
	v.Tokens[2], v.Types[2] = "</s>", TokenControl
	for b := 0; b < 128; b++ {
		v.Tokens[3+b], v.Types[3+b] = fmt.Sprintf("<0x%02X>", b), TokenByte
	}
	for id := firstPiece; id < n; id++ {
		v.Tokens[id] = "▁" + base26(id)
		v.Types[id] = TokenNormal
		v.Scores[id] = -float32(id - firstPiece)
	}
	return v, nil
}

func base26(n int) string {
	var b []byte
	for {
		b = append(b, byte('a'+n%26))
		n /= 26
		if n == 0 {
			break
		}
	}
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
	return string(b)
}

// ByteToRune is GPT-2's byte-level alphabet: the printable character that
// stands for each byte in token texts (0x20, space, is 'Ġ').
func ByteToRune(b byte) rune { return byteLevel.toRune[b] }

var byteLevel = newByteLevel()

type byteLevelTable struct {
	toRune [256]rune
	order  [256]byte // bytes in token order: printable ones first, as GPT-2
}

func newByteLevel() *byteLevelTable {
	t := &byteLevelTable{}
	printable := func(b int) bool {
		return ('!' <= b && b <= '~') || (0xA1 <= b && b <= 0xAC) || (0xAE <= b && b <= 0xFF)
	}
	n, next := 0, 0
	for b := 0; b < 256; b++ {
		if printable(b) {
			t.toRune[b] = rune(b)
			t.order[n] = byte(b)
			n++
		}
	}
	for b := 0; b < 256; b++ {
		if !printable(b) {
			t.toRune[b] = rune(256 + next)
			next++
			t.order[n] = byte(b)
			n++
		}
	}
	return t
}

func byteLevelBPE(s *Shape) (*Vocabulary, error) {
	tk := &s.Tokenizer
	fixed := make(map[int]Special, len(tk.Specials))
	for _, sp := range tk.Specials {
		fixed[sp.ID] = sp
	}
	// Regular tokens take the ids the specials leave free (SmolLM2's
	// specials come first, Llama 3's last), except that with Qwen's layout
	// (one block of specials followed by unused rows) they stop at the
	// specials and the rows after them are padding.
	nRegular := s.Vocab - len(fixed)
	if paddingTail(tk, s.Vocab) {
		nRegular = tk.Specials[0].ID
	}
	if nRegular < 256 {
		return nil, fmt.Errorf("synth: shape %s: room for %d regular tokens, byte-level BPE needs 256", s.Name, nRegular)
	}
	regular, merges := bpeMerges(nRegular)
	v := &Vocabulary{Tokens: make([]string, s.Vocab), Types: make([]TokenType, s.Vocab), Merges: merges}
	next := 0
	for id := 0; id < s.Vocab; id++ {
		if sp, ok := fixed[id]; ok {
			v.Tokens[id], v.Types[id] = sp.Text, sp.Type
			continue
		}
		if next < len(regular) {
			v.Tokens[id], v.Types[id] = regular[next], TokenNormal
			next++
			continue
		}
		v.Tokens[id], v.Types[id] = fmt.Sprintf("[PAD%d]", id), TokenUnused
	}
	seen := make(map[string]int, s.Vocab)
	for id, t := range v.Tokens {
		if prev, dup := seen[t]; dup {
			return nil, fmt.Errorf("synth: shape %s: token %q at ids %d and %d", s.Name, t, prev, id)
		}
		seen[t] = id
	}
	return v, nil
}

// paddingTail reports whether the specials form one block followed by unused
// padding rows up to the vocabulary size (Qwen), rather than ending it.
func paddingTail(tk *Tokenizer, vocab int) bool {
	if len(tk.Specials) == 0 {
		return false
	}
	first := tk.Specials[0].ID
	last := tk.Specials[len(tk.Specials)-1].ID
	return first > 0 && last < vocab-1
}

// symbol is one step of a candidate token: the byte-level character(s) it
// appends, what that costs, and the state it leads to.
type symbol struct {
	text string
	cost float64
	next int
}

// Candidate tokens are enumerated cheapest first from small automata over
// byte-level characters: words (an optional space 'Ġ', an optional capital,
// lowercase letters weighted by English letter frequency), numbers of up to
// three digits, runs of spaces, newlines or tabs, punctuation runs with an
// optional leading space, and English contractions. Cost is additive, so a
// token's prefix is always cheaper and comes first.
const (
	stWordStart = iota
	stWordAfterSpace
	stWord
	stDigits1
	stDigits2
	stDigits3
	stSpaces
	stNewlines
	stTabs
	stPunct
	stPunctRun
	stContraction
	stEnd
	nStates
)

var maxRunes = [nStates]int{stWordStart: 12, stWordAfterSpace: 12, stWord: 12, stDigits1: 3, stDigits2: 3, stDigits3: 3,
	stSpaces: 16, stNewlines: 4, stTabs: 4, stPunct: 3, stPunctRun: 3, stContraction: 4, stEnd: 0}

// English letter frequencies in percent (a–z), a fact that makes generated
// word pieces look like English ones.
var letterFreq = [26]float64{8.2, 1.5, 2.8, 4.3, 12.7, 2.2, 2.0, 6.1, 7.0, 0.15, 0.77, 4.0, 2.4,
	6.7, 7.5, 1.9, 0.095, 6.0, 6.3, 9.1, 2.8, 0.98, 2.4, 0.15, 2.0, 0.074}

func automata() [nStates][]symbol {
	var a [nStates][]symbol
	space := string(ByteToRune(' '))
	for i := 0; i < 26; i++ {
		c := -math.Log(letterFreq[i] / 100)
		lower, upper := string(rune('a'+i)), string(rune('A'+i))
		a[stWordStart] = append(a[stWordStart], symbol{lower, c + 1.2, stWord}, symbol{upper, c + 3.5, stWord})
		a[stWordAfterSpace] = append(a[stWordAfterSpace], symbol{lower, c, stWord}, symbol{upper, c + 2.5, stWord})
		a[stWord] = append(a[stWord], symbol{lower, c, stWord})
	}
	a[stWordStart] = append(a[stWordStart], symbol{space, 0.3, stWordAfterSpace})
	for d := '0'; d <= '9'; d++ {
		a[stDigits1] = append(a[stDigits1], symbol{string(d), 2.0, stDigits2})
		a[stDigits2] = append(a[stDigits2], symbol{string(d), 2.5, stDigits3})
		a[stDigits3] = append(a[stDigits3], symbol{string(d), 2.5, stEnd})
	}
	a[stSpaces] = []symbol{{space, 2.5, stSpaces}}
	a[stNewlines] = []symbol{{string(ByteToRune('\n')), 3.0, stNewlines}}
	a[stTabs] = []symbol{{string(ByteToRune('\t')), 3.5, stTabs}}
	for _, p := range ".,:;!?()[]{}<>\"'-_=+*/\\#@$%&|~`^" {
		a[stPunct] = append(a[stPunct], symbol{string(p), 4.0, stPunctRun})
		a[stPunctRun] = append(a[stPunctRun], symbol{string(p), 5.5, stPunctRun})
	}
	a[stPunct] = append(a[stPunct], symbol{space, 1.5, stPunctRun})
	for _, c := range []string{"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"} {
		a[stContraction] = append(a[stContraction], symbol{c, 4.0 + float64(len(c)), stEnd})
	}
	for i := range a {
		sortSymbols(a[i])
	}
	return a
}

func sortSymbols(s []symbol) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && (s[j].cost < s[j-1].cost || (s[j].cost == s[j-1].cost && s[j].text < s[j-1].text)); j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// candidate is a heap entry standing for prefix + sym[state][idx].
type candidate struct {
	base   float64 // cost of prefix
	cost   float64 // cost with the symbol
	prefix string
	state  int
	idx    int
}

type candHeap []candidate

func (h candHeap) Len() int { return len(h) }
func (h candHeap) Less(i, j int) bool {
	if h[i].cost != h[j].cost {
		return h[i].cost < h[j].cost
	}
	if h[i].prefix != h[j].prefix {
		return h[i].prefix < h[j].prefix
	}
	return h[i].state < h[j].state || (h[i].state == h[j].state && h[i].idx < h[j].idx)
}
func (h candHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *candHeap) Push(x any)   { *h = append(*h, x.(candidate)) }
func (h *candHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// bpeMerges returns n regular tokens (the 256 byte tokens first) and the
// n−256 merges that build the others, in rank order.
//
// Candidates come cheapest first from the automata above. A candidate is
// accepted only if byte-level BPE with the merges accepted so far splits it
// into exactly two tokens; the merge of those two becomes the next rank. So
// every token is what BPE produces for its own text, and adding later merges
// (of higher rank) never changes how an earlier token's text is split.
func bpeMerges(n int) (tokens, merges []string) {
	tokens = make([]string, 0, n)
	for _, b := range byteLevel.order {
		tokens = append(tokens, string(byteLevel.toRune[b]))
	}
	auto := automata()
	ranks := make(map[[2]string]int, n)
	known := make(map[string]bool, n)
	for _, t := range tokens {
		known[t] = true
	}
	h := &candHeap{}
	for _, st := range []int{stWordStart, stDigits1, stSpaces, stNewlines, stTabs, stPunct, stContraction} {
		heap.Push(h, candidate{cost: auto[st][0].cost, state: st})
	}
	var syms []string
	for len(tokens) < n && h.Len() > 0 {
		c := heap.Pop(h).(candidate)
		sym := auto[c.state][c.idx]
		text := c.prefix + sym.text
		if c.idx+1 < len(auto[c.state]) {
			nx := auto[c.state][c.idx+1]
			heap.Push(h, candidate{base: c.base, cost: c.base + nx.cost, prefix: c.prefix, state: c.state, idx: c.idx + 1})
		}
		if sym.next != stEnd && len(auto[sym.next]) > 0 && utf8.RuneCountInString(text) < maxRunes[sym.next] {
			heap.Push(h, candidate{base: c.cost, cost: c.cost + auto[sym.next][0].cost, prefix: text, state: sym.next})
		}
		if utf8.RuneCountInString(text) < 2 || known[text] {
			continue
		}
		syms = bpeSplit(syms[:0], text, ranks)
		if len(syms) != 2 {
			continue
		}
		ranks[[2]string{syms[0], syms[1]}] = len(merges)
		merges = append(merges, syms[0]+" "+syms[1])
		tokens = append(tokens, text)
		known[text] = true
	}
	return tokens, merges
}

// bpeSplit applies byte-level BPE merges (lowest rank first, leftmost on
// ties) to text, whose characters are already byte-level symbols.
func bpeSplit(syms []string, text string, ranks map[[2]string]int) []string {
	for _, r := range text {
		syms = append(syms, string(r))
	}
	for len(syms) > 1 {
		best, at := math.MaxInt, -1
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := ranks[[2]string{syms[i], syms[i+1]}]; ok && r < best {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		syms[at] += syms[at+1]
		syms = append(syms[:at+1], syms[at+2:]...)
	}
	return syms
}

// bytesToText converts raw text to byte-level symbols (each byte → its rune).
func bytesToText(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteRune(ByteToRune(s[i]))
	}
	return b.String()
}
