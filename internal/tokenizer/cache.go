package tokenizer

import (
	"hash/maphash"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
)

// Default cache sizes (see Options).
const (
	DefaultWordCacheBytes     = 8 << 20
	DefaultFragmentCacheBytes = 32 << 20
)

// MinFragmentBytes is the shortest text fragment the fragment cache keeps:
// shorter ones (role names, the newline between two turns) cost less to
// encode word by word than they would take up in the cache.
const MinFragmentBytes = 64

// Options tune a Tokenizer's caches. The zero value means the defaults.
//
// Caching never changes a token: every cache maps an exact input (compared
// byte for byte, not only by hash) to the tokens the uncached algorithm
// produces for it, and tests check the two agree.
type Options struct {
	// WordCacheBytes bounds the word cache, which remembers the tokens of
	// each pre-tokenized word (BPE) or space-led piece (SPM) and is used by
	// every Encode. 0 means DefaultWordCacheBytes; negative disables it.
	// The bound counts entries (keys, ids and their headers); the table
	// itself adds about 1/6 of it.
	//
	// Words are cached per EncodeOptions.Scope: a word one tenant sent
	// is never a hit for another. The scopes share the budget, so one
	// tenant's words can push out another's (a cost in speed, never a
	// token or a content revealed).
	WordCacheBytes int
	// FragmentCacheBytes bounds the fragment cache, which remembers the
	// tokens of whole text fragments (the text between two special
	// tokens) for the calls that ask for it with EncodeOptions.ReuseFragments.
	// 0 means DefaultFragmentCacheBytes; negative disables it.
	FragmentCacheBytes int
}

// CacheStats reports the caches' use since the Tokenizer was loaded.
type CacheStats struct {
	// WordHits and WordMisses count words (SPM pieces) found and not found
	// in the word cache.
	WordHits, WordMisses uint64
	// WordEntries and WordBytes are what the word cache holds now.
	WordEntries, WordBytes int64
	// FragmentHits and FragmentMisses count fragment lookups (fragments
	// shorter than MinFragmentBytes are not looked up).
	FragmentHits, FragmentMisses uint64
	// FragmentEntries and FragmentBytes are what the fragment cache holds
	// now.
	FragmentEntries, FragmentBytes int64
}

// Prepare builds now what encoding otherwise builds on first use: the word
// cache's table and, for BPE vocabularies, the pre-tokenizer's table of
// code point classes (about a megabyte, a millisecond to fill). Tools that
// only inspect a vocabulary never pay for them; a server should call
// Prepare when it loads the model, because its first requests often come
// as a burst, and every one of them waited for the first to fill the
// tables (64 streams starting together on 2 cores: up to 9 ms each before
// submission). Safe to call more than once and concurrently with Encode.
func (t *Tokenizer) Prepare() {
	if t.words != nil {
		t.words.ready()
	}
	if t.kind == KindBPE {
		cpClassTable()
	}
}

// CacheStats returns the caches' counters. It is safe to call at any time;
// the counters of calls still running may be missing.
func (t *Tokenizer) CacheStats() CacheStats {
	var s CacheStats
	if c := t.words; c != nil {
		s.WordHits, s.WordMisses = c.hits.Load(), c.misses.Load()
		s.WordEntries, s.WordBytes = c.entries.Load(), c.used.Load()
	}
	if c := t.frags; c != nil {
		s.FragmentHits, s.FragmentMisses = c.hits.Load(), c.misses.Load()
		c.mu.Lock()
		s.FragmentEntries, s.FragmentBytes = int64(len(c.m)), c.used
		c.mu.Unlock()
	}
	return s
}

// wordCache remembers the tokens of words: a pre-tokenized word of a BPE
// vocabulary (its bytes before the GPT-2 byte mapping) or a space-led piece
// of SPM text (its bytes with spaces escaped as ▁). Merging a word costs a
// heap of candidate pairs and a map lookup per pair, about a microsecond;
// most words of a prompt were seen before, in this prompt or an earlier
// one, and a hit costs a hash and a compare.
//
// Layout: a set-associative table of 2^k buckets with wordWays ways each.
// A word's 64-bit hash (maphash, seeded per cache) selects the bucket and
// is kept as the way's tag, so a lookup reads one bucket's tags and
// dereferences only an entry whose tag matches; it then compares the whole
// key, so a hash collision is a miss, never a wrong token.
//
// Concurrency: entries are immutable and published through atomic
// pointers, so lookups take no lock and write nothing except, once per
// entry and sweep, its CLOCK reference bit. Inserts (after a miss) lock the
// bucket. A lookup racing an insert or eviction in its bucket may miss an
// entry that is there; it can never see a half-written one.
//
// Size: each bucket may hold budget/2^k bytes of entries (cost estimates
// the heap bytes of key, ids and headers). Inserting evicts, within the
// bucket, the first entry whose reference bit is clear (CLOCK), clearing
// bits on the way, until the new entry fits. An entry that alone exceeds a
// bucket's share is not cached.
type wordCache struct {
	seed      maphash.Seed
	mask      uint64
	perBucket int64
	alloc     sync.Once    // allocates buckets on first use (ready)
	buckets   []wordBucket // after ready

	hits, misses  atomic.Uint64
	entries, used atomic.Int64
}

