package kv

import (
	"errors"
	"testing"
	"time"
)

// valuePool is a pool of n 4-token blocks on a clock the test moves.
func valuePool(t *testing.T, n int) (*Pool, *time.Time) {
	t.Helper()
	now := time.Unix(1_000_000, 0)
	p, err := NewPool(Config{NumBlocks: n, BlockSize: 4, Layers: 1, KVDim: 4, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return p, &now
}

// cache runs a sequence over tokens with the given classes (one per
// block, the last one for the rest) and releases it, leaving its full
// blocks cached. It returns how many tokens came from the cache.
func cache(t *testing.T, p *Pool, tokens []int32, pinUntil time.Time, classes ...Class) int {
	t.Helper()
	s := p.NewSequence(Hash{7}, nil)
	if len(classes) > 0 {
		s.SetClasses(classes[:len(classes)-1], classes[len(classes)-1])
	}
	s.PinUntil(pinUntil)
	hit := s.MatchPrefix(tokens)
	if err := extend(s, tokens[hit:]); err != nil {
		t.Fatal(err)
	}
	s.Release()
	if err := p.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	return hit
}

// findable reports which of the chain's full blocks are still findable.
func findable(p *Pool, tokens []int32) []bool {
	s := p.NewSequence(Hash{7}, nil)
	hashes := s.PromptHashes(tokens)
	out := make([]bool, len(hashes))
	for i, h := range hashes {
		out[i] = p.Lookup(h)
	}
	return out
}

// evict takes n blocks out of the pool (forcing evictions) and gives them
// back as free.
func evict(t *testing.T, p *Pool, n int) error {
	t.Helper()
	s := p.NewSequence(Hash{9}, nil)
	err := s.Reserve(n * p.BlockSize())
	s.Release()
	if cerr := p.CheckInvariants(); cerr != nil {
		t.Fatal(cerr)
	}
	return err
}

func seqTokens(base int32, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = base + int32(i)
	}
	return out
}

// TestEvictionCutsChainsFromTheTail: the blocks a chain needs first go
// last, whatever order they were released in.
func TestEvictionCutsChainsFromTheTail(t *testing.T) {
	p, _ := valuePool(t, 5)
	chain := seqTokens(100, 17) // 4 full blocks + 1 token (its block is freed)
	cache(t, p, chain, time.Time{})
	// A prefix hit on the first block alone makes it the most used: value
	// alone would evict the tail first anyway, but the first block must
	// stay even if it were the least valuable.
	cache(t, p, chain[:5], time.Time{})
	for k := 1; k <= 4; k++ {
		if err := evict(t, p, k+1); err != nil { // the free block, then k evictions
			t.Fatal(err)
		}
		got := findable(p, chain)
		for i, f := range got {
			if want := i < 4-k; f != want {
				t.Fatalf("after evicting %d: findable %v, want the first %d", k, got, 4-k)
			}
		}
	}
}

// TestEvictionByClassThenValue: lower classes go first; within a class,
// the block less likely to be used again, by what the pool has seen:
// here prompts used once never came back and prompts used twice came back
// a third time, so a chain used twice outlives a fresher one used once.
func TestEvictionByClassThenValue(t *testing.T) {
	p, _ := valuePool(t, 7)
	dead := int32(1000)
	for k := range int32(5) {
		back := seqTokens(5000+100*k, 9)
		for range 3 {
			cache(t, p, back, time.Time{}, ClassSession)
			for range 2 {
				cache(t, p, seqTokens(dead, 9), time.Time{}, ClassSession) // never again
				dead += 100
			}
		}
	}
	persistent := seqTokens(1, 9) // 2 full blocks each (and one freed)
	session := seqTokens(50, 9)
	popular := seqTokens(200, 9)
	cache(t, p, persistent, time.Time{}, ClassPersistent)
	cache(t, p, popular, time.Time{}, ClassSession)
	if hit := cache(t, p, popular, time.Time{}, ClassSession); hit != 8 {
		t.Fatalf("hit %d tokens of popular, want 8", hit)
	}
	cache(t, p, session, time.Time{}, ClassSession)
	steps := []struct {
		evict                        int
		persistent, popular, session int // findable blocks left
	}{
		{3, 2, 2, 0}, // the free block, then the session chain, used once
		{5, 2, 0, 0}, // then the popular one
		{7, 0, 0, 0}, // persistent last
	}
	for _, st := range steps {
		if err := evict(t, p, st.evict); err != nil {
			t.Fatal(err)
		}
		count := func(tokens []int32) int {
			n := 0
			for _, f := range findable(p, tokens) {
				if f {
					n++
				}
			}
			return n
		}
		if a, b, c := count(persistent), count(popular), count(session); a != st.persistent || b != st.popular || c != st.session {
			t.Fatalf("after evicting %d: persistent %d, popular %d, session %d blocks left; want %d, %d, %d",
				st.evict, a, b, c, st.persistent, st.popular, st.session)
		}
	}
}

// TestPinsKeptUntilExpiry: pinned blocks are not evictable before their
// expiry (a reservation that would need them fails), and go first after.
func TestPinsKeptUntilExpiry(t *testing.T) {
	p, now := valuePool(t, 5)
	pinned := seqTokens(1, 9)   // 2 full blocks
	session := seqTokens(60, 9) // 2 full blocks
	cache(t, p, pinned, now.Add(time.Hour), ClassPinned)
	cache(t, p, session, time.Time{}, ClassSession)
	if st := p.Stats(); st.Pinned != 2 || st.Cached != 4 || p.Available() != 3 {
		t.Fatalf("stats %+v, available %d", st, p.Available())
	}
	if err := evict(t, p, 4); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("reserving over a pinned block: %v, want ErrNoSpace", err)
	}
	if err := evict(t, p, 3); err != nil {
		t.Fatal(err)
	}
	if f := findable(p, pinned); !f[0] || !f[1] {
		t.Fatalf("pinned blocks evicted before their expiry: %v", f)
	}
	// A later use of the pin extends it; the expiry is the latest.
	cache(t, p, pinned, now.Add(2*time.Hour), ClassPinned)
	*now = now.Add(90 * time.Minute)
	if err := evict(t, p, 4); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("the extended pin did not hold: %v", err)
	}
	*now = now.Add(time.Hour)
	if st := p.Stats(); st.Pinned != 0 || p.Available() != 5 {
		t.Fatalf("after expiry: stats %+v, available %d", st, p.Available())
	}
	if err := evict(t, p, 5); err != nil {
		t.Fatal(err)
	}
}

