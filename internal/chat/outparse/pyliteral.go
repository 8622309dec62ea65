package outparse

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/kvserve/kvserve/internal/chat/pyjson"
)

// Some models write tool calls as Python literals rather than JSON: Hermes
// 2 Pro's own documentation shows <tool_call>{'arguments': {'symbol':
// 'TSLA'}, 'name': 'get_stock_fundamentals'}</tool_call>, and Llama 3.1's
// built-in calls are Python calls, brave_search.call(query="…"). pyReader
// reads such literals (dicts, lists, tuples, strings, numbers, True, False,
// None) and writes them as JSON, the way json.dumps(ast.literal_eval(x))
// would, except that non-ASCII text stays as it is.

type pyStatus uint8

const (
	pyOK   pyStatus = iota
	pyMore          // the input ended inside the literal
	pyBad           // not a literal this reader accepts
)

type pyReader struct {
	s string
	i int
}

// pyField is one key of a dict read at the top level, with its value as
// JSON.
type pyField struct {
	key, json string
}

func (r *pyReader) space() {
	r.i += skipSpace(r.s[r.i:])
}

// dict reads a dict at the top level and returns its fields.
func (r *pyReader) dict() ([]pyField, pyStatus) {
	r.space()
	if r.i >= len(r.s) {
		return nil, pyMore
	}
	if r.s[r.i] != '{' {
		return nil, pyBad
	}
	r.i++
	var fields []pyField
	for {
		r.space()
		if r.i >= len(r.s) {
			return nil, pyMore
		}
		if r.s[r.i] == '}' {
			r.i++
			return fields, pyOK
		}
		if len(fields) > 0 {
			if r.s[r.i] != ',' {
				return nil, pyBad
			}
			r.i++
			r.space()
			if r.i < len(r.s) && r.s[r.i] == '}' {
				r.i++
				return fields, pyOK
			}
		}
		var key strings.Builder
		if st := r.str(&key); st != pyOK {
			return nil, st
		}
		var k string
		if err := unquoteJSON(key.String(), &k); err != nil {
			return nil, pyBad
		}
		r.space()
		if r.i >= len(r.s) {
			return nil, pyMore
		}
		if r.s[r.i] != ':' {
			return nil, pyBad
		}
		r.i++
		var v strings.Builder
		if st := r.value(&v, 1); st != pyOK {
			return nil, st
		}
		fields = append(fields, pyField{k, v.String()})
	}
}

