// Package vllmevents follows a vLLM server's KV cache events (exact mode):
// it subscribes to the ZMQ stream vLLM publishes with --kv-events-config,
// decodes its msgpack batches, keeps a mirror of the blocks the server
// holds, and republishes them as kvserve's own KV events, hashed per tenant
// as kvserve's workers hash them, so that the router places requests on a
// vLLM server by what it really holds rather than by a prediction.
//
// # The wire
//
// vLLM's publisher (vllm/distributed/kv_events.py, ZmqEventPublisher) sends
// each batch as a three-frame message on a PUB socket: the topic, the
// batch's sequence number (8 bytes, big-endian, from 0 at the server's
// start), and the batch in msgpack. A ROUTER socket, if configured, replays
// the batches it still buffers from a sequence number on: a subscriber that
// sees a gap asks for the missing ones.
//
// A batch is [ts, events, data_parallel_rank] (an array; a map with those
// keys is read too). Each event is tagged with its type, BlockStored,
// BlockRemoved or AllBlocksCleared, as a positional array (vLLM before its
// switch to named fields: ["BlockStored", block_hashes, parent_block_hash,
// token_ids, block_size, lora_id, medium, lora_name, extra_keys, group_idx,
// ...], trailing defaults omitted) or as a map with a "type" key and the
// fields by name (newer vLLM). Both are read, and fields this package does
// not know are ignored, so that a newer vLLM's additions do not break it. A
// block hash is an integer (64 bits, signed or not) or bytes.
package vllmevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Kind is an event's type.
type Kind uint8

// The event types vLLM publishes.
const (
	Unknown Kind = iota
	BlockStored
	BlockRemoved
	AllBlocksCleared
)

// BlockHash is a vLLM block hash as a comparable key: "i" and the 8
// big-endian bytes of an integer hash, or "b" and a bytes hash.
type BlockHash string

// Event is one decoded event. Fields an event type does not have are zero.
type Event struct {
	Kind   Kind
	Type   string // the tag as sent (for an Unknown kind)
	Hashes []BlockHash
	// Parent is the hash of the block before Hashes[0] ("" for the first
	// block of a sequence).
	Parent    BlockHash
	Tokens    []int32 // BlockSize tokens per block
	BlockSize int
	// LoRA is set when the blocks belong to an adapter (lora_id or
	// lora_name).
	LoRA bool
	// Medium is where the blocks live ("GPU" when absent: vLLM's own pool;
	// "CPU" for its offloading connector's host memory).
	Medium string
	// ExtraKeys holds, per block, the strings among the extra keys vLLM
	// hashed it with (multimodal hashes, the cache_salt on a sequence's
	// first block).
	ExtraKeys [][]string
	// Group is the KV cache group (0 for models with one kind of
	// attention).
	Group int
}

// Batch is one published batch.
type Batch struct {
	TS     float64
	Events []Event
	Rank   int // data_parallel_rank (0 when absent)
}

// MaxPayload bounds one batch's encoded size.
const MaxPayload = 64 << 20

// maxDepth bounds the nesting of a batch: vLLM's is four deep (batch,
// events, event, extra keys) plus whatever an extra key holds.
const maxDepth = 16

// Decode reads one batch. It fails on anything that is not msgpack of a
// batch's shape; events of a type it does not know are returned as
// Unknown.
func Decode(payload []byte) (Batch, error) {
	if len(payload) > MaxPayload {
		return Batch{}, fmt.Errorf("vllmevents: batch of %d bytes (at most %d)", len(payload), MaxPayload)
	}
	if err := checkShape(payload); err != nil {
		return Batch{}, fmt.Errorf("vllmevents: %w", err)
	}
	// Not the loose decoding: it reads bytes as strings, and a bytes block
	// hash must stay one.
	v, err := msgpack.NewDecoder(bytes.NewReader(payload)).DecodeInterface()
	if err != nil {
		return Batch{}, fmt.Errorf("vllmevents: %w", err)
	}
	var ts, events, rank any
	switch b := v.(type) {
	case []any:
		if len(b) < 2 {
			return Batch{}, errors.New("vllmevents: a batch is [ts, events, rank]")
		}
		ts, events = b[0], b[1]
		if len(b) > 2 {
			rank = b[2]
		}
	case map[string]any:
		ts, events, rank = b["ts"], b["events"], b["data_parallel_rank"]
	default:
		return Batch{}, fmt.Errorf("vllmevents: a batch is an array or a map, not %T", v)
	}
	var out Batch
	switch t := ts.(type) {
	case float64:
		out.TS = t
	case float32:
		out.TS = float64(t)
	default:
		n, ok := integer(ts)
		if !ok {
			return Batch{}, fmt.Errorf("vllmevents: batch timestamp %T", ts)
		}
		out.TS = float64(n)
	}
	if rank != nil {
		r, ok := integer(rank)
		if !ok || r < 0 || r > 1<<20 {
			return Batch{}, fmt.Errorf("vllmevents: data_parallel_rank %v", rank)
		}
		out.Rank = int(r)
	}
	list, ok := events.([]any)
	if !ok {
		return Batch{}, fmt.Errorf("vllmevents: batch events: %T, not a list", events)
	}
	out.Events = make([]Event, 0, len(list))
	for i, raw := range list {
		e, err := decodeEvent(raw)
		if err != nil {
			return Batch{}, fmt.Errorf("vllmevents: event %d: %w", i, err)
		}
		out.Events = append(out.Events, e)
	}
	return out, nil
}