const wordWays = 8

type wordBucket struct {
	tags [wordWays]atomic.Uint64
	ents [wordWays]atomic.Pointer[wordEntry]
	ref  atomic.Uint32 // CLOCK reference bit of each way

	mu   sync.Mutex // held by writers
	hand int32      // next way the CLOCK looks at (mu)
	used int64      // bytes of this bucket's entries (mu)
}

// wordEntry is one cached word; it is never modified once published.
type wordEntry struct {
	hash  uint64
	scope string
	key   string
	ids   []int32
	cost  int64
}

// wordEntryOverhead approximates the heap bytes of an entry beyond its key
// and ids: the entry itself and the allocation rounding of the other two.
const wordEntryOverhead = 64

// avgWordCost is the entry size buckets are dimensioned for: a short word
// of one or two tokens.
const avgWordCost = 96

func newWordCache(budget int) *wordCache {
	n := max(budget/(wordWays*avgWordCost), 1)
	n = 1 << (bits.Len(uint(n)) - 1) // round down to a power of two
	return &wordCache{
		seed:      maphash.MakeSeed(),
		mask:      uint64(n - 1),
		perBucket: int64(budget / n),
	}
}

// ready allocates the table on first use, so that a tokenizer loaded and
// never used to encode (model inspection, metadata fuzzing) does not pay
// for it. Every call that uses the cache calls ready first.
func (c *wordCache) ready() *wordCache {
	c.alloc.Do(func() { c.buckets = make([]wordBucket, c.mask+1) })
	return c
}

func wordCost(keyLen, nids int) int64 {
	return wordEntryOverhead + int64(keyLen+7)&^7 + int64(4*nids+7)&^7
}

// lookupWord returns the cached tokens of word in scope, whose hash is h.
func lookupWord[S string | []byte](c *wordCache, h uint64, scope string, word S) ([]int32, bool) {
	b := &c.buckets[h&c.mask]
	for w := range wordWays {
		if b.tags[w].Load() != h {
			continue
		}
		e := b.ents[w].Load()
		if e == nil || e.hash != h || e.key != string(word) || e.scope != scope {
			continue
		}
		if bit := uint32(1) << w; b.ref.Load()&bit == 0 {
			b.ref.Or(bit)
		}
		return e.ids, true
	}
	return nil, false
}

// insert caches ids as the tokens of word in scope (hash h), copying both.
func (c *wordCache) insert(h uint64, scope string, word []byte, ids []int32) {
	cost := wordCost(len(word), len(ids))
	if cost > c.perBucket {
		return
	}
	b := &c.buckets[h&c.mask]
	b.mu.Lock()
	defer b.mu.Unlock()
	free := -1
	for w := range wordWays {
		e := b.ents[w].Load()
		if e == nil {
			if free < 0 {
				free = w
			}
			continue
		}
		if e.hash == h && e.key == string(word) && e.scope == scope {
			return // another call cached it meanwhile
		}
	}
	// CLOCK: pass over ways with the reference bit set (clearing it) and
	// evict the first without, until a way is free and the bytes fit.
	// Lookups may set bits again meanwhile; after two full sweeps the hand
	// evicts regardless, so this ends.
	for sweep := 0; free < 0 || b.used+cost > c.perBucket; sweep++ {
		w := int(b.hand)
		b.hand = (b.hand + 1) % wordWays
		e := b.ents[w].Load()
		if e == nil {
			continue
		}
		if bit := uint32(1) << w; b.ref.Load()&bit != 0 && sweep < 2*wordWays {
			b.ref.And(^bit)
			continue
		}
		b.tags[w].Store(0)
		b.ents[w].Store(nil)
		b.ref.And(^(uint32(1) << w))
		b.used -= e.cost
		c.used.Add(-e.cost)
		c.entries.Add(-1)
		if free < 0 {
			free = w
		}
	}
	e := &wordEntry{hash: h, scope: scope, key: string(word), ids: append([]int32(nil), ids...), cost: cost}
	b.ents[free].Store(e)
	b.tags[free].Store(h)
	b.used += cost
	c.used.Add(cost)
	c.entries.Add(1)
}

