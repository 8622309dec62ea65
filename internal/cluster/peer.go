package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/kv"
)

// Copying KV between workers. A gateway that places a request on one worker
// while another holds more of its prefix in memory names that worker in
// GenerateRequest.CopyFrom; before queueing the request, the chosen worker
// asks it for the blocks it lacks (a KVCopyRequest on SubjectKV) and stores
// the answer in its pool (engine.ImportKV), so the request finds them as a
// prefix hit. Any failure only means the blocks are computed instead.

// SubjectKV is where worker id answers KVCopyRequests: the message's reply
// subject receives KVCopyChunks.
func SubjectKV(id string) string { return "kvserve.worker." + id + ".kv" }

// KVCopyRequest asks a worker for the contents of blocks, by hash, in
// order; it answers the leading run its memory holds. The hashes follow the
// JSON object after a newline, 32 bytes each.
type KVCopyRequest struct {
	V int `json:"v"`
	// BlockBytes is the asker's block size in bytes: a worker whose blocks
	// differ (another model, KV type or block size) answers with an error.
	BlockBytes int64 `json:"block_bytes"`
	Hashes     int   `json:"hashes"`
}

// KVCopyChunk is one message of the answer: the JSON object, a newline, and
// the next bytes of the blocks' contents, concatenated in order (a block
// may span chunks: NATS bounds a message's size).
type KVCopyChunk struct {
	V   int `json:"v"`
	Seq int `json:"seq"` // from 0
	// Blocks is how many blocks the whole answer holds (in every chunk).
	Blocks int        `json:"blocks"`
	Done   bool       `json:"done,omitempty"`
	Error  *WireError `json:"error,omitempty"`
}

func (m *KVCopyRequest) version() int { return m.V }
func (m *KVCopyChunk) version() int   { return m.V }

// maxCopyBytes bounds one request's copy: past it the rest is computed.
const maxCopyBytes = 256 << 20

// maxCopies bounds the copies a worker serves at once, and those it takes:
// past it a peer's ask is refused and a request's copy skipped (its prefix
// computed), so a burst of copies cannot take the worker's memory.
const maxCopies = 2

// peerEngine is an Engine that copies KV blocks to and from its peers
// (Local does; an adapter in front of another server does not).
type peerEngine interface {
	MissingBlocks(r *engine.Request) (hashes []kv.Hash, held int)
	ExportKV(hashes []kv.Hash) [][]byte
	ImportKV(r *engine.Request, hashes []kv.Hash, from int, data [][]byte) (int, error)
	BlockBytes() int64
}

func (l localEngine) MissingBlocks(r *engine.Request) ([]kv.Hash, int) { return l.e.MissingBlocks(r) }
func (l localEngine) ExportKV(hashes []kv.Hash) [][]byte               { return l.e.ExportKV(hashes) }
func (l localEngine) BlockBytes() int64                                { return l.e.BlockBytes() }
func (l localEngine) ImportKV(r *engine.Request, hashes []kv.Hash, from int, data [][]byte) (int, error) {
	return l.e.ImportKV(r, hashes, from, data)
}

// peer is the engine as a peerEngine, nil when the worker copies no KV.
func (w *Worker) peer() peerEngine {
	pe, ok := w.e.(peerEngine)
	if !ok || w.cfg.NoKVCopy {
		return nil
	}
	return pe
}

// encodeKVCopyRequest is a KVCopyRequest with its hashes.
func encodeKVCopyRequest(blockBytes int64, hashes []kv.Hash) ([]byte, error) {
	data, err := json.Marshal(KVCopyRequest{V: Version, BlockBytes: blockBytes, Hashes: len(hashes)})
	if err != nil {
		return nil, err
	}
	data = append(data, '\n')
	for i := range hashes {
		data = append(data, hashes[i][:]...)
	}
	return data, nil
}