// The positional fields of each event type, in vLLM's declaration order
// (the tag first).
var (
	storedFields  = []string{"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx"}
	removedFields = []string{"type", "block_hashes", "medium", "group_idx"}
)

// fields names an event's values, whichever of the two shapes it came in.
func fields(raw any) (map[string]any, error) {
	switch e := raw.(type) {
	case map[string]any:
		return e, nil
	case []any:
		if len(e) == 0 {
			return nil, errors.New("empty event")
		}
		names := storedFields
		if e[0] == "BlockRemoved" {
			names = removedFields
		}
		m := make(map[string]any, len(e))
		for i, v := range e {
			if i < len(names) {
				m[names[i]] = v
			}
		}
		return m, nil
	}
	return nil, fmt.Errorf("an event is an array or a map, not %T", raw)
}

func decodeEvent(raw any) (Event, error) {
	f, err := fields(raw)
	if err != nil {
		return Event{}, err
	}
	tag, ok := f["type"].(string)
	if !ok {
		return Event{}, fmt.Errorf("event type %T, not a string", f["type"])
	}
	e := Event{Type: tag, Medium: "GPU"}
	switch tag {
	case "BlockStored":
		e.Kind = BlockStored
	case "BlockRemoved":
		e.Kind = BlockRemoved
	case "AllBlocksCleared":
		e.Kind = AllBlocksCleared
		return e, nil
	default:
		return e, nil // a newer vLLM's event: skipped by the caller
	}
	hs, ok := f["block_hashes"].([]any)
	if !ok {
		return Event{}, fmt.Errorf("%s: block_hashes %T, not a list", tag, f["block_hashes"])
	}
	for _, h := range hs {
		bh, err := blockHash(h)
		if err != nil {
			return Event{}, fmt.Errorf("%s: %w", tag, err)
		}
		e.Hashes = append(e.Hashes, bh)
	}
	if m := f["medium"]; m != nil {
		s, ok := m.(string)
		if !ok {
			return Event{}, fmt.Errorf("%s: medium %T", tag, m)
		}
		e.Medium = s
	}
	if g := f["group_idx"]; g != nil {
		n, ok := integer(g)
		if !ok || n < 0 || n > 1<<20 {
			return Event{}, fmt.Errorf("%s: group_idx %v", tag, g)
		}
		e.Group = int(n)
	}
	if e.Kind == BlockRemoved {
		return e, nil
	}
	if p := f["parent_block_hash"]; p != nil {
		if e.Parent, err = blockHash(p); err != nil {
			return Event{}, fmt.Errorf("%s: parent: %w", tag, err)
		}
	}
	toks, ok := f["token_ids"].([]any)
	if !ok {
		return Event{}, fmt.Errorf("%s: token_ids %T, not a list", tag, f["token_ids"])
	}
	e.Tokens = make([]int32, len(toks))
	for i, t := range toks {
		n, ok := integer(t)
		if !ok || n < 0 || n > 1<<31-1 {
			return Event{}, fmt.Errorf("%s: token id %v", tag, t)
		}
		e.Tokens[i] = int32(n)
	}
	switch bs := f["block_size"].(type) {
	case []any: // vLLM's first releases: num_toks_per_block, one per block
		for _, v := range bs {
			n, ok := integer(v)
			if !ok || n <= 0 || (e.BlockSize != 0 && int(n) != e.BlockSize) {
				return Event{}, fmt.Errorf("%s: num_toks_per_block %v", tag, bs)
			}
			e.BlockSize = int(n)
		}
	default:
		n, ok := integer(bs)
		if !ok || n <= 0 || n > 1<<20 {
			return Event{}, fmt.Errorf("%s: block_size %v", tag, bs)
		}
		e.BlockSize = int(n)
	}
	if len(e.Tokens) != len(e.Hashes)*e.BlockSize {
		return Event{}, fmt.Errorf("%s: %d token ids for %d blocks of %d", tag, len(e.Tokens), len(e.Hashes), e.BlockSize)
	}
	e.LoRA = f["lora_id"] != nil || f["lora_name"] != nil
	if ek, ok := f["extra_keys"].([]any); ok {
		e.ExtraKeys = make([][]string, len(ek))
		for i, keys := range ek {
			list, _ := keys.([]any)
			for _, k := range list {
				if s, ok := k.(string); ok {
					e.ExtraKeys[i] = append(e.ExtraKeys[i], s)
				}
			}
		}
	}
	return e, nil
}

