package gemini

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"github.com/kvserve/kvserve/internal/api"
)

// schemaJSON is Gemini's Schema: the OpenAPI 3.0 subset that
// functionDeclarations[].parameters and generationConfig.responseSchema
// are written in. Fields outside it are refused, as Google refuses them
// ("Unknown name"), with a pointer to the *JsonSchema fields that take full
// JSON Schema; additionalProperties is accepted as well, since JSON-Schema
// generators write it.
type schemaJSON struct {
	Type                 string                    `json:"type"`
	Format               string                    `json:"format"`
	Title                string                    `json:"title"`
	Description          string                    `json:"description"`
	Nullable             bool                      `json:"nullable"`
	Enum                 []string                  `json:"enum"`
	Properties           orderedObject             `json:"properties"`
	PropertyOrdering     []string                  `json:"propertyOrdering"`
	Required             []string                  `json:"required"`
	Items                json.RawMessage           `json:"items"`
	AnyOf                repeated[json.RawMessage] `json:"anyOf"`
	MinItems             *int64s                   `json:"minItems"`
	MaxItems             *int64s                   `json:"maxItems"`
	MinLength            *int64s                   `json:"minLength"`
	MaxLength            *int64s                   `json:"maxLength"`
	MinProperties        *int64s                   `json:"minProperties"`
	MaxProperties        *int64s                   `json:"maxProperties"`
	Minimum              *float64s                 `json:"minimum"`
	Maximum              *float64s                 `json:"maximum"`
	Pattern              string                    `json:"pattern"`
	Default              json.RawMessage           `json:"default"`
	Example              json.RawMessage           `json:"example"`
	AdditionalProperties json.RawMessage           `json:"additionalProperties"`
}

// int64s is an int64 written as a JSON number or, as proto3 JSON writes
// int64 fields, a decimal string.
type int64s int64

func (n *int64s) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	if len(s) > 1 && s[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		// A type error, so that the decoder names the field.
		return &json.UnmarshalTypeError{Value: string(b), Type: reflect.TypeFor[uint64]()}
	}
	*n = int64s(v)
	return nil
}

// float64s is a double written as a JSON number or, as proto3 JSON
// allows, a string.
type float64s float64

func (f *float64s) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	if len(s) > 1 && s[0] == '"' {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return &json.UnmarshalTypeError{Value: string(b), Type: reflect.TypeFor[float64]()}
	}
	*f = float64s(v)
	return nil
}

// orderedObject is a JSON object kept with its keys in order.
type orderedObject []orderedMember

type orderedMember struct {
	Key   string
	Value json.RawMessage
}

func (o *orderedObject) UnmarshalJSON(b []byte) error {
	if string(bytes.TrimSpace(b)) == "null" {
		*o = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("expected an object")
	}
	out := orderedObject{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return err
		}
		out = append(out, orderedMember{Key: kt.(string), Value: v})
	}
	*o = out
	return nil
}

// schemaTypes maps Gemini's Type names (any case, as clients send
// "OBJECT" and "object") to JSON Schema's.
var schemaTypes = map[string]string{
	"string": "string", "number": "number", "integer": "integer", "boolean": "boolean",
	"array": "array", "object": "object", "null": "null", "type_unspecified": "",
}

