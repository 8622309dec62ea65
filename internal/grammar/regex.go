package grammar

import (
	"fmt"
	"regexp/syntax"
	"slices"
	"unicode"
	"unicode/utf8"
)

// formatPatterns are the JSON Schema formats the grammar enforces, as
// anchored regular expressions over the decoded string. They generate a
// subset of each format (dates never use February 29, times no leap
// second), so every output parses.
var formatPatterns = func() map[string]string {
	const (
		date     = `\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)|02-(?:0[1-9]|1\d|2[0-8]))`
		time     = `(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d{1,9})?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)`
		label    = `[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?`
		local    = "[A-Za-z0-9!#$%&'*+/=?^_{|}~-]+"
		octet    = `(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)`
		hex      = `[0-9a-fA-F]`
		hostname = label + `(?:\.` + label + `)*`
	)
	return map[string]string{
		"date":      "^" + date + "$",
		"time":      "^" + time + "$",
		"date-time": "^" + date + "T" + time + "$",
		"uuid":      "^" + hex + "{8}-" + hex + "{4}-" + hex + "{4}-" + hex + "{4}-" + hex + "{12}$",
		"email":     "^" + local + `(?:\.` + local + `)*@` + label + `(?:\.` + label + `)+$`,
		"hostname":  "^" + hostname + "$",
		"ipv4":      "^(?:" + octet + `\.){3}` + octet + "$",
	}
}()

// patternNode compiles a JSON Schema pattern into a node matching the
// JSON-encoded contents (between the quotes) of the strings it matches.
// Patterns are unanchored as in JSON Schema: without ^ and $ the match may
// sit anywhere in the string.
func patternNode(pattern string) (*node, error) {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return nil, err
	}
	return anchored(re)
}

// anchored handles the top level of a pattern, where ^ and $ may appear.
func anchored(re *syntax.Regexp) (*node, error) {
	if re.Op == syntax.OpAlternate {
		alts := make([]*node, len(re.Sub))
		for i, s := range re.Sub {
			n, err := anchored(s)
			if err != nil {
				return nil, err
			}
			alts[i] = n
		}
		return alt(alts...), nil
	}
	subs := []*syntax.Regexp{re}
	if re.Op == syntax.OpConcat {
		subs = re.Sub
	}
	atStart, atEnd := false, false
	if len(subs) > 0 && (subs[0].Op == syntax.OpBeginText || subs[0].Op == syntax.OpBeginLine) {
		atStart, subs = true, subs[1:]
	}
	if len(subs) > 0 && (subs[len(subs)-1].Op == syntax.OpEndText || subs[len(subs)-1].Op == syntax.OpEndLine) {
		atEnd, subs = true, subs[:len(subs)-1]
	}
	parts := make([]*node, 0, len(subs)+2)
	anything := repeat(jsonChar(), 0, -1)
	if !atStart {
		parts = append(parts, anything)
	}
	for _, s := range subs {
		n, err := regexNode(s)
		if err != nil {
			return nil, err
		}
		parts = append(parts, n)
	}
	if !atEnd {
		parts = append(parts, anything)
	}
	return seq(parts...), nil
}

func regexNode(re *syntax.Regexp) (*node, error) {
	switch re.Op {
	case syntax.OpNoMatch:
		return neverNode, nil
	case syntax.OpEmptyMatch:
		return emptyNode, nil
	case syntax.OpLiteral:
		parts := make([]*node, len(re.Rune))
		for i, r := range re.Rune {
			if re.Flags&syntax.FoldCase != 0 {
				var ranges [][2]rune
				for f := r; ; {
					ranges = append(ranges, [2]rune{f, f})
					if f = unicode.SimpleFold(f); f == r {
						break
					}
				}
				parts[i] = charClassNode(ranges)
			} else {
				parts[i] = charClassNode([][2]rune{{r, r}})
			}
		}
		return seq(parts...), nil
	case syntax.OpCharClass:
		var ranges [][2]rune
		for i := 0; i+1 < len(re.Rune); i += 2 {
			ranges = append(ranges, [2]rune{re.Rune[i], re.Rune[i+1]})
		}
		return charClassNode(ranges), nil
	case syntax.OpAnyChar:
		return jsonChar(), nil
	case syntax.OpAnyCharNotNL:
		return charClassNode([][2]rune{{0, '\n' - 1}, {'\n' + 1, unicode.MaxRune}}), nil
	case syntax.OpCapture:
		return regexNode(re.Sub[0])
	case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
		x, err := regexNode(re.Sub[0])
		if err != nil {
			return nil, err
		}
		switch re.Op {
		case syntax.OpStar:
			return repeat(x, 0, -1), nil
		case syntax.OpPlus:
			return repeat(x, 1, -1), nil
		case syntax.OpQuest:
			return opt(x), nil
		}
		return repeat(x, re.Min, re.Max), nil
	case syntax.OpConcat, syntax.OpAlternate:
		kids := make([]*node, len(re.Sub))
		for i, s := range re.Sub {
			n, err := regexNode(s)
			if err != nil {
				return nil, err
			}
			kids[i] = n
		}
		if re.Op == syntax.OpConcat {
			return seq(kids...), nil
		}
		return alt(kids...), nil
	}
	return nil, fmt.Errorf("%s is supported only at the start or end of the pattern", re)
}