// blockHash reads an integer or bytes hash.
func blockHash(v any) (BlockHash, error) {
	switch h := v.(type) {
	case uint64:
		return intHash(h), nil
	case []byte:
		if len(h) == 0 || len(h) > 64 {
			return "", fmt.Errorf("block hash of %d bytes", len(h))
		}
		return BlockHash("b" + string(h)), nil
	}
	if n, ok := integer(v); ok {
		return intHash(uint64(n)), nil // a negative hash as its two's complement, as vLLM's consumers read it
	}
	return "", fmt.Errorf("block hash %T, not an integer or bytes", v)
}

func intHash(h uint64) BlockHash {
	var b [9]byte
	b[0] = 'i'
	binary.BigEndian.PutUint64(b[1:], h)
	return BlockHash(b[:])
}

// IntHash is the key of an integer block hash (for tests and logs).
func IntHash(h uint64) BlockHash { return intHash(h) }

// integer reads any of msgpack's integer encodings.
func integer(v any) (int64, bool) {
	switch n := v.(type) {
	case int8:
		return int64(n), true
	case int16:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint8:
		return int64(n), true
	case uint16:
		return int64(n), true
	case uint32:
		return int64(n), true
	case uint64:
		if n > 1<<63-1 {
			return 0, false
		}
		return int64(n), true
	}
	return 0, false
}

// checkShape walks the msgpack encoding without recursion and fails on
// truncation, an invalid byte, or nesting deeper than maxDepth, so that
// the decoder after it never recurses deeply nor allocates for lengths the
// data does not back.
func checkShape(b []byte) error {
	remaining := []int{1} // values left at each open level
	i := 0
	need := func(n int) error {
		if n < 0 || len(b)-i < n {
			return errors.New("truncated msgpack")
		}
		return nil
	}
	length := func(size int) (int, error) {
		if err := need(size); err != nil {
			return 0, err
		}
		var n uint64
		for _, c := range b[i : i+size] {
			n = n<<8 | uint64(c)
		}
		i += size
		if n > uint64(len(b)) {
			return 0, errors.New("truncated msgpack")
		}
		return int(n), nil
	}
	for len(remaining) > 0 {
		top := len(remaining) - 1
		if remaining[top] == 0 {
			remaining = remaining[:top]
			continue
		}
		remaining[top]--
		if err := need(1); err != nil {
			return err
		}
		c := b[i]
		i++
		skip, children := 0, 0
		var err error
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			children = 2 * int(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			children = int(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			skip = int(c & 0x1f)
		case c == 0xc4 || c == 0xd9:
			skip, err = length(1)
		case c == 0xc5 || c == 0xda:
			skip, err = length(2)
		case c == 0xc6 || c == 0xdb:
			skip, err = length(4)
		case c == 0xc7:
			skip, err = length(1)
			skip++
		case c == 0xc8:
			skip, err = length(2)
			skip++
		case c == 0xc9:
			skip, err = length(4)
			skip++
		case c == 0xca:
			skip = 4
		case c == 0xcb:
			skip = 8
		case c >= 0xcc && c <= 0xcf:
			skip = 1 << (c - 0xcc)
		case c >= 0xd0 && c <= 0xd3:
			skip = 1 << (c - 0xd0)
		case c >= 0xd4 && c <= 0xd8:
			skip = 1 + 1<<(c-0xd4)
		case c == 0xdc:
			children, err = length(2)
		case c == 0xdd:
			children, err = length(4)
		case c == 0xde:
			children, err = length(2)
			children *= 2
		case c == 0xdf:
			children, err = length(4)
			children *= 2
		default:
			return fmt.Errorf("invalid msgpack byte %#x", c)
		}
		if err != nil {
			return err
		}
		if err := need(skip); err != nil {
			return err
		}
		i += skip
		if children > 0 {
			if children > len(b)-i {
				return errors.New("truncated msgpack")
			}
			if len(remaining) >= maxDepth {
				return fmt.Errorf("msgpack nested more than %d deep", maxDepth)
			}
			remaining = append(remaining, children)
		}
	}
	if i != len(b) {
		return fmt.Errorf("%d bytes after the batch", len(b)-i)
	}
	return nil
}
