// Package pyjson writes JSON the way Python's json.dumps does, which chat
// templates (rendered as by Jinja2 in Python) and the tool calls models were
// trained on use: strings with json.dumps' escapes, floats as Python's repr.
// Both chat template rendering and the output parser need it.
package pyjson

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of JSON accepted from clients and models
// (tool schemas, tool-call arguments, extra context), so that a hostile
// document cannot exhaust the stack.
const MaxDepth = 256

// WriteString writes s quoted the way json.dumps does: the two-character
// escapes for \" \\ \n \r \t \b \f, \u00XX for other control characters, and
// with ensureASCII \uXXXX (surrogate pairs above U+FFFF) for DEL and
// non-ASCII.
// Bytes that are not UTF-8 (a Python string cannot hold them) are written as
// they are.
func WriteString(b *strings.Builder, s string, ensureASCII bool) {
	const hex = "0123456789abcdef"
	u4 := func(r rune) {
		b.WriteString(`\u`)
		b.WriteByte(hex[r>>12&15])
		b.WriteByte(hex[r>>8&15])
		b.WriteByte(hex[r>>4&15])
		b.WriteByte(hex[r&15])
	}
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch c {
			case '"':
				b.WriteString(`\"`)
			case '\\':
				b.WriteString(`\\`)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			default:
				if c < 0x20 || c == 0x7f && ensureASCII {
					u4(rune(c))
				} else {
					b.WriteByte(c)
				}
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteByte(c)
		case ensureASCII && r > 0xFFFF:
			r -= 0x10000
			u4(0xD800 + r>>10)
			u4(0xDC00 + r&0x3FF)
		case ensureASCII:
			u4(r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	b.WriteByte('"')
}

// Float formats f as Python's repr (which json.dumps uses): the shortest
// digits that round-trip, positional for exponents -4 ≤ e < 16 with at least
// one digit after the point, scientific otherwise ("1e-05", "1e+16").
func Float(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, expStr, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expStr)
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimPrefix(mant, "-")
	digits := strings.Replace(mant, ".", "", 1)
	var out string
	if exp < -4 || exp >= 16 {
		out = digits[:1]
		if len(digits) > 1 {
			out += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		out += fmt.Sprintf("e%s%02d", sign, exp)
	} else if exp < 0 {
		out = "0." + strings.Repeat("0", -exp-1) + digits
	} else if len(digits) <= exp+1 {
		out = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
	} else {
		out = digits[:exp+1] + "." + digits[exp+1:]
	}
	if neg {
		out = "-" + out
	}
	return out
}