// fragCache remembers the tokens of whole text fragments, the texts
// between special tokens: a system prompt, a tool block, an earlier turn.
// An agent re-sends them identically with every request, and a hit costs
// hashing and comparing the text (tens of GB/s) instead of pre-tokenizing
// and looking up every word.
//
// Entries are keyed by scope as well as by text, so that a fragment cached
// for one tenant is never a hit (and never faster) for another; the key
// also holds the one bit of context the tokens of a fragment depend on
// (whether SPM prefixes it with a space). The cache is an LRU list bounded
// in bytes (text, ids and an overhead per entry) under one mutex: there are
// a few lookups per request, each a map access and a list move, and the
// hash and the comparison happen outside the lock. Entries are immutable
// apart from their list links; a fragment larger than a quarter of the
// budget is not cached.
type fragCache struct {
	seed   maphash.Seed
	budget int64

	mu   sync.Mutex
	m    map[uint64]*fragEntry
	lru  fragEntry // sentinel: lru.next is the most recently used entry
	used int64

	hits, misses atomic.Uint64
}

type fragEntry struct {
	hash   uint64
	scope  string
	prefix bool
	text   string
	ids    []int32
	cost   int64

	prev, next *fragEntry // LRU links (fragCache.mu)
}

const fragEntryOverhead = 160

func newFragCache(budget int) *fragCache {
	c := &fragCache{seed: maphash.MakeSeed(), budget: int64(budget), m: map[uint64]*fragEntry{}}
	c.lru.prev, c.lru.next = &c.lru, &c.lru
	return c
}

func fragCost(scope, text string, nids int) int64 {
	return fragEntryOverhead + int64(len(scope)+len(text)+4*nids)
}

// hash returns the key of a fragment in a scope.
func (c *fragCache) hash(scope string, prefix bool, text string) uint64 {
	h := maphash.String(c.seed, text)
	s := maphash.String(c.seed, scope)
	if prefix {
		s = ^s
	}
	return h ^ (s * 0x9E3779B97F4A7C15)
}

func (c *fragCache) unlink(e *fragEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
}

func (c *fragCache) pushFront(e *fragEntry) {
	e.prev, e.next = &c.lru, c.lru.next
	e.prev.next, e.next.prev = e, e
}

// get returns the cached tokens of a fragment.
func (c *fragCache) get(h uint64, scope string, prefix bool, text string) ([]int32, bool) {
	c.mu.Lock()
	e := c.m[h]
	if e != nil {
		c.unlink(e)
		c.pushFront(e)
	}
	c.mu.Unlock()
	if e == nil || e.prefix != prefix || e.scope != scope || e.text != text {
		return nil, false
	}
	return e.ids, true
}

// put caches ids as the tokens of a fragment, copying both.
func (c *fragCache) put(h uint64, scope string, prefix bool, text string, ids []int32) {
	cost := fragCost(scope, text, len(ids))
	if cost > c.budget/4 {
		return
	}
	e := &fragEntry{hash: h, scope: strings.Clone(scope), prefix: prefix, text: strings.Clone(text),
		ids: append([]int32(nil), ids...), cost: cost}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[h]; old != nil {
		// The same fragment cached meanwhile, or a hash collision: the
		// newer one wins.
		c.unlink(old)
		c.used -= old.cost
		delete(c.m, h)
	}
	for c.used+cost > c.budget && c.lru.prev != &c.lru {
		old := c.lru.prev
		c.unlink(old)
		c.used -= old.cost
		delete(c.m, old.hash)
	}
	c.m[h] = e
	c.pushFront(e)
	c.used += cost
}

// setupCaches creates the caches opts asks for.
func (t *Tokenizer) setupCaches(opts Options) {
	wb := opts.WordCacheBytes
	if wb == 0 {
		wb = DefaultWordCacheBytes
	}
	if wb > 0 {
		t.words = newWordCache(wb)
		if t.kind == KindSPM {
			t.spmJoin = t.spmJoins()
		}
	}
	fb := opts.FragmentCacheBytes
	if fb == 0 {
		fb = DefaultFragmentCacheBytes
	}
	if fb > 0 {
		t.frags = newFragCache(fb)
	}
}

// spmJoins finds where SPM merges can cross a ▁. A merge joins two adjacent
// symbols whose concatenation is a token, so a token that spans a point
// right before a ▁ contains the symbol before that point followed by the ▁.
// For every ▁ inside a token (not at its start) spmJoins records the 1 to 4
// bytes before it, which covers every symbol that can precede it. Where the
// symbol before a ▁ is not recorded, no merge crosses, and the text on
// either side can be merged on its own with the same result (merges on one
// side never change the candidates on the other, and both sides keep their
// relative order of equal scores).
func (t *Tokenizer) spmJoins() map[uint64]struct{} {
	const sp = "\u2581"
	joins := map[uint64]struct{}{}
	for id := range t.n {
		txt := t.text(int32(id))
		for k := 1; k+len(sp) <= len(txt); k++ {
			if string(txt[k:k+len(sp)]) != sp {
				continue
			}
			for j := 1; j <= min(4, k); j++ {
				joins[packSym(txt[k-j:k])] = struct{}{}
			}
		}
	}
	return joins
}

// packSym packs a symbol of 1 to 4 bytes into a map key.
func packSym(b []byte) uint64 {
	k := uint64(len(b)) << 32
	for i, c := range b {
		k |= uint64(c) << (8 * i)
	}
	return k
}
