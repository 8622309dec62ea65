// Package vllmtest plays a vLLM server for tests of what follows one: its
// KV event publisher (a PUB socket and a ROUTER replay socket, as
// vllm/distributed/kv_events.py's ZmqEventPublisher) and an OpenAI
// completions endpoint that caches prompts by block and publishes what it
// stores and evicts, with the cache_salt on a sequence's first block.
package vllmtest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/vmihailenco/msgpack/v5"
)

// Publisher is a vLLM KV event publisher.
type Publisher struct {
	t      testing.TB
	ctx    context.Context
	topic  string
	ep     string
	replay string

	mu     sync.Mutex
	pub    zmq4.Socket
	router zmq4.Socket
	sent   [][]byte // payloads by sequence number (nil: aged out)
}

// FreeTCP is a ZeroMQ TCP endpoint on a free loopback port.
func FreeTCP(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return "tcp://" + l.Addr().String()
}

// StartPublisher listens on two free loopback ports; it stops with the
// test.
func StartPublisher(t testing.TB, topic string) *Publisher {
	t.Helper()
	p := &Publisher{t: t, ctx: t.Context(), topic: topic, ep: FreeTCP(t), replay: FreeTCP(t)}
	p.listen()
	t.Cleanup(p.Close)
	return p
}

// Endpoint is the PUB socket's address, Replay the ROUTER's.
func (p *Publisher) Endpoint() string { return p.ep }

// Replay is the replay socket's address.
func (p *Publisher) Replay() string { return p.replay }

func (p *Publisher) listen() {
	pub := zmq4.NewPub(p.ctx)
	if err := pub.Listen(p.ep); err != nil {
		p.t.Fatal(err)
	}
	router := zmq4.NewRouter(p.ctx, zmq4.WithID(zmq4.SocketIdentity("replay")))
	if err := router.Listen(p.replay); err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.pub, p.router = pub, router
	p.mu.Unlock()
	go p.serveReplays(router)
}

func (p *Publisher) serveReplays(router zmq4.Socket) {
	for {
		msg, err := router.Recv()
		if err != nil {
			return
		}
		if len(msg.Frames) != 3 || len(msg.Frames[2]) != 8 {
			p.t.Errorf("vllmtest: replay request of %d frames", len(msg.Frames))
			continue
		}
		id, from := msg.Frames[0], int64(binary.BigEndian.Uint64(msg.Frames[2]))
		p.mu.Lock()
		sent := slices.Clone(p.sent)
		p.mu.Unlock()
		for seq := max(from, 0); seq < int64(len(sent)); seq++ {
			if sent[seq] != nil {
				_ = router.Send(zmq4.NewMsgFrom(id, nil, seqBytes(seq), sent[seq]))
			}
		}
		_ = router.Send(zmq4.NewMsgFrom(id, nil, seqBytes(-1), nil))
	}
}

// Close stops both sockets.
func (p *Publisher) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pub != nil {
		p.pub.Close()
		p.router.Close()
		p.pub, p.router = nil, nil
	}
}

// Renumber starts the sequence over from 0 on the same sockets (a server
// restarted behind a proxy that kept the connection).
func (p *Publisher) Renumber() {
	p.mu.Lock()
	p.sent = nil
	p.mu.Unlock()
}

// Restart is the server restarting: the sockets close and open again and
// the sequence starts over from 0.
func (p *Publisher) Restart() {
	p.Close()
	p.mu.Lock()
	p.sent = nil
	p.mu.Unlock()
	p.listen()
}

func seqBytes(seq int64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(seq))
	return b[:]
}

// Send publishes payload as the next batch and returns its number; with
// drop it only goes into the replay buffer (lost on the way).
func (p *Publisher) Send(payload []byte, drop bool) int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	seq := int64(len(p.sent))
	p.sent = append(p.sent, payload)
	if !drop && p.pub != nil {
		if err := p.pub.Send(zmq4.NewMsgFrom([]byte(p.topic), seqBytes(seq), payload)); err != nil {
			p.t.Errorf("vllmtest: publish %d: %v", seq, err)
		}
	}
	return seq
}

// SendRaw publishes frames as they are (a malformed message).
func (p *Publisher) SendRaw(frames ...[]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.pub.Send(zmq4.NewMsgFrom(frames...)); err != nil {
		p.t.Errorf("vllmtest: publish: %v", err)
	}
}

