package grammar

import (
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"sync/atomic"
)

// automaton is a program restricted to one vocabulary: byte transitions
// only on bytes the vocabulary spells with single-byte tokens, and only
// into states from which the rule can still finish (with every call edge
// leading to a rule that can finish and a return state that can). As a
// result every stack a matcher holds can be completed, one single-byte
// token at a time: nothing the matcher allows is a dead end.
//
// States keep the program's numbering. Hot data is flat: a state's byte
// transitions are a short sorted range list, or for states with many ranges
// (string contents) a dense 256-entry row.
type automaton struct {
	v      *Vocab
	scope  [32]byte // mixed into the mask cache's keys (Grammar.SetCacheScope)
	states []astate
	ranges []prange
	calls  []acall
	dense  []int32
	start  int32
	ok     bool // the root rule can finish with this vocabulary

	infos []atomic.Pointer[stateInfo]

	keyMu   sync.Mutex
	sccID   []int32 // per state: strongly connected component (lazily)
	keys    [][32]byte
	keyDone []bool
	keyBuf  []byte
}

type astate struct {
	r0, r1 int32
	c0, c1 int32
	dense  int32 // offset of the dense row in dense, or -1
	flags  uint8
}

const (
	fFinal    = 1 << iota // the rule may return here
	fBytes                // the state has byte transitions
	fSimple               // bytes only: no calls, not final
	fDenseMin = 4         // states with at least this many ranges get a dense row
)

type acall struct {
	start, ret int32 // callee's start state, caller's return state
}

// automaton returns g's automaton for v, building it on first use.
func (g *Grammar) automaton(v *Vocab) (*automaton, error) {
	p, err := g.program()
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if a, ok := g.autos[v]; ok {
		return a, nil
	}
	a := newAutomaton(p, v)
	if g.scope != "" {
		a.scope = sha256.Sum256([]byte(g.scope))
	}
	if g.autos == nil {
		g.autos = map[*Vocab]*automaton{}
	}
	g.autos[v] = a
	return a, nil
}

func newAutomaton(p *program, v *Vocab) *automaton {
	prod := p.productive(&v.single)
	a := &automaton{v: v, states: make([]astate, len(p.states)), start: p.ruleStart[0]}
	a.ok = prod[a.start]
	a.infos = make([]atomic.Pointer[stateInfo], len(p.states))
	for s := range p.states {
		ps := &p.states[s]
		as := &a.states[s]
		as.dense = -1
		as.r0 = int32(len(a.ranges))
		if prod[s] {
			for _, rg := range p.ranges[ps.r0:ps.r1] {
				if !prod[rg.to] {
					continue
				}
				// Split the range into runs of single-byte-token bytes.
				for c := int(rg.lo); c <= int(rg.hi); {
					if !v.single.has(byte(c)) {
						c++
						continue
					}
					lo := c
					for c <= int(rg.hi) && v.single.has(byte(c)) {
						c++
					}
					a.ranges = append(a.ranges, prange{lo: byte(lo), hi: byte(c - 1), to: rg.to})
				}
			}
		}
		as.r1 = int32(len(a.ranges))
		as.c0 = int32(len(a.calls))
		if prod[s] {
			for _, c := range p.calls[ps.c0:ps.c1] {
				if prod[c.rule] && prod[c.ret] {
					a.calls = append(a.calls, acall{start: c.rule, ret: c.ret})
				}
			}
		}
		as.c1 = int32(len(a.calls))
		if ps.final {
			as.flags |= fFinal
		}
		if as.r1 > as.r0 {
			as.flags |= fBytes
			if as.c1 == as.c0 && !ps.final {
				as.flags |= fSimple
			}
		}
		if as.r1-as.r0 >= fDenseMin {
			as.dense = int32(len(a.dense))
			row := make([]int32, 256)
			for i := range row {
				row[i] = -1
			}
			for _, rg := range a.ranges[as.r0:as.r1] {
				for c := int(rg.lo); c <= int(rg.hi); c++ {
					row[c] = rg.to
				}
			}
			a.dense = append(a.dense, row...)
		}
	}
	return a
}

// step returns the state reached from st on byte b, or -1.
func (a *automaton) step(st int32, b byte) int32 {
	s := &a.states[st]
	if s.dense >= 0 {
		return a.dense[s.dense+int32(b)]
	}
	for r := s.r0; r < s.r1; r++ {
		rg := &a.ranges[r]
		if b < rg.lo {
			break
		}
		if b <= rg.hi {
			return rg.to
		}
	}
	return -1
}

