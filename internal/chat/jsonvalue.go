package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// maxJSONDepth bounds the nesting of JSON accepted from clients (tool
// schemas, tool-call arguments, extra context).
const maxJSONDepth = 256

// parseJSON turns JSON text into a template value that keeps the text's key
// order: a tool schema must reach the prompt exactly as the client wrote it,
// or the same request would tokenize differently from one server to another
// (and miss the prefix cache). Integers stay integers (Python's json.dumps
// writes 7, not 7.0); other numbers become floats.
func parseJSON(data []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return jinja.Undefined(), err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Undefined(), errors.New("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (jinja.Value, error) {
	if depth > maxJSONDepth {
		return jinja.Undefined(), fmt.Errorf("JSON nested deeper than %d", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return jinja.Undefined(), err
	}
	switch t := tok.(type) {
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(t), nil
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		s := string(t)
		if !strings.ContainsAny(s, ".eE") {
			if i, err := strconv.ParseInt(s, 10, 64); err == nil {
				return jinja.NewInt(i), nil
			}
		}
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return jinja.Undefined(), err
		}
		return jinja.NewFloat(f), nil
	case json.Delim:
		switch t {
		case '[':
			var items []jinja.Value
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				items = append(items, v)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return jinja.Undefined(), err
			}
			return jinja.NewList(items), nil
		case '{':
			d := jinja.NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return jinja.Undefined(), err
				}
				k, _ := kt.(string)
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Undefined(), err
				}
				d.AsDict().Set(k, v)
			}
			if _, err := dec.Token(); err != nil { // '}'
				return jinja.Undefined(), err
			}
			return d, nil
		}
	}
	return jinja.Undefined(), fmt.Errorf("unexpected JSON token %v", tok)
}

// jsonOptions are the keyword arguments of Python's json.dumps that chat
// templates use.
type jsonOptions struct {
	indent      string // "" with hasIndent false: one line
	hasIndent   bool
	itemSep     string
	keySep      string
	sortKeys    bool
	ensureASCII bool
}

// tojsonFilter is the template's tojson filter with the semantics chat
// templates are written for: Hugging Face transformers replaces Jinja's own
// (which sorts keys and escapes HTML) by json.dumps(x, ensure_ascii=False,
// indent=indent, separators=separators, sort_keys=sort_keys). The jinja
// library's built-in follows that except for indent (sorted keys, escaped
// HTML) and floats; this one matches json.dumps byte for byte.
func tojsonFilter(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), errors.New("tojson: no value")
	}
	o := jsonOptions{itemSep: ", ", keySep: ": "}
	// Positional arguments after the value follow json.dumps' order for the
	// ones transformers exposes: ensure_ascii, indent, separators, sort_keys.
	names := []string{"ensure_ascii", "indent", "separators", "sort_keys"}
	opts := map[string]jinja.Value{}
	for i, a := range args[1:] {
		if i < len(names) {
			opts[names[i]] = a
		}
	}
	for k, v := range kwargs {
		opts[k] = v
	}
	if v, ok := opts["ensure_ascii"]; ok {
		o.ensureASCII = v.IsTruthy()
	}
	if v, ok := opts["sort_keys"]; ok {
		o.sortKeys = v.IsTruthy()
	}
	if v, ok := opts["indent"]; ok && !v.IsNone() && !v.IsUndefined() {
		o.hasIndent = true
		o.itemSep = ","
		switch {
		case v.IsInt():
			o.indent = strings.Repeat(" ", int(max(0, min(v.AsInt(), 64))))
		case v.IsString():
			o.indent = v.AsString()
		default:
			return jinja.Undefined(), fmt.Errorf("tojson: indent must be an integer or a string")
		}
	}
	if v, ok := opts["separators"]; ok && !v.IsNone() && !v.IsUndefined() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Get(0).IsString() || !v.AsList().Get(1).IsString() {
			return jinja.Undefined(), errors.New("tojson: separators must be two strings")
		}
		o.itemSep, o.keySep = v.AsList().Get(0).AsString(), v.AsList().Get(1).AsString()
	}
	var b strings.Builder
	if err := writeJSON(&b, args[0], &o, 0); err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(b.String()), nil
}

// writeJSON appends v as json.dumps would write it.
func writeJSON(b *strings.Builder, v jinja.Value, o *jsonOptions, depth int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("tojson: value nested deeper than %d", maxJSONDepth)
	}
	newline := func(level int) {
		if o.hasIndent {
			b.WriteByte('\n')
			for range level {
				b.WriteString(o.indent)
			}
		}
	}
	switch {
	case v.IsNone():
		b.WriteString("null")
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		b.WriteString(pyFloat(v.AsFloat()))
	case v.IsString():
		writeJSONString(b, v.AsString(), o.ensureASCII)
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, it := range items {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newline(depth + 1)
			if err := writeJSON(b, it, o, depth+1); err != nil {
				return err
			}
		}
		newline(depth)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		if d.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := d.Keys
		if o.sortKeys {
			keys = append([]string(nil), keys...)
			sort.Strings(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newline(depth + 1)
			writeJSONString(b, k, o.ensureASCII)
			b.WriteString(o.keySep)
			val, _ := d.Get(k)
			if err := writeJSON(b, val, o, depth+1); err != nil {
				return err
			}
		}
		newline(depth)
		b.WriteByte('}')
	case v.IsUndefined():
		return errors.New("tojson: value is undefined")
	default:
		return errors.New("tojson: value is not JSON serializable")
	}
	return nil
}

// writeJSONString writes s quoted the way json.dumps does: the two-character
// escapes for \" \\ \n \r \t \b \f, \u00XX for other control characters, and
// with ensureASCII \uXXXX (surrogate pairs above U+FFFF) for DEL and
// non-ASCII.
// Bytes that are not UTF-8 (a Python string cannot hold them) are written as
// they are.
func writeJSONString(b *strings.Builder, s string, ensureASCII bool) {
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

// pyFloat formats f as Python's repr (which json.dumps uses): the shortest
// digits that round-trip, positional for exponents -4 ≤ e < 16 with at least
// one digit after the point, scientific otherwise ("1e-05", "1e+16").
func pyFloat(f float64) string {
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
