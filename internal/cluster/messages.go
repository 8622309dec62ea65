package cluster

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/kv"
)

// Version is the version of every message below. A receiver refuses a
// message of another version rather than guessing at its fields: gateways
// and workers of one cluster are upgraded together.
const Version = 2

// The subjects. A worker's own subjects end in its id, which must be one
// NATS subject token (ValidID).
const (
	// SubjectHeartbeat carries every worker's Heartbeat.
	SubjectHeartbeat = "kvserve.workers.heartbeat"
	// SubjectLeave carries a Leave when a worker has drained and exits.
	SubjectLeave = "kvserve.workers.leave"
	// SubjectDiscover asks every worker to heartbeat now (a gateway that
	// has just started need not wait a whole interval). The body is empty.
	SubjectDiscover = "kvserve.workers.discover"
	// SubjectGatewayHeartbeat carries every gateway's GatewayHeartbeat:
	// a worker stops the requests of a gateway silent for three of its
	// intervals (their client connections died with it).
	SubjectGatewayHeartbeat = "kvserve.gateways.heartbeat"
)

// SubjectGenerate is where worker id takes GenerateRequests (with a reply
// subject, to which it streams Frames).
func SubjectGenerate(id string) string { return "kvserve.worker." + id + ".generate" }

// SubjectCancel is where worker id takes Cancels.
func SubjectCancel(id string) string { return "kvserve.worker." + id + ".cancel" }

// SubjectEvents is where worker id publishes its KV events (EventBatch).
func SubjectEvents(id string) string { return "kv.events." + id }

// SubjectSnapshot is where worker id answers a snapshot request (empty body,
// with a reply subject) with SnapshotChunks.
func SubjectSnapshot(id string) string { return "kv.snapshot." + id }

// ValidID reports whether id can name a worker: one subject token of
// letters, digits, '-' and '_' (no dots or wildcards), at most 64 bytes.
func ValidID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("cluster: worker id %q: want 1 to 64 characters", id)
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("cluster: worker id %q: only letters, digits, '-' and '_' are allowed", id)
		}
	}
	return nil
}

// Heartbeat is a worker's registration and load, published every
// Interval on SubjectHeartbeat. The first one registers the worker; a
// worker not heard from for three of its intervals is dropped.
type Heartbeat struct {
	V      int    `json:"v"`
	Worker string `json:"worker"`
	Model  string `json:"model"`
	// ContextLength is the longest sequence the worker's engine takes
	// (its model's context, bounded by its KV pool).
	ContextLength int `json:"context_length"`
	BlockSize     int `json:"block_size"`
	// Interval is the time between two heartbeats.
	Interval time.Duration `json:"interval_ns"`
	// Draining: the worker finishes what it runs and takes nothing new.
	Draining bool `json:"draining,omitempty"`
	// Load, from engine.Engine.Now.
	Running  int `json:"running"`
	Waiting  int `json:"waiting"`
	KVTotal  int `json:"kv_blocks_total"`
	KVActive int `json:"kv_blocks_active"`
	KVCached int `json:"kv_blocks_cached"`
	// WaitingByPriority splits Waiting by priority, highest first (absent
	// from workers that do not keep it: the router then counts every
	// waiting request as ahead of a new one).
	WaitingByPriority []engine.PriorityWaiting `json:"waiting_by_priority,omitempty"`
	// EventSeq is the sequence number the worker's next KV event gets.
	EventSeq uint64 `json:"kv_event_seq"`
	// CopiesKV: the worker copies KV blocks to and from its peers
	// (SubjectKV, GenerateRequest.CopyFrom).
	CopiesKV bool `json:"copies_kv,omitempty"`
}

// GatewayHeartbeat says a gateway is alive, every Interval.
type GatewayHeartbeat struct {
	V        int           `json:"v"`
	Gateway  string        `json:"gateway"`
	Interval time.Duration `json:"interval_ns"`
}

// Leave says a worker has finished draining and is gone.
type Leave struct {
	V      int    `json:"v"`
	Worker string `json:"worker"`
}

