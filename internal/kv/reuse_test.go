package kv

import (
	"testing"
	"time"
)

// TestReuseClass: the class is the use count (capped) and where the block
// sat in its prompt.
func TestReuseClass(t *testing.T) {
	tests := []struct {
		uses  uint32
		after int
		want  uint8
	}{
		{0, 0, 0},
		{0, 511, 0},
		{0, 512, 1},
		{0, 2047, 1},
		{0, 2048, 2},
		{0, 8192, 3},
		{0, -1, 4},
		{1, 0, 5},
		{3, 100, 15},
		{99, -1, 19},
	}
	for _, tt := range tests {
		if got := reuseClass(tt.uses, tt.after); got != tt.want {
			t.Errorf("reuseClass(%d, %d) = %d, want %d", tt.uses, tt.after, got, tt.want)
		}
	}
}

// TestReuseOddsLearned: blocks stored once and never again make their
// class unlikely; blocks that come back, even after being dropped, make
// theirs likely.
func TestReuseOddsLearned(t *testing.T) {
	r := newReuseModel(16)
	hash := func(i int) Hash { return Hash{byte(i), byte(i >> 8), 1} }
	for i := range 200 {
		// A generated block, never seen again.
		var dead blockMeta
		r.use(&dead, -1, 0)
		r.forget(hash(10000+i), &dead)
		// A prompt block, dropped, then stored again by the next prompt.
		var m blockMeta
		r.use(&m, 100, 0)
		r.forget(hash(i), &m)
		var again blockMeta
		r.recall(hash(i), &again)
		if again.uses != 1 || !again.open {
			t.Fatalf("recalled %+v, want the dropped block's history", again)
		}
		r.use(&again, 100, 0)
	}
	dead, back := r.odds(reuseClass(0, -1)), r.odds(reuseClass(0, 100))
	if dead > 0.1 || back < 0.85 {
		t.Fatalf("odds: generated %.3f (want ≈ 0), prompt %.3f (want ≈ 1)", dead, back)
	}
	if never := r.odds(reuseClass(2, 9000)); never < dead || never > back {
		t.Fatalf("odds of an unseen class %.3f, want the overall rate, between %.3f and %.3f", never, dead, back)
	}
}

// TestPoolReuseOdds: the pool reports one entry per class, the model's
// odds; an LRU pool has none.
func TestPoolReuseOdds(t *testing.T) {
	p, _ := valuePool(t, 8)
	doc := seqTokens(1, 9)
	for range 3 {
		cache(t, p, doc, time.Time{}, ClassSession)
	}
	odds := p.ReuseOdds()
	if len(odds) != reuseClasses {
		t.Fatalf("%d classes, want %d", len(odds), reuseClasses)
	}
	for i, o := range odds {
		if want := p.reuse.odds(uint8(i)); o.Odds != want || o.Seen != p.reuse.seen[i] {
			t.Fatalf("class %d (%s, %s): %+v, want odds %v seen %v", i, o.Uses, o.Place, o, want, p.reuse.seen[i])
		}
	}
	// doc's two full blocks, first stored (uses 0) then matched twice, sat
	// fewer than 512 tokens before the end: classes (0, <512) and (1, <512)
	// were each followed by another use.
	for _, o := range odds[:reuseEndBuckets*2] {
		if o.Place == "<512" && (o.Seen != 2 || o.Odds <= odds[reuseClass(2, 0)].Odds) {
			t.Fatalf("class (%s, %s): %+v, want 2 uses, all followed", o.Uses, o.Place, o)
		}
	}
	lru, err := NewPool(Config{NumBlocks: 4, BlockSize: 4, Layers: 1, KVDim: 4, LRU: true})
	if err != nil {
		t.Fatal(err)
	}
	if lru.ReuseOdds() != nil {
		t.Fatal("an LRU pool reports reuse odds")
	}
}

// TestReuseGhostBounded: the model remembers a bounded number of dropped
// blocks, the most recent ones, and a block recalled and dropped again is
// remembered from its latest drop.
func TestReuseGhostBounded(t *testing.T) {
	r := newReuseModel(2) // remembers 16
	hash := func(i int) Hash { return Hash{byte(i), byte(i >> 8), 2} }
	for i := 1; i <= 40; i++ {
		r.forget(hash(i), &blockMeta{uses: uint32(i)})
	}
	if len(r.ghost) != r.ghostCap() {
		t.Fatalf("ghost holds %d blocks, want its cap %d", len(r.ghost), r.ghostCap())
	}
	for i := 1; i <= 40; i++ {
		var m blockMeta
		r.recall(hash(i), &m)
		if remembered, want := m.uses == uint32(i), i > 40-r.ghostCap(); remembered != want {
			t.Errorf("block %d recalled with uses %d; remembered = %v, want %v", i, m.uses, remembered, want)
		}
	}
	r2 := newReuseModel(2)
	m := blockMeta{uses: 7}
	r2.forget(hash(1), &m)
	var b blockMeta
	r2.recall(hash(1), &b)
	b.uses = 9
	r2.forget(hash(1), &b)
	for i := 2; i < 17; i++ { // 15 more: the first slot is overwritten, the newer one kept
		r2.forget(hash(i), &blockMeta{})
	}
	var c blockMeta
	r2.recall(hash(1), &c)
	if c.uses != 9 {
		t.Fatalf("a block dropped twice was recalled with uses %d, want 9 (its latest drop)", c.uses)
	}
}
