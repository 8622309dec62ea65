package router

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvserve/kvserve/internal/kv"
)

func hashN(i int) kv.Hash {
	var h kv.Hash
	h[0], h[1], h[31] = byte(i), byte(i>>8), 0xab
	return h
}

func stored(t kv.Tier, hs ...kv.Hash) kv.Event {
	return kv.Event{Kind: kv.BlockStored, Tier: t, Hashes: hs, BlockSize: 16}
}

func removed(t kv.Tier, hs ...kv.Hash) kv.Event {
	return kv.Event{Kind: kv.BlockRemoved, Tier: t, Hashes: hs}
}

func TestIndexApply(t *testing.T) {
	a, b, c := hashN(1), hashN(2), hashN(3)
	type update struct {
		worker string
		reset  bool
		events []kv.Event
	}
	tests := []struct {
		name    string
		updates []update
		remove  string
		want    map[string]map[kv.Hash][]kv.Tier // worker → block → tiers
		blocks  map[string]int
	}{
		{name: "stored in tiers",
			updates: []update{{"w1", false, []kv.Event{stored(kv.TierPool, a, b), stored(kv.TierHost, b), stored(kv.TierDisk, c)}}},
			want:    map[string]map[kv.Hash][]kv.Tier{"w1": {a: {kv.TierPool}, b: {kv.TierPool, kv.TierHost}, c: {kv.TierDisk}}},
			blocks:  map[string]int{"w1": 4}},
		{name: "stored twice counts once",
			updates: []update{{"w1", false, []kv.Event{stored(kv.TierPool, a), stored(kv.TierPool, a)}}},
			want:    map[string]map[kv.Hash][]kv.Tier{"w1": {a: {kv.TierPool}}},
			blocks:  map[string]int{"w1": 1}},
		{name: "removed from one tier (demotion)",
			updates: []update{{"w1", false, []kv.Event{stored(kv.TierPool, a), stored(kv.TierHost, a), removed(kv.TierPool, a), removed(kv.TierPool, b)}}},
			want:    map[string]map[kv.Hash][]kv.Tier{"w1": {a: {kv.TierHost}, b: nil}},
			blocks:  map[string]int{"w1": 1}},
		{name: "cleared one tier",
			updates: []update{{"w1", false, []kv.Event{stored(kv.TierPool, a, b), stored(kv.TierHost, b), {Kind: kv.AllCleared, Tier: kv.TierPool}}}},
			want:    map[string]map[kv.Hash][]kv.Tier{"w1": {a: nil, b: {kv.TierHost}}},
			blocks:  map[string]int{"w1": 1}},
		{name: "workers apart",
			updates: []update{{"w1", false, []kv.Event{stored(kv.TierPool, a)}}, {"w2", false, []kv.Event{stored(kv.TierHost, a), removed(kv.TierPool, a)}}},
			want:    map[string]map[kv.Hash][]kv.Tier{"w1": {a: {kv.TierPool}}, "w2": {a: {kv.TierHost}}},
			blocks:  map[string]int{"w1": 1, "w2": 1}},
		{name: "snapshot replaces",
			updates: []update{{"w1", false, []kv.Event{stored(kv.TierPool, a, b)}}, {"w2", false, []kv.Event{stored(kv.TierPool, a)}}, {"w1", true, []kv.Event{stored(kv.TierDisk, c)}}},
			want:    map[string]map[kv.Hash][]kv.Tier{"w1": {a: nil, b: nil, c: {kv.TierDisk}}, "w2": {a: {kv.TierPool}}},
			blocks:  map[string]int{"w1": 1, "w2": 1}},
		{name: "worker removed",
			updates: []update{{"w1", false, []kv.Event{stored(kv.TierPool, a, b)}}, {"w2", false, []kv.Event{stored(kv.TierPool, a)}}},
			remove:  "w1",
			want:    map[string]map[kv.Hash][]kv.Tier{"w1": {a: nil, b: nil}, "w2": {a: {kv.TierPool}}},
			blocks:  map[string]int{"w1": 0, "w2": 1}},
		{name: "unknown tier ignored",
			updates: []update{{"w1", false, []kv.Event{stored(kv.Tier(9), a)}}},
			want:    map[string]map[kv.Hash][]kv.Tier{"w1": {a: nil}},
			blocks:  map[string]int{"w1": 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := NewIndex(nil)
			for _, u := range tt.updates {
				x.Apply(u.worker, u.reset, u.events)
			}
			if tt.remove != "" {
				x.Remove(tt.remove)
				if slices.Contains(x.Workers(), tt.remove) {
					t.Errorf("%s still known after Remove", tt.remove)
				}
			}
			if err := x.checkInvariants(); err != nil {
				t.Fatal(err)
			}
			for w, bs := range tt.want {
				for h, tiers := range bs {
					if got := x.Tiers(w, h); !slices.Equal(got, tiers) {
						t.Errorf("%s holds %v in %v, want %v", w, h, got, tiers)
					}
				}
			}
			for w, n := range tt.blocks {
				if got := x.Blocks(w); got != n {
					t.Errorf("%s: %d blocks, want %d", w, got, n)
				}
			}
		})
	}
}

