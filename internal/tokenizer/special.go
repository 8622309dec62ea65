package tokenizer

import (
	"slices"
	"strings"
)

// fragment is a piece of the input after special tokens are cut out: either
// a token id (tok ≥ 0) or the text text[start:end] still to be tokenised.
type fragment struct {
	tok        int32
	start, end int
}

// trie holds the texts of the special tokens so that one pass over a text
// finds which of them occur in it; most texts contain none, and then the
// per-token partition below does no work at all.
type trie struct {
	root  [256]int32 // child of the root per byte, or 0
	lead  int        // the first byte of every text when they share one, else -1
	nodes []trieNode // nodes[0] is the root
	edges []trieEdge // children, sorted by byte within each node
}

type trieNode struct {
	first, count int32 // children in edges[first : first+count]
	match        int32 // index in Tokenizer.special of the text ending here, or -1
}

type trieEdge struct {
	b    byte
	next int32
}

func newTrie(t *Tokenizer, special []int32) trie {
	// Build with maps, then flatten to sorted edge lists.
	type node struct {
		kids  map[byte]int32
		match int32
	}
	nodes := []node{{match: -1}}
	for i, id := range special {
		cur := int32(0)
		for _, b := range t.text(id) {
			if nodes[cur].kids == nil {
				nodes[cur].kids = map[byte]int32{}
			}
			next, ok := nodes[cur].kids[b]
			if !ok {
				next = int32(len(nodes))
				nodes = append(nodes, node{match: -1})
				nodes[cur].kids[b] = next
			}
			cur = next
		}
		nodes[cur].match = int32(i)
	}
	tr := trie{lead: -1}
	if len(nodes[0].kids) == 1 {
		for b := range nodes[0].kids {
			tr.lead = int(b)
		}
	}
	tr.nodes = make([]trieNode, len(nodes))
	for i, n := range nodes {
		keys := make([]byte, 0, len(n.kids))
		for b := range n.kids {
			keys = append(keys, b)
		}
		slices.Sort(keys)
		tr.nodes[i] = trieNode{first: int32(len(tr.edges)), count: int32(len(keys)), match: n.match}
		for _, b := range keys {
			tr.edges = append(tr.edges, trieEdge{b: b, next: n.kids[b]})
			if i == 0 {
				tr.root[b] = n.kids[b]
			}
		}
	}
	return tr
}

func (tr *trie) child(n int32, b byte) int32 {
	if n == 0 {
		return tr.root[b]
	}
	e := tr.edges[tr.nodes[n].first : tr.nodes[n].first+tr.nodes[n].count]
	for _, x := range e {
		if x.b == b {
			return x.next
		}
		if x.b > b {
			break
		}
	}
	return 0
}

// mark sets occ[i] for every special token i whose text occurs in text.
func (tr *trie) mark(text string, occ []bool) {
	for i := 0; i < len(text); i++ {
		if tr.lead >= 0 {
			// Special tokens usually all start with '<': jump from one to
			// the next.
			j := strings.IndexByte(text[i:], byte(tr.lead))
			if j < 0 {
				return
			}
			i += j
		}
		n := tr.root[text[i]]
		for j := i + 1; n != 0; j++ {
			if m := tr.nodes[n].match; m >= 0 {
				occ[m] = true
			}
			if j == len(text) {
				break
			}
			n = tr.child(n, text[j])
		}
	}
}

// partition cuts the special tokens out of text as llama.cpp's
// tokenizer_st_partition does: token by token, longest text first, every
// occurrence in every remaining text fragment, left to right. Control and
// unknown tokens take part only with parseSpecial; user-defined tokens
// always do. A token with the lstrip (rstrip) flag swallows the whitespace
// before (after) it within its fragment.
func (t *Tokenizer) partition(st *encodeState, text string, parseSpecial bool) []fragment {
	frags := append(st.frags[:0], fragment{tok: -1, start: 0, end: len(text)})
	if len(t.special) == 0 || len(text) == 0 {
		st.frags = frags
		return frags
	}
	if cap(st.occ) < len(t.special) {
		st.occ = make([]bool, len(t.special))
	}
	occ := st.occ[:len(t.special)]
	clear(occ)
	t.specialTrie.mark(text, occ)
	next := st.frags2[:0]
	for si, id := range t.special {
		if !occ[si] {
			continue
		}
		a := t.attrs[id]
		if !parseSpecial && a&(attrControl|attrUnknown) != 0 {
			continue
		}
		tt := string(t.text(id))
		next = next[:0]
		for _, f := range frags {
			if f.tok >= 0 {
				next = append(next, f)
				continue
			}
			off, end := f.start, f.end
			for {
				j := strings.Index(text[off:end], tt)
				if j < 0 {
					if off < end {
						next = append(next, fragment{tok: -1, start: off, end: end})
					}
					break
				}
				m := off + j
				l := m
				if a&attrLStrip != 0 {
					for l > off && isCSpace(text[l-1]) {
						l--
					}
				}
				if l > off {
					next = append(next, fragment{tok: -1, start: off, end: l})
				}
				next = append(next, fragment{tok: id, start: m, end: m + len(tt)})
				r := m + len(tt)
				if r >= end {
					break
				}
				if a&attrRStrip != 0 {
					for r < end && isCSpace(text[r]) {
						r++
					}
				}
				off = r
			}
		}
		frags, next = next, frags
	}
	st.frags, st.frags2 = frags, next
	return frags
}
