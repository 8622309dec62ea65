package grammar

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// FromJSONSchema returns a grammar of the JSON values that are instances of
// a JSON Schema, with the default Options. See Options.FromJSONSchema.
func FromJSONSchema(schema []byte) (*Grammar, error) { return Options{}.FromJSONSchema(schema) }

// FromJSONSchema returns a grammar of the JSON values that are instances of
// a JSON Schema (the draft 2020-12 subset of OpenAI structured outputs,
// plus a little more):
//
//   - type (one or a list), enum, const, anyOf, allOf with one subschema,
//     $ref to "#" or a JSON pointer into the document ($defs, definitions),
//     nullable (OpenAPI);
//   - objects: properties (generated in the schema's order; required ones
//     always, optional ones may be skipped), required, additionalProperties
//     (false, true or a schema; absent means Options.AdditionalProperties),
//     unevaluatedProperties like additionalProperties;
//   - arrays: items, prefixItems, minItems, maxItems;
//   - strings: minLength, maxLength, pattern (a regular expression, as
//     much of ECMA-262 as Go's regexp/syntax shares), format (date-time,
//     date, time, uuid, email, ipv4, hostname; other formats are
//     annotations and ignored);
//   - numbers and integers: minimum, maximum, exclusiveMinimum,
//     exclusiveMaximum (bounds are rounded inward to integers for number),
//     multipleOf 1 for integers.
//
// Annotations (title, description, default, examples, ...) and unknown
// keywords are ignored. Known keywords that would restrict the output in
// ways the grammar cannot (not, if/then/else, uniqueItems, contains,
// patternProperties, oneOf with several subschemas, ...) are an error unless
// Options.Lenient is set. Generated numbers have at most 16 integer digits,
// 16 fraction digits and a 2-digit exponent.
//
// Every output is an instance of the schema; not every instance can be
// generated (property order is fixed, strings use one escaping, numbers are
// bounded), which is the point of constraining a model.
func (o Options) FromJSONSchema(schema []byte) (*Grammar, error) {
	root, err := parseJSON(schema)
	if err != nil {
		return nil, fmt.Errorf("grammar: schema: %w", err)
	}
	c := &schemaCompiler{
		o:        o,
		b:        newJSONBuilder(o),
		root:     root,
		refs:     map[schemaKey]*refEntry{},
		objects:  map[schemaKey]*node{},
		strs:     map[string]*node{},
		patterns: map[string]*regexp.Regexp{},
		nameSets: map[*jnode]map[string]bool{},
	}
	n, err := c.compile(root, 1, "#")
	if err != nil {
		return nil, err
	}
	if n.kind == kNever {
		return nil, fmt.Errorf("grammar: schema: no JSON value satisfies it (within MaxDepth %d)", o.maxDepth())
	}
	g := newGrammar(n)
	if err := g.Check(); err != nil {
		return nil, fmt.Errorf("grammar: schema: %w", errors.Unwrap(err))
	}
	return g, nil
}

// Limits on schema compilation (hostile schemas).
const (
	maxSchemaWork = 1 << 16 // subschemas compiled (counting each depth a $ref is expanded at)
	maxUnroll     = 4096    // minItems/maxItems/minLength/maxLength
	// maxPatternWork bounds the pattern bytes times value bytes of the
	// enum and const strings checked against patterns.
	maxPatternWork = 1 << 26
)

// Keyword classes.
var (
	annotationKeywords = setOfStrings("$schema", "$id", "$comment", "$anchor", "$dynamicAnchor", "$vocabulary",
		"title", "description", "default", "examples", "example", "deprecated", "readOnly", "writeOnly",
		"contentMediaType", "contentEncoding", "contentSchema", "$defs", "definitions", "discriminator")
	unsupportedKeywords = setOfStrings("minProperties", "maxProperties", "patternProperties", "propertyNames",
		"dependentRequired", "dependentSchemas", "dependencies", "uniqueItems", "contains", "minContains",
		"maxContains", "not", "if", "then", "else", "unevaluatedItems", "$dynamicRef", "$recursiveRef")
	// constraintKeywords are the supported keywords that constrain a value
	// (everything but applicators and annotations).
	constraintKeywords = []string{"type", "enum", "const", "properties", "required", "additionalProperties",
		"unevaluatedProperties", "items", "prefixItems", "additionalItems", "minItems", "maxItems", "minLength",
		"maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"}
)

func setOfStrings(s ...string) map[string]bool {
	m := make(map[string]bool, len(s))
	for _, x := range s {
		m[x] = true
	}
	return m
}

