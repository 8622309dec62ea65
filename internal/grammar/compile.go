package grammar

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// byteSet is a set of bytes, one bit per byte value.
type byteSet [4]uint64

func (s *byteSet) has(b byte) bool { return s[b>>6]>>(b&63)&1 != 0 }
func (s *byteSet) add(b byte)      { s[b>>6] |= 1 << (b & 63) }

func (s *byteSet) addRange(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		s.add(byte(c))
	}
}

func (s *byteSet) count() int {
	return bits.OnesCount64(s[0]) + bits.OnesCount64(s[1]) + bits.OnesCount64(s[2]) + bits.OnesCount64(s[3])
}

// runs returns the maximal ranges [lo, hi] of s in increasing order.
func (s *byteSet) runs() [][2]byte {
	var out [][2]byte
	for c := 0; c < 256; {
		if !s.has(byte(c)) {
			c++
			continue
		}
		lo := c
		for c < 256 && s.has(byte(c)) {
			c++
		}
		out = append(out, [2]byte{byte(lo), byte(c - 1)})
	}
	return out
}

func setOf(chars string) *byteSet {
	var s byteSet
	for i := 0; i < len(chars); i++ {
		s.add(chars[i])
	}
	return &s
}

func rangeSet(lo, hi byte) *byteSet {
	var s byteSet
	s.addRange(lo, hi)
	return &s
}

// String renders the set as a bracketed class, e.g. [0-9a-f].
func (s *byteSet) String() string {
	var sb strings.Builder
	sb.WriteByte('[')
	for _, r := range s.runs() {
		sb.WriteString(classChar(r[0]))
		if r[1] > r[0] {
			if r[1] > r[0]+1 {
				sb.WriteByte('-')
			}
			sb.WriteString(classChar(r[1]))
		}
	}
	sb.WriteByte(']')
	return sb.String()
}

