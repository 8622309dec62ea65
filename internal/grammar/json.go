package grammar

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// Options tune the JSON grammars. The zero value gives the defaults, which
// suit constrained decoding of model output.
type Options struct {
	// MaxIndent bounds JSON whitespace: wherever JSON allows whitespace the
	// grammar allows nothing, one space, or one newline followed by at most
	// MaxIndent spaces or tabs. 0 means 20, enough for pretty-printed
	// output a few levels deep; negative allows no whitespace at all. A
	// bound is what keeps a weak model from wandering in whitespace.
	MaxIndent int
	// MaxDepth bounds the nesting of arrays and objects, in free JSON
	// values and through recursive $ref. 0 means 32.
	MaxDepth int
	// AdditionalProperties makes object schemas without an
	// additionalProperties keyword accept extra properties, as JSON Schema
	// reads them. By default they do not, as in OpenAI's strict mode (the
	// output is valid either way; extra properties only add freedom).
	AdditionalProperties bool
	// MaxStringLength, when positive, bounds the characters of strings
	// the grammar leaves free: keys and values of free JSON, and schema
	// strings without maxLength (never below their minLength). A weak model
	// inside a string otherwise picks among almost every token and rarely
	// the few that close it. 0 means unbounded.
	MaxStringLength int
	// Lenient makes FromJSONSchema ignore keywords it cannot enforce
	// (minimum, multipleOf, uniqueItems, ...) instead of failing, and read
	// oneOf as anyOf. The output then has the schema's shape but may
	// violate those keywords.
	Lenient bool
}

// Digit bounds of generated JSON numbers: a model cannot run on forever
// inside a number, and every number parses as a float64 (|x| < 1e115).
const (
	maxIntDigits  = 16
	maxFracDigits = 16
	maxExpDigits  = 2
)

func (o Options) maxIndent() int {
	switch {
	case o.MaxIndent == 0:
		return 20
	case o.MaxIndent < 0:
		return -1
	}
	return o.MaxIndent
}

// maxString is the bound on free strings, -1 for none.
func (o Options) maxString() int {
	if o.MaxStringLength <= 0 {
		return -1
	}
	return o.MaxStringLength
}

func (o Options) maxDepth() int {
	if o.MaxDepth <= 0 {
		return 32
	}
	return o.MaxDepth
}

// jsonBuilder makes the shared pieces of JSON grammars: whitespace, the
// string, number and integer rules, and free values per nesting depth.
type jsonBuilder struct {
	o       Options
	ws      *node
	str     *rule
	num     *rule
	integer *rule
	values  map[int]*rule
}

// Shared rules: immutable once built, so grammars built separately (a
// schema inside a tool call object) reuse one automaton for each instead of
// carrying copies. The whitespace and string rules depend on Options; the
// defaults are shared, other settings get their own.
var (
	defaultIndent = Options{}.maxIndent()
	sharedWS      = wsRule(defaultIndent)
	sharedString  = stringRule(-1)
	sharedNumber  = &rule{name: "number", body: seq(
		integerNode(),
		opt(seq(lit("."), repeat(class(rangeSet('0', '9')), 1, maxFracDigits))),
		opt(seq(class(setOf("eE")), opt(class(setOf("+-"))), repeat(class(rangeSet('0', '9')), 1, maxExpDigits))),
	)}
	sharedInteger = &rule{name: "integer", body: integerNode()}
)

// wsRule is JSON whitespace as a rule of its own rather than inlined: its
// bounded indentation takes maxIndent states, which would otherwise be
// copied at every point of every rule where JSON allows whitespace.
func wsRule(maxIndent int) *node {
	return call(&rule{name: "ws", body: opt(alt(lit(" "), seq(lit("\n"), repeat(class(setOf(" \t")), 0, maxIndent))))})
}

func stringRule(maxLen int) *rule {
	return &rule{name: "string", body: seq(lit(`"`), repeat(jsonChar(), 0, maxLen), lit(`"`))}
}

func newJSONBuilder(o Options) *jsonBuilder {
	b := &jsonBuilder{o: o, values: map[int]*rule{}, num: sharedNumber, integer: sharedInteger, ws: sharedWS, str: sharedString}
	switch n := o.maxIndent(); {
	case n < 0:
		b.ws = emptyNode
	case n != defaultIndent:
		b.ws = wsRule(n)
	}
	if n := o.maxString(); n >= 0 {
		b.str = stringRule(n)
	}
	return b
}

func integerNode() *node {
	return seq(opt(lit("-")), alt(lit("0"), seq(class(rangeSet('1', '9')), repeat(class(rangeSet('0', '9')), 0, maxIntDigits-1))))
}

// jsonChar matches one character of a JSON string as it appears between
// the quotes: printable ASCII except " and \, a valid multi-byte UTF-8
// sequence (no overlongs, no surrogates), or an escape. \u escapes of
// UTF-16 surrogates are not generated, so every string decodes to valid
// Unicode and one grammar character is one code point.
func jsonChar() *node {
	var plain byteSet
	plain.addRange(0x20, 0x7f)
	plain[0] &^= 1 << '"'
	plain[1] &^= 1 << ('\\' - 64)
	return labeled("char", alt(class(&plain), utf8Multi(), jsonEscape()))
}