type schemaKey struct {
	s *jnode
	d int
}

type refEntry struct {
	busy bool
	n    *node
}

type schemaCompiler struct {
	o       Options
	b       *jsonBuilder
	root    *jnode
	refs    map[schemaKey]*refEntry
	objects map[schemaKey]*node
	strs    map[string]*node
	work    int
	strRest *rule
	// patternWork counts chargePattern's steps.
	patternWork int
	// patterns holds each pattern compiled for literalOK (nil: invalid),
	// once: an enum is checked value by value against the same pattern.
	patterns map[string]*regexp.Regexp
	// nameSets holds the sets made by names.
	nameSets map[*jnode]map[string]bool
}

// names returns the keys of object n, or the strings in array n, as a set
// made once per node: literalOK checks every value of an enum against a
// schema's properties and required names, and looking each key up in the
// lists took time quadratic in their lengths.
func (c *schemaCompiler) names(n *jnode) map[string]bool {
	if set, ok := c.nameSets[n]; ok {
		return set
	}
	set := map[string]bool{}
	switch {
	case n == nil:
	case n.kind == 'o':
		for _, k := range n.keys {
			set[k] = true
		}
	case n.kind == 'a':
		for _, it := range n.items {
			if it.kind == 's' {
				set[it.str] = true
			}
		}
	}
	c.nameSets[n] = set
	return set
}

func (c *schemaCompiler) errf(path, format string, args ...any) error {
	return fmt.Errorf("grammar: schema %s: %s", path, fmt.Sprintf(format, args...))
}

// compile returns the node of the values of schema s at nesting depth d
// (a container value would be at depth d).
func (c *schemaCompiler) compile(s *jnode, d int, path string) (*node, error) {
	if c.work++; c.work > maxSchemaWork {
		return nil, c.errf(path, "too complex (more than %d subschemas to compile)", maxSchemaWork)
	}
	switch s.kind {
	case 'b':
		if s.b {
			return c.b.value(d), nil
		}
		return neverNode, nil
	case 'o':
	default:
		return nil, c.errf(path, "a schema must be an object or a boolean, not %s", s.describe())
	}
	for i, k := range s.keys {
		if unsupportedKeywords[k] && !trivialKeyword(k, s.vals[i]) && !c.o.Lenient {
			return nil, c.errf(path, "keyword %q is not supported (Options.Lenient ignores it)", k)
		}
	}
	n, err := c.compileObject(s, d, path)
	if err != nil {
		return nil, err
	}
	if nb := s.get("nullable"); nb != nil && nb.kind == 'b' && nb.b {
		n = alt(n, lit("null"))
	}
	return n, nil
}

// trivialKeyword reports whether an unsupported keyword's value constrains
// nothing (uniqueItems: false, minProperties: 0, ...).
func trivialKeyword(k string, v *jnode) bool {
	switch k {
	case "uniqueItems":
		return v.kind == 'b' && !v.b
	case "minProperties", "minContains":
		return v.kind == 'n' && (v.str == "0")
	case "dependentRequired", "dependentSchemas", "dependencies", "patternProperties":
		return v.kind == 'o' && len(v.keys) == 0
	}
	return false
}

func (c *schemaCompiler) constraintSiblings(s *jnode) []string {
	var out []string
	for _, k := range constraintKeywords {
		if s.get(k) != nil {
			out = append(out, k)
		}
	}
	return out
}