// value reads one literal and writes it as JSON.
func (r *pyReader) value(b *strings.Builder, depth int) pyStatus {
	if depth > pyjson.MaxDepth {
		return pyBad
	}
	r.space()
	if r.i >= len(r.s) {
		return pyMore
	}
	switch c := r.s[r.i]; {
	case c == '{':
		r.i++
		b.WriteByte('{')
		for n := 0; ; n++ {
			r.space()
			if r.i >= len(r.s) {
				return pyMore
			}
			if r.s[r.i] == '}' {
				r.i++
				b.WriteByte('}')
				return pyOK
			}
			if n > 0 {
				if r.s[r.i] != ',' {
					return pyBad
				}
				r.i++
				r.space()
				if r.i < len(r.s) && r.s[r.i] == '}' {
					r.i++
					b.WriteByte('}')
					return pyOK
				}
				b.WriteString(", ")
			}
			if st := r.str(b); st != pyOK {
				return st
			}
			r.space()
			if r.i >= len(r.s) {
				return pyMore
			}
			if r.s[r.i] != ':' {
				return pyBad
			}
			r.i++
			b.WriteString(": ")
			if st := r.value(b, depth+1); st != pyOK {
				return st
			}
		}
	case c == '[' || c == '(':
		end := byte(']')
		if c == '(' {
			end = ')'
		}
		r.i++
		b.WriteByte('[')
		for n := 0; ; n++ {
			r.space()
			if r.i >= len(r.s) {
				return pyMore
			}
			if r.s[r.i] == end {
				r.i++
				b.WriteByte(']')
				return pyOK
			}
			if n > 0 {
				if r.s[r.i] != ',' {
					return pyBad
				}
				r.i++
				r.space()
				if r.i < len(r.s) && r.s[r.i] == end {
					r.i++
					b.WriteByte(']')
					return pyOK
				}
				b.WriteString(", ")
			}
			if st := r.value(b, depth+1); st != pyOK {
				return st
			}
		}
	case c == '\'' || c == '"':
		return r.str(b)
	case c == '-' || c == '+' || c >= '0' && c <= '9' || c == '.':
		j := r.i
		for j < len(r.s) && (r.s[j] >= '0' && r.s[j] <= '9' || strings.IndexByte("+-.eE", r.s[j]) >= 0) {
			j++
		}
		if j == len(r.s) {
			return pyMore
		}
		num := strings.TrimPrefix(r.s[r.i:j], "+")
		r.i = j
		if validJSONNumber(num) {
			b.WriteString(num)
			return pyOK
		}
		// Python floats JSON lacks: "1.", ".5".
		if f, err := strconv.ParseFloat(num, 64); err == nil && strings.Contains(num, ".") && !strings.ContainsAny(num, "xXnN_") {
			b.WriteString(pyjson.Float(f))
			return pyOK
		}
		return pyBad
	default:
		j := r.i
		for j < len(r.s) && isIdent(r.s[j]) {
			j++
		}
		word := r.s[r.i:j]
		for _, kw := range [...][2]string{{"True", "true"}, {"False", "false"}, {"None", "null"}} {
			if word == kw[0] && j < len(r.s) {
				r.i = j
				b.WriteString(kw[1])
				return pyOK
			}
			if j == len(r.s) && strings.HasPrefix(kw[0], word) {
				return pyMore
			}
		}
	}
	return pyBad
}

// validJSONNumber reports whether s is a JSON number.
func validJSONNumber(s string) bool {
	var sc jsonScan
	sc.reset()
	for i := 0; i < len(s); i++ {
		if r := sc.step(s[i]); r != scanMore {
			return false
		}
	}
	return sc.complete()
}

// str reads a quoted Python string and writes it as a JSON string.
func (r *pyReader) str(b *strings.Builder) pyStatus {
	if r.i >= len(r.s) {
		return pyMore
	}
	q := r.s[r.i]
	if q != '\'' && q != '"' {
		return pyBad
	}
	var v []byte
	for j := r.i + 1; j < len(r.s); j++ {
		c := r.s[j]
		switch {
		case c == q:
			r.i = j + 1
			pyjson.WriteString(b, string(v), false)
			return pyOK
		case c == '\n':
			return pyBad
		case c != '\\':
			v = append(v, c)
			continue
		}
		if j+1 >= len(r.s) {
			return pyMore
		}
		j++
		switch e := r.s[j]; e {
		case '\\', '\'', '"':
			v = append(v, e)
		case 'n':
			v = append(v, '\n')
		case 't':
			v = append(v, '\t')
		case 'r':
			v = append(v, '\r')
		case 'b':
			v = append(v, '\b')
		case 'f':
			v = append(v, '\f')
		case '0':
			v = append(v, 0)
		case 'x', 'u', 'U':
			n := 2
			if e == 'u' {
				n = 4
			} else if e == 'U' {
				n = 8
			}
			if j+n >= len(r.s) {
				return pyMore
			}
			x, err := strconv.ParseUint(r.s[j+1:j+1+n], 16, 32)
			if err != nil || x > utf8.MaxRune {
				return pyBad
			}
			v = utf8.AppendRune(v, rune(x))
			j += n
		case '\n':
		default:
			v = append(v, '\\', e)
		}
	}
	return pyMore
}

// unquoteJSON decodes a JSON string literal written by writeJSONString.
func unquoteJSON(lit string, out *string) error {
	if len(lit) < 2 {
		return strconv.ErrSyntax
	}
	*out = decodeString(lit[1 : len(lit)-1])
	return nil
}
