package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// sampleUniform generates with uniform random logits (a model with random
// weights): every step it draws a logit per token, lets the matcher mask
// them and takes the largest, until an end token. It fails the test if
// nothing is allowed (deadlock), if a sampled token is rejected, or if the
// output does not end within maxSteps tokens.
func sampleUniform(t testing.TB, g *Grammar, v *Vocab, rng *rand.Rand, maxSteps int) ([]byte, int) {
	t.Helper()
	m := g.NewMatcher(v)
	if m.Err() != nil {
		t.Fatalf("matcher: %v", m.Err())
	}
	logits := make([]float32, v.Size())
	var out []byte
	for step := 0; step < maxSteps; step++ {
		for i := range logits {
			logits[i] = rng.Float32()
		}
		m.Process(logits)
		best, bv := int32(-1), float32(math.Inf(-1))
		for i, x := range logits {
			if x > bv {
				best, bv = int32(i), x
			}
		}
		if best < 0 {
			t.Fatalf("deadlock: nothing allowed after %q", out)
		}
		m.Accept(best)
		if m.Err() != nil {
			t.Fatalf("after %q: %v", out, m.Err())
		}
		if v.isEOG[best] {
			return out, step + 1
		}
		out = append(out, v.piece(best)...)
	}
	t.Fatalf("no end within %d tokens: %q", maxSteps, out)
	return nil, 0
}

// Property test schemas: realistic shapes, strings bounded so that a
// random model over a large vocabulary finishes quickly.
var propertySchemas = []string{
	`{"type":"object","properties":{
		"name":{"type":"string","maxLength":12},
		"age":{"type":"integer","minimum":0,"maximum":150},
		"email":{"type":"string","format":"email"},
		"score":{"type":"number","exclusiveMinimum":-1,"maximum":1},
		"tags":{"type":"array","items":{"enum":["a","b","c d"]},"maxItems":4},
		"address":{"type":"object","properties":{"city":{"type":"string","maxLength":8},"zip":{"type":"string","pattern":"^\\d{5}$"}},"required":["zip"]},
		"active":{"type":"boolean"},
		"nick":{"type":["string","null"],"maxLength":5}
	},"required":["name","age","tags","active"],"additionalProperties":false}`,
	`{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","minimum":-9,"maximum":9},"kids":{"type":"array","items":{"$ref":"#/$defs/node"},"maxItems":3}},"required":["v","kids"]}},"$ref":"#/$defs/node"}`,
	`{"type":"object","properties":{"result":{"anyOf":[{"type":"string","maxLength":6},{"type":"number"},{"type":"null"},{"type":"array","prefixItems":[{"const":"ok"},{"type":"integer"}],"items":false,"minItems":2}]}},"required":["result"]}`,
	`{"type":"object","properties":{"id":{"type":"string","format":"uuid"},"at":{"type":"string","format":"date-time"},"ip":{"type":"string","format":"ipv4"},"day":{"type":"string","format":"date"}},"required":["id","at","ip","day"]}`,
	`{"type":"object","properties":{"k":{"type":"integer"},"ko":{"type":"integer"}},"required":["k"],"additionalProperties":{"type":"string","maxLength":3},"maxStringHint":1}`,
}

func TestRandomSamplingIsValid(t *testing.T) {
	type run struct {
		vocab   string
		samples int
	}
	runs := []run{{"tiny", 6}, {"smollm2-135m", 4}}
	if !testing.Short() {
		runs = append(runs, run{"qwen2.5-0.5b", 1})
	}
	for _, r := range runs {
		v, _ := testVocab(t, r.vocab)
		rng := rand.New(rand.NewPCG(12, uint64(len(r.vocab))))
		// Free JSON: strings bounded only for large vocabularies, where a
		// random model almost never picks one of the few closing tokens.
		free := Options{}
		if r.vocab != "tiny" {
			free.MaxStringLength = 16
		}
		for name, g := range map[string]*Grammar{"value": free.JSONValue(), "object": free.JSONObject()} {
			for range r.samples {
				out, _ := sampleUniform(t, g, v, rng, 20000)
				var x any
				if err := json.Unmarshal(out, &x); err != nil {
					t.Fatalf("%s/%s: %q: %v", r.vocab, name, out, err)
				}
				if _, isObj := x.(map[string]any); name == "object" && !isObj {
					t.Fatalf("%s: %q is not an object", r.vocab, out)
				}
			}
		}
		for i, schema := range propertySchemas {
			g := mustSchema(t, Options{MaxStringLength: 10}, schema)
			for range r.samples {
				out, _ := sampleUniform(t, g, v, rng, 20000)
				if err := validateInstance(out, schema); err != nil {
					t.Fatalf("%s schema %d: %q: %v", r.vocab, i, out, err)
				}
			}
		}
	}
}