// TestEphemeralNeverCached: from a sequence's first ephemeral block on,
// its blocks are freed when it ends; the blocks before stay cached.
func TestEphemeralNeverCached(t *testing.T) {
	p, _ := valuePool(t, 8)
	turn := seqTokens(1, 17) // 4 full blocks
	cache(t, p, turn, time.Time{}, ClassPersistent, ClassSession, ClassEphemeral, ClassSession)
	got := findable(p, turn)
	if want := []bool{true, true, false, false}; len(got) != 4 || got[0] != want[0] || got[1] != want[1] || got[2] || got[3] {
		t.Fatalf("findable %v, want %v", got, want)
	}
	if st := p.Stats(); st.Cached != 2 || st.Free != 6 {
		t.Fatalf("stats %+v: want 2 cached, 6 free", st)
	}
}

// TestLRUStillAvailable: the plain LRU evictor remains a configuration.
func TestLRUStillAvailable(t *testing.T) {
	p, err := NewPool(Config{NumBlocks: 5, BlockSize: 4, Layers: 1, KVDim: 4, Evictor: NewLRU(5)})
	if err != nil {
		t.Fatal(err)
	}
	cache(t, p, seqTokens(1, 17), time.Time{})
	if err := evict(t, p, 1); err != nil {
		t.Fatal(err)
	}
}