// TestIndexRandom applies random events from several workers and checks the
// index against a plain model after each.
func TestIndexRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	ops := make([]byte, 20000)
	for i := range ops {
		ops[i] = byte(rng.IntN(256))
	}
	if err := runOps(ops); err != nil {
		t.Fatal(err)
	}
}

// runOps interprets ops as index operations (3 bytes each: kind and
// worker, tier, block) and compares the index with a model of it.
func runOps(ops []byte) error {
	x := NewIndex(nil)
	type key struct {
		w string
		h kv.Hash
		t kv.Tier
	}
	model := map[key]bool{}
	workers := []string{"a", "b", "c", "d"}
	for i := 0; i+3 <= len(ops); i += 3 {
		w := workers[ops[i]&3]
		tier := kv.Tier(ops[i+1]%4 + 1) // 4 is unknown: ignored
		h := hashN(int(ops[i+2] % 32))
		switch ops[i] >> 2 % 8 {
		case 0, 1, 2:
			x.Apply(w, false, []kv.Event{stored(tier, h)})
			if tier <= numTiers {
				model[key{w, h, tier}] = true
			}
		case 3, 4:
			x.Apply(w, false, []kv.Event{removed(tier, h)})
			delete(model, key{w, h, tier})
		case 5:
			x.Apply(w, false, []kv.Event{{Kind: kv.AllCleared, Tier: tier}})
			for k := range model {
				if k.w == w && k.t == tier {
					delete(model, k)
				}
			}
		case 6:
			x.Apply(w, true, []kv.Event{stored(tier, h)})
			for k := range model {
				if k.w == w {
					delete(model, k)
				}
			}
			if tier <= numTiers {
				model[key{w, h, tier}] = true
			}
		case 7:
			x.Remove(w)
			for k := range model {
				if k.w == w {
					delete(model, k)
				}
			}
		}
		if err := x.checkInvariants(); err != nil {
			return err
		}
	}
	for _, w := range workers {
		n := 0
		for b := range 32 {
			for tier := kv.Tier(1); tier <= numTiers; tier++ {
				has := slices.Contains(x.Tiers(w, hashN(b)), tier)
				if has != model[key{w, hashN(b), tier}] {
					return errorString("index and model disagree on " + w)
				}
				if has {
					n++
				}
			}
		}
		if x.Blocks(w) != n {
			return errorString("block count of " + w + " is off")
		}
	}
	return nil
}

type errorString string

func (e errorString) Error() string { return string(e) }

// FuzzIndex runs arbitrary operation sequences against the index: its
// invariants hold and it agrees with a plain model of it.
func FuzzIndex(f *testing.F) {
	f.Add([]byte{0, 0, 1, 4, 1, 1, 28, 0, 0})
	f.Add([]byte{1, 1, 2, 24, 1, 2, 12, 0, 2, 20, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		if err := runOps(ops); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{"kv", "least-loaded", "round-robin", "", "KV"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePolicy(s)
		if (err == nil) != (s == "kv" || s == "least-loaded" || s == "round-robin") || err == nil && string(p) != s {
			t.Fatalf("ParsePolicy(%q) = %q, %v", s, p, err)
		}
	})
}