// TestRandomSamplingUnboundedStrings samples free JSON with unbounded
// strings through the small SPM vocabulary: the grammar alone must end.
func TestRandomSamplingUnboundedStrings(t *testing.T) {
	v, _ := testVocab(t, "tiny")
	rng := rand.New(rand.NewPCG(13, 14))
	for range 10 {
		out, _ := sampleUniform(t, JSONValue(), v, rng, 50000)
		if !json.Valid(out) || !isASCII(out) {
			t.Fatalf("%q", out)
		}
	}
}

// --- an independent validator for the schema subset ---

// oval is a JSON value with object members in document order.
type oval struct {
	kind byte // o a s n b z
	str  string
	b    bool
	arr  []*oval
	keys []string
	vals []*oval
}

func decodeOrdered(data []byte) (*oval, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeOval(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("trailing data")
	}
	return v, nil
}

func decodeOval(dec *json.Decoder) (*oval, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			v := &oval{kind: 'a'}
			for dec.More() {
				x, err := decodeOval(dec)
				if err != nil {
					return nil, err
				}
				v.arr = append(v.arr, x)
			}
			_, err := dec.Token()
			return v, err
		}
		v := &oval{kind: 'o'}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			if slices.Contains(v.keys, k.(string)) {
				return nil, fmt.Errorf("duplicate key %q", k)
			}
			x, err := decodeOval(dec)
			if err != nil {
				return nil, err
			}
			v.keys = append(v.keys, k.(string))
			v.vals = append(v.vals, x)
		}
		_, err := dec.Token()
		return v, err
	case string:
		return &oval{kind: 's', str: t}, nil
	case json.Number:
		return &oval{kind: 'n', str: string(t)}, nil
	case bool:
		return &oval{kind: 'b', b: t}, nil
	}
	return &oval{kind: 'z'}, nil
}

// validateInstance checks that data is JSON and an instance of schema,
// with object members in the schema's property order.
func validateInstance(data []byte, schema string) error {
	if !json.Valid(data) {
		return fmt.Errorf("not valid JSON")
	}
	inst, err := decodeOrdered(data)
	if err != nil {
		return err
	}
	var root any
	if err := json.Unmarshal([]byte(schema), &root); err != nil {
		return err
	}
	sv := &schemaValidator{root: root, order: propertyOrders(schema)}
	return sv.validate(inst, root, "#")
}

// propertyOrders maps each "properties" object's key list (joined) to
// itself, so the validator can check order by looking up a schema's
// properties keys in document order.
func propertyOrders(schema string) map[string][]string {
	out := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(schema))
	var walk func(isProps bool) error
	walk = func(isProps bool) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		d, ok := tok.(json.Delim)
		if !ok {
			return nil
		}
		if d == '[' {
			for dec.More() {
				if err := walk(false); err != nil {
					return err
				}
			}
			_, err := dec.Token()
			return err
		}
		var keys []string
		for dec.More() {
			k, _ := dec.Token()
			keys = append(keys, k.(string))
			if err := walk(k.(string) == "properties" && !isProps); err != nil {
				return err
			}
		}
		if isProps {
			sorted := slices.Clone(keys)
			slices.Sort(sorted)
			out[strings.Join(sorted, "\x00")] = keys
		}
		_, err = dec.Token()
		return err
	}
	_ = walk(false)
	return out
}