// decodeKVCopyRequest reads a KVCopyRequest and its hashes.
func decodeKVCopyRequest(data []byte) (KVCopyRequest, []kv.Hash, error) {
	var m KVCopyRequest
	i := bytes.IndexByte(data, '\n')
	if i < 0 {
		return m, nil, errors.New("cluster: KV copy request without its hashes")
	}
	if err := decode(data[:i], &m, "KV copy request"); err != nil {
		return m, nil, err
	}
	tail := data[i+1:]
	if m.Hashes < 0 || len(tail) != m.Hashes*len(kv.Hash{}) || m.BlockBytes <= 0 {
		return m, nil, fmt.Errorf("cluster: KV copy request: %d hashes and %d block bytes announced, %d bytes of hashes", m.Hashes, m.BlockBytes, len(tail))
	}
	hashes := make([]kv.Hash, m.Hashes)
	for j := range hashes {
		copy(hashes[j][:], tail[j*len(kv.Hash{}):])
	}
	return m, hashes, nil
}

// decodeKVCopyChunk reads a KVCopyChunk and the bytes it carries.
func decodeKVCopyChunk(data []byte) (KVCopyChunk, []byte, error) {
	var m KVCopyChunk
	i := bytes.IndexByte(data, '\n')
	if i < 0 {
		return m, nil, errors.New("cluster: KV copy chunk without its newline")
	}
	if err := decode(data[:i], &m, "KV copy chunk"); err != nil {
		return m, nil, err
	}
	if m.Seq < 0 || m.Blocks < 0 {
		return m, nil, fmt.Errorf("cluster: KV copy chunk %d of %d blocks", m.Seq, m.Blocks)
	}
	return m, data[i+1:], nil
}

// onKV answers a peer's KVCopyRequest on its own goroutine: copying out
// many blocks takes a while, and the subscription's other messages wait
// for its handler.
func (w *Worker) onKV(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	w.mu.Lock()
	if w.draining {
		w.mu.Unlock()
		w.publishChunk(m.Reply, KVCopyChunk{V: Version, Done: true,
			Error: &WireError{Kind: KindClosed, Message: "cluster: worker " + w.cfg.ID + " is draining"}}, nil)
		return
	}
	w.pumps.Add(1)
	w.mu.Unlock()
	go func() {
		defer w.pumps.Done()
		w.answerKV(m)
	}()
}

func (w *Worker) answerKV(m *nats.Msg) {
	fail := func(kind, msg string) {
		w.publishChunk(m.Reply, KVCopyChunk{V: Version, Done: true, Error: &WireError{Kind: kind, Message: msg}}, nil)
	}
	pe := w.peer()
	if pe == nil {
		fail(KindInvalid, "cluster: worker "+w.cfg.ID+" does not copy KV blocks")
		return
	}
	select {
	case w.copiesOut <- struct{}{}:
		defer func() { <-w.copiesOut }()
	default:
		fail(KindQueueFull, fmt.Sprintf("cluster: worker %s is serving %d KV copies already", w.cfg.ID, maxCopies))
		return
	}
	req, hashes, err := decodeKVCopyRequest(m.Data)
	if err != nil {
		fail(KindInvalid, err.Error())
		return
	}
	if bb := pe.BlockBytes(); req.BlockBytes != bb {
		fail(KindInvalid, fmt.Sprintf("cluster: worker %s's KV blocks have %d bytes, the asker's %d", w.cfg.ID, bb, req.BlockBytes))
		return
	}
	hashes = hashes[:min(len(hashes), max(1, int(maxCopyBytes/req.BlockBytes)))]
	blocks := pe.ExportKV(hashes)
	// Chunks well below the connection's message limit, their header
	// included.
	limit := max(4096, int(w.nc.MaxPayload())-1024)
	c := KVCopyChunk{V: Version, Blocks: len(blocks)}
	var buf []byte
	for _, b := range blocks {
		for len(b) > 0 {
			n := min(len(b), limit-len(buf))
			buf, b = append(buf, b[:n]...), b[n:]
			if len(buf) == limit {
				w.publishChunk(m.Reply, c, buf)
				c.Seq++
				buf = buf[:0]
			}
		}
	}
	c.Done = true
	w.publishChunk(m.Reply, c, buf)
}

