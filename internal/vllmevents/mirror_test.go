package vllmevents

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kvserve/kvserve/internal/kv"
)

// recording reads the batches record.py wrote in one form.
func recording(t testing.TB, form string) [][]byte {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", form, "*.msgpack"))
	if err != nil || len(files) == 0 {
		t.Fatalf("recording %s: %v (%d files)", form, err, len(files))
	}
	slices.Sort(files)
	var out [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

var testSecret = []byte("cluster secret")

const testModel = "model-x"

func span(start, n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(start + i)
	}
	return out
}

// chain is what kvserve's router computes for scope's prompt.
func chain(scope string, tokens []int32) []kv.Hash {
	return kv.NewHasher([]byte(testModel)).Chain(nil, kv.ScopeSalt(testSecret, scope), tokens, 16)
}

// held is the mirror's view as the router would rebuild it from the
// event log: the set of (tier, hash) stored and not removed.
func held(t *testing.T, events []kv.Event) map[kv.Tier][]kv.Hash {
	t.Helper()
	set := map[kv.Tier]map[kv.Hash]bool{}
	for _, e := range events {
		if set[e.Tier] == nil {
			set[e.Tier] = map[kv.Hash]bool{}
		}
		switch e.Kind {
		case kv.BlockStored:
			for _, h := range e.Hashes {
				if set[e.Tier][h] {
					t.Errorf("%v stored twice in %v", h, e.Tier)
				}
				set[e.Tier][h] = true
			}
		case kv.BlockRemoved:
			for _, h := range e.Hashes {
				if !set[e.Tier][h] {
					t.Errorf("%v removed from %v but not held", h, e.Tier)
				}
				delete(set[e.Tier], h)
			}
		case kv.AllCleared:
			clear(set[e.Tier])
		}
	}
	out := map[kv.Tier][]kv.Hash{}
	for tier, hs := range set {
		for h := range hs {
			out[tier] = append(out[tier], h)
		}
		slices.SortFunc(out[tier], func(a, b kv.Hash) int { return slices.Compare(a[:], b[:]) })
	}
	return out
}

func sorted(hs ...kv.Hash) []kv.Hash {
	hs = slices.Clone(hs)
	slices.SortFunc(hs, func(a, b kv.Hash) int { return slices.Compare(a[:], b[:]) })
	return hs
}

func TestMirrorRecordings(t *testing.T) {
	a := chain("tenant-a", span(100, 64)) // a1..a4
	b := chain("tenant-b", span(200, 32)) // b1, b2
	// After batches 0-4: A's first three blocks in the pool (the fourth
	// came and went), B's first in the pool and its second in host memory;
	// another client's block, an adapter's and one of another size nowhere.
	want := map[kv.Tier][]kv.Hash{kv.TierPool: sorted(a[0], a[1], a[2], b[0]), kv.TierHost: sorted(b[1])}
	for _, form := range []string{"array", "map"} {
		for _, late := range []bool{false, true} {
			name := form
			if late {
				name += "/salts-known-late"
			}
			t.Run(name, func(t *testing.T) {
				log := kv.NewEventLog(1024)
				m := NewMirror(MirrorConfig{Secret: testSecret, ModelID: testModel, BlockSize: 16, Events: log})
				if !late {
					m.Register("salt-a", "tenant-a")
					m.Register("salt-b", "tenant-b")
				}
				rec := recording(t, form)
				for i, payload := range rec[:5] {
					batch, err := Decode(payload)
					if err != nil {
						t.Fatalf("batch %d: %v", i, err)
					}
					m.Apply(batch)
					if late && i == 1 {
						// Tenant B's first request after a worker restart: its
						// blocks already held are published now; A's (a4's
						// store comes next) stay unpublished until A's turn.
						m.Register("salt-b", "tenant-b")
					}
				}
				if late {
					evs, _, _ := log.Poll(1, nil)
					if got := held(t, evs)[kv.TierPool]; len(got) != 1 || got[0] != b[0] {
						t.Fatalf("before A registers, the pool holds %v; want only B's first block %v", got, b[0])
					}
					m.Register("salt-a", "tenant-a")
				}
				evs, _, err := log.Poll(1, nil)
				if err != nil {
					t.Fatal(err)
				}
				got := held(t, evs)
				if !slices.Equal(got[kv.TierPool], want[kv.TierPool]) || !slices.Equal(got[kv.TierHost], want[kv.TierHost]) || len(got[kv.TierDisk]) != 0 {
					t.Fatalf("held %v\nwant %v", got, want)
				}
				snap, next := m.Snapshot()
				if next != log.Next() {
					t.Errorf("snapshot's next %d, log's %d", next, log.Next())
				}
				if got := held(t, snap); !slices.Equal(got[kv.TierPool], want[kv.TierPool]) || !slices.Equal(got[kv.TierHost], want[kv.TierHost]) {
					t.Errorf("snapshot holds %v\nwant %v", got, want)
				}
				for _, e := range snap {
					if e.Hashes[0] == a[1] && e.Parent != a[0] || e.Hashes[0] == a[0] && !e.Parent.IsZero() {
						t.Errorf("stored %v with parent %v: a chain's first block has none, the others their predecessor", e.Hashes[0], e.Parent)
					}
				}
				if h := m.Held(); h[kv.TierPool] != 4 || h[kv.TierHost] != 1 {
					t.Errorf("Held %v, want 4 in the pool and 1 in host memory", h)
				}
				skipped, unattributed, _ := m.Counts()
				if skipped != 2 || unattributed < 1 { // the adapter's block and the other size's; the other client's
					t.Errorf("skipped %d (want 2), unattributed %d (want ≥ 1)", skipped, unattributed)
				}
				// Batch 5 resets the cache: everything is removed.
				batch, err := Decode(rec[5])
				if err != nil {
					t.Fatal(err)
				}
				m.Apply(batch)
				evs, _, _ = log.Poll(1, nil)
				if got := held(t, evs); len(got[kv.TierPool])+len(got[kv.TierHost]) != 0 {
					t.Errorf("after AllBlocksCleared the log still holds %v", got)
				}
				if snap, _ := m.Snapshot(); len(snap) != 0 {
					t.Errorf("after AllBlocksCleared the snapshot has %d blocks", len(snap))
				}
			})
		}
	}
}

// TestMirrorUnknownSaltNeverPublished: blocks whose salt kvserve did not
// send (another client of the server, another cluster) stay unpublished.
func TestMirrorUnknownSaltNeverPublished(t *testing.T) {
	log := kv.NewEventLog(64)
	m := NewMirror(MirrorConfig{Secret: testSecret, ModelID: testModel, BlockSize: 16, Events: log})
	m.Register("salt-z", "tenant-z")
	for _, payload := range recording(t, "map")[:5] {
		batch, err := Decode(payload)
		if err != nil {
			t.Fatal(err)
		}
		m.Apply(batch)
	}
	if n := log.Next() - 1; n != 0 {
		t.Fatalf("%d events published for salts never registered", n)
	}
}