type schemaValidator struct {
	root  any
	order map[string][]string
}

func (sv *schemaValidator) resolve(ref string) (any, error) {
	frag := strings.TrimPrefix(ref, "#")
	n := sv.root
	if frag == "" {
		return n, nil
	}
	for _, tok := range strings.Split(frag[1:], "/") {
		m, ok := n.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("bad ref %s", ref)
		}
		n = m[strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")]
	}
	return n, nil
}

func rat(x any) *big.Rat {
	switch v := x.(type) {
	case float64:
		return new(big.Rat).SetFloat64(v)
	case string:
		r, _ := new(big.Rat).SetString(v)
		return r
	}
	return nil
}

func (sv *schemaValidator) validate(x *oval, schema any, path string) error {
	if b, ok := schema.(bool); ok {
		if !b {
			return fmt.Errorf("%s: false schema", path)
		}
		return nil
	}
	s := schema.(map[string]any)
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...))
	}
	if ref, ok := s["$ref"].(string); ok {
		target, err := sv.resolve(ref)
		if err != nil {
			return err
		}
		if err := sv.validate(x, target, path); err != nil {
			return err
		}
	}
	if any, ok := s["anyOf"].([]any); ok {
		var errs []error
		for _, sub := range any {
			err := sv.validate(x, sub, path)
			if err == nil {
				errs = nil
				break
			}
			errs = append(errs, err)
		}
		if errs != nil {
			return fail("no anyOf branch matches: %v", errs)
		}
	}
	if all, ok := s["allOf"].([]any); ok {
		for _, sub := range all {
			if err := sv.validate(x, sub, path); err != nil {
				return err
			}
		}
	}
	typeName := map[byte]string{'o': "object", 'a': "array", 's': "string", 'n': "number", 'b': "boolean", 'z': "null"}[x.kind]
	if x.kind == 'n' && rat(x.str).IsInt() {
		typeName = "integer"
	}
	if t, ok := s["type"]; ok {
		var types []any
		if ts, ok := t.(string); ok {
			types = []any{ts}
		} else {
			types = t.([]any)
		}
		if !slices.Contains(types, any(typeName)) && !(typeName == "integer" && slices.Contains(types, any("number"))) &&
			!(x.kind == 'z' && s["nullable"] == true) {
			return fail("type %s, want %v", typeName, types)
		}
	}
	if c, ok := s["const"]; ok && !sameJSON(x, c) {
		return fail("not the const")
	}
	if e, ok := s["enum"].([]any); ok && !slices.ContainsFunc(e, func(c any) bool { return sameJSON(x, c) }) {
		return fail("not in the enum")
	}
	num := func(k string) *big.Rat {
		if v, ok := s[k].(float64); ok {
			return new(big.Rat).SetFloat64(v)
		}
		return nil
	}
	switch x.kind {
	case 's':
		n := utf8.RuneCountInString(x.str)
		if m := num("minLength"); m != nil && big.NewRat(int64(n), 1).Cmp(m) < 0 {
			return fail("shorter than minLength")
		}
		if m := num("maxLength"); m != nil && big.NewRat(int64(n), 1).Cmp(m) > 0 {
			return fail("%q longer than maxLength", x.str)
		}
		if p, ok := s["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(x.str) {
			return fail("%q does not match %s", x.str, p)
		}
		if f, ok := s["format"].(string); ok {
			if err := checkFormat(f, x.str); err != nil {
				return fail("format %s: %v", f, err)
			}
		}
	case 'n':
		r := rat(x.str)
		if m := num("minimum"); m != nil && r.Cmp(m) < 0 {
			return fail("%s below minimum", x.str)
		}
		if m := num("maximum"); m != nil && r.Cmp(m) > 0 {
			return fail("%s above maximum", x.str)
		}
		if m := num("exclusiveMinimum"); m != nil && r.Cmp(m) <= 0 {
			return fail("%s not above exclusiveMinimum", x.str)
		}
		if m := num("exclusiveMaximum"); m != nil && r.Cmp(m) >= 0 {
			return fail("%s not below exclusiveMaximum", x.str)
		}
		if f, err := strconv.ParseFloat(x.str, 64); err != nil || math.IsInf(f, 0) {
			return fail("%s does not parse as a float64", x.str)
		}
	case 'a':
		n := big.NewRat(int64(len(x.arr)), 1)
		if m := num("minItems"); m != nil && n.Cmp(m) < 0 {
			return fail("fewer than minItems")
		}
		if m := num("maxItems"); m != nil && n.Cmp(m) > 0 {
			return fail("more than maxItems")
		}
		prefix, _ := s["prefixItems"].([]any)
		for i, item := range x.arr {
			sub, ok := s["items"]
			if i < len(prefix) {
				sub, ok = prefix[i], true
			}
			if ok {
				if err := sv.validate(item, sub, fmt.Sprintf("%s/%d", path, i)); err != nil {
					return err
				}
			}
		}
	case 'o':
		props, _ := s["properties"].(map[string]any)
		if req, ok := s["required"].([]any); ok {
			for _, r := range req {
				if !slices.Contains(x.keys, r.(string)) {
					return fail("required %q missing", r)
				}
			}
		}
		var order []string
		if props != nil {
			keys := make([]string, 0, len(props))
			for k := range props {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			order = sv.order[strings.Join(keys, "\x00")]
		}
		last := -1
		for i, k := range x.keys {
			sub, declared := props[k]
			if !declared {
				ap, ok := s["additionalProperties"]
				if ok && ap == false || !ok && s["unevaluatedProperties"] == false {
					return fail("extra property %q", k)
				}
				if ok {
					sub = ap
				} else {
					sub = true
				}
			} else {
				pos := slices.Index(order, k)
				if pos < last {
					return fail("property %q out of schema order %v", k, order)
				}
				last = pos
			}
			if err := sv.validate(x.vals[i], sub, path+"/"+k); err != nil {
				return err
			}
		}
	}
	return nil
}