// GenerateRequest asks a worker to run one request. The reply subject of
// its message receives the request's Frames.
type GenerateRequest struct {
	V int `json:"v"`
	// ID names the request in Cancels and Frames (unique per gateway
	// connection: its reply inbox).
	ID string `json:"id"`
	// Gateway names the sending gateway, whose heartbeats keep the
	// request alive ("": kept until it ends or is cancelled).
	Gateway string         `json:"gateway,omitempty"`
	Request engine.Request `json:"request"`
	// PromptIDs says the prompt follows the JSON object, Request.Prompt
	// left empty: a newline, then PromptIDs little-endian 32-bit ids
	// (EncodeGenerateRequest). A long prompt as JSON (numbers, or base64)
	// costs the gateway and the worker each hundreds of microseconds to
	// encode and decode, on every request's way to its first token.
	PromptIDs int `json:"prompt_ids,omitempty"`
	// CopyFrom names a worker holding more of the prompt's prefix in
	// memory than this one: copy the blocks from it before queueing the
	// request (see SubjectKV).
	CopyFrom string `json:"copy_from,omitempty"`
}

// EncodeGenerateRequest is the message asking a worker to run r, copying
// KV blocks from worker copyFrom first ("": none): the request as JSON,
// then its prompt in binary (GenerateRequest.PromptIDs).
func EncodeGenerateRequest(id, gateway, copyFrom string, r engine.Request) ([]byte, error) {
	prompt := r.Prompt
	r.Prompt = nil
	data, err := json.Marshal(GenerateRequest{V: Version, ID: id, Gateway: gateway, Request: r, PromptIDs: len(prompt), CopyFrom: copyFrom})
	if err != nil {
		return nil, err
	}
	data = slices.Grow(data, 1+4*len(prompt))
	data = append(data, '\n')
	for _, t := range prompt {
		data = binary.LittleEndian.AppendUint32(data, uint32(t))
	}
	return data, nil
}

// Cancel asks a worker to stop request ID (its client went away).
type Cancel struct {
	V  int    `json:"v"`
	ID string `json:"id"`
}

// Frame is one message of a request's reply stream. Seq counts from 0,
// one per numbered frame, so the gateway notices a lost one. Frame 0 is
// the acknowledgement: the request was queued (or Error says why not, and
// the stream ends there). Later frames carry outputs; the last has Done
// set. A KeepAlive frame is not numbered and carries nothing: the worker
// sends one each heartbeat interval in which it had nothing else to send
// (a grammar compiling, a request queued, a long prefill), so the gateway
// tells a busy worker from a dead one.
type Frame struct {
	V         int             `json:"v"`
	ID        string          `json:"id"`
	Seq       uint64          `json:"seq"`
	KeepAlive bool            `json:"keep_alive,omitempty"`
	Outputs   []engine.Output `json:"outputs,omitempty"`
	Usage     engine.Usage    `json:"usage"`
	// QueueTime is how long the request waited in the worker's queue (0
	// until admitted).
	QueueTime time.Duration `json:"queue_ns,omitempty"`
	// Received is when the worker received the request (frame 0): with
	// the outputs' sampling times, the gateway tells the time the
	// cluster added to the engine's own (kvserve_cluster_added_seconds).
	Received time.Time `json:"received,omitzero"`
	// Ended is when the worker's engine produced the last output (on the
	// last frame).
	Ended time.Time `json:"ended,omitzero"`
	Done  bool      `json:"done,omitempty"`
	// Error refuses the request (frame 0 only).
	Error *WireError `json:"error,omitempty"`
}

// WireError is a submission error crossing the wire with its kind, so
// the gateway gives the client the status the local engine would have.
type WireError struct {
	// Kind is one of the Kind* constants.
	Kind    string `json:"kind"`
	Message string `json:"message"`
	// Constraint is engine.ConstraintError's Kind (KindConstraint only).
	Constraint string `json:"constraint,omitempty"`
}

// The kinds of WireError.
const (
	KindQueueFull  = "queue_full"
	KindTooLong    = "too_long"
	KindInvalid    = "invalid"
	KindConstraint = "constraint"
	KindPinQuota   = "pin_quota"
	KindClosed     = "closed" // shutting down or draining
	KindInternal   = "internal"
)

// wireErrors maps kinds to the engine's sentinel errors.
var wireErrors = map[string]error{
	KindQueueFull: engine.ErrQueueFull,
	KindTooLong:   engine.ErrTooLong,
	KindInvalid:   engine.ErrInvalid,
	KindPinQuota:  engine.ErrPinQuota,
	KindClosed:    engine.ErrClosed,
}

// toWire encodes a Submit error.
func toWire(err error) *WireError {
	var ce *engine.ConstraintError
	if errors.As(err, &ce) {
		return &WireError{Kind: KindConstraint, Message: ce.Err.Error(), Constraint: ce.Kind}
	}
	for k, e := range wireErrors {
		if errors.Is(err, e) {
			return &WireError{Kind: k, Message: err.Error()}
		}
	}
	return &WireError{Kind: KindInternal, Message: err.Error()}
}

