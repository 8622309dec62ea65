package tokenizer

import (
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/testshared"
)

// Cache configurations every equivalence test runs: the defaults, and
// caches so small that nearly every insert evicts something.
var (
	noCaches    = Options{WordCacheBytes: -1, FragmentCacheBytes: -1}
	tinyCaches  = Options{WordCacheBytes: 1024, FragmentCacheBytes: 2048}
	cacheScopes = []EncodeOptions{{}, {ReuseFragments: true, Scope: "a"}, {ReuseFragments: true, Scope: "b"}}
)

// cachedSet is one vocabulary loaded three times: without caches (the
// reference), with the default caches and with tiny ones.
type cachedSet struct {
	name                string
	plain, cached, tiny *Tokenizer
}

func loadCachedSet(t testing.TB, name string, load func(Options) *Tokenizer) cachedSet {
	return cachedSet{name: name, plain: load(noCaches), cached: load(Options{}), tiny: load(tinyCaches)}
}

func vocabCachedSets(t testing.TB) []cachedSet {
	files, err := filepath.Glob(testshared.Path(t, "testdata", "vocab", "ggml-vocab-*.gguf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no vocab files: %v", err)
	}
	var sets []cachedSet
	for _, path := range files {
		name := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "ggml-vocab-"), ".gguf")
		sets = append(sets, loadCachedSet(t, name, func(o Options) *Tokenizer { return loadTokenizerOptions(t, path, o) }))
	}
	return sets
}

// checkCached encodes text with every flag combination through the
// uncached tokenizer and, twice each (cold, then warm), through the cached
// ones with and without fragment reuse, and requires identical ids.
func checkCached(t *testing.T, s cachedSet, text string) {
	t.Helper()
	for _, flags := range [][2]bool{{false, false}, {true, true}, {false, true}} {
		base := EncodeOptions{AddSpecial: flags[0], ParseSpecial: flags[1]}
		want := s.plain.AppendEncodeWith(nil, text, base)
		for _, tok := range []*Tokenizer{s.cached, s.tiny} {
			for _, sc := range cacheScopes {
				opts := base
				opts.ReuseFragments, opts.Scope = sc.ReuseFragments, sc.Scope
				for pass := range 2 {
					if got := tok.AppendEncodeWith(nil, text, opts); !slices.Equal(got, want) {
						t.Fatalf("%s %+v pass %d on %q:\n got %v\nwant %v", s.name, opts, pass, text, got, want)
					}
				}
			}
		}
	}
}

// randomTexts makes texts from pieces of the vocabulary test inputs
// (whole, or cut anywhere, which also cuts UTF-8 sequences), palette
// characters, special-token texts and whitespace runs, so that words and
// fragments repeat within and across texts.
func randomTexts(t testing.TB, n int, seed uint64) []string {
	rng := rand.New(rand.NewPCG(seed, 1))
	seeds := encodeSeeds(t)
	extra := []string{"<s>", "</s>", "<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|end|>", "\u2581", "\u2581\u2581",
		"  ", "    ", "\n", "\n\n", "\t", " \n ", "\xff", "\xe2\x96", "\xf0 ", "'s", "1234567", "x\u00a0y"}
	texts := make([]string, n)
	for i := range texts {
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			switch rng.IntN(4) {
			case 0:
				b.WriteString(seeds[rng.IntN(len(seeds))])
			case 1:
				s := seeds[rng.IntN(len(seeds))]
				lo := rng.IntN(len(s) + 1)
				b.WriteString(s[lo : lo+rng.IntN(len(s)-lo+1)])
			case 2:
				raw := make([]byte, 1+rng.IntN(24))
				for k := range raw {
					raw[k] = byte(rng.UintN(256))
				}
				b.WriteString(paletteText(string(raw)))
			default:
				b.WriteString(extra[rng.IntN(len(extra))])
			}
		}
		texts[i] = b.String()
	}
	return texts
}

