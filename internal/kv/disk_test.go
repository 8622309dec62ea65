package kv

import (
	"context"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// diskPool is a pool of n 4-token blocks with a G2 of hostBlocks blocks and
// a G3 in dir.
func diskPool(t *testing.T, n, hostBlocks int, dir string) *Pool {
	t.Helper()
	cfg := Config{NumBlocks: n, BlockSize: 4, Layers: 2, KVDim: 4, DiskDir: dir}
	cfg.HostMemoryBytes = int64(hostBlocks) * cfg.BlockBytes()
	cfg.DiskBytes = 1000 * cfg.BlockBytes()
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

// written waits until G3 has written its queue.
func written(t *testing.T, p *Pool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().Disk.QueueDepth > 0 {
		if time.Now().After(deadline) {
			t.Fatal("G3 did not write its queue")
		}
		time.Sleep(time.Millisecond)
	}
}

// fetchWait moves a prompt's G3 blocks up and waits for them.
func fetchWait(t *testing.T, p *Pool, scope Hash, prompt []int32) int {
	t.Helper()
	hashes := p.NewSequence(scope, nil).PromptHashes(prompt)
	done := make(chan struct{}, 1)
	n := p.Fetch(scope, hashes, false, func() { done <- struct{}{} })
	if n > 0 {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("fetch did not end")
		}
	}
	return n
}

// TestDiskTier: blocks pushed out of memory reach G3 and come back, with
// their contents, once fetched; before the fetch, a match stops where
// memory ends.
func TestDiskTier(t *testing.T) {
	for _, host := range []int{0, 2} {
		p := diskPool(t, 5, host, t.TempDir())
		a, b := seqTokens(1, 17), seqTokens(100, 17) // 4 full blocks each
		cache(t, p, a, time.Time{})
		cache(t, p, b, time.Time{})
		written(t, p)
		// G3 holds the chain's tail and, sent down with it, the head that
		// stays in G2 (a block on disk is of use only after its prefix).
		if st := p.Stats().Disk; st.Blocks != 4 {
			t.Fatalf("G2 of %d: G3 holds %d blocks, want 4", host, st.Blocks)
		}
		s := p.NewSequence(Hash{7}, nil)
		// G2 keeps the chain's head (evicted last), G3 the rest.
		if hit := s.MatchPrefix(a); hit != 4*host {
			t.Fatalf("G2 of %d: hit %d tokens before fetching, want %d", host, hit, 4*host)
		}
		if g1, g2, g3 := s.MatchedFrom(); g1 != 0 || g2 != 4*host || g3 != 0 {
			t.Fatalf("G2 of %d: matched %d/%d/%d tokens from G1/G2/G3 before fetching, want 0/%d/0", host, g1, g2, g3, 4*host)
		}
		s.Release()
		if n := fetchWait(t, p, Hash{7}, a); n != 4-host {
			t.Fatalf("G2 of %d: fetched %d blocks, want %d", host, n, 4-host)
		}
		if hit := s.MatchPrefix(a); hit != 16 {
			t.Fatalf("G2 of %d: hit %d tokens after fetching, want 16", host, hit)
		}
		// The chain's head from memory (G1, or G2 where the first match's
		// blocks went back down), the rest from G3.
		if g1, g2, g3 := s.MatchedFrom(); g1+g2 != 4*host || g3 != 16-4*host {
			t.Fatalf("G2 of %d: matched %d/%d/%d tokens from G1/G2/G3 after fetching, want %d from memory, %d from G3", host, g1, g2, g3, 4*host, 16-4*host)
		}
		checkContent(t, s)
		if err := extend(s, a[s.Len():]); err != nil {
			t.Fatal(err)
		}
		checkContent(t, s)
		s.Release()
		if err := p.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		// Another scope's identical tokens find nothing.
		other := p.NewSequence(Hash{8}, nil)
		if n := fetchWait(t, p, Hash{8}, a); n != 0 || other.MatchPrefix(a) != 0 {
			t.Fatal("another scope reached G3's blocks")
		}
		other.Release()
	}
}

// TestDiskTierSurvivesRestart: a pool closed and opened again on the same
// directory serves what the first held in memory.
func TestDiskTierSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	p := diskPool(t, 8, 2, dir)
	a := seqTokens(1, 17)
	cache(t, p, a, time.Time{})
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	q := diskPool(t, 8, 2, dir)
	if n := fetchWait(t, q, Hash{7}, a); n != 4 {
		t.Fatalf("fetched %d blocks after the restart, want 4", n)
	}
	s := q.NewSequence(Hash{7}, nil)
	if hit := s.MatchPrefix(a); hit != 16 {
		t.Fatalf("hit %d tokens after the restart, want 16", hit)
	}
	checkContent(t, s)
	s.Release()
	if err := q.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestDiskTierCorruptBlock: a damaged file is a miss from that block on;
// what is recomputed is right.
func TestDiskTierCorruptBlock(t *testing.T) {
	dir := t.TempDir()
	p := diskPool(t, 8, 0, dir)
	a := seqTokens(1, 17)
	cache(t, p, a, time.Time{})
	if err := p.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	hashes := p.NewSequence(Hash{7}, nil).PromptHashes(a)
	x := hex.EncodeToString(hashes[1][:])
	path := filepath.Join(dir, "blocks", x[:2], x)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	q := diskPool(t, 8, 0, dir)
	fetchWait(t, q, Hash{7}, a)
	s := q.NewSequence(Hash{7}, nil)
	if hit := s.MatchPrefix(a); hit != 4 {
		t.Fatalf("hit %d tokens with block 1 damaged, want 4", hit)
	}
	if err := extend(s, a[s.Len():]); err != nil {
		t.Fatal(err)
	}
	checkContent(t, s)
	s.Release()
	if st := q.Stats().Disk; st.Corrupt != 1 {
		t.Fatalf("corrupt count %d, want 1", st.Corrupt)
	}
}

// TestForgetScope: a forgotten scope's blocks are gone from every tier,
// in use or not; another scope's stay.
func TestForgetScope(t *testing.T) {
	p := diskPool(t, 12, 2, t.TempDir())
	gone, kept := Hash{1}, Hash{2}
	run := func(scope Hash, tokens []int32) *Sequence {
		s := p.NewSequence(scope, nil)
		hit := s.MatchPrefix(tokens)
		if err := extend(s, tokens[hit:]); err != nil {
			t.Fatal(err)
		}
		return s
	}
	// Spread both scopes over G1, G2 and G3, and keep one of gone's in use.
	for i := range 4 {
		run(gone, seqTokens(int32(100*i), 17)).Release()
		run(kept, seqTokens(int32(100*i), 17)).Release()
	}
	written(t, p)
	active := run(gone, seqTokens(1000, 17))
	if err := p.ForgetScope(gone); err != nil {
		t.Fatal(err)
	}
	if err := p.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		tokens := seqTokens(int32(100*i), 17)
		if n := fetchWait(t, p, gone, tokens); n != 0 {
			t.Fatalf("prompt %d: %d blocks of a forgotten scope on disk", i, n)
		}
		s := p.NewSequence(gone, nil)
		if hit := s.MatchPrefix(tokens); hit != 0 {
			t.Fatalf("prompt %d: a forgotten scope hit %d tokens", i, hit)
		}
		s.Release()
	}
	active.Release()
	if err := p.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	s := p.NewSequence(gone, nil)
	if hit := s.MatchPrefix(seqTokens(1000, 17)); hit != 0 {
		t.Fatalf("a forgotten block in use at the time was cached: %d tokens", hit)
	}
	s.Release()
	// The other scope still finds its last prompt, from some tier.
	fetchWait(t, p, kept, seqTokens(300, 17))
	k := p.NewSequence(kept, nil)
	if hit := k.MatchPrefix(seqTokens(300, 17)); hit != 16 {
		t.Fatalf("the kept scope hit %d tokens, want 16", hit)
	}
	checkContent(t, k)
	k.Release()
}

