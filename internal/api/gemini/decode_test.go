package gemini

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/grammar"
)

func TestCamelCase(t *testing.T) {
	tests := []struct{ in, want string }{
		{"system_instruction", "systemInstruction"},
		{"max_output_tokens", "maxOutputTokens"},
		{"allowed_function_names", "allowedFunctionNames"},
		{"text", "text"},
		{"topP", "topP"},
		{"_private", "_private"},
		{"trailing_", "trailing_"},
		{"a__b", "aB"},
		{"", ""},
	}
	for _, tc := range tests {
		if got := camelCase(tc.in); got != tc.want {
			t.Errorf("camelCase(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestNormalizeKeys(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"snake to camel", `{"system_instruction":{"parts":[{"text":"a_b"}]},"generation_config":{"max_output_tokens":3}}`,
			`{"systemInstruction":{"parts":[{"text":"a_b"}]},"generationConfig":{"maxOutputTokens":3}}`},
		{"property names kept, schemas normalized", `{"parameters":{"type":"OBJECT","properties":{"user_id":{"type":"STRING","max_length":"4"},"properties":{"type":"OBJECT","properties":{"x_y":{"type":"STRING"}}}},"property_ordering":["user_id"]}}`,
			`{"parameters":{"type":"OBJECT","properties":{"user_id":{"type":"STRING","maxLength":"4"},"properties":{"type":"OBJECT","properties":{"x_y":{"type":"STRING"}}}},"propertyOrdering":["user_id"]}}`},
		{"free-form values kept", `{"function_call":{"name":"f","args":{"snake_key":1}},"function_response":{"response":{"a_b":[{"c_d":2}]}},"kvserve":{"session_id":"s"}}`,
			`{"functionCall":{"name":"f","args":{"snake_key":1}},"functionResponse":{"response":{"a_b":[{"c_d":2}]}},"kvserve":{"session_id":"s"}}`},
		{"numbers exact, order kept", `{"b":1.50,"a":12345678901234567890,"c":[true,false,null]}`,
			`{"b":1.50,"a":12345678901234567890,"c":[true,false,null]}`},
		{"json schema kept", `{"parameters_json_schema":{"type":"object","additional_properties":false}}`,
			`{"parametersJsonSchema":{"type":"object","additional_properties":false}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := normalizeKeys([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestRepeated(t *testing.T) {
	var v struct {
		A repeated[string] `json:"a"`
		B repeated[string] `json:"b"`
		C repeated[string] `json:"c"`
	}
	if err := json.Unmarshal([]byte(`{"a":"x","b":["y","z"],"c":null}`), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.A) != 1 || v.A[0] != "x" || len(v.B) != 2 || v.C != nil {
		t.Fatalf("%+v", v)
	}
	if err := json.Unmarshal([]byte(`{"a":5}`), &v); err == nil {
		t.Fatal("a number decoded as a string")
	}
}

func TestConvertSchema(t *testing.T) {
	tests := []struct {
		name, in, want string
		field          string // of a 400, or "" for success
	}{
		{"scalar types any case", `{"type":"STRING","description":"d"}`, `{"type":"string","description":"d"}`, ""},
		{"nullable", `{"type":"integer","nullable":true,"minimum":"1","maximum":9.5}`, `{"type":["integer","null"],"minimum":1,"maximum":9.5}`, ""},
		{"enum format dropped, nullable enum", `{"type":"STRING","format":"enum","enum":["a","b"],"nullable":true}`, `{"type":["string","null"],"enum":["a","b",null]}`, ""},
		{"object: ordering, required, closed", `{"type":"OBJECT","properties":{"b":{"type":"NUMBER"},"a":{"type":"BOOLEAN"},"c":{"type":"STRING"}},"propertyOrdering":["a","b"],"required":["a"]}`,
			`{"type":"object","properties":{"a":{"type":"boolean"},"b":{"type":"number"},"c":{"type":"string"}},"required":["a"],"additionalProperties":false}`, ""},
		{"open object", `{"type":"OBJECT"}`, `{"type":"object"}`, ""},
		{"explicit additionalProperties", `{"type":"OBJECT","properties":{"a":{"type":"STRING"}},"additionalProperties":{"type":"INTEGER"}}`,
			`{"type":"object","properties":{"a":{"type":"string"}},"additionalProperties":{"type":"integer"}}`, ""},
		{"array limits as strings", `{"type":"ARRAY","items":{"type":"STRING","pattern":"^a+$"},"minItems":"1","maxItems":3}`,
			`{"type":"array","items":{"type":"string","pattern":"^a+$"},"minItems":1,"maxItems":3}`, ""},
		{"anyOf nullable", `{"anyOf":[{"type":"STRING"},{"type":"INTEGER"}],"nullable":true}`, `{"anyOf":[{"type":"string"},{"type":"integer"},{"type":"null"}]}`, ""},
		{"annotations", `{"type":"STRING","title":"T","example":"x","default":"y"}`, `{"type":"string","title":"T","default":"y"}`, ""},
		{"unspecified type", `{"type":"TYPE_UNSPECIFIED"}`, `{}`, ""},
		{"unknown field", `{"type":"OBJECT","properties":{"a":{"type":"STRING","const":"x"}}}`, "", "p.properties.a"},
		{"unknown type", `{"type":"DATE"}`, "", "p.type"},
		{"required not a property", `{"type":"OBJECT","properties":{"a":{"type":"STRING"}},"required":["b"]}`, "", "p.required"},
		{"bad limit", `{"type":"ARRAY","maxItems":"-1"}`, "", "p.maxItems"},
		{"not an object", `["STRING"]`, "", "p"},
		{"bad nested type", `{"type":"ARRAY","items":{"type":7}}`, "", "p.items.type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := convertSchema(json.RawMessage(tc.in), "p")
			if tc.field != "" {
				var ae *api.Error
				if !errors.As(err, &ae) || ae.Code != api.CodeInvalidRequest || ae.Param != tc.field {
					t.Fatalf("error %v (param %v), want a 400 on %q", err, paramOf(err), tc.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
			if _, err := grammar.FromJSONSchema(got); err != nil && !strings.Contains(tc.name, "unspecified") {
				t.Fatalf("the grammar refuses %s: %v", got, err)
			}
		})
	}
}

func paramOf(err error) string {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Param
	}
	return ""
}

// TestConvertSchemaLongName: a long property name costs its length once,
// not once per property under it (each subschema's parameter name, for
// errors, was built up front).
func TestConvertSchemaLongName(t *testing.T) {
	var props strings.Builder
	for i := range 10000 {
		if i > 0 {
			props.WriteByte(',')
		}
		fmt.Fprintf(&props, `"p%d":{}`, i)
	}
	schema := `{"type":"OBJECT","properties":{"` + strings.Repeat("k", 256<<10) + `":{"type":"OBJECT","properties":{` + props.String() + `}}}}`
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := convertSchema([]byte(schema), "responseSchema")
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 64<<20 {
		t.Fatalf("converting %d bytes of schema allocated %d MiB", len(schema), got>>20)
	}
}
