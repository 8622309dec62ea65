package grammar

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
)

// allowedSet returns the tokens Process leaves finite.
func allowedSet(m *Matcher, n int) []int32 {
	logits := make([]float32, n)
	m.Process(logits)
	var out []int32
	for i, x := range logits {
		if !math.IsInf(float64(x), -1) {
			out = append(out, int32(i))
		}
	}
	return out
}

// cloneMatcher copies a matcher's state (test helper).
func cloneMatcher(m *Matcher) *Matcher {
	c := &Matcher{mask: make([]uint64, len(m.mask)), scratch: make([]uint64, len(m.scratch)), intern: map[frame]int32{}}
	c.w.init(m.a)
	copyMatcher(c, m)
	return c
}

// copyMatcher makes c's state a copy of m's, reusing c's memory.
func copyMatcher(c, m *Matcher) {
	c.v, c.a, c.err, c.done, c.finished = m.v, m.a, m.err, m.done, m.finished
	c.cur = append(c.cur[:0], m.cur...)
	c.w.frames = append(c.w.frames[:0], m.w.frames[:m.nframes]...)
	c.nframes = m.nframes
}

func TestMatcherEndOfGeneration(t *testing.T) {
	v := byteVocab()
	const eog = 256
	g := JSONValue()
	m := g.NewMatcher(v)
	if m.Done() || slices.Contains(allowedSet(m, v.Size()), eog) {
		t.Fatal("end allowed before any output")
	}
	m.Accept('1')
	if !m.Done() {
		t.Fatal("a number is a complete JSON value")
	}
	if a := allowedSet(m, v.Size()); !slices.Contains(a, eog) || !slices.Contains(a, '2') || !slices.Contains(a, '.') {
		t.Fatalf("after 1: allowed %v, want the end and continuations", a)
	}
	m = g.NewMatcher(v)
	for _, b := range []byte("true") {
		m.Accept(int32(b))
	}
	if a := allowedSet(m, v.Size()); !slices.Equal(a, []int32{eog}) {
		t.Fatalf("after true: allowed %v, want only the end token", a)
	}
	m.Accept(eog)
	if m.Err() != nil || !m.Done() {
		t.Fatalf("end after true: err %v done %v", m.Err(), m.Done())
	}

	// A disallowed token puts the matcher in error; then only the end.
	m = g.NewMatcher(v)
	m.Accept('x')
	if m.Err() == nil {
		t.Fatal("x accepted as the start of a JSON value")
	}
	if a := allowedSet(m, v.Size()); !slices.Equal(a, []int32{eog}) {
		t.Fatalf("after an error: allowed %v, want only the end token", a)
	}
	m = g.NewMatcher(v)
	m.Accept(eog)
	if m.Err() == nil {
		t.Fatal("end of generation accepted before the value")
	}
	m = g.NewMatcher(v)
	m.Accept(-1)
	if m.Err() == nil {
		t.Fatal("token -1 accepted")
	}
}

func TestControlTokensNeverAllowed(t *testing.T) {
	v, tok := testVocab(t, "qwen2.5-0.5b")
	g := Sequence(Literal("<tool_call>"), JSONObject())
	m := g.NewMatcher(v)
	allowed := allowedSet(m, v.Size())
	toolCall, ok := tok.TokenID("<tool_call>")
	if !ok || !slices.Contains(allowed, toolCall) {
		t.Errorf("the user-defined <tool_call> token (%d) is not allowed at the start", toolCall)
	}
	for _, id := range allowed {
		if tok.IsControl(id) || tok.IsEOG(id) {
			t.Errorf("control/end token %d %q allowed", id, tok.TokenText(id))
		}
		if p := tok.AppendPiece(nil, id, false); len(p) == 0 || p[0] != '<' {
			t.Errorf("token %d %q allowed at the start of <tool_call>", id, p)
		}
	}
}

