package tokenizer

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/dlclark/regexp2/v2"
)

// A splitter is one pre-tokenizer expression. Texts are split as llama.cpp's
// unicode_regex_split does: the text is decoded to code points, and each
// expression in turn splits every current segment into its matches and the
// gaps between them. Segments are given and returned as lengths in code
// points.
type splitter interface {
	split(s *splitText, segs, out []int) []int
}

// splitText is the decoded text the splitters work on, with per-code-point
// classes and, built only when a regular expression needs them, the two
// rune views llama.cpp matches its fallback expressions against.
type splitText struct {
	cps       []rune
	cls       []uint8 // class byte of each code point (see cpClassTable)
	offs      []int32 // byte offset of each code point in the text, and the text's length
	collapsed []rune  // every code point as one ASCII-range stand-in
	wide      []rune  // code points, non-ASCII whitespace as \v
}

func (s *splitText) reset(text string, table []uint8) {
	// Sized for the worst case (one code point per byte) and written by
	// index: this loop sees every byte of every prompt.
	n := len(text)
	cps, cls, offs := grow(s.cps, n), grow(s.cls, n), grow(s.offs, n+1)
	ascii := table[:0x80:0x80]
	k := 0
	for i := 0; i < len(text) && k < len(cps) && k < len(cls) && k < len(offs); k++ {
		c := text[i]
		offs[k] = int32(i)
		if c < 0x80 {
			cps[k] = rune(c)
			cls[k] = ascii[c]
			i++
			continue
		}
		cp, w := decodeCodePoint(text, i)
		i += w
		cps[k] = cp
		cls[k] = cpFlags(table, cp)
	}
	offs[k] = int32(n)
	s.cps, s.cls, s.offs = cps[:k], cls[:k], offs[:k+1]
	s.collapsed, s.wide = s.collapsed[:0], s.wide[:0]
}

// grow returns b resized to n elements, reusing its array when it can.
func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n, n+n/4)
	}
	return b[:n]
}

// Stand-ins for non-ASCII code points in llama.cpp's "collapsed" text, so
// that a byte-oriented regex engine can match \p{..} classes.
const (
	collapsedOther  = 0xD0
	collapsedNumber = 0xD1
	collapsedLetter = 0xD2
	collapsedPunct  = 0xD3
	collapsedMark   = 0xD4
	collapsedSymbol = 0xD5
)

func (s *splitText) collapsedRunes() []rune {
	if len(s.collapsed) == len(s.cps) {
		return s.collapsed
	}
	s.collapsed = s.collapsed[:0]
	for i, cp := range s.cps {
		c := cp
		if cp < 0 || cp >= 0x80 {
			f := s.cls[i]
			switch {
			case f&whiteSpace != 0:
				c = '\v'
			case f&classMask == classNumber:
				c = collapsedNumber
			case f&classMask == classLetter:
				c = collapsedLetter
			case f&classMask == classPunct:
				c = collapsedPunct
			case f&classMask == classMark:
				c = collapsedMark
			case f&classMask == classSymbol:
				c = collapsedSymbol
			default:
				c = collapsedOther
			}
		}
		s.collapsed = append(s.collapsed, c)
	}
	return s.collapsed
}

func (s *splitText) wideRunes() []rune {
	if len(s.wide) == len(s.cps) {
		return s.wide
	}
	s.wide = s.wide[:0]
	for i, cp := range s.cps {
		if (cp < 0 || cp >= 0x80) && s.cls[i]&whiteSpace != 0 {
			cp = '\v'
		}
		s.wide = append(s.wide, cp)
	}
	return s.wide
}