func (c *schemaCompiler) compileObject(s *jnode, d int, path string) (*node, error) {
	if ref := s.get("$ref"); ref != nil {
		if ref.kind != 's' {
			return nil, c.errf(path, "$ref must be a string")
		}
		if sib := c.constraintSiblings(s); len(sib) > 0 && !c.o.Lenient {
			return nil, c.errf(path, "$ref together with %s is not supported", strings.Join(sib, ", "))
		}
		return c.ref(ref.str, d, path)
	}
	if all := s.get("allOf"); all != nil {
		if all.kind != 'a' {
			return nil, c.errf(path, "allOf must be an array")
		}
		switch {
		case len(all.items) == 1 && len(c.constraintSiblings(s)) == 0 && s.get("anyOf") == nil && s.get("oneOf") == nil:
			return c.compile(all.items[0], d, path+"/allOf/0")
		case len(all.items) > 0 && !c.o.Lenient:
			return nil, c.errf(path, "allOf is supported only with one subschema and no sibling constraints")
		}
	}
	anyOf, key := s.get("anyOf"), "anyOf"
	if one := s.get("oneOf"); one != nil {
		if anyOf != nil {
			return nil, c.errf(path, "anyOf together with oneOf is not supported")
		}
		if one.kind == 'a' && len(one.items) > 1 && !c.o.Lenient && !c.disjoint(one.items, path) {
			return nil, c.errf(path, "oneOf is supported only when its subschemas are disjoint (different types, or a required const discriminator); Options.Lenient reads it as anyOf")
		}
		anyOf, key = one, "oneOf"
	}
	if anyOf != nil {
		if anyOf.kind != 'a' || len(anyOf.items) == 0 {
			return nil, c.errf(path, "%s must be a non-empty array", key)
		}
		if sib := c.constraintSiblings(s); len(sib) > 0 && !c.o.Lenient {
			return nil, c.errf(path, "%s together with %s is not supported", key, strings.Join(sib, ", "))
		}
		alts := make([]*node, len(anyOf.items))
		for i, sub := range anyOf.items {
			n, err := c.compile(sub, d, fmt.Sprintf("%s/%s/%d", path, key, i))
			if err != nil {
				return nil, err
			}
			alts[i] = n
		}
		return alt(alts...), nil
	}

	types, err := c.types(s, path)
	if err != nil {
		return nil, err
	}
	if cv := s.get("const"); cv != nil {
		if err := c.chargePattern(cv, s, path); err != nil {
			return nil, err
		}
		if !c.literalOK(cv, s, types) {
			return neverNode, nil
		}
		return lit(string(cv.encode(nil))), nil
	}
	if ev := s.get("enum"); ev != nil {
		if ev.kind != 'a' {
			return nil, c.errf(path, "enum must be an array")
		}
		alts := make([]*node, 0, len(ev.items))
		for _, v := range ev.items {
			if err := c.chargePattern(v, s, path); err != nil {
				return nil, err
			}
			if c.literalOK(v, s, types) {
				alts = append(alts, lit(string(v.encode(nil))))
			}
		}
		return alt(alts...), nil
	}
	if types == nil {
		if types = inferTypes(s); types == nil {
			return c.b.value(d), nil
		}
	}
	alts := make([]*node, 0, len(types))
	for _, t := range types {
		var n *node
		var err error
		switch t {
		case "string":
			n, err = c.stringNode(s, path)
		case "number", "integer":
			n, err = c.numberNode(s, t == "integer", path)
		case "boolean":
			n = alt(lit("true"), lit("false"))
		case "null":
			n = lit("null")
		case "object":
			n, err = c.objectNode(s, d, path)
		case "array":
			n, err = c.arrayNode(s, d, path)
		}
		if err != nil {
			return nil, err
		}
		alts = append(alts, n)
	}
	return alt(alts...), nil
}

var allTypes = []string{"string", "number", "integer", "boolean", "null", "object", "array"}

// types returns the "type" keyword as a list, or nil when absent.
func (c *schemaCompiler) types(s *jnode, path string) ([]string, error) {
	t := s.get("type")
	if t == nil {
		return nil, nil
	}
	var out []string
	add := func(v *jnode) error {
		if v.kind != 's' || !slices.Contains(allTypes, v.str) {
			return c.errf(path, "unknown type %s", v.describe())
		}
		if !slices.Contains(out, v.str) {
			out = append(out, v.str)
		}
		return nil
	}
	switch t.kind {
	case 's':
		if err := add(t); err != nil {
			return nil, err
		}
	case 'a':
		for _, v := range t.items {
			if err := add(v); err != nil {
				return nil, err
			}
		}
	default:
		return nil, c.errf(path, "type must be a string or an array")
	}
	// integer is a subset of number.
	if slices.Contains(out, "number") {
		out = slices.DeleteFunc(out, func(s string) bool { return s == "integer" })
	}
	if len(out) == 0 {
		out = []string{} // type: [] allows nothing
	}
	return out, nil
}

// inferTypes picks the type of a schema without "type" from its keywords:
// JSON Schema would allow any type there (keywords apply only to their own
// type), and generating only the type the keywords describe is a subset.
func inferTypes(s *jnode) []string {
	has := func(keys ...string) bool {
		for _, k := range keys {
			if s.get(k) != nil {
				return true
			}
		}
		return false
	}
	switch {
	case has("properties", "required", "additionalProperties", "unevaluatedProperties"):
		return []string{"object"}
	case has("items", "prefixItems", "minItems", "maxItems"):
		return []string{"array"}
	case has("minLength", "maxLength", "pattern", "format"):
		return []string{"string"}
	case has("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"):
		return []string{"number"}
	}
	return nil // any value
}

