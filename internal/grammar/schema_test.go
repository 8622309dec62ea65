package grammar

import (
	"fmt"
	"math/big"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func mustSchema(t *testing.T, o Options, schema string) *Grammar {
	t.Helper()
	g, err := o.FromJSONSchema([]byte(schema))
	if err != nil {
		t.Fatalf("%s: %v", schema, err)
	}
	return g
}

func TestSchemaConformance(t *testing.T) {
	tests := []struct {
		name   string
		opts   Options
		schema string
		cases  []tcase
	}{
		{"types", Options{}, `{"type":["string","null"]}`, []tcase{{`"x"`, true}, {`null`, true}, {`1`, false}, {`{}`, false}}},
		{"integer", Options{}, `{"type":"integer"}`, []tcase{{`-12`, true}, {`0`, true}, {`1.5`, false}, {`1e3`, false}}},
		{"number", Options{}, `{"type":"number"}`, []tcase{{`-12`, true}, {`1.5e-3`, true}, {`"1"`, false}}},
		{"boolean", Options{}, `{"type":"boolean"}`, []tcase{{`true`, true}, {`false`, true}, {`0`, false}}},
		{"true schema", Options{}, `true`, []tcase{{`[1,{"a":null}]`, true}, {`"s"`, true}}},
		{"empty schema", Options{}, `{"description":"anything"}`, []tcase{{`[1,{"a":null}]`, true}, {`7`, true}}},
		{"enum", Options{}, `{"enum":["red","gré\"en",1.50,null,[1,2],{"a":true}]}`, []tcase{
			{`"red"`, true}, {`"gré\"en"`, true}, {`1.50`, true}, {`null`, true}, {`[1,2]`, true}, {`{"a":true}`, true},
			{`"blue"`, false}, {`1.5`, false}, {`[1, 2]`, false}, {`"gr\u00e9\"en"`, false}}},
		{"enum filtered by type", Options{}, `{"type":"string","enum":["a",1,null]}`, []tcase{{`"a"`, true}, {`1`, false}, {`null`, false}}},
		{"const", Options{}, `{"const":{"k":[1,"x"]}}`, []tcase{{`{"k":[1,"x"]}`, true}, {`{"k": [1, "x"]}`, false}}},
		{"properties in order", Options{}, `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["a","b"]}`, []tcase{
			{`{"a":1,"b":"x"}`, true}, {`{ "a" : 1 , "b" : "x" }`, true}, {`{"b":"x","a":1}`, false}, {`{"a":1}`, false},
			{`{"a":1,"b":"x","c":2}`, false}, {`{"a":"1","b":"x"}`, false}}},
		{"optional properties", Options{}, `{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},"required":["b"]}`, []tcase{
			{`{"b":2}`, true}, {`{"a":1,"b":2}`, true}, {`{"b":2,"c":3}`, true}, {`{"a":1,"b":2,"c":3}`, true},
			{`{}`, false}, {`{"a":1}`, false}, {`{"a":1,"c":3}`, false}, {`{"c":3,"b":2}`, false}, {`{"b":2,}`, false}, {`{,"b":2}`, false}}},
		{"all optional", Options{}, `{"properties":{"a":{"type":"null"},"b":{"type":"null"}}}`, []tcase{
			{`{}`, true}, {`{"a":null}`, true}, {`{"b":null}`, true}, {`{"a":null,"b":null}`, true}, {`{"b":null,"a":null}`, false}, {`{"a":null,}`, false}}},
		{"additional properties schema", Options{}, `{"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],"additionalProperties":{"type":"boolean"}}`, []tcase{
			{`{"id":1}`, true}, {`{"id":1,"x":true,"y":false}`, true}, {`{"id":1,"x":1}`, false},
			{`{"id":1,"id":true}`, false}, {`{"id":1,"i":true}`, true}, {`{"id":1,"idx":true}`, true}, {`{"id":1,"":true}`, true}}},
		{"additional properties true", Options{}, `{"type":"object","properties":{"ab":{"type":"integer"},"é":{"type":"integer"}},"additionalProperties":true}`, []tcase{
			{`{"ab":1,"zz":[1]}`, true}, {`{"zz":{}}`, true}, {`{"ab":1,"ab":2}`, false}, {`{"ab":1,"a":2}`, true}, {`{"ab":1,"abc":2}`, true},
			{`{"é":1,"é":2}`, false}, {`{"e":1}`, true}, {"{\"\xc3\xa8\":1}", true}, {`{"\u0061b":1}`, false}}},
		{"additional default", Options{AdditionalProperties: true}, `{"type":"object","properties":{"a":{"type":"integer"}}}`, []tcase{
			{`{"a":1,"b":"x"}`, true}, {`{"b":"x"}`, true}}},
		{"additional false overrides option", Options{AdditionalProperties: true}, `{"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false}`, []tcase{
			{`{"a":1}`, true}, {`{"a":1,"b":"x"}`, false}}},
		{"required outside properties", Options{}, `{"type":"object","required":["k"],"additionalProperties":{"type":"integer"}}`, []tcase{
			{`{"k":1}`, true}, {`{}`, false}, {`{"k":1,"j":2}`, true}}},
		{"nested", Options{}, `{"type":"object","properties":{"p":{"type":"object","properties":{"q":{"type":"array","items":{"type":"integer"}}},"required":["q"]}},"required":["p"]}`, []tcase{
			{`{"p":{"q":[]}}`, true}, {`{"p":{"q":[1,2,3]}}`, true}, {`{"p":{"q":["1"]}}`, false}, {`{"p":{}}`, false}}},
		{"array bounds", Options{}, `{"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3}`, []tcase{
			{`[1,2]`, true}, {`[1,2,3]`, true}, {`[1]`, false}, {`[1,2,3,4]`, false}, {`[]`, false}}},
		{"array min only", Options{}, `{"type":"array","minItems":1}`, []tcase{{`[null]`, true}, {`[1,"a",{}]`, true}, {`[]`, false}}},
		{"prefixItems", Options{}, `{"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false,"minItems":1}`, []tcase{
			{`["a"]`, true}, {`["a",1]`, true}, {`["a",1,2]`, false}, {`[]`, false}, {`[1]`, false}}},
		{"tuple draft 7", Options{}, `{"type":"array","items":[{"type":"null"}],"additionalItems":{"type":"boolean"}}`, []tcase{
			{`[]`, true}, {`[null]`, true}, {`[null,true,false]`, true}, {`[true]`, false}}},
		{"anyOf", Options{}, `{"anyOf":[{"type":"string","maxLength":2},{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]},{"type":"null"}]}`, []tcase{
			{`"ab"`, true}, {`"abc"`, false}, {`{"x":1}`, true}, {`{"x":"1"}`, false}, {`null`, true}, {`1`, false}}},
		{"anyOf objects sharing a prefix", Options{}, `{"anyOf":[{"type":"object","properties":{"k":{"const":"a"},"v":{"type":"integer"}},"required":["k","v"]},{"type":"object","properties":{"k":{"const":"b"},"v":{"type":"string"}},"required":["k","v"]}]}`, []tcase{
			{`{"k":"a","v":1}`, true}, {`{"k":"b","v":"s"}`, true}, {`{"k":"a","v":"s"}`, false}, {`{"k":"b","v":1}`, false}}},
		{"oneOf single", Options{}, `{"oneOf":[{"type":"integer"}]}`, []tcase{{`1`, true}, {`"1"`, false}}},
		{"oneOf disjoint types", Options{}, `{"oneOf":[{"type":"integer"},{"type":["string","null"]}]}`, []tcase{{`1`, true}, {`"1"`, true}, {`null`, true}, {`true`, false}}},
		{"oneOf discriminated", Options{}, `{"oneOf":[{"$ref":"#/$defs/cat"},{"$ref":"#/$defs/dog"}],"discriminator":{"propertyName":"pet"},"$defs":{
			"cat":{"type":"object","properties":{"pet":{"const":"cat"},"meows":{"type":"boolean"}},"required":["pet","meows"]},
			"dog":{"type":"object","properties":{"pet":{"enum":["dog"]},"barks":{"type":"boolean"}},"required":["pet","barks"]}}}`, []tcase{
			{`{"pet":"cat","meows":true}`, true}, {`{"pet":"dog","barks":false}`, true}, {`{"pet":"dog","meows":true}`, false}}},
		{"allOf single", Options{}, `{"allOf":[{"$ref":"#/$defs/x"}],"description":"d","$defs":{"x":{"type":"boolean"}}}`, []tcase{{`true`, true}, {`1`, false}}},
		{"nullable", Options{}, `{"type":"integer","nullable":true}`, []tcase{{`1`, true}, {`null`, true}, {`"x"`, false}}},
		{"ref defs", Options{}, `{"type":"object","properties":{"a":{"$ref":"#/$defs/pt"},"b":{"$ref":"#/definitions/n"}},"required":["a","b"],"$defs":{"pt":{"type":"array","items":{"type":"number"},"maxItems":2}},"definitions":{"n":{"enum":[1,2]}}}`, []tcase{
			{`{"a":[1.5,2],"b":2}`, true}, {`{"a":[1,2,3],"b":1}`, false}, {`{"a":[],"b":3}`, false}}},
		{"ref pointer escapes", Options{}, `{"$ref":"#/$defs/a~1b%20c","$defs":{"a/b c":{"type":"null"}}}`, []tcase{{`null`, true}, {`1`, false}}},
		{"recursive ref", Options{MaxDepth: 4}, `{"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v","kids"]}}}`, []tcase{
			{`{"v":1,"kids":[]}`, true}, {`{"v":1,"kids":[{"v":2,"kids":[]}]}`, true},
			{`{"v":1,"kids":[{"v":2,"kids":[{"v":3,"kids":[]}]}]}`, false}, // depth 5 > MaxDepth 4
			{`{"v":1,"kids":[{"v":2}]}`, false}}},
		{"root recursion", Options{MaxDepth: 6}, `{"type":"array","items":{"$ref":"#"}}`, []tcase{{`[]`, true}, {`[[],[[]]]`, true}, {`[1]`, false}, {`[[[[[[[]]]]]]]`, false}}},
		{"degenerate self reference", Options{}, `{"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"}`, []tcase{{`null`, true}, {`1`, false}}},
		{"string lengths", Options{}, `{"type":"string","minLength":2,"maxLength":3}`, []tcase{
			{`"ab"`, true}, {`"abc"`, true}, {`"a"`, false}, {`"abcd"`, false}, {`"é€"`, true}, {`"\n\t"`, true}, {`"\u0041"`, false}}},
		{"pattern anchored", Options{}, `{"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"}`, []tcase{
			{`"AB-123"`, true}, {`"AB-12"`, false}, {`"xAB-123"`, false}, {`"ab-123"`, false}}},
		{"pattern unanchored", Options{}, `{"type":"string","pattern":"cat|dog"}`, []tcase{
			{`"cat"`, true}, {`"a dog!"`, true}, {`"cow"`, false}, {`""`, false}}},
		{"pattern escapes", Options{}, `{"type":"string","pattern":"^a\"b\\\\c\\nd$"}`, []tcase{{`"a\"b\\c\nd"`, true}, {`"ab\\c\nd"`, false}}},
		{"pattern fold", Options{}, `{"type":"string","pattern":"^(?i)ok$"}`, []tcase{{`"OK"`, true}, {`"oK"`, true}, {`"okk"`, false}}},
		{"format date", Options{}, `{"type":"string","format":"date"}`, []tcase{
			{`"2024-02-28"`, true}, {`"2024-02-30"`, false}, {`"2024-13-01"`, false}, {`"2024-04-31"`, false}, {`"2024-12-31"`, true}}},
		{"format date-time", Options{}, `{"type":"string","format":"date-time"}`, []tcase{
			{`"2024-01-02T03:04:05Z"`, true}, {`"2024-01-02T03:04:05.123+05:30"`, true}, {`"2024-01-02 03:04:05Z"`, false}, {`"2024-01-02T24:00:00Z"`, false}}},
		{"format uuid", Options{}, `{"type":"string","format":"uuid"}`, []tcase{
			{`"123e4567-e89b-12d3-a456-426614174000"`, true}, {`"123e4567e89b12d3a456426614174000"`, false}}},
		{"format email", Options{}, `{"type":"string","format":"email"}`, []tcase{
			{`"a.b+c@example.co"`, true}, {`"a@b"`, false}, {`".a@b.co"`, false}, {`"a@-b.co"`, false}}},
		{"format time", Options{}, `{"type":"string","format":"time"}`, []tcase{{`"23:59:59Z"`, true}, {`"12:00:00.5-07:00"`, true}, {`"24:00:00Z"`, false}, {`"12:00"`, false}}},
		{"format hostname", Options{}, `{"type":"string","format":"hostname"}`, []tcase{{`"a-b.example"`, true}, {`"localhost"`, true}, {`"-a.b"`, false}, {`"a..b"`, false}}},
		{"format ipv4", Options{}, `{"type":"string","format":"ipv4"}`, []tcase{{`"192.168.0.255"`, true}, {`"256.1.1.1"`, false}, {`"01.1.1.1"`, false}}},
		{"unknown format ignored", Options{}, `{"type":"string","format":"color"}`, []tcase{{`"anything"`, true}}},
		{"integer bounds", Options{}, `{"type":"integer","minimum":-5,"exclusiveMaximum":100}`, []tcase{
			{`-5`, true}, {`-6`, false}, {`0`, true}, {`99`, true}, {`100`, false}, {`-0`, false}}},
		{"number bounds", Options{}, `{"type":"number","exclusiveMinimum":0,"maximum":1}`, []tcase{
			{`0.5`, true}, {`1`, true}, {`0`, false}, {`0.0`, false}, {`0.001`, true}, {`1.5`, false}, {`1.0`, false}, {`-0.5`, false}}},
		{"multipleOf 1", Options{}, `{"type":"integer","multipleOf":1}`, []tcase{{`3`, true}}},
		{"inferred object", Options{}, `{"properties":{"a":{"type":"integer"}},"required":["a"]}`, []tcase{{`{"a":1}`, true}, {`"x"`, false}}},
		{"max string default", Options{MaxStringLength: 2}, `{"type":"object","properties":{"s":{"type":"string"},"t":{"type":"string","maxLength":4}},"required":["s","t"]}`, []tcase{
			{`{"s":"ab","t":"abcd"}`, true}, {`{"s":"abc","t":"a"}`, false}}},
		{"annotations ignored", Options{}, `{"$schema":"https://json-schema.org/draft/2020-12/schema","title":"t","type":"boolean","default":true,"examples":[true],"x-extra":1,"unknownKeyword":2}`, []tcase{{`true`, true}}},
		{"lenient", Options{Lenient: true}, `{"type":"array","items":{"type":"integer","minimum":1,"multipleOf":3},"uniqueItems":true,"contains":{"const":3}}`, []tcase{{`[3,4]`, true}, {`["3"]`, false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { check(t, mustSchema(t, tt.opts, tt.schema), tt.cases) })
	}
}

func TestSchemaErrors(t *testing.T) {
	for _, tt := range []struct{ schema, want string }{
		{`{"type":"object"`, "schema"},
		{`[1]`, "must be an object or a boolean"},
		{`{"type":"strin"}`, "unknown type"},
		{`{"type":"integer","minimum":"1"}`, "must be a number"},
		{`{"not":{"type":"null"}}`, `"not" is not supported`},
		{`{"type":"array","uniqueItems":true}`, `"uniqueItems" is not supported`},
		{`{"if":{},"then":{}}`, "not supported"},
		{`{"oneOf":[{"type":"integer"},{"type":"number"}]}`, "oneOf is supported only when"},
		{`{"oneOf":[{"properties":{"k":{"const":1}},"required":["k"]},{"properties":{"k":{"const":1}},"required":["k"]}]}`, "oneOf is supported only when"},
		{`{"oneOf":[{"properties":{"k":{"const":1}}},{"properties":{"k":{"const":2}}}]}`, "oneOf is supported only when"},
		{`{"allOf":[{"type":"integer"},{"minimum":1}]}`, "allOf is supported only"},
		{`{"$ref":"other.json#/a"}`, "only references inside the schema"},
		{`{"$ref":"#/$defs/missing"}`, "no such schema"},
		{`{"$ref":"#anchor"}`, "anchors are not supported"},
		{`{"type":"number","multipleOf":0.5}`, "multipleOf"},
		{`{"type":"object","properties":{"a":true},"required":["b"],"additionalProperties":false}`, "no JSON value satisfies"},
		{`false`, "no JSON value satisfies"},
		{`{"type":"array","minItems":5000}`, "larger than the supported"},
		{`{"type":"string","pattern":"(?=x)"}`, "pattern"},
		{`{"type":"string","pattern":"a\\bc"}`, "supported only at the start or end"},
		{`{"type":"string","pattern":"x","minLength":2}`, "minLength/maxLength"},
		{`{"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`, "no JSON value satisfies"},
		{`{"type":"object","properties":{"a":{"$ref":"#"}},"required":["a"]}`, "no JSON value satisfies"},
		{`{"type":"string","minLength":3,"maxLength":2}`, "no JSON value satisfies"},
		{`{"type":"integer","minimum":5,"maximum":4}`, "no JSON value satisfies"},
		{`{"type":[]}`, "no JSON value satisfies"},
	} {
		_, err := FromJSONSchema([]byte(tt.schema))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want one containing %q", tt.schema, err, tt.want)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "grammar: ") {
			t.Errorf("%s: error %q lacks the package prefix", tt.schema, err)
		}
	}
}

// TestIntegerRanges checks the digit-range construction against brute
// force: exactly the integers in [lo, hi] are accepted.
func TestIntegerRanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	v := byteVocab()
	pick := func() int64 {
		switch rng.IntN(4) {
		case 0:
			return rng.Int64N(21) - 10
		case 1:
			return rng.Int64N(2001) - 1000
		case 2:
			return rng.Int64N(200001) - 100000
		}
		return []int64{0, 1, 9, 10, 99, 100, 999, 1000, -1, -9, -10, -100}[rng.IntN(12)]
	}
	for range 40 {
		lo, hi := pick(), pick()
		if lo > hi {
			lo, hi = hi, lo
		}
		g := mustSchema(t, Options{}, fmt.Sprintf(`{"type":"integer","minimum":%d,"maximum":%d}`, lo, hi))
		m := g.NewMatcher(v)
		probe := []int64{lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, 0, -1, 1}
		for range 30 {
			probe = append(probe, lo-50+rng.Int64N(hi-lo+101))
		}
		for _, x := range probe {
			s := strconv.FormatInt(x, 10)
			_, done := feed(t, g, v, s)
			if want := lo <= x && x <= hi; done != want {
				t.Errorf("[%d, %d]: %s accepted=%v", lo, hi, s, done)
			}
		}
		_ = m
	}
}

// TestNumberRanges checks number bounds: every accepted numeral is in
// range (computed exactly), and numerals strictly inside are accepted.
func TestNumberRanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	v := byteVocab()
	numerals := []string{"0", "-0", "0.5", "-0.5", "1", "1.0", "1.25", "-1", "-1.75", "2", "2.5", "3", "-3", "-3.5", "10", "10.01", "-10", "-9.99", "7", "0.001", "-0.001"}
	for range 30 {
		var parts []string
		lo, hi := rng.IntN(21)-10, rng.IntN(21)-10
		if lo > hi {
			lo, hi = hi, lo
		}
		loKey, hiKey := "minimum", "maximum"
		if rng.IntN(2) == 0 {
			loKey = "exclusiveMinimum"
		}
		if rng.IntN(2) == 0 {
			hiKey = "exclusiveMaximum"
		}
		parts = append(parts, fmt.Sprintf(`"%s":%d`, loKey, lo), fmt.Sprintf(`"%s":%d`, hiKey, hi))
		schema := `{"type":"number",` + strings.Join(parts, ",") + `}`
		g, err := FromJSONSchema([]byte(schema))
		empty := lo == hi && (loKey != "minimum" || hiKey != "maximum")
		if empty {
			if err == nil {
				t.Errorf("%s: want an error for an empty range", schema)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", schema, err)
		}
		for _, s := range numerals {
			x, _ := new(big.Rat).SetString(s)
			l, h := big.NewRat(int64(lo), 1), big.NewRat(int64(hi), 1)
			in := x.Cmp(l) >= 0 && x.Cmp(h) <= 0
			if loKey == "exclusiveMinimum" && x.Cmp(l) == 0 || hiKey == "exclusiveMaximum" && x.Cmp(h) == 0 {
				in = false
			}
			_, done := feed(t, g, v, s)
			if done && !in {
				t.Errorf("%s: accepts %s, which is out of range", schema, s)
			}
			strictlyInside := x.Cmp(l) > 0 && x.Cmp(h) < 0
			if strictlyInside && s != "-0" && !strings.HasSuffix(s, ".0") && !done {
				t.Errorf("%s: rejects %s", schema, s)
			}
		}
	}
}

// TestUTF8Sequences checks the rune-range to UTF-8 byte-sequence split
// against encoding every code point of random ranges.
func TestUTF8Sequences(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		a, b := rune(rng.IntN(0x110000)), rune(rng.IntN(0x110000))
		if rng.IntN(2) == 0 {
			b = a + rune(rng.IntN(3000))
		}
		if a > b {
			a, b = b, a
		}
		b = min(b, 0x10ffff)
		var seqs [][][2]byte
		utf8Sequences(a, b, func(s [][2]byte) { seqs = append(seqs, s) })
		matches := func(enc []byte) int {
			n := 0
			for _, s := range seqs {
				if len(s) != len(enc) {
					continue
				}
				ok := true
				for i, r := range s {
					ok = ok && r[0] <= enc[i] && enc[i] <= r[1]
				}
				if ok {
					n++
				}
			}
			return n
		}
		for range 300 {
			r := a - 50 + rune(rng.IntN(int(b-a)+101))
			if r < 0 || r > 0x10ffff || (r >= 0xd800 && r <= 0xdfff) {
				continue
			}
			want := 0
			if a <= r && r <= b {
				want = 1
			}
			if got := matches(utf8.AppendRune(nil, r)); got != want {
				t.Fatalf("[%#x, %#x]: U+%04X matched by %d sequences, want %d", a, b, r, got, want)
			}
		}
		if a <= 0xd800 && b >= 0xd800 && matches([]byte{0xed, 0xa0, 0x80}) != 0 {
			t.Fatalf("[%#x, %#x]: a surrogate's encoding matched", a, b)
		}
	}
}

