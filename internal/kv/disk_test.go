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
	n := p.Fetch(scope, hashes, func() { done <- struct{}{} })
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
		if st := p.Stats().Disk; st.Blocks != 4-host {
			t.Fatalf("G2 of %d: G3 holds %d blocks, want %d", host, st.Blocks, 4-host)
		}
		s := p.NewSequence(Hash{7}, nil)
		// G2 keeps the chain's head (evicted last), G3 the rest.
		if hit := s.MatchPrefix(a); hit != 4*host {
			t.Fatalf("G2 of %d: hit %d tokens before fetching, want %d", host, hit, 4*host)
		}
		s.Release()
		if n := fetchWait(t, p, Hash{7}, a); n != 4-host {
			t.Fatalf("G2 of %d: fetched %d blocks, want %d", host, n, 4-host)
		}
		if hit := s.MatchPrefix(a); hit != 16 {
			t.Fatalf("G2 of %d: hit %d tokens after fetching, want 16", host, hit)
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
