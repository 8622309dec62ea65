// Package grammar constrains sampling so that generated text is a sentence
// of a grammar: any JSON value, a JSON object, an instance of a JSON Schema,
// or one tool call in a model's own format. It is what lets the API promise
// `response_format: json_schema` and forced `tool_choice` even for a small
// model, or a model with random weights: the model still chooses every
// token, but only among tokens that keep the output a valid prefix.
//
// The pieces, in the order data flows through them:
//
//   - A Grammar is an immutable tree of byte-level expressions (literals,
//     byte classes, sequences, choices, bounded repetition) and rules that
//     other rules call. JSONValue, JSONObject, FromJSONSchema, Literal,
//     Sequence, Choice, Object and Repeat build them; nothing in the public
//     API can express unbounded recursion (JSON nesting and recursive $ref
//     are unrolled to Options.MaxDepth), so every grammar terminates.
//   - On first use a grammar compiles to a program: one DFA per rule whose
//     alphabet is bytes plus "call rule R" (a recursive transition network).
//     Inside a rule everything is deterministic; nondeterminism is left only
//     where a call competes with bytes or other calls.
//   - Per Vocab the program is restricted to the bytes that the vocabulary
//     has single-byte tokens for, and every state from which the grammar can
//     no longer be finished is removed. So every prefix the matcher allows
//     has a completion that the vocabulary can spell: no deadlock, even for
//     the tiny models' vocabulary that has no bytes above 0x7F.
//   - A Matcher holds a set of stacks (state plus return frames, shared in
//     an arena). Process walks the vocabulary's byte trie in preorder and
//     skips a whole subtree as soon as its prefix is rejected. Walks are
//     cached per state in the Vocab: the cached mask of a state holds the
//     tokens that stay inside the state's rule, and the trie nodes after
//     which the rule can end ("escapes"); only the subtrees under escapes
//     are walked again per token, with the real caller stack. Cache keys are
//     structural hashes of the reachable automaton, so the string-content
//     states of every JSON grammar share one entry.
//
// Use: build one Vocab per tokenizer and keep it (it holds the shared mask
// cache); build JSONValue/JSONObject grammars once and reuse them; schema
// grammars are cheap to build per request (a typical tool schema compiles
// in well under a millisecond) but worth caching by schema text when
// clients repeat them. Masking costs about 2-5 µs per token inside strings
// and 0.1-0.5 ms elsewhere for a 152k vocabulary once masks are cached; a
// cache miss walks the trie (about 3 ms for the string-content state of a
// 152k vocabulary, once per vocabulary).
//
// Limits, all errors rather than hangs: schema documents nest at most 256
// deep, counts (minItems, maxLength, ...) at most 4096, automata at most
// 131072 DFA states built in a bounded number of steps. An object's
// optional properties cost steps quadratic in their number, so objects
// with more than about a thousand of them are refused.
//
// A Grammar is safe for concurrent use; a Matcher serves one sample.
package grammar

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// nodeKind is the kind of one expression node.
type nodeKind uint8

const (
	kEmpty  nodeKind = iota // matches the empty string
	kNever                  // matches nothing
	kBytes                  // the literal byte string lit
	kClass                  // one byte of set
	kSeq                    // kids in order
	kAlt                    // one of kids
	kRepeat                 // kids[0] repeated min..max times (max < 0: unbounded)
	kCall                   // rule, as a separate automaton with its own stack frame
)

// node is one expression of a grammar. Nodes are immutable once built and
// freely shared between grammars (a grammar is a DAG of nodes).
type node struct {
	kind     nodeKind
	lit      string
	set      *byteSet
	kids     []*node
	min, max int
	rule     *rule
	// label, when set, names the node in String (e.g. "ws"): the node is
	// printed as its label and defined once below the rules.
	label string
}

// rule is a named expression compiled as its own automaton. Calls to rules
// are what let grammars share sub-automata (JSON strings, numbers, nested
// values) instead of inlining copies, and what makes cached masks reusable.
type rule struct {
	name string
	body *node
}

var (
	emptyNode = &node{kind: kEmpty}
	neverNode = &node{kind: kNever}
)

func lit(s string) *node {
	if s == "" {
		return emptyNode
	}
	return &node{kind: kBytes, lit: s}
}

