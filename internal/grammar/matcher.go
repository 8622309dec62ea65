package grammar

import (
	"fmt"
	"math"
	"math/bits"
)

// Stack representation. A matcher's state is a set of elements; an element
// is a current automaton state (always one with byte transitions) plus a
// parent frame. Frames form parent-linked stacks in an arena, shared by
// elements: frame{ret, parent} says "when the rule running above returns,
// continue at state ret with parent as the next frame". Two sentinels end
// every chain: rootFrame (returning past it completes the grammar) and
// bottomFrame (used when walking a state with an unknown caller: returning
// past it is an escape, recorded for the caller to resolve).
const (
	rootFrame   int32 = -1
	bottomFrame int32 = -2
)

type elem struct {
	st, parent int32
}

type frame struct {
	ret, parent int32
}

// maxElems bounds a stack set. Sets grow only where calls compete with
// bytes for the same input (e.g. anyOf over objects sharing a prefix);
// dropping extras is sound (each kept element is still a valid way to
// continue) and keeps hostile grammars from exploding.
const maxElems = 256

// walker holds the working memory of trie walks and token advances: the
// frame arena and one element set per trie depth. It never allocates once
// its slices have grown to the grammar's needs.
type walker struct {
	a      *automaton
	v      *Vocab
	frames []frame
	elems  []elem
	start  []int32 // per depth: the set is elems[start[d]:end[d]]
	end    []int32
	fmark  []int32 // per depth: len(frames) after the set was built
	setLo  int32   // first element of the set being built (for dedup)
	popped bool    // a return past the chain's sentinel happened
}

func (w *walker) init(a *automaton) {
	w.a, w.v = a, a.v
	n := a.v.maxDepth + 2
	w.start = make([]int32, n)
	w.end = make([]int32, n)
	w.fmark = make([]int32, n)
}

// closure adds the elements for being in state st with parent frame: st
// itself if it reads bytes, the callee start of each call (pushing the
// return frame), and, if st is final, whatever follows the return.
func (w *walker) closure(st, parent int32) {
	s := &w.a.states[st]
	if s.flags&fSimple != 0 {
		w.addElem(st, parent)
		return
	}
	if s.flags&fBytes != 0 {
		w.addElem(st, parent)
	}
	for c := s.c0; c < s.c1; c++ {
		cl := w.a.calls[c]
		w.frames = append(w.frames, frame{ret: cl.ret, parent: parent})
		w.closure(cl.start, int32(len(w.frames)-1))
	}
	if s.flags&fFinal != 0 {
		if parent < 0 {
			w.popped = true
			return
		}
		f := w.frames[parent]
		w.closure(f.ret, f.parent)
	}
}

func (w *walker) addElem(st, parent int32) {
	n := int32(len(w.elems))
	for i := w.setLo; i < n; i++ {
		if w.elems[i] == (elem{st, parent}) {
			return
		}
	}
	if n-w.setLo >= maxElems {
		return
	}
	w.elems = append(w.elems, elem{st, parent})
}

// walk visits the trie nodes [lo, hi), a run of sibling subtrees whose
// roots have depth d, starting from the element set at depth d-1. It sets in out the tokens whose bytes are
// accepted, and, when esc is not nil, appends the nodes with children after
// which a chain's sentinel was popped.
func (w *walker) walk(lo, hi int32, out []uint64, esc *[]int32) {
	v, a := w.v, w.a
	for i := lo; i < hi; {
		d := int(v.nodeDepth[i])
		ps, pe := w.start[d-1], w.end[d-1]
		w.elems = w.elems[:pe]
		w.frames = w.frames[:w.fmark[d-1]]
		w.start[d] = pe
		w.setLo = pe
		w.popped = false
		b := v.nodeByte[i]
		for j := ps; j < pe; j++ {
			e := w.elems[j]
			st := &a.states[e.st]
			var t int32 = -1
			if st.dense >= 0 {
				t = a.dense[st.dense+int32(b)]
			} else {
				for r := st.r0; r < st.r1; r++ {
					rg := &a.ranges[r]
					if b < rg.lo {
						break
					}
					if b <= rg.hi {
						t = rg.to
						break
					}
				}
			}
			if t < 0 {
				continue
			}
			if a.states[t].flags&fSimple != 0 {
				w.addElem(t, e.parent)
			} else {
				w.closure(t, e.parent)
			}
		}
		w.end[d] = int32(len(w.elems))
		w.fmark[d] = int32(len(w.frames))
		alive := w.end[d] > w.start[d]
		if alive || w.popped {
			for _, id := range v.toks[v.nodeTok[i]:v.nodeTok[i+1]] {
				out[id>>6] |= 1 << (id & 63)
			}
			if w.popped && esc != nil && v.nodeSkip[i] > i+1 {
				*esc = append(*esc, i)
			}
		}
		if alive {
			i++
		} else {
			i = v.nodeSkip[i]
		}
	}
}

