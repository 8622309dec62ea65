package kv

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/fnv"
	"math/rand/v2"
	"testing"
	"time"
)

// A fake forward pass writes, at every position, a fingerprint of the whole
// prefix up to and including that position into every layer's K and V. A
// block's content is then right exactly when it matches the fingerprints of
// the prefix its hash stands for — which lets the tests check sharing,
// copy-on-write and de-duplication without a model.
func fingerprint(prefix []int32, layer int, v bool) uint16 {
	h := fnv.New32a()
	var b [4]byte
	for _, t := range prefix {
		binary.LittleEndian.PutUint32(b[:], uint32(t))
		h.Write(b[:])
	}
	x := h.Sum32() + uint32(layer)*7919
	if v {
		x ^= 0x5555
	}
	return uint16(x)
}

func fakeForward(s *Sequence, tokens []int32) {
	all := append(append([]int32(nil), s.Tokens()...), tokens...)
	cfg := s.pool.Config()
	for pos := s.Len(); pos < len(all); pos++ {
		b, off := pos/cfg.BlockSize, pos%cfg.BlockSize
		for l := 0; l < cfg.Layers; l++ {
			k, v := s.Block(l, b)
			for d := 0; d < cfg.KVDim; d++ {
				i := 2 * (off*cfg.KVDim + d)
				binary.LittleEndian.PutUint16(k[i:], fingerprint(all[:pos+1], l, false)+uint16(d))
				binary.LittleEndian.PutUint16(v[i:], fingerprint(all[:pos+1], l, true)+uint16(d))
			}
		}
	}
}

// checkContent verifies every computed position of s holds its prefix's fingerprint.
func checkContent(t *testing.T, s *Sequence) {
	t.Helper()
	cfg := s.pool.Config()
	toks := s.Tokens()
	for pos := range toks {
		b, off := pos/cfg.BlockSize, pos%cfg.BlockSize
		for l := 0; l < cfg.Layers; l++ {
			k, v := s.Block(l, b)
			for d := 0; d < cfg.KVDim; d++ {
				i := 2 * (off*cfg.KVDim + d)
				if got, want := binary.LittleEndian.Uint16(k[i:]), fingerprint(toks[:pos+1], l, false)+uint16(d); got != want {
					t.Fatalf("position %d layer %d K[%d] = %d, want %d (block %d)", pos, l, d, got, want, s.blocks[b])
				}
				if got, want := binary.LittleEndian.Uint16(v[i:]), fingerprint(toks[:pos+1], l, true)+uint16(d); got != want {
					t.Fatalf("position %d layer %d V[%d] = %d, want %d", pos, l, d, got, want)
				}
			}
		}
	}
}