// Forget drops batches from the replay buffer (aged out of it).
func (p *Publisher) Forget(seqs ...int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range seqs {
		p.sent[s] = nil
	}
}

// Batch encodes events as vLLM does since its switch to named fields: an
// array [ts, events, data_parallel_rank] of maps tagged by "type".
func Batch(events ...map[string]any) []byte {
	list := make([]any, len(events))
	for i, e := range events {
		list[i] = e
	}
	b, err := msgpack.Marshal([]any{float64(time.Now().UnixNano()) / 1e9, list, 0})
	if err != nil {
		panic(err) // maps of plain values always encode
	}
	return b
}

// Empty is a batch with no events.
func Empty() []byte { return Batch() }

// Stored is a BlockStored event in pool (GPU) memory; parent 0 means none,
// salt "" none.
func Stored(hashes []uint64, parent uint64, tokens []int32, blockSize int, salt string) map[string]any {
	var p any
	if parent != 0 {
		p = parent
	}
	extra := make([]any, len(hashes))
	if salt != "" && parent == 0 && len(extra) > 0 {
		extra[0] = []any{salt}
	}
	return map[string]any{"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": p, "token_ids": tokens,
		"block_size": blockSize, "lora_id": nil, "medium": "GPU", "lora_name": nil, "extra_keys": extra, "group_idx": 0,
		"kv_cache_spec_kind": "full_attention"}
}

// Removed is a BlockRemoved event from pool memory.
func Removed(hashes []uint64) map[string]any {
	return map[string]any{"type": "BlockRemoved", "block_hashes": hashes, "medium": "GPU", "group_idx": 0}
}

// Server is a vLLM server's completions endpoint as far as a follower of
// its events can tell: each prompt's full blocks are cached (hashed by the
// previous block, the tokens and, for the first, the cache_salt) and the
// new ones published as stored; a reply of fixed text is streamed with the
// cached prompt tokens in its usage.
type Server struct {
	*httptest.Server
	pub       *Publisher
	blockSize int

	mu     sync.Mutex
	cached map[uint64]bool
	salts  []string // cache_salt of each request, in order
}

// NewServer starts a server publishing through pub; it stops with the
// test.
func NewServer(t testing.TB, pub *Publisher, blockSize int) *Server {
	s := &Server{pub: pub, blockSize: blockSize, cached: map[uint64]bool{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.complete))
	t.Cleanup(s.Close)
	return s
}

// Salts returns the cache_salt of every request so far.
func (s *Server) Salts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.salts)
}

func blockHash(parent uint64, tokens []int32, salt string) uint64 {
	h := sha256.New()
	_ = binary.Write(h, binary.LittleEndian, parent)
	_ = binary.Write(h, binary.LittleEndian, tokens)
	h.Write([]byte(salt))
	return binary.BigEndian.Uint64(h.Sum(nil)) | 1 // never 0, which means "no parent"
}

func (s *Server) complete(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Prompt    []int32 `json:"prompt"`
		CacheSalt string  `json:"cache_salt"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.salts = append(s.salts, req.CacheSalt)
	var parent, firstParent uint64
	var hashes []uint64
	var tokens []int32
	cached := 0
	for i := 0; i+s.blockSize <= len(req.Prompt); i += s.blockSize {
		blk := req.Prompt[i : i+s.blockSize]
		salt := ""
		if i == 0 {
			salt = req.CacheSalt
		}
		h := blockHash(parent, blk, salt)
		if s.cached[h] && len(hashes) == 0 {
			cached += s.blockSize
		} else if !s.cached[h] {
			if len(hashes) == 0 {
				firstParent = parent
			}
			s.cached[h] = true
			hashes = append(hashes, h)
			tokens = append(tokens, blk...)
		}
		parent = h
	}
	s.mu.Unlock()
	if len(hashes) > 0 {
		s.pub.Send(Batch(Stored(hashes, firstParent, tokens, s.blockSize, req.CacheSalt)), false)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, "data: {\"choices\":[{\"index\":0,\"text\":\"ok\",\"finish_reason\":\"stop\"}]}\n\n")
	fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":%d}}}\n\n", len(req.Prompt), cached)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// EvictAll drops every cached block, publishing their removal.
func (s *Server) EvictAll() {
	s.mu.Lock()
	var hashes []uint64
	for h := range s.cached {
		hashes = append(hashes, h)
	}
	clear(s.cached)
	s.mu.Unlock()
	if len(hashes) > 0 {
		s.pub.Send(Batch(Removed(hashes)), false)
	}
}