// stateInfo returns the walk of state q with an unknown caller, from the
// automaton's memo, the vocabulary's cache, or by walking the whole trie.
func (a *automaton) stateInfo(q int32, w *walker, scratch []uint64) *stateInfo {
	if info := a.infos[q].Load(); info != nil {
		return info
	}
	k := a.key(q)
	for i := range k {
		k[i] ^= a.scope[i]
	}
	if info := a.v.cache.get(k); info != nil {
		a.infos[q].Store(info)
		return info
	}
	info := a.walkState(q, w, scratch)
	a.v.cache.put(k, info)
	a.infos[q].Store(info)
	return info
}

// walkState walks the whole trie from state q with the bottom sentinel as
// its caller; scratch is a vocabulary-sized bitset it may overwrite.
func (a *automaton) walkState(q int32, w *walker, scratch []uint64) *stateInfo {
	clear(scratch)
	base := len(w.frames)
	w.elems = append(w.elems[:0], elem{q, bottomFrame})
	w.start[0], w.end[0], w.fmark[0] = 0, 1, int32(base)
	var esc []int32
	w.walk(0, int32(len(a.v.nodeByte)), scratch, &esc)
	w.frames = w.frames[:base]
	info := &stateInfo{escapes: esc}
	n := 0
	for _, word := range scratch {
		n += bits.OnesCount64(word)
	}
	if n*32 < a.v.n {
		info.ids = make([]int32, 0, n)
		for wi, word := range scratch {
			for word != 0 {
				info.ids = append(info.ids, int32(wi*64+bits.TrailingZeros64(word)))
				word &= word - 1
			}
		}
	} else {
		info.bits = append([]uint64(nil), scratch...)
	}
	return info
}

// Matcher constrains one sample to a grammar. It implements the engine's
// LogitsProcessor: Process masks the logits of every token that would make
// the output an invalid prefix, Accept advances over the sampled token.
// While the grammar is incomplete, end-of-generation tokens are masked;
// once Done they are allowed, and they are the only tokens allowed when the
// grammar cannot continue.
//
// A Matcher is not safe for concurrent use; its grammar and vocabulary are.
type Matcher struct {
	v   *Vocab
	a   *automaton
	err error

	cur      []elem
	done     bool // the output so far is a complete sentence
	finished bool // an end-of-generation token was accepted after Done

	nframes int // w.frames[:nframes] hold the frames of cur
	w       walker
	mask    []uint64
	scratch []uint64
	infos   []*stateInfo

	// Accept's compaction buffers.
	newFrames []frame
	remap     []int32
	intern    map[frame]int32
}

// NewMatcher returns a matcher of g over v's tokens. If g cannot be
// compiled or cannot be completed with v's tokens (a schema needing bytes
// the vocabulary cannot spell), the matcher reports it from Err and allows
// only end-of-generation tokens.
func (g *Grammar) NewMatcher(v *Vocab) *Matcher {
	m := &Matcher{v: v}
	words := (v.n + 63) / 64
	m.mask = make([]uint64, words)
	a, err := g.automaton(v)
	if err != nil {
		m.err = err
		return m
	}
	if !a.ok {
		m.err = fmt.Errorf("grammar: no sentence of the grammar can be spelled with this vocabulary")
		return m
	}
	m.a = a
	m.scratch = make([]uint64, words)
	m.intern = map[frame]int32{}
	m.w.init(a)
	w := &m.w
	w.setLo = 0
	w.popped = false
	w.closure(a.start, rootFrame)
	m.done = w.popped
	m.commit(0, int32(len(w.elems)))
	return m
}

// Err returns why the matcher cannot constrain any more: the grammar did
// not compile or cannot be spelled with the vocabulary, or a token was
// accepted that the grammar does not allow. Nil while all is well.
func (m *Matcher) Err() error { return m.err }

// Done reports whether the output so far is a complete sentence of the
// grammar (it may still be extendable, e.g. a number).
func (m *Matcher) Done() bool { return m.done && m.err == nil }

// Process sets the logits of disallowed tokens to -Inf.
func (m *Matcher) Process(logits []float32) {
	mask := m.mask
	clear(mask)
	if m.err == nil && !m.finished {
		m.allowed(mask)
	}
	if m.err != nil || m.done || m.finished {
		for _, id := range m.v.eog {
			mask[id>>6] |= 1 << (id & 63)
		}
	}
	applyMask(logits, mask)
}