// TestHostTier: blocks evicted from the pool move to G2 and come back, with
// their contents, on a prefix hit; with G2 short of room, the chain's
// prefix (evicted last) is what it keeps.
func TestHostTier(t *testing.T) {
	tests := []struct {
		name       string
		hostBlocks int
		wantHit    int // tokens of chain a found after b pushed it out
	}{
		{"room for all", 8, 16},
		{"room for two", 2, 8},
		{"none", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{NumBlocks: 5, BlockSize: 4, Layers: 2, KVDim: 4}
			cfg.HostMemoryBytes = int64(tt.hostBlocks) * cfg.BlockBytes()
			p, err := NewPool(cfg)
			if err != nil {
				t.Fatal(err)
			}
			a, b := seqTokens(1, 17), seqTokens(100, 17) // 4 full blocks each
			cache(t, p, a, time.Time{})
			cache(t, p, b, time.Time{})
			if st := p.Stats(); st.Host.Blocks != min(tt.hostBlocks, 4) || st.Evictions != 4 {
				t.Fatalf("after b: %+v", st)
			}
			s := p.NewSequence(Hash{7}, nil)
			if hit := s.MatchPrefix(a); hit != tt.wantHit {
				t.Fatalf("hit %d tokens of a, want %d", hit, tt.wantHit)
			}
			checkContent(t, s) // onboarded blocks hold a's KV
			if err := extend(s, a[s.Len():]); err != nil {
				t.Fatal(err)
			}
			checkContent(t, s)
			s.Release()
			if err := p.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			if st := p.Stats(); st.Host.Onboarded != int64(tt.wantHit/4) {
				t.Fatalf("onboarded %d blocks, want %d", st.Host.Onboarded, tt.wantHit/4)
			}
		})
	}
}

// TestDemote: a finished session's chain moves to G2 at once (or, without
// G2, goes first), and comes back on its next turn.
func TestDemote(t *testing.T) {
	cfg := Config{NumBlocks: 10, BlockSize: 4, Layers: 2, KVDim: 4}
	cfg.HostMemoryBytes = 8 * cfg.BlockBytes()
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	turn := seqTokens(1, 17)
	cache(t, p, turn, time.Time{})
	s := p.NewSequence(Hash{7}, nil)
	if moved, _ := p.Demote(s.PromptHashes(turn)); moved != 4 {
		t.Fatalf("moved %d blocks, want 4", moved)
	}
	if st := p.Stats(); st.Cached != 0 || st.Host.Blocks != 4 {
		t.Fatalf("after demotion: %+v", st)
	}
	if err := p.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if hit := s.MatchPrefix(turn); hit != 16 {
		t.Fatalf("next turn hit %d tokens, want 16", hit)
	}
	checkContent(t, s)
	s.Release()

	// Without G2: the demoted chain is evicted before a fresher one of the
	// same class, although it was released later.
	q, _ := valuePool(t, 9)
	old, fresh := seqTokens(1, 17), seqTokens(50, 17)
	cache(t, q, fresh, time.Time{})
	cache(t, q, old, time.Time{})
	if _, lowered := q.Demote(q.NewSequence(Hash{7}, nil).PromptHashes(old)); lowered != 4 {
		t.Fatalf("lowered %d, want 4", lowered)
	}
	if err := evict(t, q, 5); err != nil { // the free block, then four evictions
		t.Fatal(err)
	}
	if f := findable(q, fresh); !f[3] {
		t.Fatalf("the fresh chain was evicted before the demoted one: %v", f)
	}
}