// TestDiskTierHoldsWholeChains: a block goes to disk with the ancestors
// the disk lacks, so that a crash — which loses memory, where a chain's
// head stays while its tail is evicted — leaves reachable chains on disk.
func TestDiskTierHoldsWholeChains(t *testing.T) {
	dir := t.TempDir()
	p := diskPool(t, 5, 0, dir)
	head := seqTokens(1, 8)                                          // 2 blocks shared by both prompts
	a := append(append([]int32(nil), head...), seqTokens(100, 9)...) // + 2 blocks of its own
	b := append(append([]int32(nil), head...), seqTokens(200, 9)...)
	cache(t, p, a, time.Time{})
	cache(t, p, b, time.Time{}) // evicts a's tail; the shared head stays in the pool
	written(t, p)
	// A crash: the disk keeps what was written; the pool's memory is lost.
	if err := p.disk.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	q := diskPool(t, 5, 0, dir)
	if n := fetchWait(t, q, Hash{7}, a); n != 4 {
		t.Fatalf("fetched %d of a's blocks after the crash, want all 4", n)
	}
	s := q.NewSequence(Hash{7}, nil)
	if hit := s.MatchPrefix(a); hit != 16 {
		t.Fatalf("hit %d tokens of a after the crash, want 16", hit)
	}
	checkContent(t, s)
	s.Release()
}
