package cluster

import (
	"bytes"
	"testing"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/testshared/sharedmodel"
)

// modelEngine is an engine on a real model (tests' tiny Llama), so that
// copied KV is real KV whose every byte decides the tokens.
func modelEngine(t *testing.T, kvType string, events *kv.EventLog) *engine.Engine {
	t.Helper()
	m := sharedmodel.Load(t, "tiny-f32.gguf")
	et, err := kv.ParseElemType(kvType)
	if err != nil {
		t.Fatal(err)
	}
	fw, err := model.NewForwarder(m, model.ForwarderOptions{Threads: 1, KVType: et.DType()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fw.Close)
	e, err := engine.New(fw, engine.Config{KVMemoryBytes: 8 << 20, Events: events, ModelID: testModel})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e
}

func startModelWorker(t *testing.T, s *Server, id, kvType string) *testWorker {
	t.Helper()
	events := kv.NewEventLog(4096)
	return startWorkerOn(t, s, id, modelEngine(t, kvType, events), events)
}

// copyPicker places every request on worker to, naming worker from to copy
// KV blocks from.
type copyPicker struct{ to, from string }

func (p copyPicker) Pick(r *engine.Request, cands []Candidate) int {
	i, _ := p.PickCopy(r, cands)
	return i
}

func (p copyPicker) PickCopy(_ *engine.Request, cands []Candidate) (int, int) {
	i, peer := -1, -1
	for j, c := range cands {
		switch c.Worker {
		case p.to:
			i = j
		case p.from:
			peer = j
		}
	}
	return i, peer
}

// TestCopyKVFromPeer: a request placed on one worker while another holds
// its prefix copies the prefix's KV from it over NATS and reports it
// cached; its tokens are those of computing everything (the copied KV is
// the real thing, byte for byte). A peer that is gone, or whose blocks
// differ, only means the prefix is computed.
func TestCopyKVFromPeer(t *testing.T) {
	checkGoroutines(t)
	s := startNATS(t)
	holder := startModelWorker(t, s, "w1", "f32")
	taker := startModelWorker(t, s, "w2", "f32")
	other := startModelWorker(t, s, "w3", "f16") // blocks of another size
	// The holder computes the shared prefix.
	regA, toHolder := gateway(t, s, prefer("w1"))
	waitWorkers(t, regA, 3)
	for _, w := range regA.Workers(testModel) {
		if !w.CopiesKV {
			t.Fatalf("worker %s does not announce KV copies", w.Worker)
		}
	}
	shared := prompt(100)
	first := engine.Request{Prompt: shared, MaxTokens: 4, Scope: "tenant-a"}
	readAll(t, mustSubmit(t, toHolder, first))

	// The reference: the follow-up computed from scratch on a fresh engine.
	next := engine.Request{Prompt: append(append([]int32(nil), shared...), 7, 8, 9, 10, 11), MaxTokens: 8, Scope: "tenant-a"}
	want := stripTimes(readAll(t, mustSubmit(t, api.LocalBackend(modelEngine(t, "f32", nil)), next)))

	tests := []struct {
		name       string
		to, from   string
		req        engine.Request
		wantCached int
	}{
		{"copied from the holder", "w2", "w1", next, 96},
		{"another tenant's prompt finds nothing to copy", "w3", "w1", engine.Request{Prompt: next.Prompt, MaxTokens: 8, Scope: "tenant-b"}, 0},
		{"blocks of another size are refused", "w3", "w1", next, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg, b := gateway(t, s, copyPicker{to: tt.to, from: tt.from})
			waitWorkers(t, reg, 3)
			st := mustSubmit(t, b, tt.req)
			got := stripTimes(readAll(t, st))
			if tt.req.Scope == next.Scope && !equalOutputs(got, want) {
				t.Errorf("outputs differ from computing everything:\n got %v\nwant %v", got, want)
			}
			if u := st.Usage(); u.CachedTokens != tt.wantCached {
				t.Errorf("cached tokens %d, want %d", u.CachedTokens, tt.wantCached)
			}
			if n := counterValue(t, b.copies); n != 1 {
				t.Errorf("kvserve_cluster_kv_copies_total = %v, want 1", n)
			}
		})
	}
	// A holder serving as many copies as it may refuses another: the
	// prefix is computed; once it is free again, copied.
	fresh := engine.Request{Prompt: prompt(120)[20:], MaxTokens: 2, Scope: "tenant-d"}
	readAll(t, mustSubmit(t, toHolder, fresh))
	for range maxCopies {
		holder.copiesOut <- struct{}{}
	}
	reg, b := gateway(t, s, copyPicker{to: "w2", from: "w1"})
	waitWorkers(t, reg, 3)
	busy := mustSubmit(t, b, fresh)
	readAll(t, busy)
	if u := busy.Usage(); u.CachedTokens != 0 {
		t.Errorf("from a holder busy with copies: cached tokens %d, want 0", u.CachedTokens)
	}
	for range maxCopies {
		<-holder.copiesOut
	}
	fresh.Scope = "tenant-e"
	readAll(t, mustSubmit(t, toHolder, fresh))
	free := mustSubmit(t, b, fresh)
	readAll(t, free)
	if u := free.Usage(); u.CachedTokens != 96 {
		t.Errorf("from the holder free again: cached tokens %d, want 96", u.CachedTokens)
	}

	// A peer gone before the registry noticed: nobody answers on its
	// subject, and the request is computed at once.
	reg, b = gateway(t, s, copyPicker{to: "w2", from: "w3"})
	waitWorkers(t, reg, 3)
	other.kill()
	st := mustSubmit(t, b, engine.Request{Prompt: next.Prompt, MaxTokens: 8, Scope: "tenant-c"})
	readAll(t, st)
	if u := st.Usage(); u.CachedTokens != 0 {
		t.Errorf("with the peer gone: cached tokens %d, want 0", u.CachedTokens)
	}
	if n := holder.e.KV().Stats().ExportedBlocks; n == 0 {
		t.Error("the holder exported no blocks")
	}
	if n := taker.e.KV().Stats().ImportedBlocks; n != 12 {
		t.Errorf("the taker imported %d blocks, want two prompts' 6 full ones", n)
	}
	if n := other.e.KV().Stats().ImportedBlocks; n != 0 {
		t.Errorf("the worker with other blocks imported %d", n)
	}
}

func equalOutputs(a, b []engine.Output) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Token != b[i].Token || a[i].Finish != b[i].Finish {
			return false
		}
	}
	return true
}

// TestKVCopyMessagesRoundTrip: a copy request's hashes come back as sent;
// malformed ones are refused.
func TestKVCopyMessagesRoundTrip(t *testing.T) {
	hashes := []kv.Hash{{1, 2, 3}, {4, 5, 6}}
	data, err := encodeKVCopyRequest(4096, hashes)
	if err != nil {
		t.Fatal(err)
	}
	m, got, err := decodeKVCopyRequest(data)
	if err != nil || m.BlockBytes != 4096 || len(got) != 2 || got[1] != hashes[1] {
		t.Fatalf("round trip: %+v %v %v", m, got, err)
	}
	for _, bad := range [][]byte{
		data[:len(data)-1],
		bytes.Replace(data, []byte(`"block_bytes":4096`), []byte(`"block_bytes":0`), 1),
		bytes.Replace(data, []byte(`"hashes":2`), []byte(`"hashes":-1`), 1),
		[]byte(`{"v":2}`),
	} {
		if _, _, err := decodeKVCopyRequest(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