// wideObject is an object schema with n string properties, all required
// or all optional.
func wideObject(n int, required bool) string {
	var props, names strings.Builder
	for i := range n {
		if i > 0 {
			props.WriteByte(',')
			names.WriteByte(',')
		}
		fmt.Fprintf(&props, `"p%d":{"type":"string"}`, i)
		fmt.Fprintf(&names, `"p%d"`, i)
	}
	s := `{"type":"object","properties":{` + props.String() + `}`
	if required {
		s += `,"required":[` + names.String() + `]`
	}
	return s + `,"additionalProperties":false}`
}

// TestWideObjectMemory: an object's member list is built in memory linear
// in its properties (each property once copied the list after it, so a
// request with a few thousand properties allocated gigabytes).
func TestWideObjectMemory(t *testing.T) {
	schema := wideObject(6000, true)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := FromJSONSchema([]byte(schema))
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 256<<20 {
		t.Fatalf("compiling %d bytes of schema allocated %d MiB", len(schema), got>>20)
	}
}

// TestWideOptionalObject: an object with thousands of optional properties
// is refused (its automaton takes steps quadratic in their number, which
// the state limit alone did not bound), and one with hundreds compiles.
func TestWideOptionalObject(t *testing.T) {
	if _, err := FromJSONSchema([]byte(wideObject(500, false))); err != nil {
		t.Fatalf("500 optional properties: %v", err)
	}
	_, err := FromJSONSchema([]byte(wideObject(3000, false)))
	if err == nil || !strings.Contains(err.Error(), "too large to compile") {
		t.Fatalf("3000 optional properties: got %v, want too large to compile", err)
	}
}

