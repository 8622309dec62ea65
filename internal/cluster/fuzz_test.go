package cluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/kv"
)

// fuzzDecoder checks one decoder on arbitrary bytes: it never panics, and
// what it accepts encodes to JSON that decodes to the same message (the
// fields a peer sends are the fields it reads back).
func fuzzDecoder[M any](f *testing.F, decode func([]byte) (M, error), seeds ...any) {
	for _, s := range seeds {
		if raw, ok := s.([]byte); ok { // an encoded message as it is
			f.Add(raw)
			continue
		}
		data, err := json.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(fmt.Appendf(nil, `{"v":%d}`, Version))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decode(data)
		if err != nil {
			return
		}
		again, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode it: %v", data, err)
		}
		back, err := decode(again)
		if err != nil {
			t.Fatalf("accepted %q, re-encoded as %s, then refused: %v", data, again, err)
		}
		if third, _ := json.Marshal(back); !bytes.Equal(again, third) {
			t.Fatalf("round trip changed the message:\n%s\n%s", again, third)
		}
	})
}

var seedHash = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func FuzzDecodeHeartbeat(f *testing.F) {
	fuzzDecoder(f, DecodeHeartbeat, Heartbeat{V: Version, Worker: "w-1", Model: "m", Interval: time.Second, Running: 2, EventSeq: 9,
		WaitingByPriority: []engine.PriorityWaiting{{Priority: 1, Requests: 2, PromptTokens: 30}}})
}

func FuzzDecodeGatewayHeartbeat(f *testing.F) {
	fuzzDecoder(f, DecodeGatewayHeartbeat, GatewayHeartbeat{V: Version, Gateway: "g-1", Interval: time.Second})
}

func FuzzDecodeLeave(f *testing.F) {
	fuzzDecoder(f, DecodeLeave, Leave{V: Version, Worker: "w-1"})
}

func FuzzDecodeGenerateRequest(f *testing.F) {
	// The binary form too: JSON, a newline, the prompt.
	data, err := EncodeGenerateRequest("_INBOX.y", "g-1", "", engine.Request{Prompt: []int32{5, 6, 7, 8}, MaxTokens: 1})
	if err != nil {
		f.Fatal(err)
	}
	fuzzDecoder(f, DecodeGenerateRequest, GenerateRequest{V: Version, ID: "_INBOX.x", Gateway: "g-1", Request: engine.Request{
		Prompt: []int32{1, 2, 3}, MaxTokens: 4, N: 2, Scope: "t", Segments: []engine.Segment{{Start: 0, End: 2, Retention: engine.RetentionPersistent}},
		Hints: engine.Hints{SessionID: "s", TTL: time.Minute}}}, data)
}

func FuzzDecodeCancel(f *testing.F) {
	fuzzDecoder(f, DecodeCancel, Cancel{V: Version, ID: "_INBOX.x"})
}

func FuzzDecodeFrame(f *testing.F) {
	fuzzDecoder(f, DecodeFrame,
		Frame{V: Version, ID: "x", Seq: 3, Outputs: []engine.Output{{Index: 0, Token: 5}, {Index: 1, Token: -1, Finish: engine.FinishError, Err: errors.New("boom")}},
			Usage: engine.Usage{PromptTokens: 4}, Done: true},
		Frame{V: Version, ID: "x", Error: &WireError{Kind: KindConstraint, Message: "bad schema", Constraint: "json_schema"}})
}

func FuzzDecodeEventBatch(f *testing.F) {
	fuzzDecoder(f, DecodeEventBatch, EventBatch{V: Version, Worker: "w", First: 7, Events: []WireEvent{
		{Kind: kv.BlockStored, Tier: kv.TierPool, Hashes: []string{seedHash}, Parent: seedHash, Tokens: []int32{1}, BlockSize: 1},
		{Kind: kv.BlockRemoved, Tier: kv.TierHost, Hashes: []string{seedHash}}}})
}

func FuzzDecodeSnapshotChunk(f *testing.F) {
	fuzzDecoder(f, DecodeSnapshotChunk, SnapshotChunk{V: Version, Worker: "w", Next: 3, Last: true,
		Events: []WireEvent{{Kind: kv.BlockStored, Tier: kv.TierDisk, Hashes: []string{seedHash}}}})
}