// newSplitter returns the splitter for one pre-tokenizer expression: a
// hand-written one for the common patterns, else a regular expression
// matched the way llama.cpp's std::regex fallback does.
func newSplitter(expr string) (splitter, error) {
	switch expr {
	case exprGPT2:
		return gpt2Splitter{}, nil
	case exprLlama3:
		return llama3Splitter{maxDigits: 3}, nil
	case exprQwen2:
		return llama3Splitter{maxDigits: 1}, nil
	case exprDigit:
		return digitSplitter{}, nil
	}
	return newRegexSplitter(expr)
}

func isLetter(f uint8) bool { return f&classMask == classLetter }
func isNumber(f uint8) bool { return f&classMask == classNumber }
func isSpace(f uint8) bool  { return f&whiteSpace != 0 }

// segmenter walks the segments of a split, handing out one segment's bounds
// at a time and recording the pieces a splitter cuts from it.
type segmenter struct {
	lo, hi int // current segment [lo, hi) in code points
	prev   int // end of the last piece emitted
	out    []int
}

// emit cuts a piece ending at end and returns its length.
func (g *segmenter) emit(end int) int {
	n := end - g.prev
	if n > 0 {
		g.out = append(g.out, n)
	}
	g.prev = end
	return n
}

// gpt2Splitter implements GPT-2's pattern
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
//
// by hand, as llama.cpp does, deciding each alternative by looking at code
// point classes instead of backtracking.
type gpt2Splitter struct{}

func (gpt2Splitter) split(s *splitText, segs, out []int) []int {
	g := segmenter{out: out}
	start := 0
	for _, n := range segs {
		g.lo, g.hi, g.prev = start, start+n, start
		start += n
		cps, cls, hi := s.cps, s.cls, g.hi
		cls0 := func(p int) uint8 { // class, or 0 past the segment
			if p < hi {
				return cls[p]
			}
			return 0
		}
		for pos := g.lo; pos < hi; {
			c := cps[pos]
			if c == '\'' && pos+1 < hi {
				c1 := cps[pos+1]
				if c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd' {
					pos += g.emit(pos + 2)
					continue
				}
				if pos+2 < hi {
					c2 := cps[pos+2]
					if (c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l') {
						pos += g.emit(pos + 3)
						continue
					}
				}
			}
			f2 := cls[pos]
			if c == ' ' {
				f2 = cls0(pos + 1)
			}
			switch {
			case isLetter(f2): // ?\p{L}+
				if c == ' ' {
					pos++
				}
				for isLetter(f2) {
					pos++
					f2 = cls0(pos)
				}
				g.emit(pos)
				continue
			case isNumber(f2): // ?\p{N}+
				if c == ' ' {
					pos++
				}
				for isNumber(f2) {
					pos++
					f2 = cls0(pos)
				}
				g.emit(pos)
				continue
			case f2 != 0 && !isSpace(f2): // ?[^\s\p{L}\p{N}]+
				if c == ' ' {
					pos++
				}
				for f2 != 0 && !isSpace(f2) && !isLetter(f2) && !isNumber(f2) {
					pos++
					f2 = cls0(pos)
				}
				g.emit(pos)
				continue
			}
			ws := 0
			for isSpace(cls0(pos + ws)) {
				ws++
			}
			switch {
			case ws > 1 && pos+ws < hi: // \s+(?!\S)
				pos += ws - 1
				g.emit(pos)
			case ws > 0: // \s+
				pos += ws
				g.emit(pos)
			default:
				pos++
				g.emit(pos)
			}
		}
	}
	return g.out
}

// llama3Splitter implements the Llama 3 pattern (maxDigits 3) and the
// Qwen2 pattern (maxDigits 1, \p{N} instead of \p{N}{1,3}):
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
type llama3Splitter struct{ maxDigits int }

func lowerASCII(c rune) rune {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	if c >= 0x80 {
		return unicode.ToLower(c)
	}
	return c
}

