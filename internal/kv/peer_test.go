package kv

import "testing"

// TestPeerExportImport: blocks one pool computed, exported by hash and
// imported into another pool, are found there by the same prompt with the
// content the first pool computed; the second pool computes only what
// neither held.
func TestPeerExportImport(t *testing.T) {
	scope := Hash{9}
	prompt := seqTokens(500, 4*6+2) // 6 full blocks of 4 and 2 tokens
	tests := []struct {
		name       string
		holderHas  int // tokens of prompt the holder computed
		takerHas   int // tokens of prompt the taker computed before
		from       int // first block to import
		wantStored int
		wantHit    int // the taker's prefix match afterwards
	}{
		{"everything", 26, 0, 0, 6, 24},
		{"the holder has part of it", 13, 0, 0, 3, 12},
		{"the taker has the start", 26, 8, 2, 4, 24},
		{"the taker lacks the block before from: nothing", 26, 0, 2, 0, 0},
		{"the taker has more than the holder exported", 8, 16, 0, 0, 16},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			holder := newTestPool(t, 16, nil)
			taker := newTestPool(t, 16, NewEventLog(64))
			for _, c := range []struct {
				p *Pool
				n int
			}{{holder, tc.holderHas}, {taker, tc.takerHas}} {
				s := c.p.NewSequence(scope, nil)
				if err := extend(s, prompt[:c.n]); err != nil {
					t.Fatal(err)
				}
				s.Release()
			}
			seq := taker.NewSequence(scope, nil)
			hashes := seq.PromptHashes(prompt)
			data := holder.Export(hashes[tc.from:])
			if want := tc.holderHas/4 - tc.from; len(data) != max(0, want) {
				t.Fatalf("exported %d blocks, want %d", len(data), max(0, want))
			}
			stored, err := seq.Import(prompt, hashes, tc.from, data)
			if err != nil {
				t.Fatal(err)
			}
			if stored != tc.wantStored {
				t.Errorf("stored %d blocks, want %d", stored, tc.wantStored)
			}
			if err := taker.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			s := taker.NewSequence(scope, nil)
			if hit := s.MatchPrefix(prompt); hit != tc.wantHit {
				t.Errorf("the taker's match: %d tokens, want %d", hit, tc.wantHit)
			}
			checkContent(t, s)
			if err := extend(s, prompt[s.Len():]); err != nil {
				t.Fatal(err)
			}
			checkContent(t, s)
			s.Release()
			if err := taker.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			if got := taker.Stats().ImportedBlocks; got != int64(tc.wantStored) {
				t.Errorf("ImportedBlocks = %d, want %d", got, tc.wantStored)
			}
		})
	}
}

// TestPeerImportScopeAndRoom: an import under another scope is never found
// by this one (the hashes carry the scope); an import into a pool that
// active sequences fill stops where the room ends, keeping a prefix; the
// imported blocks are classed as the importing sequence says; a block of
// the wrong size is refused.
func TestPeerImportScopeAndRoom(t *testing.T) {
	prompt := seqTokens(700, 4*8+1)
	holder := newTestPool(t, 16, nil)
	s := holder.NewSequence(Hash{1}, nil)
	if err := extend(s, prompt); err != nil {
		t.Fatal(err)
	}
	s.Release()
	data := holder.Export(holder.NewSequence(Hash{1}, nil).PromptHashes(prompt))
	if len(data) != 8 {
		t.Fatalf("exported %d blocks, want 8", len(data))
	}

	// Another scope's hashes find nothing in the holder.
	if got := holder.Export(holder.NewSequence(Hash{2}, nil).PromptHashes(prompt)); len(got) != 0 {
		t.Errorf("another scope exported %d blocks", len(got))
	}

	taker := newTestPool(t, 8, nil)
	busy := taker.NewSequence(Hash{3}, nil)
	if err := extend(busy, seqTokens(900, 4*5)); err != nil { // 5 of 8 blocks active
		t.Fatal(err)
	}
	seq := taker.NewSequence(Hash{1}, nil)
	seq.SetClasses(nil, ClassPersistent)
	hashes := seq.PromptHashes(prompt)
	stored, err := seq.Import(prompt, hashes, 0, data)
	if err != nil {
		t.Fatal(err)
	}
	if stored != 3 {
		t.Errorf("stored %d blocks into 3 free ones", stored)
	}
	if got := taker.Stats().ByClass[ClassPersistent]; got != 3 {
		t.Errorf("%d persistent blocks, want the 3 imported", got)
	}
	if err := taker.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	other := taker.NewSequence(Hash{2}, nil)
	if hit := other.MatchPrefix(prompt); hit != 0 {
		t.Errorf("another scope found %d imported tokens", hit)
	}
	other.Release()
	busy.Release()

	short := [][]byte{make([]byte, 3)}
	fresh := newTestPool(t, 8, nil).NewSequence(Hash{1}, nil)
	if _, err := fresh.Import(prompt, hashes, 0, short); err == nil {
		t.Error("a block of 3 bytes was imported")
	}
}

// TestPeerImportNotAUse: importing does not count as a use of the blocks
// for the reuse odds; the request that matches them does.
func TestPeerImportNotAUse(t *testing.T) {
	prompt := seqTokens(300, 4*4+1)
	holder, _ := valuePool(t, 16)
	s := holder.NewSequence(Hash{1}, nil)
	if err := extend(s, prompt); err != nil {
		t.Fatal(err)
	}
	s.Release()
	taker, _ := valuePool(t, 16)
	seq := taker.NewSequence(Hash{1}, nil)
	hashes := seq.PromptHashes(prompt)
	if _, err := seq.Import(prompt, hashes, 0, holder.Export(hashes)); err != nil {
		t.Fatal(err)
	}
	uses := func() int {
		taker.mu.Lock()
		defer taker.mu.Unlock()
		return int(taker.meta[taker.index[hashes[0]]].uses)
	}
	if got := uses(); got != 0 {
		t.Errorf("after the import the first block has %d uses, want 0", got)
	}
	m := taker.NewSequence(Hash{1}, nil)
	m.MatchPrefix(prompt)
	m.Release()
	if got := uses(); got != 1 {
		t.Errorf("after a match it has %d uses, want 1", got)
	}
}