// TestCacheEquivalenceVocab compares cached and uncached encodings with
// every test vocabulary on its test inputs and on random texts.
func TestCacheEquivalenceVocab(t *testing.T) {
	inputs := append(encodeSeeds(t), randomTexts(t, 150, 1)...)
	for _, s := range vocabCachedSets(t) {
		t.Run(s.name, func(t *testing.T) {
			for _, text := range inputs {
				checkCached(t, s, text)
			}
			// The reference is what llama.cpp produces, so the cached
			// tokenizer must pass the golden test too (warm this time).
			path := testshared.Path(t, "testdata", "vocab", "ggml-vocab-"+s.name+".gguf")
			for i, c := range readVocabTests(t, path+".inp", path+".out") {
				for pass := range 2 {
					if got := s.tiny.Encode(c.input, false, false); !slices.Equal(got, c.want) {
						t.Fatalf("case %d pass %d %q:\n got %v\nwant %v", i, pass, c.input, got, c.want)
					}
				}
			}
			st := s.cached.CacheStats()
			if st.WordHits == 0 || st.WordMisses == 0 || st.FragmentHits == 0 || st.FragmentMisses == 0 {
				t.Errorf("caches not exercised: %+v", st)
			}
		})
	}
}

// TestCacheEquivalenceAgent compares cached and uncached encodings of
// agent prompts, turn after turn, with the synthetic models' vocabularies
// and chat templates (the prompts kvserve serves).
func TestCacheEquivalenceAgent(t *testing.T) {
	for _, shape := range []string{"smollm2-135m", "qwen2.5-0.5b", "llama-3.2-1b"} {
		t.Run(shape, func(t *testing.T) {
			s := loadCachedSet(t, shape, func(o Options) *Tokenizer { return synthTokenizer(t, shape, o) })
			for turns := range 5 {
				checkCached(t, s, agentPrompt(t, s.plain, 3*turns))
			}
			st := s.cached.CacheStats()
			if st.FragmentHits == 0 {
				t.Errorf("no fragment hits: %+v", st)
			}
		})
	}
}

// TestSPMPieces checks the cut of SPM text into pieces on a vocabulary
// whose tokens contain ▁ inside: merges across such a ▁ must still happen.
func TestSPMPieces(t *testing.T) {
	const sp = "\u2581"
	// Scores fall with the index: x▁ merges before anything else.
	pieces := []string{"x" + sp, "x" + sp + "y", sp + sp, sp + sp + sp, sp + sp + sp + "z", "é" + sp,
		sp + "a", sp + "ab", "ab", sp + "b", sp, "a", "b", "x", "y", "z", "é"}
	md := spmMetadata(pieces, []string{"<|x|>"}, nil)
	s := loadCachedSet(t, "spm-joins", func(o Options) *Tokenizer {
		tok, err := FromMetadataOptions(md, o)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	})
	joins := s.cached.spmJoin
	for _, sym := range []string{"x", sp, "é", "\xa9", "\x81", "\x96\x81", "\x81" + sp} {
		if _, ok := joins[packSym([]byte(sym))]; !ok {
			t.Errorf("join %q missing", sym)
		}
	}
	for _, sym := range []string{"a", "b", "y", "z"} {
		if _, ok := joins[packSym([]byte(sym))]; ok {
			t.Errorf("join %q should not be there", sym)
		}
	}
	id := func(text string) int32 {
		i, ok := s.plain.TokenID(text)
		if !ok {
			t.Fatalf("no token %q", text)
		}
		return i
	}
	for _, c := range []struct {
		text string
		want []int32
	}{
		{"x y", []int32{id(sp), id("x" + sp + "y")}}, // x▁ then x▁y: merges across the space
		{"ab   z", []int32{id(sp + "ab"), id(sp + sp + sp + "z")}},
		{"é a", []int32{id(sp), id("é" + sp), id("a")}},
		{"a b", []int32{id(sp + "a"), id(sp + "b")}},
	} {
		for _, tok := range []*Tokenizer{s.plain, s.cached} {
			if got := tok.Encode(c.text, false, false); !slices.Equal(got, c.want) {
				t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
			}
		}
	}
	alphabet := []string{"x", "y", "z", "a", "b", "é", " ", " ", "  ", sp, "<|x|>", "\xc3", "\xe2\x96", "\xf0"}
	rng := rand.New(rand.NewPCG(7, 7))
	for range 2000 {
		var b strings.Builder
		for range rng.IntN(16) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		checkCached(t, s, b.String())
	}
}