// chargePattern counts the matching of v against the pattern of s, about
// the pattern's length per byte of v, against maxPatternWork: an enum
// repeats the match per value, so without a bound its cost is the
// product of two lengths in the schema.
func (c *schemaCompiler) chargePattern(v, s *jnode, path string) error {
	p := s.get("pattern")
	if v.kind != 's' || p == nil || p.kind != 's' {
		return nil
	}
	if c.patternWork += len(p.str) * (len(v.str) + 1); c.patternWork > maxPatternWork {
		return c.errf(path, "too complex (checking enum and const strings against their patterns takes more than %d steps)", maxPatternWork)
	}
	return nil
}

// literalOK reports whether a const or enum value satisfies the sibling
// keywords of s that a literal can violate: type, string lengths and
// pattern, numeric bounds, array lengths, and for objects required and
// additionalProperties: false.
func (c *schemaCompiler) literalOK(v, s *jnode, types []string) bool {
	if types != nil {
		t := v.typeName()
		if !slices.Contains(types, t) && !(t == "integer" && slices.Contains(types, "number")) {
			return false
		}
	}
	num := func(k string) (float64, bool) {
		n := s.get(k)
		if n == nil || n.kind != 'n' {
			return 0, false
		}
		f, err := strconv.ParseFloat(n.str, 64)
		return f, err == nil
	}
	switch v.kind {
	case 's':
		l := utf8.RuneCountInString(v.str)
		if n, ok := num("minLength"); ok && float64(l) < n {
			return false
		}
		if n, ok := num("maxLength"); ok && float64(l) > n {
			return false
		}
		if p := s.get("pattern"); p != nil && p.kind == 's' {
			re, ok := c.patterns[p.str]
			if !ok {
				re, _ = regexp.Compile(p.str)
				c.patterns[p.str] = re
			}
			if re == nil || !re.MatchString(v.str) {
				return false
			}
		}
	case 'n':
		x, err := strconv.ParseFloat(v.str, 64)
		if err != nil {
			return false
		}
		if n, ok := num("minimum"); ok && x < n {
			return false
		}
		if n, ok := num("maximum"); ok && x > n {
			return false
		}
		if n, ok := num("exclusiveMinimum"); ok && x <= n {
			return false
		}
		if n, ok := num("exclusiveMaximum"); ok && x >= n {
			return false
		}
	case 'a':
		if n, ok := num("minItems"); ok && float64(len(v.items)) < n {
			return false
		}
		if n, ok := num("maxItems"); ok && float64(len(v.items)) > n {
			return false
		}
	case 'o':
		if req := c.names(s.get("required")); len(req) > 0 {
			found := map[string]bool{}
			for _, k := range v.keys {
				if req[k] {
					found[k] = true
				}
			}
			if len(found) < len(req) {
				return false
			}
		}
		if ap := s.get("additionalProperties"); ap != nil && ap.kind == 'b' && !ap.b {
			props := c.names(s.get("properties"))
			for _, k := range v.keys {
				if !props[k] {
					return false
				}
			}
		}
	}
	return true
}

// disjoint reports whether no value can satisfy two of the schemas, so
// that oneOf means anyOf: either their types are pairwise disjoint, or all
// are objects requiring one property whose schema is a const (or a
// one-value enum) with a different value in each (a discriminated union).
func (c *schemaCompiler) disjoint(schemas []*jnode, path string) bool {
	deref := func(s *jnode) *jnode {
		for range 32 {
			ref := s.get("$ref")
			if ref == nil || ref.kind != 's' {
				return s
			}
			t, err := c.resolve(ref.str, path)
			if err != nil {
				return s
			}
			s = t
		}
		return s
	}
	// Pairwise disjoint types.
	seen := map[string]bool{}
	typed := true
	for _, s := range schemas {
		types, err := c.types(deref(s), path)
		if err != nil || types == nil {
			typed = false
			break
		}
		for _, t := range types {
			num := t == "number" || t == "integer"
			if seen[t] || num && (seen["number"] || seen["integer"]) {
				typed = false
			}
			seen[t] = true
		}
	}
	if typed {
		return true
	}
	// A discriminator property.
	var name string
	values := map[string]bool{}
	for i, s := range schemas {
		s = deref(s)
		props := s.get("properties")
		req := s.get("required")
		if props == nil || req == nil || req.kind != 'a' {
			return false
		}
		// A set: looking each property up in the list would take time
		// quadratic in their numbers.
		required := make(map[string]bool, len(req.items))
		for _, r := range req.items {
			if r.kind == 's' {
				required[r.str] = true
			}
		}
		found := false
		for j, k := range props.keys {
			if i > 0 && k != name {
				continue
			}
			v := deref(props.vals[j])
			lit := v.get("const")
			if e := v.get("enum"); lit == nil && e != nil && e.kind == 'a' && len(e.items) == 1 {
				lit = e.items[0]
			}
			if lit == nil || !required[k] {
				continue
			}
			enc := string(lit.encode(nil))
			if values[enc] {
				return false
			}
			name, values[enc], found = k, true, true
			break
		}
		if !found {
			return false
		}
	}
	return true
}

