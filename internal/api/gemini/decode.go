package gemini

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/kvserve/kvserve/internal/api"
)

// decodeBody reads the request body and decodes it into v after
// normalizing its field names (see normalizeKeys).
func decodeBody(r *http.Request, v any) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return api.AsError(err)
		}
		return &api.Error{Code: api.CodeInvalidRequest, Message: "could not read the request body", Err: err}
	}
	return decodeBytes(body, v)
}

// decodeBytes is decodeBody on a body already read. Bodies that are not
// valid JSON are decoded as they are, so the error names the fault.
func decodeBytes(body []byte, v any) error {
	if json.Valid(body) && len(body) > 0 {
		if err := checkDepth(body); err != nil {
			return err
		}
		if norm, err := normalizeKeys(body); err == nil {
			body = norm
		}
	}
	return api.DecodeJSONBytes(body, v)
}

// checkDepth refuses bodies nested deeper than api.MaxJSONDepth before the
// recursive normalizer walks them (api.DecodeJSONBytes checks again).
func checkDepth(body []byte) error {
	depth, inString, escaped := 0, false, false
	for _, c := range body {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > api.MaxJSONDepth {
				return api.Errorf(api.CodeInvalidRequest, "JSON nested deeper than %d levels", api.MaxJSONDepth)
			}
		case '}', ']':
			depth--
		}
	}
	return nil
}

// freeForm are the fields whose values are the client's own data (function
// arguments and results, JSON Schemas, the kvserve extension with its
// snake_case keys, schema annotations): their keys are kept as sent.
var freeForm = map[string]bool{
	"args": true, "response": true, "parametersJsonSchema": true, "responseJsonSchema": true,
	"kvserve": true, "example": true, "default": true, "partMetadata": true,
}

// normalizeKeys rewrites the object keys of a Gemini request from the
// proto's snake_case (system_instruction, function_declarations) to the
// lowerCamelCase the structs are tagged with, as Google's JSON parser
// accepts both. Values under freeForm keys are copied as they are, and so
// are the property names of a schema's properties (their values are
// schemas and are normalized). Key order is kept: it is the order of a
// tool's parameters in the prompt.
func normalizeKeys(body []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	out := make([]byte, 0, len(body)+16)
	out, err := normValue(dec, out, false)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// normValue copies the next value of dec to out, renaming keys.
// propertyNames says the value is a schema's properties map.
func normValue(dec *json.Decoder, out []byte, propertyNames bool) ([]byte, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			out = append(out, '{')
			first := true
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := kt.(string)
				if !first {
					out = append(out, ',')
				}
				first = false
				if !propertyNames {
					key = camelCase(key)
				}
				out = api.AppendJSONString(out, key)
				out = append(out, ':')
				if !propertyNames && freeForm[key] {
					var raw json.RawMessage
					if err := dec.Decode(&raw); err != nil {
						return nil, err
					}
					out = append(out, raw...)
					continue
				}
				if out, err = normValue(dec, out, !propertyNames && key == "properties"); err != nil {
					return nil, err
				}
			}
			if _, err := dec.Token(); err != nil { // '}'
				return nil, err
			}
			return append(out, '}'), nil
		case '[':
			out = append(out, '[')
			first := true
			for dec.More() {
				if !first {
					out = append(out, ',')
				}
				first = false
				if out, err = normValue(dec, out, false); err != nil {
					return nil, err
				}
			}
			if _, err := dec.Token(); err != nil { // ']'
				return nil, err
			}
			return append(out, ']'), nil
		}
	case string:
		return api.AppendJSONString(out, t), nil
	case json.Number:
		return append(out, t...), nil
	case bool:
		if t {
			return append(out, "true"...), nil
		}
		return append(out, "false"...), nil
	case nil:
		return append(out, "null"...), nil
	}
	return nil, errors.New("gemini: unexpected JSON token")
}

// camelCase turns snake_case into lowerCamelCase ("system_instruction" →
// "systemInstruction"); keys without an inner underscore are unchanged.
func camelCase(s string) string {
	i := strings.IndexByte(s, '_')
	if i <= 0 || i == len(s)-1 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	up := false
	for j := 0; j < len(s); j++ {
		c := s[j]
		if c == '_' && j > 0 && j < len(s)-1 {
			up = true
			continue
		}
		if up && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		up = false
		b.WriteByte(c)
	}
	return b.String()
}

// repeated decodes a repeated field given either as an array or, as
// Google's parser allows, as a single value.
type repeated[T any] []T

func (r *repeated[T]) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case string(b) == "null":
		*r = nil
		return nil
	case len(b) > 0 && b[0] == '[':
		var many []T
		if err := json.Unmarshal(b, &many); err != nil {
			return err
		}
		*r = many
		return nil
	}
	var one T
	if err := json.Unmarshal(b, &one); err != nil {
		return err
	}
	*r = repeated[T]{one}
	return nil
}
