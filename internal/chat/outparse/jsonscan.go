package outparse

import (
	"unicode/utf16"
	"unicode/utf8"

	"github.com/kvserve/kvserve/internal/chat/pyjson"
)

// jsonScan is an incremental JSON syntax checker: it is fed one byte at a
// time and says when one JSON value ends, without building anything. The
// stream parser uses it to find where a tool call's arguments end while
// passing their bytes through as they arrive, and to skip values it does not
// need (a call's "id", say). It accepts exactly RFC 8259 JSON: no raw
// control characters in strings, no trailing commas, no NaN.
type jsonScan struct {
	stack []byte // open containers: '{' or '['
	st    scanState
	lit   string // the rest of true/false/null still expected
	nhex  int    // hex digits still expected in a \u escape
	depth int    // maximum nesting
}

type scanState uint8

const (
	scValue    scanState = iota // expecting a value (leading space allowed)
	scArrFirst                  // after '[': a value or ']'
	scObjFirst                  // after '{': a key or '}'
	scObjKey                    // after ',' in an object: a key
	scKey                       // inside a key string
	scKeyEsc                    // after '\' in a key
	scKeyHex                    // inside \uXXXX in a key
	scColon                     // after a key: ':'
	scStr                       // inside a string value
	scStrEsc                    // after '\' in a string
	scStrHex                    // inside \uXXXX in a string
	scAfter                     // after a value inside a container: ',' or the close
	scLit                       // inside true/false/null
	scNumMinus                  // after '-'
	scNumZero                   // after a leading 0
	scNumInt                    // in the integer digits
	scNumDot                    // after '.'
	scNumFrac                   // in the fraction digits
	scNumE                      // after 'e'
	scNumESign                  // after 'e+' or 'e-'
	scNumExp                    // in the exponent digits
	scDone                      // the value is complete
	scErr                       // the input is not JSON
)

// scanResult is what one byte did to the scan.
type scanResult uint8

const (
	scanMore   scanResult = iota // the byte belongs to the value, which goes on
	scanEnd                      // the byte completed the value
	scanBefore                   // the value ended just before this byte (a number); the byte is not part of it
	scanError                    // the byte cannot continue the value
)

func (s *jsonScan) reset() {
	s.stack = s.stack[:0]
	s.st = scValue
	s.lit = ""
	s.nhex = 0
	if s.depth == 0 {
		s.depth = pyjson.MaxDepth
	}
}