// ref compiles the target of a $ref at depth d. A reference back to a
// schema being compiled at the same depth (a cycle that nests no value, as
// in a = anyOf[a, null]) contributes nothing: the least fixed point.
func (c *schemaCompiler) ref(ref string, d int, path string) (*node, error) {
	target, err := c.resolve(ref, path)
	if err != nil {
		return nil, err
	}
	k := schemaKey{target, d}
	if e, ok := c.refs[k]; ok {
		if e.busy {
			return neverNode, nil
		}
		return e.n, nil
	}
	e := &refEntry{busy: true}
	c.refs[k] = e
	n, err := c.compile(target, d, pathName(ref))
	if err != nil {
		return nil, err
	}
	if n.kind != kCall && n.kind != kNever && countNodes(n, 64) >= 64 {
		// Share a large non-container definition as one rule instead of
		// inlining a copy at every use.
		n = call(&rule{name: refName(ref, d), body: n})
	}
	e.busy, e.n = false, n
	return n, nil
}

// countNodes counts the nodes of n's tree, stopping at limit.
func countNodes(n *node, limit int) int {
	count := 1
	for _, k := range n.kids {
		if count >= limit {
			break
		}
		count += countNodes(k, limit-count)
	}
	return count
}

func refName(ref string, d int) string {
	name := ref[strings.LastIndexByte(ref, '/')+1:]
	if name == "" || name == "#" {
		name = "root"
	}
	if d > 1 {
		name += "@" + strconv.Itoa(d)
	}
	return name
}

// resolve finds the schema a $ref names: "#" or a JSON pointer fragment
// ("#/$defs/Node"). Remote references and anchors are not supported.
func (c *schemaCompiler) resolve(ref, path string) (*jnode, error) {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return nil, c.errf(path, "$ref %q: only references inside the schema (#/...) are supported", ref)
	}
	frag, err := url.PathUnescape(frag)
	if err != nil {
		return nil, c.errf(path, "$ref %q: %v", ref, err)
	}
	if frag == "" {
		return c.root, nil
	}
	if frag[0] != '/' {
		return nil, c.errf(path, "$ref %q: anchors are not supported", ref)
	}
	n := c.root
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch n.kind {
		case 'o':
			n = n.get(tok)
		case 'a':
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(n.items) {
				n = nil
			} else {
				n = n.items[i]
			}
		default:
			n = nil
		}
		if n == nil {
			return nil, c.errf(path, "$ref %q: no such schema", ref)
		}
	}
	return n, nil
}

// count reads a non-negative integer keyword (def when absent).
func (c *schemaCompiler) count(s *jnode, k string, def int, path string) (int, error) {
	v := s.get(k)
	if v == nil {
		return def, nil
	}
	if v.kind != 'n' || !isIntegral(v.str) || strings.HasPrefix(v.str, "-") {
		return 0, c.errf(path, "%s must be a non-negative integer", k)
	}
	f, err := strconv.ParseFloat(v.str, 64)
	if err != nil || f > maxUnroll {
		if c.o.Lenient {
			if strings.HasPrefix(k, "max") {
				return -1, nil
			}
			return maxUnroll, nil
		}
		return 0, c.errf(path, "%s %s is larger than the supported %d", k, v.str, maxUnroll)
	}
	return int(f), nil
}