// TestPersistentTTL: a persistent block with a TTL outlasts session blocks
// until its TTL runs out, and is then an unclassified block like any
// other (its age counting against it); without a TTL it stays persistent,
// and a TTL-less request's claim outlasts a TTL.
func TestPersistentTTL(t *testing.T) {
	p, now := valuePool(t, 5)
	run := func(tokens []int32, class Class, ttl time.Duration) {
		t.Helper()
		s := p.NewSequence(Hash{7}, nil)
		s.SetClasses(nil, class)
		if ttl > 0 {
			s.PersistUntil(now.Add(ttl))
		}
		hit := s.MatchPrefix(tokens)
		if err := extend(s, tokens[hit:]); err != nil {
			t.Fatal(err)
		}
		s.Release()
		if err := p.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	timed, forever, session, fresh := seqTokens(1, 9), seqTokens(30, 9), seqTokens(60, 9), seqTokens(90, 9) // 2 full blocks each
	run(timed, ClassPersistent, time.Hour)
	run(session, ClassSession, 0)
	if err := evict(t, p, 3); err != nil { // the free block, then the session chain
		t.Fatal(err)
	}
	if f := findable(p, timed); !f[0] || !f[1] {
		t.Fatalf("a persistent chain within its TTL was evicted before a session one: %v", f)
	}
	if st := p.Stats(); st.ByClass[ClassPersistent] != 2 {
		t.Fatalf("by class before the TTL: %v", st.ByClass)
	}
	*now = now.Add(2 * time.Hour)
	run(fresh, ClassSession, 0) // fresher than the expired chain, and as often used
	if st := p.Stats(); st.ByClass[ClassPersistent] != 0 {
		t.Fatalf("by class after the TTL: %v", st.ByClass)
	}
	if err := evict(t, p, 3); err != nil {
		t.Fatal(err)
	}
	if f := findable(p, timed); f[0] || f[1] {
		t.Fatalf("an expired persistent chain outlived a fresher session one: %v", f)
	}

	// A TTL-less claim outlasts a TTL: the chain stays persistent.
	run(forever, ClassPersistent, 0)
	run(forever, ClassPersistent, time.Minute)
	*now = now.Add(time.Hour)
	if st := p.Stats(); st.ByClass[ClassPersistent] != 2 {
		t.Fatalf("a persistent chain without a TTL lost its class: %v", st.ByClass)
	}
}

// TestPersistentQuotaPerOwner: past its quota a tenant's persistent blocks
// are kept as session blocks, so a tenant flooding the pool with
// "persistent" prompts pushes out its own excess before another tenant's
// persistent blocks.
func TestPersistentQuotaPerOwner(t *testing.T) {
	p, err := NewPool(Config{NumBlocks: 9, BlockSize: 4, Layers: 1, KVDim: 4, MaxPersistentPerOwner: 2})
	if err != nil {
		t.Fatal(err)
	}
	a, b := Hash{1}, Hash{2}
	run := func(scope Hash, tokens []int32) {
		t.Helper()
		s := p.NewSequence(scope, nil)
		s.SetClasses(nil, ClassPersistent)
		hit := s.MatchPrefix(tokens)
		if err := extend(s, tokens[hit:]); err != nil {
			t.Fatal(err)
		}
		s.Release()
		if err := p.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
	}
	run(b, seqTokens(500, 9)) // b's system prompt: 2 persistent blocks
	for i := range 4 {        // a floods: 8 blocks asked persistent, 2 granted
		run(a, seqTokens(int32(100*i), 9))
	}
	if st := p.Stats(); st.ByClass[ClassPersistent] != 4 {
		t.Fatalf("persistent blocks %d, want 2 of a's and 2 of b's: %v", st.ByClass[ClassPersistent], st.ByClass)
	}
	s := p.NewSequence(b, nil)
	hashes := s.PromptHashes(seqTokens(500, 9))
	for _, h := range hashes {
		if !p.Lookup(h) {
			t.Fatal("a's flood evicted b's persistent prompt")
		}
	}
}

// TestUnpin: a deleted cache's pins end at once; its blocks are then
// cached like any, and a pinned chain of another is untouched.
func TestUnpin(t *testing.T) {
	p, now := valuePool(t, 6)
	doc, other := seqTokens(1, 9), seqTokens(50, 9) // 2 full blocks each
	cache(t, p, doc, now.Add(time.Hour), ClassPinned)
	cache(t, p, other, now.Add(time.Hour), ClassPinned)
	// One of doc's blocks in use while it is unpinned.
	s := p.NewSequence(Hash{7}, nil)
	if hit := s.MatchPrefix(doc); hit != 8 {
		t.Fatalf("hit %d", hit)
	}
	if n := p.Unpin(p.NewSequence(Hash{7}, nil).PromptHashes(doc)); n != 2 {
		t.Fatalf("unpinned %d blocks, want 2", n)
	}
	s.Release()
	if err := p.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if got := p.Pinned(); got != 2 {
		t.Fatalf("%d blocks pinned after unpinning doc, want other's 2", got)
	}
	if err := evict(t, p, 4); err != nil { // the free blocks, then doc's
		t.Fatal(err)
	}
	if f := findable(p, other); !f[0] || !f[1] {
		t.Fatalf("the other pinned chain was evicted: %v", f)
	}
}