// TestProcessMatchesAccept checks the cached, trie-walking Process against
// Accept applied to each token separately, along random paths of several
// grammars: the two share no code beyond the automaton's closure.
func TestProcessMatchesAccept(t *testing.T) {
	v, _ := testVocab(t, "smollm2-135m")
	grammars := map[string]*Grammar{
		"value":  Options{MaxStringLength: 6}.JSONValue(),
		"schema": mustSchema(t, Options{}, `{"type":"object","properties":{"id":{"type":"integer","minimum":0,"maximum":300},"name":{"type":"string","maxLength":8},"tags":{"type":"array","items":{"enum":["x","yz"]}},"extra":{"anyOf":[{"type":"number"},{"type":"null"}]}},"required":["id","name"]}`),
		"tool":   Sequence(Literal("<tool_call>\n"), Object(Field{"name", JSONString("f")}, Field{"arguments", JSONObject()}), Literal("\n</tool_call>")),
	}
	rng := rand.New(rand.NewPCG(7, 8))
	steps := 12
	if testing.Short() {
		steps = 4
	}
	for name, g := range grammars {
		m := g.NewMatcher(v)
		for step := 0; step < steps; step++ {
			allowed := allowedSet(m, v.Size())
			in := make([]bool, v.Size())
			for _, id := range allowed {
				in[id] = true
			}
			c := cloneMatcher(m)
			for id := range v.Size() {
				copyMatcher(c, m)
				c.Accept(int32(id))
				if ok := c.Err() == nil; ok != in[id] {
					t.Fatalf("%s step %d: token %d %q: Process allows=%v, Accept ok=%v", name, step, id, v.piece(int32(id)), in[id], ok)
				}
			}
			if len(allowed) == 0 {
				t.Fatalf("%s step %d: nothing allowed", name, step)
			}
			next := allowed[rng.IntN(len(allowed))]
			if v.isEOG[next] {
				break
			}
			m.Accept(next)
		}
	}
}

// TestSPMWithoutHighBytes uses the tiny models' vocabulary, whose byte
// tokens stop at 0x7F: non-ASCII text cannot be spelled, so the grammar
// must steer around it rather than deadlock.
func TestSPMWithoutHighBytes(t *testing.T) {
	v, _ := testVocab(t, "tiny")
	g := mustSchema(t, Options{}, `{"type":"object","properties":{"w":{"enum":["é","e"]},"s":{"type":"string","pattern":"^[éa]+$"}},"required":["w","s"]}`)
	rng := rand.New(rand.NewPCG(9, 10))
	for range 20 {
		out, _ := sampleUniform(t, g, v, rng, 2000)
		if want := `{"w":"e","s":"a`; !(len(out) >= 3) || !isASCII(out) {
			t.Fatalf("output %q is not ASCII", out)
		} else if !containsAll(string(out), `"e"`) {
			t.Fatalf("output %q: want the only spellable enum value, as in %s", out, want)
		}
	}
	// A grammar that needs a byte the vocabulary lacks cannot start.
	m := mustSchema(t, Options{}, `{"const":"é"}`).NewMatcher(v)
	if m.Err() == nil {
		t.Fatal(`const "é" accepted by a vocabulary without bytes above 0x7F`)
	}
	if a := allowedSet(m, v.Size()); len(a) == 0 || !v.isEOG[a[0]] {
		t.Fatalf("unsatisfiable matcher allows %v, want the end tokens", a)
	}
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		found := false
		for i := 0; i+len(sub) <= len(s); i++ {
			if s[i:i+len(sub)] == sub {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// TestMaskCacheShared checks that grammars built separately share the
// vocabulary's cached masks for identical sub-automata (JSON strings).
func TestMaskCacheShared(t *testing.T) {
	v := newVocab(byteVocab().tokensForTest(), []int32{256})
	enter := func(g *Grammar, prefix string) {
		m := g.NewMatcher(v)
		for _, b := range []byte(prefix) {
			m.Accept(int32(b))
		}
		if m.Err() != nil {
			t.Fatal(m.Err())
		}
		allowedSet(m, v.Size())
	}
	enter(JSONObject(), `{"key`)
	_, misses1, _, _ := v.CacheStats()
	enter(mustSchema(t, Options{}, `{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}`), `{"a":"val`)
	hits, misses2, entries, bytes := v.CacheStats()
	if hits == 0 {
		t.Errorf("no cache hit inside a string of a second grammar (misses %d → %d)", misses1, misses2)
	}
	if entries == 0 || bytes <= 0 {
		t.Errorf("cache stats: %d entries, %d bytes", entries, bytes)
	}
}

// TestMaskCacheScoped checks that grammars of different cache scopes never
// share the vocabulary's masks, and grammars of one scope do.
func TestMaskCacheScoped(t *testing.T) {
	v := newVocab(byteVocab().tokensForTest(), []int32{256})
	schema := `{"type":"object","properties":{"secret":{"enum":["alpha-value","beta-value"]}},"required":["secret"]}`
	enter := func(scope string) (hits, misses uint64) {
		g := mustSchema(t, Options{}, schema)
		g.SetCacheScope(scope)
		h0, m0, _, _ := v.CacheStats()
		m := g.NewMatcher(v)
		for _, b := range []byte(`{"secret":"al`) {
			m.Accept(int32(b))
			allowedSet(m, v.Size())
		}
		if m.Err() != nil {
			t.Fatal(m.Err())
		}
		h1, m1, _, _ := v.CacheStats()
		return h1 - h0, m1 - m0
	}
	if _, misses := enter("tenant-a"); misses == 0 {
		t.Fatal("the first grammar computed no mask")
	}
	if hits, _ := enter("tenant-b"); hits != 0 {
		t.Errorf("another scope's grammar found %d masks of the first", hits)
	}
	if hits, misses := enter("tenant-a"); hits == 0 || misses != 0 {
		t.Errorf("the same scope's grammar: %d hits, %d misses; want all hits", hits, misses)
	}
}

func (v *Vocab) tokensForTest() [][]byte {
	out := make([][]byte, v.n)
	for id := range v.n {
		out[id] = v.piece(int32(id))
	}
	return out
}

func TestMaskCacheBounded(t *testing.T) {
	var c maskCache
	c.init(1000)
	for i := range 100 {
		c.put([32]byte{byte(i)}, &stateInfo{ids: make([]int32, 50)})
	}
	if c.bytes > 1000 || c.lru.Len() != len(c.m) {
		t.Fatalf("cache holds %d bytes in %d entries (map %d), limit 1000", c.bytes, c.lru.Len(), len(c.m))
	}
	if c.get([32]byte{99}) == nil || c.get([32]byte{0}) != nil {
		t.Fatal("LRU order: the newest entry must stay, the oldest go")
	}
}

// TestConcurrentMatchers runs many matchers of one grammar and vocabulary
// at once (run with -race).
func TestConcurrentMatchers(t *testing.T) {
	v, _ := testVocab(t, "tiny")
	g := mustSchema(t, Options{}, `{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}},"b":{"type":"string"}},"required":["a","b"]}`)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 11))
			for range 5 {
				out, _ := sampleUniform(t, g, v, rng, 5000)
				if err := validateInstance(out, `{"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}},"b":{"type":"string"}},"required":["a","b"]}`); err != nil {
					t.Errorf("%q: %v", out, err)
				}
			}
		}()
	}
	wg.Wait()
}