// sameJSON compares an instance with a schema literal decoded by
// encoding/json (numbers compared exactly as rationals).
func sameJSON(x *oval, c any) bool {
	switch v := c.(type) {
	case nil:
		return x.kind == 'z'
	case bool:
		return x.kind == 'b' && x.b == v
	case string:
		return x.kind == 's' && x.str == v
	case float64:
		return x.kind == 'n' && rat(x.str).Cmp(new(big.Rat).SetFloat64(v)) == 0
	case []any:
		if x.kind != 'a' || len(x.arr) != len(v) {
			return false
		}
		for i := range v {
			if !sameJSON(x.arr[i], v[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		if x.kind != 'o' || len(x.keys) != len(v) {
			return false
		}
		for i, k := range x.keys {
			if c, ok := v[k]; !ok || !sameJSON(x.vals[i], c) {
				return false
			}
		}
		return true
	}
	return false
}

// checkFormat validates formats with the standard library's parsers.
func checkFormat(f, s string) error {
	switch f {
	case "date":
		_, err := time.Parse(time.DateOnly, s)
		return err
	case "date-time":
		_, err := time.Parse(time.RFC3339Nano, s)
		return err
	case "time":
		_, err := time.Parse("15:04:05.999999999Z07:00", s)
		return err
	case "ipv4":
		a, err := netip.ParseAddr(s)
		if err == nil && !a.Is4() {
			err = fmt.Errorf("not IPv4")
		}
		return err
	case "uuid":
		if !regexp.MustCompile(`^[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}$`).MatchString(s) {
			return fmt.Errorf("not a UUID")
		}
	case "email":
		local, domain, ok := strings.Cut(s, "@")
		if !ok || local == "" || strings.HasPrefix(local, ".") || strings.HasSuffix(local, ".") || strings.Contains(local, "..") ||
			!strings.Contains(domain, ".") {
			return fmt.Errorf("not an email address")
		}
		for _, label := range strings.Split(domain, ".") {
			if label == "" || len(label) > 63 || strings.HasPrefix(label, "-") || strings.HasSuffix(label, "-") {
				return fmt.Errorf("bad domain label %q", label)
			}
		}
	}
	return nil
}
