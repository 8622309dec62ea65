package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// jnode is a parsed JSON value that keeps object members in document order
// (encoding/json's maps do not, and a schema's property order is the order
// the output must follow).
type jnode struct {
	kind  byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' bool, 'z' null
	str   string
	b     bool
	items []*jnode
	keys  []string
	vals  []*jnode
}

// maxSchemaNesting bounds the nesting of a schema document.
const maxSchemaNesting = 256

// parseJSON parses one JSON document.
func parseJSON(data []byte) (*jnode, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := parseValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("data after the JSON value")
	}
	return n, nil
}

func parseValue(dec *json.Decoder, depth int) (*jnode, error) {
	if depth > maxSchemaNesting {
		return nil, fmt.Errorf("nested deeper than %d", maxSchemaNesting)
	}
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &jnode{kind: 'o'}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("object key is not a string")
				}
				v, err := parseValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, k)
				n.vals = append(n.vals, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return n, nil
		case '[':
			n := &jnode{kind: 'a'}
			for dec.More() {
				v, err := parseValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				n.items = append(n.items, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return n, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case string:
		return &jnode{kind: 's', str: t}, nil
	case json.Number:
		return &jnode{kind: 'n', str: string(t)}, nil
	case bool:
		return &jnode{kind: 'b', b: t}, nil
	case nil:
		return &jnode{kind: 'z'}, nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

// get returns the value of member k (the last one, as JSON parsers do).
func (n *jnode) get(k string) *jnode {
	if n == nil || n.kind != 'o' {
		return nil
	}
	for i := len(n.keys) - 1; i >= 0; i-- {
		if n.keys[i] == k {
			return n.vals[i]
		}
	}
	return nil
}

// encode appends the compact JSON encoding of n (members in order, numbers
// as written, strings without HTML escaping).
func (n *jnode) encode(dst []byte) []byte {
	switch n.kind {
	case 'o':
		dst = append(dst, '{')
		for i, k := range n.keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, jsonQuote(k)...)
			dst = append(dst, ':')
			dst = n.vals[i].encode(dst)
		}
		return append(dst, '}')
	case 'a':
		dst = append(dst, '[')
		for i, v := range n.items {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = v.encode(dst)
		}
		return append(dst, ']')
	case 's':
		return append(dst, jsonQuote(n.str)...)
	case 'n':
		return append(dst, n.str...)
	case 'b':
		if n.b {
			return append(dst, "true"...)
		}
		return append(dst, "false"...)
	}
	return append(dst, "null"...)
}

// typeName is the JSON Schema type of n ("integer" for integral numbers).
func (n *jnode) typeName() string {
	switch n.kind {
	case 'o':
		return "object"
	case 'a':
		return "array"
	case 's':
		return "string"
	case 'n':
		if isIntegral(n.str) {
			return "integer"
		}
		return "number"
	case 'b':
		return "boolean"
	}
	return "null"
}

// isIntegral reports whether the JSON number text s has an integer value
// (1, 1.0 and 1e2 do; 1.5 does not).
func isIntegral(s string) bool {
	s = strings.TrimPrefix(s, "-")
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant = s[:i]
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil {
			// An exponent beyond int range: huge magnitudes are integers,
			// tiny ones are not (unless the mantissa is zero).
			return !strings.HasPrefix(s[i+1:], "-") || strings.Trim(mant, "0.") == ""
		}
		exp = max(min(e, 1<<30), -1<<30)
	}
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		return true // zero
	}
	zeros := len(digits) - len(strings.TrimRight(digits, "0"))
	return zeros >= len(frac)-exp
}

// describe renders a short form of n for error messages.
func (n *jnode) describe() string {
	s := string(n.encode(nil))
	if len(s) > 40 {
		s = s[:37] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}
