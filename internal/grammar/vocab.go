package grammar

import (
	"bytes"
	"container/list"
	"slices"
	"sync"

	"github.com/kvserve/kvserve/internal/tokenizer"
)

// Vocab is what matchers need of a tokenizer: every token's bytes as a trie,
// the end-of-generation tokens, and a cache of per-state token masks shared
// by every grammar and request using this vocabulary. Build it once per
// tokenizer; it is safe for concurrent use.
//
// The trie is stored in preorder, one entry per node (the root excluded):
// the byte on the edge into the node, the node's depth (the length of its
// path), skip (the index just past its subtree) and the tokens whose bytes
// are exactly its path. A walk visits entries in order and jumps to skip as
// soon as a prefix is rejected, so a rejected byte prunes a whole subtree
// at the cost of one step.
//
// Tokens that render as nothing (control tokens such as <|im_start|>,
// unknown and unused tokens) are never allowed by a grammar: they add no
// text, so a grammar cannot account for them, and allowing them would let a
// model stall forever. End-of-generation tokens are allowed exactly when
// the grammar is complete. User-defined tokens (<tool_call> in Qwen) render
// as their text and are matched like any other token.
type Vocab struct {
	n int // tokens in the vocabulary

	// Trie in preorder.
	nodeByte  []byte
	nodeDepth []uint16
	nodeSkip  []int32
	nodeTok   []int32 // tokens at node i: toks[nodeTok[i]:nodeTok[i+1]]
	toks      []int32
	maxDepth  int

	pieceOff []int32 // bytes of token id: pieces[pieceOff[id]:pieceOff[id+1]]
	pieces   []byte
	eog      []int32
	isEOG    []bool

	// single holds the bytes that some token spells alone. Grammars are
	// restricted to these bytes: any text over them can be produced one
	// byte token at a time, which is what guarantees that every allowed
	// prefix can still be completed.
	single byteSet

	cache maskCache
}

// maxPieceLen bounds the bytes of a token the trie holds; longer tokens are
// never allowed (no real vocabulary has them).
const maxPieceLen = 1 << 12

// NewVocab builds the trie of tok's token pieces (as Decode renders them,
// control tokens excluded) and its end-of-generation set.
func NewVocab(tok *tokenizer.Tokenizer) *Vocab {
	n := tok.VocabSize()
	pieces := make([][]byte, n)
	var buf []byte
	for id := range n {
		start := len(buf)
		buf = tok.AppendPiece(buf, int32(id), false)
		pieces[id] = buf[start:len(buf):len(buf)]
	}
	return newVocab(pieces, tok.EOGs())
}

// newVocab builds a Vocab from token pieces (empty: never allowed) and the
// end-of-generation token ids.
func newVocab(pieces [][]byte, eogs []int32) *Vocab {
	n := len(pieces)
	v := &Vocab{n: n, pieceOff: make([]int32, n+1), isEOG: make([]bool, n)}
	for _, id := range eogs {
		if id >= 0 && int(id) < n && !v.isEOG[id] {
			v.isEOG[id] = true
			v.eog = append(v.eog, id)
		}
	}
	slices.Sort(v.eog)
	ids := make([]int32, 0, n)
	for id, p := range pieces {
		v.pieces = append(v.pieces, p...)
		v.pieceOff[id+1] = int32(len(v.pieces))
		if len(p) == 0 || len(p) > maxPieceLen || v.isEOG[id] {
			continue
		}
		ids = append(ids, int32(id))
		if len(p) == 1 {
			v.single.add(p[0])
		}
	}
	slices.SortStableFunc(ids, func(a, b int32) int { return bytes.Compare(pieces[a], pieces[b]) })

	// Build the preorder trie from the sorted pieces: path holds the node
	// index at each depth of the current path.
	var path []int32
	var prev []byte
	for _, id := range ids {
		p := pieces[id]
		l := 0
		for l < len(p) && l < len(prev) && p[l] == prev[l] {
			l++
		}
		for len(path) > l {
			v.nodeSkip[path[len(path)-1]] = int32(len(v.nodeByte))
			path = path[:len(path)-1]
		}
		for d := l; d < len(p); d++ {
			path = append(path, int32(len(v.nodeByte)))
			v.nodeByte = append(v.nodeByte, p[d])
			v.nodeDepth = append(v.nodeDepth, uint16(d+1))
			v.nodeSkip = append(v.nodeSkip, 0)
			v.nodeTok = append(v.nodeTok, int32(len(v.toks)))
		}
		v.toks = append(v.toks, id)
		v.maxDepth = max(v.maxDepth, len(p))
		prev = p
	}
	for _, i := range path {
		v.nodeSkip[i] = int32(len(v.nodeByte))
	}
	v.nodeTok = append(v.nodeTok, int32(len(v.toks)))
	v.cache.init(defaultCacheBytes)
	return v
}

// Size returns the number of tokens in the vocabulary.
func (v *Vocab) Size() int { return v.n }

func (v *Vocab) piece(id int32) []byte {
	if id < 0 || int(id) >= v.n {
		return nil
	}
	return v.pieces[v.pieceOff[id]:v.pieceOff[id+1]]
}

// stateInfo is the cached result of walking the whole trie from one
// automaton state with an unknown caller: the tokens accepted without the
// state's rule returning (as a bitset, or a sorted id list when there are
// few), and the trie nodes after which the rule may return with bytes of
// the token still to go.
type stateInfo struct {
	bits    []uint64
	ids     []int32
	escapes []int32
}

func (s *stateInfo) size() int64 {
	return int64(8*len(s.bits)+4*len(s.ids)+4*len(s.escapes)) + 96
}

// defaultCacheBytes bounds a Vocab's mask cache. A dense mask of a 152k
// vocabulary is 19 KB; JSON grammars touch a few dozen dense states.
const defaultCacheBytes = 64 << 20

// maskCache is an LRU map from state keys to stateInfo, bounded in bytes.
type maskCache struct {
	mu     sync.Mutex
	limit  int64
	bytes  int64
	m      map[[32]byte]*list.Element
	lru    list.List
	hits   uint64
	misses uint64
}

type cacheEntry struct {
	key  [32]byte
	info *stateInfo
}

func (c *maskCache) init(limit int64) {
	c.limit = limit
	c.m = map[[32]byte]*list.Element{}
}

func (c *maskCache) get(k [32]byte) *stateInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		c.lru.MoveToFront(e)
		c.hits++
		return e.Value.(*cacheEntry).info
	}
	c.misses++
	return nil
}

func (c *maskCache) put(k [32]byte, info *stateInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; ok {
		return
	}
	c.m[k] = c.lru.PushFront(&cacheEntry{key: k, info: info})
	c.bytes += info.size()
	for c.bytes > c.limit && c.lru.Len() > 1 {
		e := c.lru.Back()
		ce := e.Value.(*cacheEntry)
		c.lru.Remove(e)
		delete(c.m, ce.key)
		c.bytes -= ce.info.size()
	}
}

// CacheStats reports the mask cache's hits, misses, entries and bytes.
func (v *Vocab) CacheStats() (hits, misses uint64, entries int, bytes int64) {
	v.cache.mu.Lock()
	defer v.cache.mu.Unlock()
	return v.cache.hits, v.cache.misses, v.cache.lru.Len(), v.cache.bytes
}