// key returns a structural hash of everything a walk from state q can see:
// q's transitions, finality and calls, and recursively those of every state
// reachable from q by bytes, calls and returns. Two states with equal keys
// accept the same token sequences before their rules return, in any
// grammar, so their walks (stateInfo) are interchangeable: this is what
// lets one cached mask of "inside a JSON string" serve every grammar.
//
// The hash is computed Merkle-style over strongly connected components:
// a state's serialization lists the states of its component in BFS order
// from it (edges inside the component as local indexes) and names edges
// leaving the component by the target's own key.
func (a *automaton) key(q int32) [32]byte {
	a.keyMu.Lock()
	defer a.keyMu.Unlock()
	if a.sccID == nil {
		a.computeSCC()
		a.keys = make([][32]byte, len(a.states))
		a.keyDone = make([]bool, len(a.states))
	}
	return a.keyOf(q)
}

func (a *automaton) keyOf(q int32) [32]byte {
	if a.keyDone[q] {
		return a.keys[q]
	}
	c := a.sccID[q]
	// BFS over q's component; make sure every edge leaving it is keyed.
	order := []int32{q}
	local := map[int32]int32{q: 0}
	for i := 0; i < len(order); i++ {
		a.forEachEdge(order[i], func(t int32) {
			if a.sccID[t] != c {
				a.keyOf(t)
				return
			}
			if _, ok := local[t]; !ok {
				local[t] = int32(len(order))
				order = append(order, t)
			}
		})
	}
	buf := a.keyBuf[:0]
	ref := func(t int32) {
		if a.sccID[t] == c {
			buf = append(buf, 'L')
			buf = binary.LittleEndian.AppendUint32(buf, uint32(local[t]))
			return
		}
		buf = append(buf, 'X')
		buf = append(buf, a.keys[t][:]...)
	}
	for _, s := range order {
		st := &a.states[s]
		buf = append(buf, 'S', st.flags&fFinal)
		buf = binary.LittleEndian.AppendUint32(buf, uint32(st.r1-st.r0))
		for _, rg := range a.ranges[st.r0:st.r1] {
			buf = append(buf, rg.lo, rg.hi)
			ref(rg.to)
		}
		buf = binary.LittleEndian.AppendUint32(buf, uint32(st.c1-st.c0))
		for _, cl := range a.calls[st.c0:st.c1] {
			ref(cl.start)
			ref(cl.ret)
		}
	}
	a.keys[q] = sha256.Sum256(buf)
	a.keyDone[q] = true
	a.keyBuf = buf[:0]
	return a.keys[q]
}

func (a *automaton) forEachEdge(s int32, f func(int32)) {
	st := &a.states[s]
	for _, rg := range a.ranges[st.r0:st.r1] {
		f(rg.to)
	}
	for _, cl := range a.calls[st.c0:st.c1] {
		f(cl.start)
		f(cl.ret)
	}
}

// computeSCC labels the strongly connected components of the state graph
// (Tarjan's algorithm, iterative).
func (a *automaton) computeSCC() {
	n := len(a.states)
	index := make([]int32, n)
	low := make([]int32, n)
	onStack := make([]bool, n)
	a.sccID = make([]int32, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int32
	var next int32
	var comps int32
	type frame struct {
		s     int32
		edges []int32
		i     int
	}
	edges := func(s int32) []int32 {
		var out []int32
		a.forEachEdge(s, func(t int32) { out = append(out, t) })
		return out
	}
	for root := range n {
		if index[root] >= 0 {
			continue
		}
		call := []frame{{s: int32(root), edges: edges(int32(root))}}
		index[root], low[root] = next, next
		next++
		stack = append(stack, int32(root))
		onStack[root] = true
		for len(call) > 0 {
			f := &call[len(call)-1]
			if f.i < len(f.edges) {
				t := f.edges[f.i]
				f.i++
				if index[t] < 0 {
					index[t], low[t] = next, next
					next++
					stack = append(stack, t)
					onStack[t] = true
					call = append(call, frame{s: t, edges: edges(t)})
				} else if onStack[t] {
					low[f.s] = min(low[f.s], index[t])
				}
				continue
			}
			s := f.s
			call = call[:len(call)-1]
			if len(call) > 0 {
				p := call[len(call)-1].s
				low[p] = min(low[p], low[s])
			}
			if low[s] == index[s] {
				for {
					t := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[t] = false
					a.sccID[t] = comps
					if t == s {
						break
					}
				}
				comps++
			}
		}
	}
}