// Err decodes e into an error that matches the engine's sentinels
// (errors.Is) and, for constraints, *engine.ConstraintError (errors.As).
func (e *WireError) Err() error {
	if e.Kind == KindConstraint {
		return &engine.ConstraintError{Kind: e.Constraint, Err: errors.New(e.Message)}
	}
	if s, ok := wireErrors[e.Kind]; ok {
		// The message already names the sentinel's text; keep it as is.
		return &remoteError{msg: strings.TrimPrefix(e.Message, "engine: "), sentinel: s}
	}
	return fmt.Errorf("cluster: the worker failed: %s", e.Message)
}

// remoteError is an engine error that happened on a worker.
type remoteError struct {
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return "engine: " + e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

// EventBatch is a run of a worker's KV events with consecutive sequence
// numbers from First. A consumer that expected an earlier number missed
// events and resyncs with a snapshot.
type EventBatch struct {
	V      int         `json:"v"`
	Worker string      `json:"worker"`
	First  uint64      `json:"first"`
	Events []WireEvent `json:"events"`
}

// SnapshotChunk is part of a snapshot: every block a worker holds, as
// stored events, in chunks (a snapshot can exceed NATS's message size).
// Next is the sequence number of the first event the snapshot may not
// reflect (kv.Pool.Snapshot): apply the snapshot, then events from Next.
// The chunk with Last set ends it.
type SnapshotChunk struct {
	V      int         `json:"v"`
	Worker string      `json:"worker"`
	Next   uint64      `json:"next"`
	Part   int         `json:"part"`
	Last   bool        `json:"last,omitempty"`
	Events []WireEvent `json:"events,omitempty"`
	// Error says why there is no snapshot.
	Error string `json:"error,omitempty"`
}

// WireEvent is a kv.Event with its hashes in hex.
type WireEvent struct {
	Kind      kv.EventKind `json:"kind"`
	Tier      kv.Tier      `json:"tier"`
	Hashes    []string     `json:"hashes,omitempty"`
	Parent    string       `json:"parent,omitempty"`
	Tokens    []int32      `json:"tokens,omitempty"`
	BlockSize int          `json:"block_size,omitempty"`
	Class     kv.Class     `json:"class,omitempty"`
}

// wireEvent encodes e (its Seq is carried by the batch).
func wireEvent(e kv.Event) WireEvent {
	w := WireEvent{Kind: e.Kind, Tier: e.Tier, Tokens: e.Tokens, BlockSize: e.BlockSize, Class: e.Class}
	w.Hashes = make([]string, len(e.Hashes))
	for i, h := range e.Hashes {
		w.Hashes[i] = hex.EncodeToString(h[:])
	}
	if !e.Parent.IsZero() {
		w.Parent = hex.EncodeToString(e.Parent[:])
	}
	return w
}

// Event decodes w.
func (w WireEvent) Event(seq uint64) (kv.Event, error) {
	e := kv.Event{Seq: seq, Kind: w.Kind, Tier: w.Tier, Tokens: w.Tokens, BlockSize: w.BlockSize, Class: w.Class}
	if w.Kind < kv.BlockStored || w.Kind > kv.AllCleared {
		return kv.Event{}, fmt.Errorf("cluster: KV event of unknown kind %d", w.Kind)
	}
	e.Hashes = make([]kv.Hash, len(w.Hashes))
	for i, s := range w.Hashes {
		if err := decodeHash(s, &e.Hashes[i]); err != nil {
			return kv.Event{}, err
		}
	}
	if w.Parent != "" {
		if err := decodeHash(w.Parent, &e.Parent); err != nil {
			return kv.Event{}, err
		}
	}
	return e, nil
}

func decodeHash(s string, h *kv.Hash) error {
	if len(s) != 2*len(h) {
		return fmt.Errorf("cluster: block hash %q: want %d hex digits", s, 2*len(h))
	}
	if _, err := hex.Decode(h[:], []byte(s)); err != nil {
		return fmt.Errorf("cluster: block hash %q: %w", s, err)
	}
	return nil
}

// versioned is what every message has.
type versioned interface{ version() int }

func (m *Heartbeat) version() int        { return m.V }
func (m *Leave) version() int            { return m.V }
func (m *GatewayHeartbeat) version() int { return m.V }
func (m *GenerateRequest) version() int  { return m.V }
func (m *Cancel) version() int           { return m.V }
func (m *Frame) version() int            { return m.V }
func (m *EventBatch) version() int       { return m.V }
func (m *SnapshotChunk) version() int    { return m.V }

// decode reads one message and checks its version; what refers to it in
// errors.
func decode[M versioned](data []byte, m M, what string) error {
	if err := json.Unmarshal(data, m); err != nil {
		return fmt.Errorf("cluster: decode %s: %w", what, err)
	}
	if v := m.version(); v != Version {
		return fmt.Errorf("cluster: %s of version %d; this build speaks version %d", what, v, Version)
	}
	return nil
}

// DecodeHeartbeat reads a Heartbeat and checks it names a valid worker.
func DecodeHeartbeat(data []byte) (Heartbeat, error) {
	var m Heartbeat
	if err := decode(data, &m, "heartbeat"); err != nil {
		return Heartbeat{}, err
	}
	if err := ValidID(m.Worker); err != nil {
		return Heartbeat{}, err
	}
	if m.Interval <= 0 {
		return Heartbeat{}, fmt.Errorf("cluster: heartbeat of %s: interval %v", m.Worker, m.Interval)
	}
	if len(m.WaitingByPriority) > maxPriorities {
		return Heartbeat{}, fmt.Errorf("cluster: heartbeat of %s: %d priorities waiting (at most %d)", m.Worker, len(m.WaitingByPriority), maxPriorities)
	}
	for _, p := range m.WaitingByPriority {
		if p.Requests < 0 || p.PromptTokens < 0 {
			return Heartbeat{}, fmt.Errorf("cluster: heartbeat of %s: %+v waiting", m.Worker, p)
		}
	}
	return m, nil
}

// maxPriorities bounds the priorities a heartbeat lists: the API's range
// ([-1000, 1000]).
const maxPriorities = 2001

// DecodeGatewayHeartbeat reads a GatewayHeartbeat.
func DecodeGatewayHeartbeat(data []byte) (GatewayHeartbeat, error) {
	var m GatewayHeartbeat
	if err := decode(data, &m, "gateway heartbeat"); err != nil {
		return GatewayHeartbeat{}, err
	}
	if m.Gateway == "" || m.Interval <= 0 {
		return GatewayHeartbeat{}, fmt.Errorf("cluster: gateway heartbeat of %q every %v", m.Gateway, m.Interval)
	}
	return m, nil
}

// DecodeLeave reads a Leave.
func DecodeLeave(data []byte) (Leave, error) {
	var m Leave
	err := decode(data, &m, "leave")
	return m, err
}

// DecodeGenerateRequest reads a GenerateRequest.
func DecodeGenerateRequest(data []byte) (GenerateRequest, error) {
	var m GenerateRequest
	head, tail := data, []byte(nil)
	if i := bytes.IndexByte(data, '\n'); i >= 0 {
		// A newline never appears inside encoding/json's output: what
		// follows it is the binary prompt.
		head, tail = data[:i], data[i+1:]
	}
	if err := decode(head, &m, "generate request"); err != nil {
		return GenerateRequest{}, err
	}
	if m.ID == "" {
		return GenerateRequest{}, errors.New("cluster: generate request without an id")
	}
	if m.PromptIDs < 0 || len(tail) != 4*m.PromptIDs || m.PromptIDs > 0 && len(m.Request.Prompt) > 0 {
		return GenerateRequest{}, fmt.Errorf("cluster: generate request: %d prompt ids announced, %d bytes after the request, %d ids in it",
			m.PromptIDs, len(tail), len(m.Request.Prompt))
	}
	if m.PromptIDs > 0 {
		m.Request.Prompt = make([]int32, m.PromptIDs)
		for i := range m.Request.Prompt {
			m.Request.Prompt[i] = int32(binary.LittleEndian.Uint32(tail[4*i:]))
		}
		m.PromptIDs = 0
	}
	return m, nil
}

// DecodeCancel reads a Cancel.
func DecodeCancel(data []byte) (Cancel, error) {
	var m Cancel
	err := decode(data, &m, "cancel")
	return m, err
}

// DecodeFrame reads a Frame.
func DecodeFrame(data []byte) (Frame, error) {
	var m Frame
	err := decode(data, &m, "frame")
	return m, err
}

// DecodeEventBatch reads an EventBatch.
func DecodeEventBatch(data []byte) (EventBatch, error) {
	var m EventBatch
	err := decode(data, &m, "KV event batch")
	return m, err
}

// DecodeSnapshotChunk reads a SnapshotChunk.
func DecodeSnapshotChunk(data []byte) (SnapshotChunk, error) {
	var m SnapshotChunk
	err := decode(data, &m, "snapshot chunk")
	return m, err
}