// publishChunk sends a chunk header and its bytes.
func (w *Worker) publishChunk(subj string, c KVCopyChunk, payload []byte) {
	data, err := json.Marshal(c)
	if err != nil {
		w.log.Error("cluster: encode a KV copy chunk", "err", err)
		return
	}
	data = append(append(data, '\n'), payload...)
	if err := w.nc.Publish(subj, data); err != nil {
		w.log.Warn("cluster: send a KV copy chunk", "worker", w.cfg.ID, "err", err)
	}
}

// copyTimeout bounds the wait for each chunk of a peer's answer.
const copyTimeout = 2 * time.Second

// copyFrom asks worker peer for the blocks of r's prompt this worker's
// memory lacks and stores those it sends. It returns how many blocks it
// stored; an error means none were (the request computes them).
func (w *Worker) copyFrom(ctx context.Context, peer string, r *engine.Request) (int, error) {
	pe := w.peer()
	if pe == nil || peer == w.cfg.ID {
		return 0, nil
	}
	select {
	case w.copiesIn <- struct{}{}:
		defer func() { <-w.copiesIn }()
	default:
		return 0, fmt.Errorf("cluster: %d KV copies under way already", maxCopies)
	}
	hashes, from := pe.MissingBlocks(r)
	if from >= len(hashes) {
		return 0, nil
	}
	bb := pe.BlockBytes()
	want := hashes[from:]
	want = want[:min(len(want), max(1, int(maxCopyBytes/bb)))]
	msg, err := encodeKVCopyRequest(bb, want)
	if err != nil {
		return 0, err
	}
	inbox := w.nc.NewInbox()
	sub, err := w.nc.SubscribeSync(inbox)
	if err != nil {
		return 0, fmt.Errorf("cluster: subscribe to a KV copy's inbox: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// The answer may be larger than a subscription's default pending
	// bound; it is bounded by maxCopyBytes instead.
	_ = sub.SetPendingLimits(-1, 2*maxCopyBytes)
	if err := w.nc.PublishRequest(SubjectKV(peer), inbox, msg); err != nil {
		return 0, fmt.Errorf("cluster: ask worker %s for KV blocks: %w", peer, err)
	}
	var (
		data   []byte
		blocks = -1
	)
	for seq := 0; ; seq++ {
		cctx, cancel := context.WithTimeout(ctx, copyTimeout)
		m, err := sub.NextMsgWithContext(cctx)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("cluster: KV blocks from worker %s: %w", peer, err)
		}
		c, payload, err := decodeKVCopyChunk(m.Data)
		if err != nil {
			return 0, err
		}
		if c.Error != nil {
			return 0, fmt.Errorf("cluster: worker %s: %w", peer, c.Error.Err())
		}
		if c.Seq != seq || blocks >= 0 && c.Blocks != blocks || c.Blocks > len(want) {
			return 0, fmt.Errorf("cluster: KV copy from worker %s: chunk %d of %d blocks, expected chunk %d of at most %d", peer, c.Seq, c.Blocks, seq, len(want))
		}
		if blocks < 0 {
			data = make([]byte, 0, int64(c.Blocks)*bb) // at most maxCopyBytes: c.Blocks ≤ len(want)
		}
		blocks = c.Blocks
		if int64(len(data)+len(payload)) > int64(blocks)*bb {
			return 0, fmt.Errorf("cluster: KV copy from worker %s: more bytes than its %d blocks", peer, blocks)
		}
		data = append(data, payload...)
		if c.Done {
			break
		}
	}
	parts := make([][]byte, blocks)
	switch int64(len(data)) {
	case int64(blocks) * bb:
		for i := range parts {
			parts[i] = data[int64(i)*bb : int64(i+1)*bb]
		}
	case 0:
		// A simulated engine's blocks have no contents (its pool keeps the
		// bookkeeping only): the import refuses them where a pool has.
	default:
		return 0, fmt.Errorf("cluster: KV copy from worker %s: %d bytes for %d blocks of %d", peer, len(data), blocks, bb)
	}
	return pe.ImportKV(r, hashes, from, parts)
}