// allowed sets in mask the tokens that continue the current state.
func (m *Matcher) allowed(mask []uint64) {
	w := &m.w
	// Look up (or compute) every element's walk first: computing one uses
	// the walker's working memory.
	m.infos = m.infos[:0]
	for _, e := range m.cur {
		w.frames = w.frames[:m.nframes]
		m.infos = append(m.infos, m.a.stateInfo(e.st, w, m.scratch))
	}
	v := m.v
	for i, e := range m.cur {
		info := m.infos[i]
		if info.bits != nil {
			for j, word := range info.bits {
				mask[j] |= word
			}
		} else {
			for _, id := range info.ids {
				mask[id>>6] |= 1 << (id & 63)
			}
		}
		if len(info.escapes) == 0 || e.parent < 0 {
			continue // returning past the root leaves no room for more bytes
		}
		// Resolve escapes: after the element's rule returns, the rest of
		// the token is read by the caller's continuation.
		for _, n := range info.escapes {
			d := int(v.nodeDepth[n])
			w.frames = w.frames[:m.nframes]
			w.elems = w.elems[:0]
			w.setLo = 0
			f := w.frames[e.parent]
			w.closure(f.ret, f.parent)
			w.start[d], w.end[d], w.fmark[d] = 0, int32(len(w.elems)), int32(len(w.frames))
			if w.end[d] > 0 {
				w.walk(n+1, v.nodeSkip[n], mask, nil)
			}
		}
	}
	w.frames = w.frames[:m.nframes]
}

// applyMask sets logits[i] to -Inf for every i whose bit is clear (and for
// every i beyond the mask).
func applyMask(logits []float32, mask []uint64) {
	ninf := float32(math.Inf(-1))
	for wi := 0; wi*64 < len(logits); wi++ {
		var word uint64
		if wi < len(mask) {
			word = mask[wi]
		}
		if word == ^uint64(0) {
			continue
		}
		base := wi * 64
		lim := min(64, len(logits)-base)
		if word == 0 {
			l := logits[base : base+lim]
			for j := range l {
				l[j] = ninf
			}
			continue
		}
		inv := ^word
		if lim < 64 {
			inv &= 1<<lim - 1
		}
		for inv != 0 {
			logits[base+bits.TrailingZeros64(inv)] = ninf
			inv &= inv - 1
		}
	}
}

// Accept advances the matcher over the sampled token. A token the grammar
// does not allow puts the matcher in error (see Err), after which only
// end-of-generation tokens are allowed.
func (m *Matcher) Accept(tok int32) {
	if m.err != nil || m.finished {
		return
	}
	v := m.v
	if tok >= 0 && int(tok) < v.n && v.isEOG[tok] {
		if m.done {
			m.finished = true
			m.cur = m.cur[:0]
			return
		}
		m.err = fmt.Errorf("grammar: end of generation before the grammar is complete")
		return
	}
	p := v.piece(tok)
	if len(p) == 0 || len(p) > maxPieceLen {
		m.err = fmt.Errorf("grammar: token %d is not allowed by the grammar", tok)
		return
	}
	w := &m.w
	a := m.a
	w.frames = w.frames[:m.nframes]
	w.elems = append(w.elems[:0], m.cur...)
	lo, hi := int32(0), int32(len(w.elems))
	done := false
	for k, b := range p {
		w.setLo = int32(len(w.elems))
		w.popped = false
		for j := lo; j < hi; j++ {
			e := w.elems[j]
			if t := a.step(e.st, b); t >= 0 {
				w.closure(t, e.parent)
			}
		}
		lo, hi = w.setLo, int32(len(w.elems))
		if k == len(p)-1 {
			done = w.popped
		}
		if lo == hi {
			break
		}
	}
	if lo == hi && !done {
		m.err = fmt.Errorf("grammar: token %d (%q) is not allowed by the grammar", tok, p)
		return
	}
	m.done = done
	m.commit(lo, hi)
}

// commit makes w.elems[lo:hi] the current set, copying the frames they use
// to the start of the arena with identical frames merged, so that the arena
// stays as small as the live stacks and equal stacks compare equal.
func (m *Matcher) commit(lo, hi int32) {
	w := &m.w
	if cap(m.remap) < len(w.frames) {
		m.remap = make([]int32, len(w.frames), 2*len(w.frames))
	}
	m.remap = m.remap[:len(w.frames)]
	for i := range m.remap {
		m.remap[i] = -3
	}
	clear(m.intern)
	m.newFrames = m.newFrames[:0]
	m.cur = m.cur[:0]
	for _, e := range w.elems[lo:hi] {
		ne := elem{st: e.st, parent: m.copyFrame(e.parent)}
		dup := false
		for _, c := range m.cur {
			if c == ne {
				dup = true
				break
			}
		}
		if !dup {
			m.cur = append(m.cur, ne)
		}
	}
	w.frames, m.newFrames = m.newFrames, w.frames[:0]
	m.nframes = len(w.frames)
}

// copyFrame copies frame f of w.frames and its parents into newFrames.
func (m *Matcher) copyFrame(f int32) int32 {
	if f < 0 {
		return f
	}
	if r := m.remap[f]; r != -3 {
		return r
	}
	fr := m.w.frames[f]
	nf := frame{ret: fr.ret, parent: m.copyFrame(fr.parent)}
	id, ok := m.intern[nf]
	if !ok {
		id = int32(len(m.newFrames))
		m.newFrames = append(m.newFrames, nf)
		m.intern[nf] = id
	}
	m.remap[f] = id
	return id
}