// TestLongPropertyName: a long property name costs its length once, not
// once per subschema under it (each subschema's path, which names it in
// errors, copied the name).
func TestLongPropertyName(t *testing.T) {
	schema := `{"type":"object","properties":{"` + strings.Repeat("k", 128<<10) + `":` + wideObject(6000, true) + `}}`
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, _ = FromJSONSchema([]byte(schema)) // an error or a grammar: either is fine
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 384<<20 {
		t.Fatalf("compiling %d bytes of schema allocated %d MiB", len(schema), got>>20)
	}
}

// wideOneOf is a oneOf whose first branch has n const properties, none of
// them required, so the disjointness check looks each one up in the
// required names and finds none.
func wideOneOf(n int) string {
	var props, names strings.Builder
	for i := range n {
		if i > 0 {
			props.WriteByte(',')
			names.WriteByte(',')
		}
		fmt.Fprintf(&props, `"p%d":{"const":1}`, i)
		fmt.Fprintf(&names, `"q%d"`, i)
	}
	return `{"oneOf":[{"type":"object","properties":{` + props.String() + `},"required":[` + names.String() + `]},{"type":"object"}]}`
}

// TestEnumPattern: checking an enum's values against a pattern costs the
// pattern's length per value, so a long enum under a long pattern is
// refused instead of matched value by value; a short one is checked.
func TestEnumPattern(t *testing.T) {
	enum := func(n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `"v%d"`, i)
		}
		return b.String()
	}
	_, err := FromJSONSchema([]byte(`{"type":"string","pattern":"^v(` + strings.Repeat("(1|2)?", 4000) + `)$","enum":[` + enum(20000) + `]}`))
	if err == nil || !strings.Contains(err.Error(), "too complex") {
		t.Fatalf("long enum under a long pattern: got %v, want too complex", err)
	}
	g, err := FromJSONSchema([]byte(`{"type":"string","pattern":"^v1","enum":[` + enum(200) + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if s := g.String(); !strings.Contains(s, `"\"v199\""`) || strings.Contains(s, `"\"v2\""`) {
		t.Fatalf("enum not filtered by its pattern: %s", s)
	}
}

// wideConstObject is an object schema with n properties, all required,
// no others allowed, and a const that has one key too many, found last.
func wideConstObject(n int) string {
	var props, names, obj strings.Builder
	for i := range n {
		if i > 0 {
			props.WriteByte(',')
			names.WriteByte(',')
			obj.WriteByte(',')
		}
		fmt.Fprintf(&props, `"p%d":{}`, i)
		fmt.Fprintf(&names, `"p%d"`, i)
		fmt.Fprintf(&obj, `"p%d":1`, i)
	}
	return `{"type":"object","properties":{` + props.String() + `},"required":[` + names.String() + `],"additionalProperties":false,"const":{` + obj.String() + `,"extra":1}}`
}

// wideRefusals are wide schemas that checks once took time quadratic in
// (each looked every property up in a list; now in a set): a oneOf whose
// branches are not told apart by a required const property, and an
// object const with a key the schema does not allow, found last.
var wideRefusals = []struct {
	name   string
	schema func(n int) string
	want   string
}{
	{"oneOf", wideOneOf, "disjoint"},
	{"const", wideConstObject, "no JSON value satisfies it"},
}

// TestWideRefusals: each wide schema is refused for its reason.
// BenchmarkWideRefusals shows the checks' time linear in the properties.
func TestWideRefusals(t *testing.T) {
	for _, tc := range wideRefusals {
		if _, err := FromJSONSchema([]byte(tc.schema(5000))); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

func BenchmarkWideRefusals(b *testing.B) {
	for _, tc := range wideRefusals {
		for _, n := range []int{10000, 40000} {
			schema := []byte(tc.schema(n))
			b.Run(tc.name+"/"+strconv.Itoa(n), func(b *testing.B) {
				for b.Loop() {
					if _, err := FromJSONSchema(schema); err == nil {
						b.Fatal("compiled")
					}
				}
			})
		}
	}
}

// TestConstObjectKeys: the const check still refuses a value that lacks a
// required property or has one the schema does not allow.
func TestConstObjectKeys(t *testing.T) {
	for _, tc := range []struct {
		schema string
		ok     bool
	}{
		{`{"type":"object","properties":{"a":{},"b":{}},"required":["a","b"],"additionalProperties":false,"const":{"a":1,"b":2}}`, true},
		{`{"type":"object","properties":{"a":{},"b":{}},"required":["a","b","a"],"const":{"b":2,"a":1,"a":3}}`, true},
		{`{"type":"object","properties":{"a":{},"b":{}},"required":["a","b"],"const":{"a":1,"a":2}}`, false},
		{`{"type":"object","properties":{"a":{}},"additionalProperties":false,"const":{"a":1,"c":2}}`, false},
		{`{"type":"object","additionalProperties":false,"const":{"c":2}}`, false},
		{`{"type":"object","additionalProperties":false,"const":{}}`, true},
	} {
		_, err := FromJSONSchema([]byte(tc.schema))
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok %v", tc.schema, err, tc.ok)
		}
	}
}