// convertSchema maps a Gemini Schema to JSON Schema, in the key order of
// the source (properties in propertyOrdering's order first, then as
// given). Objects with properties get additionalProperties false unless
// they say otherwise: Gemini's objects have the declared properties only.
// param names the field for errors.
func convertSchema(raw json.RawMessage, param string) (json.RawMessage, error) {
	out, err := appendSchema(nil, raw, func() string { return param })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// appendSchema appends the conversion of raw to b. param is called only
// for an error: spelling out every subschema's name up front would copy
// its ancestors' property names once per property.
func appendSchema(b []byte, raw json.RawMessage, param func() string) ([]byte, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, api.InvalidParam(param(), "a schema must be a JSON object")
	}
	var s schemaJSON
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		msg := strings.TrimPrefix(err.Error(), "json: ")
		if name, ok := strings.CutPrefix(msg, "unknown field "); ok {
			return nil, api.InvalidParam(param(), "unknown name %s in a Gemini schema (which takes type, format, title, description, nullable, enum, properties, propertyOrdering, required, items, anyOf, min/maxItems, min/maxLength, min/maxProperties, minimum, maximum, pattern, default, example); give full JSON Schema as parametersJsonSchema or responseJsonSchema", name)
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, api.InvalidParam(param()+"."+te.Field, "invalid type for %q: expected %s, got %s", te.Field, te.Type, te.Value)
		}
		return nil, api.InvalidParam(param(), "invalid schema: %s", msg)
	}
	typ := ""
	if s.Type != "" {
		t, ok := schemaTypes[strings.ToLower(s.Type)]
		if !ok {
			return nil, api.InvalidParam(param()+".type", "unknown schema type %q (STRING, NUMBER, INTEGER, BOOLEAN, ARRAY, OBJECT, NULL)", s.Type)
		}
		typ = t
	}
	b = append(b, '{')
	comma := false
	key := func(k string) {
		if comma {
			b = append(b, ',')
		}
		comma = true
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, '"', ':')
	}
	if typ != "" {
		key("type")
		if s.Nullable && typ != "null" {
			b = append(b, `["`...)
			b = append(b, typ...)
			b = append(b, `","null"]`...)
		} else {
			b = api.AppendJSONString(b, typ)
		}
	}
	if s.Format != "" && s.Format != "enum" {
		key("format")
		b = api.AppendJSONString(b, s.Format)
	}
	if s.Title != "" {
		key("title")
		b = api.AppendJSONString(b, s.Title)
	}
	if s.Description != "" {
		key("description")
		b = api.AppendJSONString(b, s.Description)
	}
	if s.Enum != nil {
		key("enum")
		b = append(b, '[')
		for i, v := range s.Enum {
			if i > 0 {
				b = append(b, ',')
			}
			b = api.AppendJSONString(b, v)
		}
		if s.Nullable {
			if len(s.Enum) > 0 {
				b = append(b, ',')
			}
			b = append(b, "null"...)
		}
		b = append(b, ']')
	}
	if s.Properties != nil {
		key("properties")
		b = append(b, '{')
		done := make(map[string]bool, len(s.Properties))
		first := true
		emit := func(m orderedMember) error {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = api.AppendJSONString(b, m.Key)
			b = append(b, ':')
			var err error
			b, err = appendSchema(b, m.Value, func() string { return param() + ".properties." + m.Key })
			done[m.Key] = true
			return err
		}
		if len(s.PropertyOrdering) > 0 {
			at := make(map[string]int, len(s.Properties))
			for i, m := range s.Properties {
				if _, dup := at[m.Key]; !dup {
					at[m.Key] = i
				}
			}
			for _, name := range s.PropertyOrdering {
				if i, ok := at[name]; ok && !done[name] {
					if err := emit(s.Properties[i]); err != nil {
						return nil, err
					}
				}
			}
		}
		for _, m := range s.Properties {
			if !done[m.Key] {
				if err := emit(m); err != nil {
					return nil, err
				}
			}
		}
		b = append(b, '}')
		for _, r := range s.Required {
			if !done[r] {
				return nil, api.InvalidParam(param()+".required", "required names %q, which is not among the properties", r)
			}
		}
	}
	if s.Required != nil {
		key("required")
		b = append(b, '[')
		for i, r := range s.Required {
			if i > 0 {
				b = append(b, ',')
			}
			b = api.AppendJSONString(b, r)
		}
		b = append(b, ']')
	}
	switch ap := bytes.TrimSpace(s.AdditionalProperties); {
	case len(ap) > 0 && ap[0] == '{':
		key("additionalProperties")
		var err error
		if b, err = appendSchema(b, ap, func() string { return param() + ".additionalProperties" }); err != nil {
			return nil, err
		}
	case string(ap) == "true" || string(ap) == "false":
		key("additionalProperties")
		b = append(b, ap...)
	case len(ap) > 0 && string(ap) != "null":
		return nil, api.InvalidParam(param()+".additionalProperties", "additionalProperties must be a boolean or a schema")
	case len(s.Properties) > 0:
		key("additionalProperties")
		b = append(b, "false"...)
	}
	if len(bytes.TrimSpace(s.Items)) > 0 && string(bytes.TrimSpace(s.Items)) != "null" {
		key("items")
		var err error
		if b, err = appendSchema(b, s.Items, func() string { return param() + ".items" }); err != nil {
			return nil, err
		}
	}
	if len(s.AnyOf) > 0 {
		key("anyOf")
		b = append(b, '[')
		for i, sub := range s.AnyOf {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendSchema(b, sub, func() string { return fmt.Sprintf("%s.anyOf[%d]", param(), i) }); err != nil {
				return nil, err
			}
		}
		if s.Nullable && typ == "" {
			b = append(b, `,{"type":"null"}`...)
		}
		b = append(b, ']')
	}
	for _, lim := range []struct {
		name string
		v    *int64s
	}{
		{"minItems", s.MinItems}, {"maxItems", s.MaxItems}, {"minLength", s.MinLength}, {"maxLength", s.MaxLength},
		{"minProperties", s.MinProperties}, {"maxProperties", s.MaxProperties},
	} {
		if lim.v != nil {
			key(lim.name)
			b = strconv.AppendInt(b, int64(*lim.v), 10)
		}
	}
	for _, lim := range []struct {
		name string
		v    *float64s
	}{{"minimum", s.Minimum}, {"maximum", s.Maximum}} {
		if lim.v != nil {
			key(lim.name)
			b = strconv.AppendFloat(b, float64(*lim.v), 'g', -1, 64)
		}
	}
	if s.Pattern != "" {
		key("pattern")
		b = api.AppendJSONString(b, s.Pattern)
	}
	if d := bytes.TrimSpace(s.Default); len(d) > 0 && string(d) != "null" {
		key("default")
		b = append(b, d...)
	}
	return append(b, '}'), nil
}