func class(s *byteSet) *node { return &node{kind: kClass, set: s} }

// seq concatenates nodes, flattening nested sequences and dropping empty
// ones; a Never part makes the whole sequence Never.
func seq(parts ...*node) *node {
	var kids []*node
	for _, p := range parts {
		switch p.kind {
		case kNever:
			return neverNode
		case kEmpty:
			continue
		case kSeq:
			if p.label == "" {
				kids = append(kids, p.kids...)
				continue
			}
		}
		kids = append(kids, p)
	}
	switch len(kids) {
	case 0:
		return emptyNode
	case 1:
		return kids[0]
	}
	return &node{kind: kSeq, kids: kids}
}

// alt is a choice between nodes; Never alternatives are dropped.
func alt(alts ...*node) *node {
	var kids []*node
	for _, a := range alts {
		switch a.kind {
		case kNever:
			continue
		case kAlt:
			if a.label == "" {
				kids = append(kids, a.kids...)
				continue
			}
		}
		kids = append(kids, a)
	}
	switch len(kids) {
	case 0:
		return neverNode
	case 1:
		return kids[0]
	}
	return &node{kind: kAlt, kids: kids}
}

func opt(n *node) *node { return alt(emptyNode, n) }

// repeat matches n between lo and hi times; hi < 0 means unbounded.
func repeat(n *node, lo, hi int) *node {
	if hi >= 0 && hi < lo {
		return neverNode
	}
	if hi == 0 || n.kind == kEmpty {
		return emptyNode
	}
	if n.kind == kNever {
		if lo == 0 {
			return emptyNode
		}
		return neverNode
	}
	if lo == 1 && hi == 1 {
		return n
	}
	return &node{kind: kRepeat, kids: []*node{n}, min: lo, max: hi}
}

func call(r *rule) *node { return &node{kind: kCall, rule: r} }

func labeled(label string, n *node) *node {
	c := *n
	c.label = label
	return &c
}

// Grammar is a compiled, immutable grammar over bytes. It is safe for
// concurrent use: the program is compiled once, on first use, and the
// per-vocabulary automata are built once per Vocab and then shared by every
// Matcher.
type Grammar struct {
	root *node

	once sync.Once
	prog *program
	err  error

	mu    sync.Mutex
	autos map[*Vocab]*automaton
	// scope keys the vocabulary's mask cache for this grammar's states
	// (SetCacheScope).
	scope string
}

func newGrammar(root *node) *Grammar { return &Grammar{root: root} }

// SetCacheScope makes the token masks this grammar's states compute be
// cached in a vocabulary under scope (a tenant), so that a grammar of
// another scope never finds them: one tenant's schema (its property
// names, its enum values) cannot make another's faster. Call it before the
// grammar's first matcher.
func (g *Grammar) SetCacheScope(scope string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.scope = scope
}

// Literal returns a grammar matching exactly the bytes of s.
func Literal(s string) *Grammar { return newGrammar(lit(s)) }

// Sequence returns a grammar matching its parts one after another.
func Sequence(parts ...*Grammar) *Grammar {
	nodes := make([]*node, len(parts))
	for i, p := range parts {
		nodes[i] = p.root
	}
	return newGrammar(seq(nodes...))
}

// Choice returns a grammar matching any one of alts (nothing, if alts is
// empty), e.g. tool_choice "required" over several tools.
func Choice(alts ...*Grammar) *Grammar {
	nodes := make([]*node, len(alts))
	for i, a := range alts {
		nodes[i] = a.root
	}
	return newGrammar(alt(nodes...))
}

// Repeat returns a grammar matching g between min and max times; max < 0
// means no upper bound. Parallel tool calls, for instance, are one call
// followed by Repeat(Sequence(separator, call), 0, n-1).
func Repeat(g *Grammar, min, max int) *Grammar {
	if min < 0 {
		min = 0
	}
	return newGrammar(repeat(g.root, min, max))
}

// Check compiles g and reports an error when it is too large to compile or
// matches nothing at all. FromJSONSchema already checks; grammars built by
// combinators are otherwise checked on first use, and a Matcher of a
// grammar that fails reports the error from Err.
func (g *Grammar) Check() error {
	_, err := g.program()
	return err
}

