package kv

import (
	"testing"
	"time"
)

// TestSharedPrefix: a prefix published to a shared scope is found by every
// scope that starts its prompt with it, and only it: what each appends
// stays its own, even when the tokens are the same; the shared blocks
// belong to the shared scope (its pins, not the tenants').
func TestSharedPrefix(t *testing.T) {
	p, _ := valuePool(t, 16)
	shared, a, b := Hash{1}, Hash{2}, Hash{3}
	prompt := seqTokens(100, 17) // 4 full blocks of 4; the first 2 published
	run := func(scope Hash, sharedBlocks int, pin bool) (hit int) {
		t.Helper()
		s := p.NewSequence(scope, nil)
		s.SetShared(shared, sharedBlocks)
		if pin {
			s.SetClasses(nil, ClassPinned)
			s.PinUntil(time.Now().Add(time.Hour))
		}
		hit = s.MatchPrefix(prompt)
		if err := extend(s, prompt[hit:]); err != nil {
			t.Fatal(err)
		}
		s.Release()
		if err := p.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		return hit
	}
	// The publisher: the whole prompt in the shared scope, pinned.
	publisher := p.NewSequence(shared, nil)
	publisher.SetClasses(nil, ClassPinned)
	publisher.PinUntil(time.Now().Add(time.Hour))
	if err := extend(publisher, prompt[:8]); err != nil {
		t.Fatal(err)
	}
	publisher.Release()
	if got := p.PinnedBy(shared); got != 2 {
		t.Fatalf("the shared scope pins %d blocks, want 2", got)
	}
	tests := []struct {
		name   string
		scope  Hash
		shared int
		want   int
	}{
		{"a finds the shared prefix", a, 2, 8},
		{"a again finds its own continuation too", a, 2, 16},
		{"b finds the shared prefix, not a's identical continuation", b, 2, 8},
		{"b again: its own", b, 2, 16},
		{"a without the shared prefix finds nothing", a, 0, 0},
		{"a sharing more blocks than were published", a, 3, 8},
	}
	for _, tc := range tests {
		if hit := run(tc.scope, tc.shared, false); hit != tc.want {
			t.Errorf("%s: hit %d tokens, want %d", tc.name, hit, tc.want)
		}
	}
	// A tenant pinning its prompt over a shared prefix pins its own blocks
	// under its own name; the shared ones stay the shared scope's.
	run(a, 2, true)
	if gotA, gotShared := p.PinnedBy(a), p.PinnedBy(shared); gotA != 2 || gotShared != 2 {
		t.Fatalf("pins: a %d (want 2), shared %d (want 2)", gotA, gotShared)
	}
	// The hashes agree with SplitChain's.
	s := p.NewSequence(a, nil)
	s.SetShared(shared, 2)
	want := NewHasher(nil).SplitChain(nil, shared, 2, a, prompt, 4)
	for i, h := range s.PromptHashes(prompt) {
		if h != want[i] {
			t.Fatalf("block %d: %v, SplitChain says %v", i, h, want[i])
		}
	}
	plain := NewHasher(nil).Chain(nil, shared, prompt[:8], 4)
	if want[0] != plain[0] || want[1] != plain[1] || want[2] == NewHasher(nil).Chain(nil, shared, prompt, 4)[2] {
		t.Fatal("SplitChain's shared part is not the shared scope's chain, or its continuation is")
	}
}