// charClassNode matches the JSON encoding of one character from ranges:
// printable characters raw, '"', '\' and control characters as their
// escapes (one canonical form each).
func charClassNode(ranges [][2]rune) *node {
	var raw [][2]rune
	var alts []*node
	for _, rg := range ranges {
		lo, hi := rg[0], min(rg[1], unicode.MaxRune)
		for r := lo; r <= hi && r < 0x20; r++ {
			alts = append(alts, lit(escapeRune(r)))
		}
		if hi >= 0x20 {
			raw = append(raw, [2]rune{max(lo, 0x20), hi})
		}
	}
	for _, special := range []rune{'"', '\\'} {
		if inRanges(raw, special) {
			alts = append(alts, lit(escapeRune(special)))
			raw = subtractRune(raw, special)
		}
	}
	alts = append(alts, runeClassNode(raw))
	return alt(alts...)
}

func inRanges(ranges [][2]rune, r rune) bool {
	for _, rg := range ranges {
		if rg[0] <= r && r <= rg[1] {
			return true
		}
	}
	return false
}

// escapeRune returns r's JSON string encoding (without quotes).
func escapeRune(r rune) string {
	s := jsonQuote(string(r))
	return s[1 : len(s)-1]
}

// runeClassNode matches the UTF-8 encoding of one code point in ranges
// (surrogates excluded), as byte-class sequences.
func runeClassNode(ranges [][2]rune) *node {
	ranges = slices.Clone(ranges)
	slices.SortFunc(ranges, func(a, b [2]rune) int { return int(a[0] - b[0]) })
	var alts []*node
	for _, rg := range ranges {
		utf8Sequences(rg[0], min(rg[1], unicode.MaxRune), func(s [][2]byte) {
			parts := make([]*node, len(s))
			for i, b := range s {
				parts[i] = class(rangeSet(b[0], b[1]))
			}
			alts = append(alts, seq(parts...))
		})
	}
	return alt(alts...)
}

// utf8Sequences calls emit with byte-range sequences whose concatenated
// matches are exactly the UTF-8 encodings of the code points in [lo, hi]:
// the range is split where the encoding length changes, around the
// surrogates, and until each continuation byte spans a full or aligned
// range.
func utf8Sequences(lo, hi rune, emit func([][2]byte)) {
	if lo > hi || lo < 0 {
		return
	}
	if lo <= 0xdfff && hi >= 0xd800 {
		if lo < 0xd800 {
			utf8Sequences(lo, 0xd7ff, emit)
		}
		if hi > 0xdfff {
			utf8Sequences(0xe000, hi, emit)
		}
		return
	}
	for _, m := range []rune{0x7f, 0x7ff, 0xffff} {
		if lo <= m && m < hi {
			utf8Sequences(lo, m, emit)
			utf8Sequences(m+1, hi, emit)
			return
		}
	}
	if hi < 0x80 {
		emit([][2]byte{{byte(lo), byte(hi)}})
		return
	}
	for i := 1; i < 4; i++ {
		m := rune(1)<<(6*i) - 1
		if lo&^m != hi&^m {
			if lo&m != 0 {
				utf8Sequences(lo, lo|m, emit)
				utf8Sequences((lo|m)+1, hi, emit)
				return
			}
			if hi&m != m {
				utf8Sequences(lo, (hi&^m)-1, emit)
				utf8Sequences(hi&^m, hi, emit)
				return
			}
		}
	}
	a := utf8.AppendRune(nil, lo)
	b := utf8.AppendRune(nil, hi)
	s := make([][2]byte, len(a))
	for i := range a {
		s[i] = [2]byte{a[i], b[i]}
	}
	emit(s)
}