func (l llama3Splitter) split(s *splitText, segs, out []int) []int {
	g := segmenter{out: out}
	start := 0
	for _, n := range segs {
		g.lo, g.hi, g.prev = start, start+n, start
		start += n
		cps, cls, hi := s.cps, s.cls, g.hi
		cls0 := func(p int) uint8 {
			if p < hi {
				return cls[p]
			}
			return 0
		}
		cp0 := func(p int) rune {
			if p < hi {
				return cps[p]
			}
			return -1
		}
		for pos := g.lo; pos < hi; {
			c, f := cps[pos], cls[pos]
			if c == '\'' && pos+1 < hi { // (?i:'s|'t|'re|'ve|'m|'ll|'d)
				c1 := lowerASCII(cps[pos+1])
				if c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd' {
					pos += g.emit(pos + 2)
					continue
				}
				if pos+2 < hi {
					c2 := lowerASCII(cps[pos+2])
					if (c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l') {
						pos += g.emit(pos + 3)
						continue
					}
				}
			}
			// [^\r\n\p{L}\p{N}]?\p{L}+
			if c != '\r' && c != '\n' && !isNumber(f) && (isLetter(f) || isLetter(cls0(pos+1))) {
				pos++
				for isLetter(cls0(pos)) {
					pos++
				}
				g.emit(pos)
				continue
			}
			// \p{N}{1,maxDigits}
			if isNumber(f) {
				ini := pos
				for isNumber(cls0(pos)) {
					pos++
					if pos-ini >= l.maxDigits {
						g.emit(pos)
						ini = pos
					}
				}
				g.emit(pos)
				continue
			}
			// ?[^\s\p{L}\p{N}]+[\r\n]*
			f2 := f
			if c == ' ' {
				f2 = cls0(pos + 1)
			}
			if !isSpace(f2) && !isLetter(f2) && !isNumber(f2) {
				if c == ' ' {
					pos++
				}
				for f2 != 0 && !isSpace(f2) && !isLetter(f2) && !isNumber(f2) {
					pos++
					f2 = cls0(pos)
				}
				for c2 := cp0(pos); c2 == '\r' || c2 == '\n'; c2 = cp0(pos) {
					pos++
				}
				g.emit(pos)
				continue
			}
			ws, lastNL := 0, -1
			for isSpace(cls0(pos + ws)) {
				if c2 := cps[pos+ws]; c2 == '\r' || c2 == '\n' {
					lastNL = pos + ws + 1
				}
				ws++
			}
			switch {
			case lastNL >= 0: // \s*[\r\n]+
				pos = lastNL
				g.emit(pos)
			case ws > 1 && pos+ws < hi: // \s+(?!\S)
				pos += ws - 1
				g.emit(pos)
			case ws > 0: // \s+
				pos += ws
				g.emit(pos)
			default:
				pos++
				g.emit(pos)
			}
		}
	}
	return g.out
}

// digitSplitter implements \p{N}: every number code point on its own, the
// runs between them as they are.
type digitSplitter struct{}

func (digitSplitter) split(s *splitText, segs, out []int) []int {
	start := 0
	for _, n := range segs {
		run := 0
		for p := start; p < start+n; p++ {
			if !isNumber(s.cls[p]) {
				run++
				continue
			}
			if run > 0 {
				out = append(out, run)
				run = 0
			}
			out = append(out, 1)
		}
		if run > 0 {
			out = append(out, run)
		}
		start += n
	}
	return out
}

// regexSplitter matches a pre-tokenizer expression with a backtracking
// regex engine the way llama.cpp's std::regex fallback does. An expression
// that uses \p{N}, \p{L}, \p{P}, \p{M} or \p{S} is matched against the
// collapsed text, where each non-ASCII code point stands in as one
// character of its class and the class escapes are rewritten to match those
// stand-ins plus the ASCII members llama.cpp assigns them (which leave out,
// for example, '~' from \p{S}). Other expressions are matched against the
// code points, non-ASCII whitespace turned into \v.
type regexSplitter struct {
	re        *regexp2.Regexp
	collapsed bool
}

