package chat

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/ardanlabs/jinja"

	"github.com/kvserve/kvserve/internal/chat/pyjson"
)

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
	if depth > pyjson.MaxDepth {
		return jinja.Undefined(), fmt.Errorf("JSON nested deeper than %d", pyjson.MaxDepth)
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
	if depth > pyjson.MaxDepth {
		return fmt.Errorf("tojson: value nested deeper than %d", pyjson.MaxDepth)
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
		b.WriteString(pyjson.Float(v.AsFloat()))
	case v.IsString():
		pyjson.WriteString(b, v.AsString(), o.ensureASCII)
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
			pyjson.WriteString(b, k, o.ensureASCII)
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
