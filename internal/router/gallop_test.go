package router

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/kv"
)

// TestGallopAgreesWithLinear: on random clusters where each worker holds a
// prefix of each chain with its tiers not rising along it (how workers
// evict and demote: from the tail), the probing walk scores every
// candidate exactly as the block-by-block walk; with remembered hashes and
// without, with several block sizes, with tenants apart.
func TestGallopAgreesWithLinear(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := range 300 {
		workers := 1 + rng.IntN(12)
		chains := 1 + rng.IntN(4)
		bases := make([][]int32, chains)
		for c := range bases {
			bases[c] = prompt(16*(1+rng.IntN(80)), int32(c+1))
		}
		gallop, _ := newTestRouter(t, Config{})
		linear, _ := newTestRouter(t, Config{})
		linear.linear = true
		ws := make([]Worker, workers)
		for w := range ws {
			ws[w] = Worker{ID: fmt.Sprint("w", w)}
			if rng.IntN(5) == 0 {
				ws[w].BlockSize = 32 // another block size: hashed apart
			}
			bs := ws[w].BlockSize
			if bs == 0 {
				bs = 16
			}
			var events []kv.Event
			for _, base := range bases {
				scope := "t"
				if rng.IntN(4) == 0 {
					scope = "other"
				}
				hs := kv.NewHasher([]byte(testModel)).Chain(nil, kv.ScopeSalt(testSecret, scope), base, bs)
				held := rng.IntN(len(hs) + 1)
				// Tiers not rising along the prefix: pool, then host, then disk.
				pool := rng.IntN(held + 1)
				host := pool + rng.IntN(held-pool+1)
				if pool > 0 {
					events = append(events, stored(kv.TierPool, hs[:pool]...))
				}
				if host > pool {
					events = append(events, stored(kv.TierHost, hs[pool:host]...))
				}
				if held > host {
					events = append(events, stored(kv.TierDisk, hs[host:held]...))
				}
				if pool > 1 && rng.IntN(3) == 0 { // some blocks in two tiers: the best counts
					events = append(events, stored(kv.TierHost, hs[:pool/2]...))
				}
			}
			gallop.Index().Apply(ws[w].ID, false, events)
			linear.Index().Apply(ws[w].ID, false, events)
		}
		for q := range 4 {
			base := bases[rng.IntN(chains)]
			p := append([]int32(nil), base[:rng.IntN(len(base)+1)]...)
			p = append(p, prompt(rng.IntN(70), int32(100+q))...)
			req := &engine.Request{Prompt: p, Scope: "t"}
			for pass := range 2 { // cold, then with the hashes remembered
				got := gallop.Score(nil, req, ws)
				want := linear.Score(nil, req, ws)
				for i := range ws {
					g, l := got[i], want[i]
					if math.Abs(g.Prefill-l.Prefill) < 1e-9 {
						g.Prefill = l.Prefill
					}
					if g != l {
						t.Fatalf("trial %d query %d pass %d worker %d (block size %d): gallop %+v, linear %+v",
							trial, q, pass, i, ws[i].BlockSize, g, l)
					}
				}
			}
		}
	}
}

// BenchmarkChooseLongPrompt is a decision on a 32,768-token prompt among
// 32 workers, one holding all of it and the others its first 4,096
// tokens (a tenant's system prompt): the probing walk against the
// block-by-block one.
func BenchmarkChooseLongPrompt(b *testing.B) {
	for _, walk := range []string{"gallop", "linear"} {
		b.Run(walk, func(b *testing.B) {
			r, err := New(NewIndex(nil), Config{Secret: testSecret, ModelID: testModel})
			if err != nil {
				b.Fatal(err)
			}
			r.linear = walk == "linear"
			p := prompt(32768, 3)
			hs := chain("t", p)
			ws := make([]Worker, 32)
			for i := range ws {
				ws[i] = Worker{ID: fmt.Sprint("w", i)}
				n := 256
				if i == 5 {
					n = len(hs)
				}
				r.Index().Apply(ws[i].ID, false, []kv.Event{stored(kv.TierPool, hs[:n]...)})
			}
			req := &engine.Request{Prompt: p, Scope: "t"}
			for b.Loop() {
				if d := r.Choose(req, ws); ws[d.Index].ID != "w5" {
					b.Fatalf("chose %s", ws[d.Index].ID)
				}
			}
		})
	}
}

// TestLearnFromEvents: once the router has hashed a chain's first block
// (placing a request), the blocks a worker then stores after it are
// remembered from the events' tokens, so the next request continuing them
// finds every hash without computing one; events without tokens, or after
// a block the router never hashed, teach nothing.
func TestLearnFromEvents(t *testing.T) {
	r, _ := newTestRouter(t, Config{})
	p := prompt(16*40, 5)
	hs := chain("t", p)
	salt := kv.ScopeSalt(testSecret, "t")
	keys := make([]uint64, len(hs))
	var buf []byte
	key, buf := r.hashes.start(salt, 16, buf)
	for i := range hs {
		key, buf = r.hashes.next(key, p[i*16:(i+1)*16], buf)
		keys[i] = key
	}
	ws := []Worker{{ID: "w"}}
	r.Index().Apply("w", false, []kv.Event{stored(kv.TierPool, hs[0])})
	r.Score(nil, &engine.Request{Prompt: p[:16], Scope: "t"}, ws) // the router hashes block 0
	if _, ok := r.hashes.get(keys[0]); !ok {
		t.Fatal("block 0 not remembered after a decision hashed it")
	}
	// Blocks 1-19 stored with their tokens, in one event after block 0;
	// 20-29 with none (a snapshot's); 30-39 after block 29.
	events := []kv.Event{
		{Kind: kv.BlockStored, Tier: kv.TierPool, Hashes: hs[1:20], Parent: hs[0], Tokens: p[16 : 20*16], BlockSize: 16},
		{Kind: kv.BlockStored, Tier: kv.TierPool, Hashes: hs[20:30], Parent: hs[19], BlockSize: 16},
		{Kind: kv.BlockStored, Tier: kv.TierPool, Hashes: hs[30:], Parent: hs[29], Tokens: p[30*16:], BlockSize: 16},
	}
	r.Index().Apply("w", false, events)
	r.Learn(events)
	for i := range hs {
		h, ok := r.hashes.get(keys[i])
		want := i < 20
		if ok != want || ok && h != hs[i] {
			t.Errorf("block %d: remembered %v (%v), want %v", i, ok, h == hs[i], want)
		}
	}
	// A chain whose first block the router never hashed: nothing learnt.
	q := prompt(16*3, 6)
	qs := chain("t", q)
	r.Learn([]kv.Event{{Kind: kv.BlockStored, Tier: kv.TierPool, Hashes: qs, Tokens: q, BlockSize: 16}})
	if _, ok := r.hashes.keyFor(qs[2]); ok {
		t.Error("learnt blocks after a first block the router never hashed")
	}
}