// stringNode compiles a string schema.
func (c *schemaCompiler) stringNode(s *jnode, path string) (*node, error) {
	minL, err := c.count(s, "minLength", 0, path)
	if err != nil {
		return nil, err
	}
	maxL, err := c.count(s, "maxLength", -1, path)
	if err != nil {
		return nil, err
	}
	pattern := ""
	if p := s.get("pattern"); p != nil {
		if p.kind != 's' {
			return nil, c.errf(path, "pattern must be a string")
		}
		pattern = p.str
	}
	if f := s.get("format"); f != nil && f.kind == 's' {
		if fp, ok := formatPatterns[f.str]; ok {
			if pattern != "" && !c.o.Lenient {
				return nil, c.errf(path, "pattern together with format %q is not supported", f.str)
			}
			if pattern == "" {
				pattern = fp
			}
		}
	}
	if pattern != "" && (minL > 0 || maxL >= 0) {
		if !c.o.Lenient {
			return nil, c.errf(path, "pattern or format together with minLength/maxLength is not supported")
		}
		minL, maxL = 0, -1
	}
	if maxL >= 0 && maxL < minL {
		return neverNode, nil
	}
	if maxL < 0 && pattern == "" && c.o.maxString() >= 0 {
		maxL = max(c.o.maxString(), minL)
	}
	key := fmt.Sprintf("%d,%d,%s", minL, maxL, pattern)
	if n, ok := c.strs[key]; ok {
		return n, nil
	}
	var n *node
	switch {
	case pattern != "":
		body, err := patternNode(pattern)
		if err != nil {
			return nil, c.errf(path, "pattern %q: %v", pattern, err)
		}
		n = call(&rule{name: "pattern", body: seq(lit(`"`), body, lit(`"`))})
	case minL == 0 && (maxL < 0 || maxL == c.o.maxString()):
		n = call(c.b.str)
	default:
		n = call(&rule{name: fmt.Sprintf("string{%d,%d}", minL, maxL), body: seq(lit(`"`), repeat(jsonChar(), minL, maxL), lit(`"`))})
	}
	c.strs[key] = n
	return n, nil
}

// numberNode compiles a number or integer schema.
func (c *schemaCompiler) numberNode(s *jnode, integer bool, path string) (*node, error) {
	if m := s.get("multipleOf"); m != nil {
		if !(integer && m.kind == 'n' && isIntegral(m.str) && strings.TrimLeft(strings.SplitN(m.str, ".", 2)[0], "0") == "1") && !c.o.Lenient {
			return nil, c.errf(path, "multipleOf %s is not supported (only multipleOf 1 with type integer)", m.describe())
		}
	}
	var b bounds
	if err := b.read(s, path, c); err != nil {
		return nil, err
	}
	if !b.any() {
		if integer {
			return call(c.b.integer), nil
		}
		return call(c.b.num), nil
	}
	return b.node(integer), nil
}

// objectNode compiles an object schema at depth d into a rule.
func (c *schemaCompiler) objectNode(s *jnode, d int, path string) (*node, error) {
	if d > c.o.maxDepth() {
		return neverNode, nil
	}
	k := schemaKey{s, d}
	if n, ok := c.objects[k]; ok {
		return n, nil
	}
	type prop struct {
		name     string
		value    *node
		required bool
	}
	var props []prop
	var index map[string]int // props by name: lookups in a long list stay linear
	if p := s.get("properties"); p != nil {
		if p.kind != 'o' {
			return nil, c.errf(path, "properties must be an object")
		}
		index = make(map[string]int, len(p.keys))
		for i, name := range p.keys {
			if _, dup := index[name]; dup {
				return nil, c.errf(path, "property %q appears twice", name)
			}
			index[name] = i
			props = append(props, prop{name: name})
		}
		for i := range props {
			v, err := c.compile(p.vals[i], d+1, path+"/properties/"+pathName(props[i].name))
			if err != nil {
				return nil, err
			}
			props[i].value = v
		}
	}
	// additionalProperties: nil = none allowed, otherwise the schema of extras.
	var extra *jnode
	extraAllowed := c.o.AdditionalProperties
	ap := s.get("additionalProperties")
	if ap == nil {
		ap = s.get("unevaluatedProperties")
	}
	if ap != nil {
		extraAllowed = !(ap.kind == 'b' && !ap.b)
		extra = ap
	}
	if req := s.get("required"); req != nil {
		if req.kind != 'a' {
			return nil, c.errf(path, "required must be an array")
		}
		for _, r := range req.items {
			if r.kind != 's' {
				return nil, c.errf(path, "required must list strings")
			}
			i, ok := index[r.str]
			if !ok {
				if !extraAllowed {
					return neverNode, nil // a required property that may not appear
				}
				var v *node
				var err error
				if extra != nil {
					v, err = c.compile(extra, d+1, path+"/additionalProperties")
				} else {
					v = c.b.value(d + 1)
				}
				if err != nil {
					return nil, err
				}
				props = append(props, prop{name: r.str, value: v})
				i = len(props) - 1
				if index == nil {
					index = map[string]int{}
				}
				index[r.str] = i
			}
			props[i].required = true
		}
	}
	var extraMember *node
	if extraAllowed {
		var v *node
		var err error
		if extra != nil {
			v, err = c.compile(extra, d+1, path+"/additionalProperties")
		} else {
			v = c.b.value(d + 1)
		}
		if err != nil {
			return nil, err
		}
		names := make([]string, len(props))
		for i, p := range props {
			names[i] = p.name
		}
		if v.kind != kNever {
			extraMember = seq(c.extraKey(names), c.b.ws, lit(":"), c.b.ws, v)
		}
	}

	ws := c.b.ws
	sep := seq(ws, lit(","), ws)
	member := func(p prop) *node { return seq(lit(jsonQuote(p.name)), ws, lit(":"), ws, p.value) }
	// rest[i]: members i.. after at least one member was written;
	// first[i]: a non-empty member list starting at i or later.
	n := len(props)
	rest := make([]*node, n+1)
	first := make([]*node, n+1)
	rest[n], first[n] = emptyNode, neverNode
	if extraMember != nil {
		rest[n] = repeat(seq(sep, extraMember), 0, -1)
		first[n] = seq(extraMember, rest[n])
	}
	anyRequired := false
	for i := n - 1; i >= 0; i-- {
		p := props[i]
		m := member(p)
		if p.required {
			anyRequired = true
			rest[i] = then(seq(sep, m), rest[i+1])
			first[i] = then(m, rest[i+1])
		} else {
			rest[i] = then(opt(seq(sep, m)), rest[i+1])
			first[i] = either(then(m, rest[i+1]), first[i+1])
		}
	}
	body := seq(first[0], ws)
	if !anyRequired {
		body = opt(body)
	}
	var result *node
	if body.kind == kNever {
		result = neverNode
	} else {
		result = call(&rule{name: ruleName(path, "object", d), body: seq(lit("{"), ws, body, lit("}"))})
	}
	c.objects[k] = result
	return result, nil
}