func newTestPool(t testing.TB, blocks int, events *EventLog) *Pool {
	p, err := NewPool(Config{NumBlocks: blocks, BlockSize: 4, Layers: 2, KVDim: 4, Events: events})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// extend reserves, "computes" and commits tokens.
func extend(s *Sequence, tokens []int32) error {
	if err := s.Reserve(s.Len() + len(tokens)); err != nil {
		return err
	}
	fakeForward(s, tokens)
	s.Commit(tokens)
	return nil
}

func TestPrefixHitAndCachedAfterRelease(t *testing.T) {
	p := newTestPool(t, 16, nil)
	prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	a := p.NewSequence(Hash{1}, nil)
	if n := a.MatchPrefix(prompt); n != 0 {
		t.Fatalf("cold hit %d", n)
	}
	if err := extend(a, prompt); err != nil {
		t.Fatal(err)
	}
	a.Release()
	if err := p.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Cached != 2 || st.Active != 0 {
		t.Fatalf("after release: %+v, want 2 cached blocks", st)
	}
	b := p.NewSequence(Hash{1}, nil)
	if n := b.MatchPrefix(prompt); n != 8 {
		t.Fatalf("warm hit %d tokens, want 8", n)
	}
	if err := extend(b, prompt[8:]); err != nil {
		t.Fatal(err)
	}
	checkContent(t, b)

	// Another scope never hits.
	c := p.NewSequence(Hash{2}, nil)
	if n := c.MatchPrefix(prompt); n != 0 {
		t.Fatalf("other scope hit %d tokens", n)
	}
	// Nor does another model.
	d := p.NewSequence(Hash{1}, []byte("other-model"))
	if n := d.MatchPrefix(prompt); n != 0 {
		t.Fatalf("other model hit %d tokens", n)
	}
}

func TestLastTokenAlwaysRecomputed(t *testing.T) {
	p := newTestPool(t, 16, nil)
	prompt := []int32{1, 2, 3, 4, 5, 6, 7, 8}
	a := p.NewSequence(Hash{}, nil)
	a.MatchPrefix(prompt)
	if err := extend(a, prompt); err != nil {
		t.Fatal(err)
	}
	a.Release()
	b := p.NewSequence(Hash{}, nil)
	if n := b.MatchPrefix(prompt); n != 4 {
		t.Fatalf("hit %d tokens of a fully cached 8-token prompt, want 4 (last block recomputed)", n)
	}
	// Recomputing the last block de-duplicates against the cached copy.
	if err := extend(b, prompt[4:]); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Active != 2 || st.Cached != 0 {
		t.Fatalf("after recompute: %+v, want the 2 cached blocks reused", st)
	}
	if err := p.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestForkCopyOnWrite(t *testing.T) {
	p := newTestPool(t, 16, nil)
	a := p.NewSequence(Hash{}, nil)
	if err := extend(a, []int32{1, 2, 3, 4, 5, 6}); err != nil { // 1 full + 1 partial block
		t.Fatal(err)
	}
	b := a.Fork()
	if p.Refs(a.blocks[1]) != 2 {
		t.Fatalf("shared partial block refs %d", p.Refs(a.blocks[1]))
	}
	if err := extend(a, []int32{7}); err != nil {
		t.Fatal(err)
	}
	if err := extend(b, []int32{9}); err != nil {
		t.Fatal(err)
	}
	if a.blocks[1] == b.blocks[1] {
		t.Fatal("written partial block still shared")
	}
	if a.blocks[0] != b.blocks[0] {
		t.Fatal("full prefix block was copied")
	}
	checkContent(t, a)
	checkContent(t, b)
	if err := p.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestReserveAllOrNothing(t *testing.T) {
	p := newTestPool(t, 3, nil)
	a := p.NewSequence(Hash{}, nil)
	if err := a.Reserve(16); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("Reserve(16) on 3 blocks of 4: %v", err)
	}
	if st := p.Stats(); st.Free != 3 {
		t.Fatalf("failed reserve took blocks: %+v", st)
	}
}

func TestEventsStoredRemoved(t *testing.T) {
	log := NewEventLog(64)
	p := newTestPool(t, 2, log)
	a := p.NewSequence(Hash{}, nil)
	if err := extend(a, []int32{1, 2, 3, 4, 5, 6, 7, 8}); err != nil {
		t.Fatal(err)
	}
	a.Release()
	b := p.NewSequence(Hash{}, nil)
	if err := extend(b, []int32{9, 9, 9}); err != nil { // evicts a's tail block first
		t.Fatal(err)
	}
	evs, _, err := log.Read(t.Context(), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []EventKind
	for _, e := range evs {
		kinds = append(kinds, e.Kind)
	}
	if len(evs) != 3 || kinds[0] != BlockStored || kinds[1] != BlockStored || kinds[2] != BlockRemoved {
		t.Fatalf("events %v", kinds)
	}
	if evs[1].Parent != evs[0].Hashes[0] {
		t.Fatal("second stored block's parent is not the first block")
	}
	if evs[2].Hashes[0] != evs[1].Hashes[0] {
		t.Fatal("eviction removed the prefix block before the tail block")
	}
	for i, e := range evs {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has seq %d", i, e.Seq)
		}
	}
}

// TestRandomOperations runs random admit / extend / fork / cancel / preempt
// sequences and checks the pool's invariants and every live sequence's
// content after each step.
func TestRandomOperations(t *testing.T) {
	seeds, steps := uint64(30), 400
	if testing.Short() {
		seeds, steps = 6, 200
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		runRandomOps(t, seed, steps)
	}
}

func FuzzPoolOperations(f *testing.F) {
	f.Add(uint64(1), uint16(200))
	f.Fuzz(func(t *testing.T, seed uint64, steps uint16) {
		runRandomOps(t, seed, int(steps%1000))
	})
}

func runRandomOps(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0))
	log := NewEventLog(1 << 14)
	// Two runs in three with a host tier (G2) of up to 20 blocks.
	host := int64(rng.IntN(3)) * int64(rng.IntN(21))
	cfg := Config{NumBlocks: 12 + rng.IntN(20), BlockSize: 4, Layers: 2, KVDim: 4, Events: log,
		MaxPersistentPerOwner: rng.IntN(6)}
	cfg.HostMemoryBytes = host * cfg.BlockBytes()
	// One run in three with a disk tier (G3) of up to 40 blocks.
	if rng.IntN(3) == 0 {
		cfg.DiskDir, cfg.DiskBytes = t.TempDir(), int64(1+rng.IntN(40))*(cfg.BlockBytes()+200)
	}
	p, err := NewPool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	// A clock that moves one second per step, so pins expire during the run.
	now := time.Unix(1000, 0)
	p.cfg.Now = func() time.Time { return now }
	book := &prefixBook{log: log, next: 1, prefix: map[Hash][]int32{}}
	prefixes := [][]int32{{1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 3, 4, 9, 9, 9, 9}, {5, 5, 5, 5}}
	var live []*Sequence
	var parked [][]int32 // preempted sequences' tokens, to resume
	randTokens := func(n int) []int32 {
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(rng.IntN(3))
		}
		return out
	}
	admit := func(prompt []int32) {
		s := p.NewSequence(Hash{byte(rng.IntN(2))}, nil)
		classes := make([]Class, rng.IntN(4))
		for i := range classes {
			classes[i] = Class(rng.IntN(NumClasses + 2)) // past the top: clamped
		}
		s.SetClasses(classes, Class(rng.IntN(NumClasses)))
		s.PinUntil(now.Add(time.Duration(rng.IntN(20)) * time.Second))
		if rng.IntN(2) == 0 {
			s.PersistUntil(now.Add(time.Duration(rng.IntN(20)) * time.Second))
		}
		if p.HasDisk() && rng.IntN(2) == 0 {
			fetchWait(t, p, s.scope, prompt)
		}
		hit := s.MatchPrefix(prompt)
		if err := extend(s, prompt[hit:]); err != nil {
			s.Release()
			return
		}
		live = append(live, s)
	}
	for step := 0; step < steps; step++ {
		now = now.Add(time.Second)
		switch op := rng.IntN(10); {
		case op < 3 || len(live) == 0:
			prompt := append(append([]int32(nil), prefixes[rng.IntN(len(prefixes))]...), randTokens(1+rng.IntN(6))...)
			admit(prompt)
		case op < 6:
			s := live[rng.IntN(len(live))]
			if err := extend(s, randTokens(1+rng.IntN(5))); err != nil && !errors.Is(err, ErrNoSpace) {
				t.Fatal(err)
			}
		case op < 7:
			s := live[rng.IntN(len(live))]
			live = append(live, s.Fork())
		case op < 8:
			i := rng.IntN(len(live))
			live[i].Release()
			live = append(live[:i], live[i+1:]...)
		case op < 9: // preempt: release and park the tokens
			i := rng.IntN(len(live))
			parked = append(parked, append([]int32(nil), live[i].Tokens()...))
			live[i].Release()
			live = append(live[:i], live[i+1:]...)
		default:
			if len(parked) > 0 && len(parked[0]) > 0 {
				admit(parked[0])
				parked = parked[1:]
			}
		}
		if err := p.CheckInvariants(); err != nil {
			t.Fatalf("seed %d step %d: %v", seed, step, err)
		}
		for _, s := range live {
			checkContent(t, s)
			// A findable block is classed at least as high as every
			// live sequence holding it asks (persistent may be held to
			// session by its owner's quota).
			for i := range s.hashes {
				want := s.classOf(i)
				if want == ClassPersistent && p.cfg.MaxPersistentPerOwner > 0 {
					want = ClassSession
				}
				if got := p.Class(s.blocks[i]); got < want {
					t.Fatalf("seed %d step %d: block %d has class %d, below its sequence's %d", seed, step, i, got, want)
				}
			}
		}
		checkCachedContent(t, p, book)
	}
	for _, s := range live {
		s.Release()
	}
	if st := p.Stats(); st.Active != 0 || st.Free+st.Cached != st.Total {
		t.Fatalf("seed %d: after releasing everything: %+v", seed, st)
	}
}

