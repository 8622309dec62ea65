package vllmevents

import (
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func pack(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeRecordings(t *testing.T) {
	for _, form := range []string{"array", "map"} {
		rec := recording(t, form)
		b, err := Decode(rec[0])
		if err != nil {
			t.Fatalf("%s: %v", form, err)
		}
		if len(b.Events) != 2 || b.TS != 1764000000 || b.Rank != 0 {
			t.Fatalf("%s: batch 0 %+v", form, b)
		}
		e := b.Events[0]
		if e.Kind != BlockStored || len(e.Hashes) != 3 || e.Parent != "" || len(e.Tokens) != 48 || e.Tokens[0] != 100 ||
			e.BlockSize != 16 || e.Medium != "GPU" || e.LoRA || len(e.ExtraKeys) != 3 || e.ExtraKeys[0][0] != "salt-a" || e.ExtraKeys[1] != nil {
			t.Errorf("%s: A's event %+v", form, e)
		}
		if form == "array" && e.Hashes[0] != IntHash(0xA000000000000001) {
			t.Errorf("array: hash %q, want the unsigned integer's", e.Hashes[0])
		}
		if form == "map" && (len(e.Hashes[0]) != 33 || e.Hashes[0][0] != 'b') {
			t.Errorf("map: hash %q, want 32 bytes", e.Hashes[0])
		}
		b, _ = Decode(rec[2])
		if off := b.Events[2]; off.Medium != "CPU" || off.Parent == "" {
			t.Errorf("%s: offload event %+v", form, off)
		}
		b, _ = Decode(rec[1])
		if !b.Events[1].LoRA {
			t.Errorf("%s: the adapter's event %+v", form, b.Events[1])
		}
		b, _ = Decode(rec[3])
		if b.Events[1].Kind != Unknown || b.Events[1].Type != "BlockTouched" {
			t.Errorf("%s: an unknown event %+v", form, b.Events[1])
		}
		b, _ = Decode(rec[5])
		if b.Events[0].Kind != AllBlocksCleared {
			t.Errorf("%s: %+v", form, b.Events[0])
		}
	}
}

func TestDecodeShapes(t *testing.T) {
	stored := func(hashes any, parent any, tokens any, bs any) []any {
		return []any{"BlockStored", hashes, parent, tokens, bs, nil, "GPU"}
	}
	toks := make([]int, 16)
	for _, tc := range []struct {
		name  string
		batch any
		want  string // error substring; "" for none
	}{
		{"map batch", map[string]any{"ts": 1.5, "events": []any{}, "data_parallel_rank": 2}, ""},
		{"int timestamp", []any{7, []any{}}, ""},
		{"negative hash", []any{1.0, []any{stored([]any{-3}, nil, toks, 16)}}, ""},
		{"first releases' num_toks_per_block", []any{1.0, []any{stored([]any{1}, nil, toks, []any{16})}}, ""},
		{"not a batch", "hello", "array or a map"},
		{"short batch", []any{1.0}, "[ts, events, rank]"},
		{"events not a list", []any{1.0, 3}, "not a list"},
		{"timestamp a string", []any{"x", []any{}}, "timestamp"},
		{"negative rank", []any{1.0, []any{}, -1}, "data_parallel_rank"},
		{"event a number", []any{1.0, []any{5}}, "array or a map"},
		{"empty event", []any{1.0, []any{[]any{}}}, "empty event"},
		{"tag a number", []any{1.0, []any{[]any{3}}}, "not a string"},
		{"hash a string", []any{1.0, []any{stored([]any{"x"}, nil, toks, 16)}}, "block hash"},
		{"hash empty bytes", []any{1.0, []any{stored([]any{[]byte{}}, nil, toks, 16)}}, "0 bytes"},
		{"hashes not a list", []any{1.0, []any{stored(7, nil, toks, 16)}}, "not a list"},
		{"parent a list", []any{1.0, []any{stored([]any{1}, []any{}, toks, 16)}}, "parent"},
		{"tokens missing", []any{1.0, []any{stored([]any{1}, nil, nil, 16)}}, "token_ids"},
		{"token negative", []any{1.0, []any{stored([]any{1}, nil, append([]int{-1}, toks[1:]...), 16)}}, "token id"},
		{"too few tokens", []any{1.0, []any{stored([]any{1, 2}, nil, toks, 16)}}, "16 token ids for 2 blocks"},
		{"block size zero", []any{1.0, []any{stored([]any{1}, nil, toks, 0)}}, "block_size"},
		{"uneven num_toks_per_block", []any{1.0, []any{stored([]any{1, 2}, nil, append(toks, toks...), []any{16, 8})}}, "num_toks_per_block"},
		{"medium a number", []any{1.0, []any{[]any{"BlockRemoved", []any{1}, 4}}}, "medium"},
		{"group negative", []any{1.0, []any{map[string]any{"type": "BlockRemoved", "block_hashes": []any{1}, "group_idx": -1}}}, "group_idx"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(pack(t, tc.batch))
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDecodeBadBytes(t *testing.T) {
	deep := strings.Repeat("\x91", 100) + "\xc0"
	for name, b := range map[string]string{
		"empty":          "",
		"truncated":      "\x93\xcb\x00",
		"invalid byte":   "\xc1",
		"deep":           deep,
		"huge array":     "\xdd\xff\xff\xff\xff",
		"huge bytes":     "\xc6\xff\xff\xff\xff\x00",
		"trailing bytes": "\x92\x01\x90\x01",
	} {
		if _, err := Decode([]byte(b)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func FuzzDecode(f *testing.F) {
	for _, form := range []string{"array", "map"} {
		for _, b := range recording(f, form) {
			f.Add(b)
		}
	}
	f.Add([]byte("\x92\xcb\x00\x00\x00\x00\x00\x00\x00\x00\x91\x81\xa4type\xacBlockRemoved"))
	f.Fuzz(func(t *testing.T, b []byte) {
		batch, err := Decode(b)
		if err != nil {
			return
		}
		for _, e := range batch.Events {
			if e.Kind == BlockStored && len(e.Tokens) != len(e.Hashes)*e.BlockSize {
				t.Fatalf("stored event with %d tokens for %d blocks of %d", len(e.Tokens), len(e.Hashes), e.BlockSize)
			}
		}
		// Whatever decodes can be mirrored.
		m := NewMirror(MirrorConfig{Secret: testSecret, BlockSize: 16})
		m.Register("salt-a", "a")
		m.Apply(batch)
		m.Snapshot()
	})
}