// TestConcurrentCache shares tokenizers with tiny and default caches
// between goroutines encoding overlapping texts (run with -race).
func TestConcurrentCache(t *testing.T) {
	path := testshared.Path(t, "testdata", "vocab", "ggml-vocab-llama-spm.gguf")
	bpePath := testshared.Path(t, "testdata", "vocab", "ggml-vocab-deepseek-coder.gguf")
	texts := randomTexts(t, 60, 3)
	for _, p := range []string{path, bpePath} {
		plain := loadTokenizerOptions(t, p, noCaches)
		want := make([][]int32, len(texts))
		for i, s := range texts {
			want[i] = plain.Encode(s, true, true)
		}
		for _, o := range []Options{{}, tinyCaches} {
			tok := loadTokenizerOptions(t, p, o)
			var wg sync.WaitGroup
			for g := range 6 {
				wg.Go(func() {
					opts := EncodeOptions{AddSpecial: true, ParseSpecial: true, ReuseFragments: g%2 == 0, Scope: fmt.Sprint(g % 3)}
					var ids []int32
					for k := range 120 {
						i := (g*13 + k*7) % len(texts)
						if ids = tok.AppendEncodeWith(ids[:0], texts[i], opts); !slices.Equal(ids, want[i]) {
							t.Errorf("goroutine %d: text %d differs", g, i)
							return
						}
					}
				})
			}
			wg.Wait()
		}
	}
}

// TestFragmentScopes checks that fragments are reused within a scope only,
// and only for calls that ask.
func TestFragmentScopes(t *testing.T) {
	tok := loadTokenizerOptions(t, testshared.Path(t, "testdata", "vocab", "ggml-vocab-gpt-2.gguf"), Options{})
	text := strings.Repeat("A system prompt long enough to be cached. ", 4) + "<|endoftext|>" + strings.Repeat("Tools: a, b, c; ", 8)
	a := EncodeOptions{ParseSpecial: true, ReuseFragments: true, Scope: "tenant-a"}
	b := EncodeOptions{ParseSpecial: true, ReuseFragments: true, Scope: "tenant-b"}
	want := tok.AppendEncodeWith(nil, text, EncodeOptions{ParseSpecial: true})
	for _, c := range []struct {
		opts                  EncodeOptions
		hits, misses, entries int
	}{
		{a, 0, 2, 2}, // both fragments are new in scope a
		{a, 2, 2, 2}, // and reused
		{b, 2, 4, 4}, // scope b sees nothing of a's
		{EncodeOptions{ParseSpecial: true}, 2, 4, 4}, // no reuse asked: no lookups
		{b, 4, 4, 4},
	} {
		if got := tok.AppendEncodeWith(nil, text, c.opts); !slices.Equal(got, want) {
			t.Fatalf("%+v: tokens differ", c.opts)
		}
		st := tok.CacheStats()
		if st.FragmentHits != uint64(c.hits) || st.FragmentMisses != uint64(c.misses) || st.FragmentEntries != int64(c.entries) {
			t.Fatalf("after %+v: %+v, want %d hits %d misses %d entries", c.opts, st, c.hits, c.misses, c.entries)
		}
	}
}

// TestWordScopes checks that a word cached for one scope is never a hit
// for another, for both tokenizer kinds.
func TestWordScopes(t *testing.T) {
	for _, vocab := range []string{"ggml-vocab-gpt-2.gguf", "ggml-vocab-llama-spm.gguf"} {
		tok := loadTokenizerOptions(t, testshared.Path(t, "testdata", "vocab", vocab), Options{})
		text := "Quietly unusual words arrive"
		want := tok.AppendEncodeWith(nil, text, EncodeOptions{Scope: "other"})
		before := tok.CacheStats()
		a, b := EncodeOptions{Scope: "tenant-a"}, EncodeOptions{Scope: "tenant-b"}
		for i, opts := range []EncodeOptions{a, a, b} {
			if got := tok.AppendEncodeWith(nil, text, opts); !slices.Equal(got, want) {
				t.Fatalf("%s %+v: tokens differ", vocab, opts)
			}
			st := tok.CacheStats()
			hits := st.WordHits - before.WordHits
			if (i == 1) != (hits > 0) {
				t.Fatalf("%s call %d (%s): %d word hits", vocab, i, opts.Scope, hits)
			}
			before = st
		}
	}
}