var categoryEscapes = []struct {
	esc   string
	stand rune
	ascii string
}{
	{`\p{N}`, collapsedNumber, `0-9`},
	{`\p{L}`, collapsedLetter, `A-Za-z`},
	{`\p{P}`, collapsedPunct, `!-#%-*,-/:-;?-@\[-\]_\{\}`},
	{`\p{M}`, collapsedMark, ``},
	{`\p{S}`, collapsedSymbol, `\$\+<->^` + "`" + `\|`},
}

func newRegexSplitter(expr string) (splitter, error) {
	collapsed := false
	for _, c := range categoryEscapes {
		if strings.Contains(expr, c.esc) {
			collapsed = true
		}
	}
	pattern := expr
	if collapsed {
		for _, r := range expr {
			if r >= 0x80 {
				return nil, fmt.Errorf("expression %q mixes Unicode categories and non-ASCII characters", expr)
			}
		}
		pattern = collapsePattern(expr)
	}
	pattern = anchorEnd(pattern)
	re, err := regexp2.Compile(pattern, regexp2.None, regexp2.OptionMaxBacktrackingStackSize(-1))
	if err != nil {
		return nil, fmt.Errorf("compile %q: %w", expr, err)
	}
	return &regexSplitter{re: re, collapsed: collapsed}, nil
}

// collapsePattern rewrites the category escapes of expr for the collapsed
// text, tracking bracket expressions the way llama.cpp does (a '[' or ']'
// preceded by a backslash does not count).
func collapsePattern(expr string) string {
	var b strings.Builder
	inside := false
	for i := 0; i < len(expr); i++ {
		c := expr[i]
		if c == '[' && (i == 0 || expr[i-1] != '\\') {
			b.WriteByte('[')
			inside = true
			continue
		}
		if inside && c == ']' && expr[i-1] != '\\' {
			b.WriteByte(']')
			inside = false
			continue
		}
		if c == '\\' && i+4 < len(expr) && expr[i+1] == 'p' && expr[i+2] == '{' && expr[i+4] == '}' {
			if k := categoryIndex(expr[i : i+5]); k >= 0 {
				if !inside {
					b.WriteByte('[')
				}
				b.WriteRune(categoryEscapes[k].stand)
				b.WriteString(categoryEscapes[k].ascii)
				if !inside {
					b.WriteByte(']')
				}
				i += 4
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

func categoryIndex(esc string) int {
	for k, c := range categoryEscapes {
		if c.esc == esc {
			return k
		}
	}
	return -1
}

// anchorEnd turns each unescaped '$' outside brackets into \z: in the
// ECMAScript grammar llama.cpp uses, $ matches only at the very end, while
// in regexp2's default grammar it also matches before a final newline.
func anchorEnd(p string) string {
	if !strings.Contains(p, "$") {
		return p
	}
	var b strings.Builder
	inside := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p):
			b.WriteByte(c)
			b.WriteByte(p[i+1])
			i++
			continue
		case c == '[':
			inside = true
		case c == ']':
			inside = false
		case c == '$' && !inside:
			b.WriteString(`\z`)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func (r *regexSplitter) split(s *splitText, segs, out []int) []int {
	var runes []rune
	if r.collapsed {
		runes = s.collapsedRunes()
	} else {
		runes = s.wideRunes()
	}
	start := 0
	for _, n := range segs {
		seg := runes[start : start+n]
		start += n
		matches, err := r.re.FindAllRunesIndex(seg, -1)
		if err != nil {
			// Only a resource limit can fail here; keep the segment whole.
			out = append(out, n)
			continue
		}
		prev := 0
		for _, m := range matches {
			if m[0] > prev {
				out = append(out, m[0]-prev)
			}
			if m[1] > m[0] {
				out = append(out, m[1]-m[0])
			}
			prev = m[1]
		}
		if prev < n {
			out = append(out, n-prev)
		}
	}
	return out
}