// prefixBook reconstructs, from stored events, the full token prefix each
// block hash stands for, so cached blocks' contents can be checked against
// their hashes.
type prefixBook struct {
	log    *EventLog
	next   uint64
	prefix map[Hash][]int32
}

func (b *prefixBook) update(t *testing.T) {
	evs, next, err := b.log.Poll(b.next, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.next = next
	for _, e := range evs {
		if e.Kind != BlockStored || e.Tier != TierPool || e.Tokens == nil {
			continue // G2 moves and onboarding carry no tokens: the first store told the prefix
		}
		parent := b.prefix[e.Parent] // nil for a scope salt
		b.prefix[e.Hashes[0]] = append(append([]int32(nil), parent...), e.Tokens...)
	}
}

// checkCachedContent verifies that every hashed block (active or cached)
// holds the KV of exactly the prefix its hash stands for.
func checkCachedContent(t *testing.T, p *Pool, book *prefixBook) {
	t.Helper()
	book.update(t)
	p.mu.Lock()
	defer p.mu.Unlock()
	cfg := p.cfg
	for i := range p.meta {
		m := &p.meta[i]
		if !m.hashed {
			continue
		}
		prefix, ok := book.prefix[m.hash]
		if !ok {
			t.Fatalf("hashed block %d (%s) was never announced", i, m.hash)
		}
		start := len(prefix) - cfg.BlockSize
		for off := 0; off < cfg.BlockSize; off++ {
			for l := 0; l < cfg.Layers; l++ {
				k, _ := p.Layer(BlockID(i), l)
				if got, want := binary.LittleEndian.Uint16(k[2*off*cfg.KVDim:]), fingerprint(prefix[:start+off+1], l, false); got != want {
					t.Fatalf("cached block %d position %d layer %d holds %d, its hash says %d", i, off, l, got, want)
				}
			}
		}
	}
}