// TestNoAllocationsPerToken replays fixed token sequences: once every
// state's mask is cached and the matcher's buffers have grown, Process and
// Accept allocate nothing, so a run of many more tokens allocates no more
// than a short one.
func TestNoAllocationsPerToken(t *testing.T) {
	v, tok := testVocab(t, "smollm2-135m")
	g := mustSchema(t, Options{}, `{"type":"object","properties":{"name":{"type":"string"},"n":{"type":"array","items":{"type":"integer"}}},"required":["name","n"]}`)
	doc := func(words, items int) []int32 {
		var sb strings.Builder
		sb.WriteString(`{"name": "`)
		for i := range words {
			fmt.Fprintf(&sb, "word%d ", i)
		}
		sb.WriteString(`", "n": [1`)
		for i := range items {
			fmt.Fprintf(&sb, ", %d", i*37)
		}
		sb.WriteString("]}")
		return tok.Encode(sb.String(), false, false)
	}
	logits := make([]float32, v.Size())
	run := func(ids []int32) func() {
		return func() {
			m := g.NewMatcher(v)
			for _, id := range ids {
				clear(logits)
				m.Process(logits)
				if math.IsInf(float64(logits[id]), -1) {
					t.Fatalf("token %d %q rejected", id, v.piece(id))
				}
				m.Accept(id)
			}
			if !m.Done() {
				t.Fatal("not done")
			}
		}
	}
	short, long := doc(2, 2), doc(60, 60)
	run(long)()
	a := testing.AllocsPerRun(5, run(short))
	b := testing.AllocsPerRun(5, run(long))
	if b > a+1 {
		t.Errorf("%d tokens: %.0f allocations per run; %d tokens: %.0f", len(short), a, len(long), b)
	}
}
