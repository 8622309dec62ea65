package engine

import (
	"context"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/tensor"
)

// TestLargePinnedPrefixUsable: a request that continues a pinned prefix
// larger than the room left beside the pins (a context cache taking most
// of the pool) is taken: its own pinned blocks are not counted twice.
func TestLargePinnedPrefixUsable(t *testing.T) {
	m := sharedModel(t, "tiny-f32.gguf")
	kvPerToken := int64(m.Config.KVBytesPerToken(2))
	e, err := newTestEngine(t, m, model.ForwarderOptions{Threads: 2, KVType: tensor.F16},
		Config{KVMemoryBytes: kvPerToken * 16 * 16, BlockSize: 16, MaxPinnedFraction: 0.75, MaxPinnedPerTenant: 0.75})
	if err != nil {
		t.Fatal(err)
	}
	doc := randomPrompts(21, 1, 160, 160, m.Config.Vocab, nil)[0] // 10 of the pool's 16 blocks
	run := func(r Request) Usage {
		t.Helper()
		r.Scope, r.MaxTokens = "tenant", 1
		st, err := e.Submit(context.Background(), r)
		if err != nil {
			t.Fatal(err)
		}
		collect(t, st, 1)
		return st.Usage()
	}
	run(Request{Prompt: doc, Hints: Hints{Retention: RetentionPinned, TTL: time.Hour}})
	if got := e.KV().Pinned(); got != 10 {
		t.Fatalf("%d blocks pinned, want 10", got)
	}
	question := append(append([]int32(nil), doc...), randomPrompts(22, 1, 10, 10, m.Config.Vocab, nil)[0]...)
	if u := run(Request{Prompt: question}); u.CachedTokens != 160 {
		t.Fatalf("the question reported %d cached tokens, want 160", u.CachedTokens)
	}
}