// complete reports whether the value is complete if the input ends here: a
// top-level number is complete only at the end of the input.
func (s *jsonScan) complete() bool {
	switch s.st {
	case scDone:
		return true
	case scNumZero, scNumInt, scNumFrac, scNumExp:
		return len(s.stack) == 0
	}
	return false
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// valueDone moves past a completed value.
func (s *jsonScan) valueDone() scanResult {
	if len(s.stack) == 0 {
		s.st = scDone
		return scanEnd
	}
	s.st = scAfter
	return scanMore
}

// step feeds one byte.
func (s *jsonScan) step(c byte) scanResult {
	switch s.st {
	case scValue, scArrFirst:
		if isSpace(c) {
			return scanMore
		}
		if s.st == scArrFirst && c == ']' {
			s.stack = s.stack[:len(s.stack)-1]
			return s.valueDone()
		}
		return s.startValue(c)
	case scObjFirst, scObjKey:
		switch {
		case isSpace(c):
			return scanMore
		case c == '"':
			s.st = scKey
			return scanMore
		case c == '}' && s.st == scObjFirst:
			s.stack = s.stack[:len(s.stack)-1]
			return s.valueDone()
		}
	case scKey, scStr:
		switch {
		case c == '"':
			if s.st == scKey {
				s.st = scColon
				return scanMore
			}
			return s.valueDone()
		case c == '\\':
			s.st++ // scKeyEsc / scStrEsc
			return scanMore
		case c >= 0x20:
			return scanMore
		}
	case scKeyEsc, scStrEsc:
		switch c {
		case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			s.st--
			return scanMore
		case 'u':
			s.st++ // scKeyHex / scStrHex
			s.nhex = 4
			return scanMore
		}
	case scKeyHex, scStrHex:
		if isHex(c) {
			s.nhex--
			if s.nhex == 0 {
				s.st -= 2
			}
			return scanMore
		}
	case scColon:
		if isSpace(c) {
			return scanMore
		}
		if c == ':' {
			s.st = scValue
			return scanMore
		}
	case scAfter:
		top := s.stack[len(s.stack)-1]
		switch {
		case isSpace(c):
			return scanMore
		case c == ',':
			if top == '{' {
				s.st = scObjKey
			} else {
				s.st = scValue
			}
			return scanMore
		case c == '}' && top == '{', c == ']' && top == '[':
			s.stack = s.stack[:len(s.stack)-1]
			return s.valueDone()
		}
	case scLit:
		if c == s.lit[0] {
			s.lit = s.lit[1:]
			if s.lit == "" {
				return s.valueDone()
			}
			return scanMore
		}
	case scNumMinus:
		switch {
		case c == '0':
			s.st = scNumZero
			return scanMore
		case c >= '1' && c <= '9':
			s.st = scNumInt
			return scanMore
		}
	case scNumZero, scNumInt:
		switch {
		case c >= '0' && c <= '9' && s.st == scNumInt:
			return scanMore
		case c == '.':
			s.st = scNumDot
			return scanMore
		case c == 'e' || c == 'E':
			s.st = scNumE
			return scanMore
		}
		return s.numberEnd(c)
	case scNumDot:
		if c >= '0' && c <= '9' {
			s.st = scNumFrac
			return scanMore
		}
	case scNumFrac:
		switch {
		case c >= '0' && c <= '9':
			return scanMore
		case c == 'e' || c == 'E':
			s.st = scNumE
			return scanMore
		}
		return s.numberEnd(c)
	case scNumE:
		switch {
		case c == '+' || c == '-':
			s.st = scNumESign
			return scanMore
		case c >= '0' && c <= '9':
			s.st = scNumExp
			return scanMore
		}
	case scNumESign:
		if c >= '0' && c <= '9' {
			s.st = scNumExp
			return scanMore
		}
	case scNumExp:
		if c >= '0' && c <= '9' {
			return scanMore
		}
		return s.numberEnd(c)
	}
	s.st = scErr
	return scanError
}

// feedObject feeds the bytes of a value that must be a JSON object, with
// spaces allowed around it, and returns how many were accepted before the
// first that cannot belong to it.
func (s *jsonScan) feedObject(b []byte) int {
	for i, c := range b {
		switch {
		case s.st == scDone || s.st == scValue && len(s.stack) == 0:
			if isSpace(c) {
				continue
			}
			if s.st == scDone || c != '{' {
				s.st = scErr
				return i
			}
		case s.st == scErr:
			return i
		}
		if s.step(c) == scanError {
			return i
		}
	}
	return len(b)
}

// numberEnd handles the byte after a complete number.
func (s *jsonScan) numberEnd(c byte) scanResult {
	if len(s.stack) == 0 {
		s.st = scDone
		return scanBefore
	}
	s.st = scAfter
	return s.step(c)
}

func (s *jsonScan) startValue(c byte) scanResult {
	switch {
	case c == '{' || c == '[':
		if len(s.stack) >= s.depth {
			break
		}
		s.stack = append(s.stack, c)
		if c == '{' {
			s.st = scObjFirst
		} else {
			s.st = scArrFirst
		}
		return scanMore
	case c == '"':
		s.st = scStr
		return scanMore
	case c == 't':
		s.st, s.lit = scLit, "rue"
		return scanMore
	case c == 'f':
		s.st, s.lit = scLit, "alse"
		return scanMore
	case c == 'n':
		s.st, s.lit = scLit, "ull"
		return scanMore
	case c == '-':
		s.st = scNumMinus
		return scanMore
	case c == '0':
		s.st = scNumZero
		return scanMore
	case c >= '1' && c <= '9':
		s.st = scNumInt
		return scanMore
	}
	s.st = scErr
	return scanError
}

// strDecoder decodes the inside of a JSON string incrementally (the opening
// quote already consumed), for tool names, object keys and arguments a model
// wrote as a string.
type strDecoder struct {
	hi rune // a high surrogate waiting for its low half, or 0
}

// decode appends the decoded form of the longest decodable prefix of s to
// out. It stops after the closing quote (end true), before an escape that s
// holds only part of (the caller waits for more input), or at a byte a JSON
// string cannot contain (bad true). n is the number of bytes of s used.
func (d *strDecoder) decode(s string, out []byte) (n int, _ []byte, end, bad bool) {
	for n < len(s) {
		c := s[n]
		switch {
		case c == '"':
			out = d.flush(out)
			return n + 1, out, true, false
		case c < 0x20:
			return n, out, false, true
		case c != '\\':
			out = d.flush(out)
			j := n + 1
			for j < len(s) && s[j] != '"' && s[j] != '\\' && s[j] >= 0x20 {
				j++
			}
			out = append(out, s[n:j]...)
			n = j
			continue
		}
		if n+1 >= len(s) {
			return n, out, false, false
		}
		var r rune
		size := 2
		switch s[n+1] {
		case '"', '\\', '/':
			r = rune(s[n+1])
		case 'b':
			r = '\b'
		case 'f':
			r = '\f'
		case 'n':
			r = '\n'
		case 'r':
			r = '\r'
		case 't':
			r = '\t'
		case 'u':
			if n+6 > len(s) {
				for _, h := range []byte(s[n+2:]) {
					if !isHex(h) {
						return n, out, false, true
					}
				}
				return n, out, false, false
			}
			for i := n + 2; i < n+6; i++ {
				if !isHex(s[i]) {
					return n, out, false, true
				}
				r = r<<4 | rune(hexVal(s[i]))
			}
			size = 6
		default:
			return n, out, false, true
		}
		n += size
		if utf16.IsSurrogate(r) {
			if r < 0xDC00 { // high half: wait for the low one
				out = d.flush(out)
				d.hi = r
				continue
			}
			if d.hi != 0 {
				out = utf8.AppendRune(out, utf16.DecodeRune(d.hi, r))
				d.hi = 0
				continue
			}
			r = utf8.RuneError
		}
		out = d.flush(out)
		out = utf8.AppendRune(out, r)
	}
	return n, out, false, false
}

// flush writes a lone high surrogate as U+FFFD, as Python does when decoding
// one into UTF-8 with errors replaced.
func (d *strDecoder) flush(out []byte) []byte {
	if d.hi != 0 {
		out = utf8.AppendRune(out, utf8.RuneError)
		d.hi = 0
	}
	return out
}

func hexVal(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