func classChar(b byte) string {
	switch {
	case b == '\\' || b == ']' || b == '-' || b == '^':
		return `\` + string(b)
	case b >= 0x20 && b < 0x7f:
		return string(b)
	case b == '\n':
		return `\n`
	case b == '\t':
		return `\t`
	}
	return fmt.Sprintf(`\x%02X`, b)
}

// singleSets holds the one-byte sets literals compile to (read-only).
var singleSets = func() (t [256]byteSet) {
	for b := range 256 {
		t[b].add(byte(b))
	}
	return t
}()

// Compile limits: a grammar whose automata exceed them is rejected with an
// error instead of exhausting memory (hostile schemas: huge maxItems or
// maxLength, huge enums).
const (
	maxNFAStates = 1 << 21
	maxDFAStates = 1 << 17
	// maxDFAWork bounds the NFA states visited by the subset construction
	// of one grammar. The state limit alone does not bound the time: an
	// object with many optional properties has states whose subsets hold
	// every property after them, so the work grows with the square of
	// their number long before the states run out.
	maxDFAWork = 1 << 25
)

// program is a grammar compiled to one DFA per rule over the alphabet
// bytes ∪ {call R}. States of all rules share one index space; a rule's
// states are contiguous and its start state is the first. A call edge
// (R, ret) means: run rule R from its start, and when it reaches a final
// state continue at ret.
type program struct {
	states    []pstate
	ranges    []prange
	calls     []pcall
	ruleStart []int32
	ruleName  []string
}

type pstate struct {
	final  bool
	r0, r1 int32 // byte transitions ranges[r0:r1], sorted, disjoint
	c0, c1 int32 // call transitions calls[c0:c1]
}

type prange struct {
	lo, hi byte
	to     int32
}

type pcall struct {
	rule, ret int32
}

// compileProgram compiles the rules reachable from root (rule 0).
func compileProgram(root *node) (*program, error) {
	rules := []*rule{{name: "root", body: root}}
	index := map[*rule]int32{}
	seen := map[*node]bool{}
	var visit func(n *node)
	visit = func(n *node) {
		if seen[n] {
			return
		}
		seen[n] = true
		if n.kind == kCall {
			if _, ok := index[n.rule]; !ok {
				index[n.rule] = int32(len(rules))
				rules = append(rules, n.rule)
			}
		}
		for _, k := range n.kids {
			visit(k)
		}
	}
	for i := 0; i < len(rules); i++ {
		visit(rules[i].body)
	}
	p := &program{ruleStart: make([]int32, len(rules)), ruleName: make([]string, len(rules))}
	b := &nfaBuilder{ruleIndex: index}
	for i, r := range rules {
		p.ruleName[i] = r.name
		b.reset()
		acc := b.add(nstate{kind: nAccept})
		start, err := b.build(r.body, acc)
		if err != nil {
			return nil, err
		}
		s, err := p.determinize(b, start)
		if err != nil {
			return nil, err
		}
		p.ruleStart[i] = s
	}
	for i := range p.calls {
		p.calls[i].rule = p.ruleStart[p.calls[i].rule] // from rule index to start state
	}
	if err := p.checkNullableCycles(); err != nil {
		return nil, err
	}
	return p, nil
}

// NFA states built by continuation passing: build(n, k) returns a state that
// matches n and then continues at k.
const (
	nEps uint8 = iota
	nByte
	nCall
	nAccept
)

type nstate struct {
	kind uint8
	set  *byteSet
	rule int32
	to   int32
	eps  []int32
}

type nfaBuilder struct {
	st        []nstate
	memo      map[nfaKey]int32
	ruleIndex map[*rule]int32
	total     int // build calls, against maxNFAStates
	work      int // subset-construction steps of all rules, against maxDFAWork
}

type nfaKey struct {
	n *node
	k int32
}

func (b *nfaBuilder) reset() {
	b.st = b.st[:0]
	b.memo = map[nfaKey]int32{}
}

func (b *nfaBuilder) add(s nstate) int32 {
	b.st = append(b.st, s)
	return int32(len(b.st) - 1)
}

func (b *nfaBuilder) eps(targets ...int32) int32 {
	var t []int32
	for _, x := range targets {
		if x >= 0 {
			t = append(t, x)
		}
	}
	if len(t) == 0 {
		return -1
	}
	if len(t) == 1 {
		return t[0]
	}
	return b.add(nstate{kind: nEps, eps: t})
}

var (
	errTooLarge    = fmt.Errorf("too large to compile (more than %d automaton states)", maxNFAStates)
	errTooMuchWork = fmt.Errorf("too large to compile (more than %d steps to build the DFA)", maxDFAWork)
)

// build returns the start of an automaton for n continuing at k, or -1 when
// n matches nothing.
func (b *nfaBuilder) build(n *node, k int32) (int32, error) {
	if k < 0 {
		return -1, nil
	}
	key := nfaKey{n, k}
	if s, ok := b.memo[key]; ok {
		return s, nil
	}
	if b.total++; b.total > maxNFAStates || len(b.st) > maxNFAStates {
		return -1, errTooLarge
	}
	s, err := b.build1(n, k)
	if err != nil {
		return -1, err
	}
	b.memo[key] = s
	return s, nil
}

func (b *nfaBuilder) build1(n *node, k int32) (int32, error) {
	switch n.kind {
	case kEmpty:
		return k, nil
	case kNever:
		return -1, nil
	case kBytes:
		s := k
		for i := len(n.lit) - 1; i >= 0; i-- {
			s = b.add(nstate{kind: nByte, set: &singleSets[n.lit[i]], to: s})
		}
		return s, nil
	case kClass:
		if n.set.count() == 0 {
			return -1, nil
		}
		return b.add(nstate{kind: nByte, set: n.set, to: k}), nil
	case kCall:
		return b.add(nstate{kind: nCall, rule: b.ruleIndex[n.rule], to: k}), nil
	case kSeq:
		s := k
		for i := len(n.kids) - 1; i >= 0 && s >= 0; i-- {
			var err error
			if s, err = b.build(n.kids[i], s); err != nil {
				return -1, err
			}
		}
		return s, nil
	case kAlt:
		starts := make([]int32, 0, len(n.kids))
		for _, kid := range n.kids {
			s, err := b.build(kid, k)
			if err != nil {
				return -1, err
			}
			starts = append(starts, s)
		}
		return b.eps(starts...), nil
	case kRepeat:
		x := n.kids[0]
		var s int32
		if n.max < 0 {
			loop := b.add(nstate{kind: nEps})
			body, err := b.build(x, loop)
			if err != nil {
				return -1, err
			}
			b.st[loop].eps = []int32{k}
			if body >= 0 && body != loop {
				b.st[loop].eps = []int32{body, k}
			}
			s = loop
		} else {
			// x{0,m} = (x (x (…)?)?)?
			s = k
			for i := 0; i < n.max-n.min; i++ {
				if b.total++; b.total > maxNFAStates {
					return -1, errTooLarge
				}
				body, err := b.build(x, s)
				if err != nil {
					return -1, err
				}
				s = b.eps(body, k)
			}
		}
		for i := 0; i < n.min && s >= 0; i++ {
			if b.total++; b.total > maxNFAStates {
				return -1, errTooLarge
			}
			var err error
			if s, err = b.build(x, s); err != nil {
				return -1, err
			}
		}
		return s, nil
	}
	return -1, fmt.Errorf("unknown node kind %d", n.kind)
}

// determinize runs the subset construction for one rule's NFA and appends
// the DFA states to p. Call symbols are part of the alphabet: two NFA
// states calling the same rule merge, so alternatives sharing a prefix
// (including a call) stay deterministic.
func (p *program) determinize(b *nfaBuilder, start int32) (int32, error) {
	if start < 0 {
		// The rule matches nothing: a state with no way out.
		p.states = append(p.states, pstate{r0: int32(len(p.ranges)), r1: int32(len(p.ranges)), c0: int32(len(p.calls)), c1: int32(len(p.calls))})
		return int32(len(p.states) - 1), nil
	}
	d := &dfaBuilder{b: b, runMemo: map[*byteSet][][2]byte{}, ids: map[string]int32{}, mark: make([]uint32, len(b.st)), base: int32(len(p.states))}
	first := d.state(p, []int32{start})
	for i := 0; i < len(d.queue); i++ {
		if len(p.states) > maxDFAStates {
			return -1, fmt.Errorf("too large to compile (more than %d DFA states)", maxDFAStates)
		}
		if b.work > maxDFAWork {
			return -1, errTooMuchWork
		}
		id := d.base + int32(i)
		set := d.queue[i]
		var byteStates, callStates []int32
		for _, s := range set {
			switch b.st[s].kind {
			case nByte:
				byteStates = append(byteStates, s)
			case nCall:
				callStates = append(callStates, s)
			}
		}
		// Byte transitions: cut 0..255 at every boundary of every set.
		var cut [257]bool
		for _, s := range byteStates {
			for _, r := range d.runs(b.st[s].set) {
				cut[r[0]] = true
				cut[int(r[1])+1] = true
			}
		}
		r0 := int32(len(p.ranges))
		var targets []int32
		for lo := 0; lo < 256; {
			hi := lo + 1
			for hi < 256 && !cut[hi] {
				hi++
			}
			if b.work > maxDFAWork {
				return -1, errTooMuchWork
			}
			targets = targets[:0]
			b.work += len(byteStates)
			for _, s := range byteStates {
				if b.st[s].set.has(byte(lo)) {
					targets = append(targets, b.st[s].to)
				}
			}
			if len(targets) > 0 {
				to := d.state(p, targets)
				if n := len(p.ranges); n > int(r0) && p.ranges[n-1].to == to && int(p.ranges[n-1].hi)+1 == lo {
					p.ranges[n-1].hi = byte(hi - 1)
				} else {
					p.ranges = append(p.ranges, prange{lo: byte(lo), hi: byte(hi - 1), to: to})
				}
			}
			lo = hi
		}
		r1 := int32(len(p.ranges))
		// Call transitions, grouped by rule.
		c0 := int32(len(p.calls))
		slices.SortFunc(callStates, func(x, y int32) int { return int(b.st[x].rule) - int(b.st[y].rule) })
		for j := 0; j < len(callStates); {
			r := b.st[callStates[j]].rule
			targets = targets[:0]
			for ; j < len(callStates) && b.st[callStates[j]].rule == r; j++ {
				targets = append(targets, b.st[callStates[j]].to)
			}
			p.calls = append(p.calls, pcall{rule: r, ret: d.state(p, targets)})
		}
		c1 := int32(len(p.calls))
		p.states[id].r0, p.states[id].r1 = r0, r1
		p.states[id].c0, p.states[id].c1 = c0, c1
	}
	return first, nil
}

type dfaBuilder struct {
	b       *nfaBuilder
	runMemo map[*byteSet][][2]byte
	ids     map[string]int32
	queue   [][]int32
	mark    []uint32
	gen     uint32
	stack   []int32
	key     []byte
	base    int32
}

// runs returns s.runs(), computed once per set.
func (d *dfaBuilder) runs(s *byteSet) [][2]byte {
	r, ok := d.runMemo[s]
	if !ok {
		r = s.runs()
		d.runMemo[s] = r
	}
	return r
}

// state returns the DFA state for the ε-closure of seeds, creating it.
func (d *dfaBuilder) state(p *program, seeds []int32) int32 {
	d.gen++
	var labeled []int32
	final := false
	d.stack = append(d.stack[:0], seeds...)
	for len(d.stack) > 0 {
		s := d.stack[len(d.stack)-1]
		d.stack = d.stack[:len(d.stack)-1]
		if s < 0 || d.mark[s] == d.gen {
			continue
		}
		d.mark[s] = d.gen
		d.b.work++
		switch st := &d.b.st[s]; st.kind {
		case nEps:
			d.stack = append(d.stack, st.eps...)
		case nAccept:
			final = true
		case nByte, nCall:
			labeled = append(labeled, s)
		}
	}
	slices.Sort(labeled)
	d.key = d.key[:0]
	if final {
		d.key = append(d.key, 1)
	} else {
		d.key = append(d.key, 0)
	}
	for _, s := range labeled {
		d.key = binary.LittleEndian.AppendUint32(d.key, uint32(s))
	}
	if id, ok := d.ids[string(d.key)]; ok {
		return id
	}
	id := int32(len(p.states))
	d.ids[string(d.key)] = id
	p.states = append(p.states, pstate{final: final})
	d.queue = append(d.queue, labeled)
	return id
}

// nullable returns, per state, whether a final state is reachable from it
// through calls of rules that can match the empty string, consuming no byte.
func (p *program) nullable() []bool {
	null := make([]bool, len(p.states))
	for changed := true; changed; {
		changed = false
		for s := len(p.states) - 1; s >= 0; s-- {
			if null[s] {
				continue
			}
			st := &p.states[s]
			ok := st.final
			for c := st.c0; c < st.c1 && !ok; c++ {
				ok = null[p.calls[c].rule] && null[p.calls[c].ret]
			}
			if ok {
				null[s] = true
				changed = true
			}
		}
	}
	return null
}

// checkNullableCycles rejects grammars in which a state can reach itself
// through calls without consuming a byte (left recursion): expanding such a
// state would never end. The public constructors cannot build one; this is
// the safety net that keeps the matcher's closure finite.
func (p *program) checkNullableCycles() error {
	null := p.nullable()
	const (
		white = iota
		grey
		black
	)
	color := make([]uint8, len(p.states))
	type frame struct {
		s    int32
		next int32 // next edge index: calls[c0+next/2], even = callee, odd = ret
	}
	for root := range p.states {
		if color[root] != white {
			continue
		}
		stack := []frame{{s: int32(root)}}
		color[root] = grey
		for len(stack) > 0 {
			f := &stack[len(stack)-1]
			st := &p.states[f.s]
			n := 2 * (st.c1 - st.c0)
			if f.next >= n {
				color[f.s] = black
				stack = stack[:len(stack)-1]
				continue
			}
			c := p.calls[st.c0+f.next/2]
			var to int32 = -1
			if f.next%2 == 0 {
				to = c.rule
			} else if null[c.rule] {
				to = c.ret
			}
			f.next++
			if to < 0 {
				continue
			}
			switch color[to] {
			case grey:
				return fmt.Errorf("left-recursive grammar (state %d reaches itself without consuming input)", to)
			case white:
				color[to] = grey
				stack = append(stack, frame{s: to})
			}
		}
	}
	return nil
}

// satisfiable reports whether the root rule matches at least one string
// over all 256 bytes.
func (p *program) satisfiable() bool {
	var all byteSet
	all.addRange(0, 255)
	prod := p.productive(&all)
	return prod[p.ruleStart[0]]
}

// productive returns, per state, whether a final state of its rule is
// reachable using only bytes in allowed and calls of rules that can
// themselves finish (then continuing from productive return states).
func (p *program) productive(allowed *byteSet) []bool {
	prod := make([]bool, len(p.states))
	for changed := true; changed; {
		changed = false
		for s := len(p.states) - 1; s >= 0; s-- {
			if prod[s] {
				continue
			}
			st := &p.states[s]
			ok := st.final
			for r := st.r0; r < st.r1 && !ok; r++ {
				rg := p.ranges[r]
				ok = prod[rg.to] && rangeIntersects(allowed, rg.lo, rg.hi)
			}
			for c := st.c0; c < st.c1 && !ok; c++ {
				ok = prod[p.calls[c].rule] && prod[p.calls[c].ret]
			}
			if ok {
				prod[s] = true
				changed = true
			}
		}
	}
	return prod
}

func rangeIntersects(s *byteSet, lo, hi byte) bool {
	for c := int(lo); c <= int(hi); c++ {
		if s.has(byte(c)) {
			return true
		}
	}
	return false
}