func jsonEscape() *node {
	hex := class(setOf("0123456789abcdefABCDEF"))
	notD := class(setOf("0123456789abcefABCEF"))
	return seq(lit(`\`), alt(
		class(setOf(`"\/bfnrt`)),
		seq(lit("u"), alt(seq(notD, hex, hex, hex), seq(class(setOf("dD")), class(rangeSet('0', '7')), hex, hex))),
	))
}

// utf8Multi matches one well-formed UTF-8 sequence of 2 to 4 bytes.
func utf8Multi() *node {
	cont := class(rangeSet(0x80, 0xbf))
	return alt(
		seq(class(rangeSet(0xc2, 0xdf)), cont),
		seq(lit("\xe0"), class(rangeSet(0xa0, 0xbf)), cont),
		seq(class(rangeSet(0xe1, 0xec)), cont, cont),
		seq(lit("\xed"), class(rangeSet(0x80, 0x9f)), cont),
		seq(class(rangeSet(0xee, 0xef)), cont, cont),
		seq(lit("\xf0"), class(rangeSet(0x90, 0xbf)), cont, cont),
		seq(class(rangeSet(0xf1, 0xf3)), cont, cont, cont),
		seq(lit("\xf4"), class(rangeSet(0x80, 0x8f)), cont, cont),
	)
}

// value returns a call of the free JSON value rule at nesting depth d: the
// value's own array or object, if any, would be at depth d. Containers are
// allowed up to MaxDepth; deeper values are scalars.
func (b *jsonBuilder) value(d int) *node {
	r, ok := b.values[d]
	if !ok {
		r = &rule{name: "value" + strconv.Itoa(d)}
		b.values[d] = r
		alts := []*node{call(b.str), call(b.num), lit("true"), lit("false"), lit("null")}
		if d <= b.o.maxDepth() {
			alts = append(alts, b.object(d), b.array(d))
		}
		r.body = alt(alts...)
	}
	return call(r)
}

// object is a free object at depth d (members at depth d+1).
func (b *jsonBuilder) object(d int) *node {
	member := seq(call(b.str), b.ws, lit(":"), b.ws, b.value(d+1))
	return b.container("{", "}", member, 0, -1)
}

// array is a free array at depth d.
func (b *jsonBuilder) array(d int) *node {
	return b.container("[", "]", b.value(d+1), 0, -1)
}

// container is open ws (item (ws "," ws item){lo-1,hi-1} ws)? close.
func (b *jsonBuilder) container(open, close string, item *node, lo, hi int) *node {
	sep := seq(b.ws, lit(","), b.ws)
	var items *node
	switch {
	case hi == 0:
		items = emptyNode
	case hi < 0:
		items = seq(item, repeat(seq(sep, item), max(lo-1, 0), -1), b.ws)
	default:
		items = seq(item, repeat(seq(sep, item), max(lo-1, 0), hi-1), b.ws)
	}
	if lo == 0 {
		items = opt(items)
	}
	return seq(lit(open), b.ws, items, lit(close))
}

// JSONValue returns a grammar of any JSON value, with the default Options.
func JSONValue() *Grammar { return Options{}.JSONValue() }

// JSONObject returns a grammar of any JSON object (OpenAI's
// response_format json_object), with the default Options.
func JSONObject() *Grammar { return Options{}.JSONObject() }

// JSONValue returns a grammar of any JSON value.
func (o Options) JSONValue() *Grammar {
	b := newJSONBuilder(o)
	return newGrammar(b.value(1))
}

// JSONObject returns a grammar of any JSON object.
func (o Options) JSONObject() *Grammar {
	b := newJSONBuilder(o)
	return newGrammar(b.object(1))
}

// Field is one member of an object built by Object: a name and a grammar
// for its value (typically FromJSONSchema, JSONString or Literal).
type Field struct {
	Name  string
	Value *Grammar
}

// Object returns a grammar of a JSON object with exactly the given members
// in the given order, e.g. a tool call {"name": "get_weather",
// "arguments": <schema>}, with the default Options.
func Object(fields ...Field) *Grammar { return Options{}.Object(fields...) }

// Object returns a grammar of a JSON object with exactly the given members
// in the given order.
func (o Options) Object(fields ...Field) *Grammar {
	b := newJSONBuilder(o)
	sep := seq(b.ws, lit(","), b.ws)
	parts := []*node{lit("{"), b.ws}
	for i, f := range fields {
		if i > 0 {
			parts = append(parts, sep)
		}
		parts = append(parts, lit(jsonQuote(f.Name)), b.ws, lit(":"), b.ws, f.Value.root)
	}
	if len(fields) > 0 {
		parts = append(parts, b.ws)
	}
	parts = append(parts, lit("}"))
	return newGrammar(seq(parts...))
}

// JSONString returns a grammar matching exactly s as a JSON string literal
// (quoted and escaped).
func JSONString(s string) *Grammar { return Literal(jsonQuote(s)) }

// jsonQuote encodes s as a JSON string without HTML escaping.
func jsonQuote(s string) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // strings always encode
	return string(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
}