func TestWordCacheBounds(t *testing.T) {
	for _, budget := range []int{600, 4096, 1 << 16} {
		c := newWordCache(budget).ready()
		if n := len(c.buckets); n&(n-1) != 0 || int64(n)*c.perBucket > int64(budget) {
			t.Fatalf("budget %d: %d buckets of %d bytes", budget, n, c.perBucket)
		}
		rng := rand.New(rand.NewPCG(uint64(budget), 0))
		for i := range 5000 {
			word := fmt.Sprintf("w%d%s", rng.IntN(3000), strings.Repeat("x", rng.IntN(40)))
			ids := make([]int32, 1+rng.IntN(10))
			for k := range ids {
				ids[k] = int32(i + k)
			}
			h := c.hashForTest(word)
			if got, ok := lookupWord(c, h, "", word); ok {
				// A word's ids were fixed the first time: check the copy.
				if len(got) == 0 || got[0] > int32(i) {
					t.Fatalf("%q: cached %v", word, got)
				}
				continue
			}
			c.insert(h, "", []byte(word), ids)
			if wordCost(len(word), len(ids)) <= c.perBucket {
				if got, ok := lookupWord(c, h, "", word); !ok || !slices.Equal(got, ids) {
					t.Fatalf("%q: just inserted, got %v %v", word, got, ok)
				}
			}
			checkWordCache(t, c, budget)
		}
	}
}

// checkWordCache verifies the cache's accounting against its contents.
func checkWordCache(t *testing.T, c *wordCache, budget int) {
	t.Helper()
	var used, entries int64
	for i := range c.buckets {
		b := &c.buckets[i]
		var bu int64
		for w := range wordWays {
			e := b.ents[w].Load()
			if e == nil {
				continue
			}
			if b.tags[w].Load() != e.hash || e.hash&c.mask != uint64(i) || e.cost != wordCost(len(e.key), len(e.ids)) {
				t.Fatalf("bucket %d way %d: inconsistent entry %q", i, w, e.key)
			}
			bu += e.cost
			entries++
		}
		if bu != b.used || bu > c.perBucket {
			t.Fatalf("bucket %d: %d bytes, accounted %d, limit %d", i, bu, b.used, c.perBucket)
		}
		used += bu
	}
	if used != c.used.Load() || entries != c.entries.Load() || used > int64(budget) {
		t.Fatalf("cache holds %d bytes in %d entries, accounted %d in %d, budget %d", used, entries, c.used.Load(), c.entries.Load(), budget)
	}
}

func (c *wordCache) hashForTest(word string) uint64 {
	return maphash.String(c.seed, word)
}

func loadTokenizerOptions(t testing.TB, path string, opts Options) *Tokenizer {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	tok, err := FromMetadataOptions(f, opts)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return tok
}

// TestWordCacheClock fills one bucket, references half of it and checks
// that inserting evicts the unreferenced half first.
func TestWordCacheClock(t *testing.T) {
	c := newWordCache(8 * int(wordCost(2, 1))).ready()
	if len(c.buckets) != 1 {
		t.Fatalf("%d buckets", len(c.buckets))
	}
	word := func(i int) string { return fmt.Sprintf("%02d", i) }
	for i := range wordWays {
		c.insert(c.hashForTest(word(i)), "", []byte(word(i)), []int32{int32(i)})
	}
	for i := 0; i < wordWays; i += 2 {
		if _, ok := lookupWord(c, c.hashForTest(word(i)), "", word(i)); !ok {
			t.Fatalf("%s missing", word(i))
		}
	}
	for i := wordWays; i < wordWays+wordWays/2; i++ {
		c.insert(c.hashForTest(word(i)), "", []byte(word(i)), []int32{int32(i)})
	}
	for i := range wordWays + wordWays/2 {
		_, ok := lookupWord(c, c.hashForTest(word(i)), "", word(i))
		if want := i%2 == 0 || i >= wordWays; ok != want {
			t.Errorf("%s cached %v, want %v", word(i), ok, want)
		}
	}
	checkWordCache(t, c, 8*int(wordCost(2, 1)))
}