// program compiles g once; errors carry the package prefix.
func (g *Grammar) program() (*program, error) {
	g.once.Do(func() {
		var err error
		g.prog, err = compileProgram(g.root)
		if err == nil && !g.prog.satisfiable() {
			err = errors.New("the grammar matches no text")
		}
		if err != nil {
			g.err = fmt.Errorf("grammar: %w", err)
		}
	})
	return g.prog, g.err
}

// String returns the grammar in a readable BNF-like notation, one rule per
// line, root first: literals in double quotes with Go escapes, byte classes
// in brackets, x? x* x+ x{m,n} for repetition, rule names for calls.
func (g *Grammar) String() string {
	p := printer{names: map[*rule]string{}, used: map[string]bool{}, labels: map[string]*node{}}
	root := &rule{name: "root", body: g.root}
	p.name(root)
	var sb strings.Builder
	for i := 0; i < len(p.queue); i++ {
		r := p.queue[i]
		body := p.expr(r.body, 0)
		fmt.Fprintf(&sb, "%s ::= %s\n", p.names[r], body)
	}
	for i := 0; i < len(p.labelOrder); i++ {
		l := p.labelOrder[i]
		n := *p.labels[l]
		n.label = ""
		fmt.Fprintf(&sb, "%s ::= %s\n", l, p.expr(&n, 0))
	}
	return strings.TrimSuffix(sb.String(), "\n")
}

// printer renders nodes for String.
type printer struct {
	names      map[*rule]string
	used       map[string]bool
	queue      []*rule
	labels     map[string]*node
	labelOrder []string
}

func (p *printer) name(r *rule) string {
	if n, ok := p.names[r]; ok {
		return n
	}
	base := r.name
	if base == "" {
		base = "rule"
	}
	n := base
	for i := 2; p.used[n]; i++ {
		n = base + "-" + strconv.Itoa(i)
	}
	p.used[n] = true
	p.names[r] = n
	p.queue = append(p.queue, r)
	return n
}

// expr renders n; prec is the binding strength the context needs
// (0: anything, 1: inside a sequence, 2: operand of a postfix operator).
func (p *printer) expr(n *node, prec int) string {
	if n.label != "" {
		if _, ok := p.labels[n.label]; !ok {
			p.labels[n.label] = n
			p.labelOrder = append(p.labelOrder, n.label)
		}
		return n.label
	}
	switch n.kind {
	case kEmpty:
		return `""`
	case kNever:
		return "NEVER"
	case kBytes:
		return strconv.Quote(n.lit)
	case kClass:
		if n.set.count() == 1 {
			for b := range 256 {
				if n.set.has(byte(b)) {
					return strconv.Quote(string([]byte{byte(b)}))
				}
			}
		}
		return n.set.String()
	case kCall:
		return p.name(n.rule)
	case kSeq:
		parts := make([]string, len(n.kids))
		for i, k := range n.kids {
			parts[i] = p.expr(k, 1)
		}
		s := strings.Join(parts, " ")
		if prec >= 2 {
			return "(" + s + ")"
		}
		return s
	case kAlt:
		var rest []*node
		optional := false
		for _, k := range n.kids {
			if k.kind == kEmpty && k.label == "" {
				optional = true
				continue
			}
			rest = append(rest, k)
		}
		if optional && len(rest) == 1 {
			return p.expr(rest[0], 2) + "?"
		}
		parts := make([]string, len(rest))
		for i, k := range rest {
			parts[i] = p.expr(k, 0)
		}
		s := strings.Join(parts, " | ")
		if optional {
			return "(" + s + ")?"
		}
		if prec >= 1 {
			return "(" + s + ")"
		}
		return s
	case kRepeat:
		var op string
		switch {
		case n.min == 0 && n.max < 0:
			op = "*"
		case n.min == 1 && n.max < 0:
			op = "+"
		case n.max < 0:
			op = fmt.Sprintf("{%d,}", n.min)
		case n.min == n.max:
			op = fmt.Sprintf("{%d}", n.min)
		default:
			op = fmt.Sprintf("{%d,%d}", n.min, n.max)
		}
		return p.expr(n.kids[0], 2) + op
	}
	return "?"
}