// then is seq(head, tail) and either is alt(a, b), but they nest tail (b)
// instead of copying its parts as seq and alt do: the member lists of an
// object are built from the last property back, and copying each tail
// would take time and memory quadratic in the number of properties.
func then(head, tail *node) *node {
	switch {
	case head.kind == kNever || tail.kind == kNever:
		return neverNode
	case head.kind == kEmpty:
		return tail
	case tail.kind == kEmpty:
		return head
	}
	return &node{kind: kSeq, kids: []*node{head, tail}}
}

func either(a, b *node) *node {
	switch {
	case a.kind == kNever:
		return b
	case b.kind == kNever:
		return a
	}
	return &node{kind: kAlt, kids: []*node{a, b}}
}

// maxPathName bounds a property name or $ref as written into a schema
// path. A path only names a place, in errors and rule names, but every
// subschema below copies it: a long name would cost its length once per
// subschema under it.
const maxPathName = 64

// pathName is s shortened to maxPathName bytes for a schema path.
func pathName(s string) string {
	if len(s) <= maxPathName {
		return s
	}
	i := maxPathName
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

func ruleName(path, kind string, d int) string {
	name := path[strings.LastIndexByte(path, '/')+1:]
	if name == "#" || name == "" {
		name = kind
	}
	if d > 1 {
		name += "@" + strconv.Itoa(d)
	}
	return name
}

// extraKey matches the key of an additional property: a JSON string that
// is none of names. It walks a trie of the names: at each point the key may
// end (unless that spells a name), continue along the trie, or leave it
// with a character no name has there, after which anything may follow.
// Escapes are allowed only after leaving the trie (an escape could spell a
// name's character in another way).
func (c *schemaCompiler) extraKey(names []string) *node {
	if len(names) == 0 {
		return call(c.b.str)
	}
	if c.strRest == nil {
		c.strRest = &rule{name: "string-rest", body: seq(repeat(jsonChar(), 0, c.o.maxString()), lit(`"`))}
	}
	type trie struct {
		kids     map[rune]*trie
		order    []rune
		terminal bool
	}
	root := &trie{kids: map[rune]*trie{}}
	for _, name := range names {
		t := root
		for _, r := range name {
			k, ok := t.kids[r]
			if !ok {
				k = &trie{kids: map[rune]*trie{}}
				t.kids[r] = k
				t.order = append(t.order, r)
			}
			t = k
		}
		t.terminal = true
	}
	var build func(t *trie) *node
	build = func(t *trie) *node {
		var alts []*node
		if !t.terminal {
			alts = append(alts, lit(`"`))
		}
		var taken []rune
		for _, r := range t.order {
			enc := jsonQuote(string(r))
			enc = enc[1 : len(enc)-1]
			if !strings.HasPrefix(enc, `\`) {
				taken = append(taken, r)
			}
			alts = append(alts, seq(lit(enc), build(t.kids[r])))
		}
		alts = append(alts, seq(rawCharExcept(taken), call(c.strRest)))
		return alt(alts...)
	}
	return seq(lit(`"`), build(root))
}

// rawCharExcept matches one character written raw in a JSON string
// (U+0020 and up, except '"', '\' and surrogates) other than those in
// except.
func rawCharExcept(except []rune) *node {
	slices.Sort(except)
	ranges := [][2]rune{{0x20, 0x10ffff}}
	for _, r := range append(except, '"', '\\') {
		ranges = subtractRune(ranges, r)
	}
	return runeClassNode(ranges)
}

// subtractRune removes r from a sorted list of disjoint rune ranges.
func subtractRune(ranges [][2]rune, r rune) [][2]rune {
	var out [][2]rune
	for _, rg := range ranges {
		if r < rg[0] || r > rg[1] {
			out = append(out, rg)
			continue
		}
		if rg[0] < r {
			out = append(out, [2]rune{rg[0], r - 1})
		}
		if r < rg[1] {
			out = append(out, [2]rune{r + 1, rg[1]})
		}
	}
	return out
}

// arrayNode compiles an array schema at depth d into a rule.
func (c *schemaCompiler) arrayNode(s *jnode, d int, path string) (*node, error) {
	if d > c.o.maxDepth() {
		return neverNode, nil
	}
	k := schemaKey{s, d}
	if n, ok := c.objects[k]; ok {
		return n, nil
	}
	var prefix []*jnode
	restSchema := s.get("items")
	restPath := path + "/items"
	if p := s.get("prefixItems"); p != nil {
		if p.kind != 'a' {
			return nil, c.errf(path, "prefixItems must be an array")
		}
		prefix = p.items
	} else if restSchema != nil && restSchema.kind == 'a' {
		// Draft 4-7 tuple form: items is the prefix, additionalItems the rest.
		prefix = restSchema.items
		restSchema = s.get("additionalItems")
		restPath = path + "/additionalItems"
	}
	lo, err := c.count(s, "minItems", 0, path)
	if err != nil {
		return nil, err
	}
	hi, err := c.count(s, "maxItems", -1, path)
	if err != nil {
		return nil, err
	}
	if len(prefix) > maxUnroll {
		return nil, c.errf(path, "more than %d prefixItems", maxUnroll)
	}
	elems := make([]*node, len(prefix))
	for i, p := range prefix {
		n, err := c.compile(p, d+1, fmt.Sprintf("%s/prefixItems/%d", path, i))
		if err != nil {
			return nil, err
		}
		elems[i] = n
	}
	var rest *node
	if restSchema == nil {
		rest = c.b.value(d + 1)
	} else {
		if rest, err = c.compile(restSchema, d+1, restPath); err != nil {
			return nil, err
		}
	}
	if rest.kind == kNever && (hi < 0 || hi > len(prefix)) {
		hi = len(prefix)
	}
	if hi >= 0 && hi < lo {
		c.objects[k] = neverNode
		return neverNode, nil
	}
	elem := func(i int) *node {
		if i < len(prefix) {
			return elems[i]
		}
		return rest
	}
	ws := c.b.ws
	sep := seq(ws, lit(","), ws)
	// tail(i): elements i.. after element i-1 was written.
	var tail func(i int) *node
	tail = func(i int) *node {
		switch {
		case hi >= 0 && i >= hi:
			return emptyNode
		case hi < 0 && i >= len(prefix) && i >= lo:
			return repeat(seq(sep, rest), 0, -1)
		case i < lo:
			return seq(sep, elem(i), tail(i+1))
		}
		return opt(seq(sep, elem(i), tail(i+1)))
	}
	var body *node
	if hi == 0 {
		body = emptyNode
	} else {
		body = seq(elem(0), tail(1), ws)
		if lo == 0 {
			body = opt(body)
		}
	}
	result := neverNode
	if body.kind != kNever {
		result = call(&rule{name: ruleName(path, "array", d), body: seq(lit("["), ws, body, lit("]"))})
	}
	c.objects[k] = result
	return result, nil
}