// FuzzWireEvent: a wire event decodes to a kv.Event or an error, and a
// decoded one encodes back to itself.
func FuzzWireEvent(f *testing.F) {
	f.Add(uint8(kv.BlockStored), uint8(kv.TierPool), seedHash, seedHash)
	f.Add(uint8(9), uint8(1), "zz", "")
	f.Fuzz(func(t *testing.T, kind, tier uint8, hash, parent string) {
		w := WireEvent{Kind: kv.EventKind(kind), Tier: kv.Tier(tier), Hashes: []string{hash}, Parent: parent}
		e, err := w.Event(1)
		if err != nil {
			return
		}
		back := wireEvent(e)
		if back.Hashes[0] != hash && !bytes.EqualFold([]byte(back.Hashes[0]), []byte(hash)) {
			t.Fatalf("hash %q came back as %q", hash, back.Hashes[0])
		}
	})
}

// TestWireErrors: every submission error the engine returns crosses the
// wire as an error the API maps to the same status.
func TestWireErrors(t *testing.T) {
	tests := []error{engine.ErrQueueFull, engine.ErrTooLong, engine.ErrInvalid, engine.ErrPinQuota, engine.ErrClosed,
		&engine.ConstraintError{Kind: "json_schema", Err: errors.New("bad")}}
	for _, want := range tests {
		var back WireError
		if err := json.Unmarshal(mustJSON(t, toWire(want)), &back); err != nil {
			t.Fatal(err)
		}
		got := back.Err()
		var ce *engine.ConstraintError
		if errors.As(want, &ce) {
			if !errors.As(got, &ce) || ce.Kind != "json_schema" {
				t.Errorf("%v came back as %v", want, got)
			}
			continue
		}
		if !errors.Is(got, want) || got.Error() != want.Error() {
			t.Errorf("%v came back as %v", want, got)
		}
	}
}

// FuzzDecodeKVCopyRequest: a copy request never panics its decoder, and
// what it accepts encodes back to the same bytes.
func FuzzDecodeKVCopyRequest(f *testing.F) {
	seed, err := encodeKVCopyRequest(4096, []kv.Hash{{1}, {2}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("{\"v\":2,\"block_bytes\":1,\"hashes\":0}\n"))
	f.Add([]byte("null\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, hashes, err := decodeKVCopyRequest(data)
		if err != nil {
			return
		}
		if len(hashes) != m.Hashes || m.BlockBytes <= 0 {
			t.Fatalf("accepted %q: %+v with %d hashes", data, m, len(hashes))
		}
		again, err := encodeKVCopyRequest(m.BlockBytes, hashes)
		if err != nil {
			t.Fatal(err)
		}
		m2, h2, err := decodeKVCopyRequest(again)
		if err != nil || m2 != m || len(h2) != len(hashes) || len(hashes) > 0 && h2[len(h2)-1] != hashes[len(hashes)-1] {
			t.Fatalf("round trip of %q: %+v %d %v", data, m2, len(h2), err)
		}
	})
}

// FuzzDecodeKVCopyChunk: a chunk never panics its decoder; what it
// accepts has a sequence number and a block count that are not negative
// and carries the bytes after its first newline.
func FuzzDecodeKVCopyChunk(f *testing.F) {
	f.Add([]byte("{\"v\":2,\"seq\":0,\"blocks\":3}\nabc"))
	f.Add([]byte("{\"v\":2,\"seq\":1,\"blocks\":3,\"done\":true}\n"))
	f.Add([]byte("{\"v\":2,\"done\":true,\"error\":{\"kind\":\"invalid\",\"message\":\"x\"}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, payload, err := decodeKVCopyChunk(data)
		if err != nil {
			return
		}
		if c.Seq < 0 || c.Blocks < 0 || c.V != Version {
			t.Fatalf("accepted %q as %+v", data, c)
		}
		if i := bytes.IndexByte(data, '\n'); !bytes.Equal(payload, data[i+1:]) {
			t.Fatalf("payload of %q: %q", data, payload)
		}
	})
}

func FuzzDecodeForgetScope(f *testing.F) {
	fuzzDecoder(f, decodeForgetScope, ForgetScope{V: Version, Scope: "t-1"})
}