func TestFragCacheLRU(t *testing.T) {
	text := func(i int) string { return fmt.Sprintf("%03d", i) + strings.Repeat("-", 97) }
	cost := fragCost("s", text(0), 10)
	c := newFragCache(int(4 * cost)) // entries up to a quarter of the budget
	ids := make([]int32, 10)
	put := func(i int) { c.put(c.hash("s", false, text(i)), "s", false, text(i), ids) }
	get := func(i int) bool { _, ok := c.get(c.hash("s", false, text(i)), "s", false, text(i)); return ok }
	for i := range 4 {
		put(i)
	}
	if !get(0) || !get(2) {
		t.Fatal("entries missing")
	}
	put(4) // evicts 1, the least recently used
	put(5) // evicts 3
	for i, want := range []bool{true, false, true, false, true, true} {
		if get(i) != want {
			t.Errorf("entry %d cached %v, want %v", i, !want, want)
		}
	}
	if c.used > c.budget || len(c.m) != 4 {
		t.Errorf("%d entries of %d bytes, budget %d", len(c.m), c.used, c.budget)
	}
	// Too large for the cache.
	big := strings.Repeat("x", int(c.budget))
	c.put(c.hash("s", false, big), "s", false, big, nil)
	if _, ok := c.get(c.hash("s", false, big), "s", false, big); ok {
		t.Error("oversized fragment cached")
	}
	// Equal hashes never return another scope's, prefix's or text's ids.
	c.put(42, "s", false, text(9), []int32{9})
	for _, k := range []struct {
		scope  string
		prefix bool
		text   string
		ok     bool
	}{{"s", false, text(9), true}, {"t", false, text(9), false}, {"s", true, text(9), false}, {"s", false, text(8), false}} {
		if got, ok := c.get(42, k.scope, k.prefix, k.text); ok != k.ok || ok && !slices.Equal(got, []int32{9}) {
			t.Errorf("get(42, %q, %v, %q) = %v %v", k.scope, k.prefix, k.text, got, ok)
		}
	}
}

// TestCacheAllocs checks that warm encodes allocate nothing, on valid and
// invalid UTF-8, for BPE and SPM, with and without fragment reuse.
func TestCacheAllocs(t *testing.T) {
	if testing.CoverMode() != "" || raceEnabled {
		t.Skip("allocation counts differ under coverage and the race detector")
	}
	text := strings.Join(encodeSeeds(t), " ") + " bad \xff\xfe bytes"
	// (The vocabularies with regular-expression pre-tokenizers allocate
	// in the regex engine.)
	for _, name := range []string{"llama-spm", "gpt-2", "starcoder"} {
		tok := loadTokenizer(t, testshared.Path(t, "testdata", "vocab", "ggml-vocab-"+name+".gguf"))
		for _, opts := range []EncodeOptions{{ParseSpecial: true}, {ParseSpecial: true, ReuseFragments: true}} {
			dst := tok.AppendEncodeWith(nil, text, opts)
			if n := testing.AllocsPerRun(20, func() { dst = tok.AppendEncodeWith(dst[:0], text, opts) }); n != 0 {
				t.Errorf("%s %+v: %v allocations per warm encode", name, opts, n)
			}
		}
	}
}

// TestPrepare: Prepare builds the word cache's table up front (a server's
// first requests must not wait for it together) and changes no result.
func TestPrepare(t *testing.T) {
	prepared := synthTokenizer(t, "smollm2-135m", Options{})
	lazy := synthTokenizer(t, "smollm2-135m", Options{})
	if prepared.Kind() != KindBPE {
		t.Fatalf("smollm2-135m: kind %v, want BPE (the kind with the code point table)", prepared.Kind())
	}
	if prepared.words == nil || prepared.words.buckets != nil {
		t.Fatal("a new tokenizer should have a word cache whose table is not built yet")
	}
	prepared.Prepare()
	if prepared.words.buckets == nil {
		t.Fatal("Prepare did not build the word cache's table")
	}
	prepared.Prepare() // idempotent
	for _, text := range randomTexts(t, 20, 7) {
		opts := EncodeOptions{ParseSpecial: true}
		if got, want := prepared.AppendEncodeWith(nil, text, opts), lazy.AppendEncodeWith(nil, text, opts); !slices.Equal(got, want) {
			t.Fatalf("%q: prepared %v, lazy %v", text, got, want)
		}
	}
}
