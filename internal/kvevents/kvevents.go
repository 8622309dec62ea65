// Package kvevents serves a worker's KV events over HTTP in the shape vLLM
// publishes them (vllm/distributed/kv_events.py): batches of BlockStored,
// BlockRemoved and AllBlocksCleared events, each batch numbered, so a
// router can keep an index of which blocks live where and notice a gap.
//
// The stream is server-sent events: every message is one batch,
//
//	id: <sequence number of the batch's last event>
//	data: {"ts": <unix seconds>, "events": [{"type": "BlockStored", ...}, ...]}
//
// vLLM's transport is ZMQ with msgpack; here the same records travel as
// JSON over the HTTP port the server already has. Field names are vLLM's;
// a block hash is the 64 hex digits of kvserve's SHA-256 chain hash.
// medium names the tier as vLLM does: "GPU" for the engine's own pool
// (G1, host memory on this CPU engine), "CPU" for the host-memory tier
// (G2), "DISK" for the disk tier (G3). "retention" (the block's retention
// class) is kvserve's addition.
package kvevents

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/kvserve/kvserve/internal/kv"
)

// Event is one event in vLLM's field names.
type Event struct {
	Type            string   `json:"type"` // BlockStored, BlockRemoved, AllBlocksCleared
	BlockHashes     []string `json:"block_hashes,omitempty"`
	ParentBlockHash *string  `json:"parent_block_hash,omitempty"`
	TokenIDs        []int32  `json:"token_ids,omitempty"`
	BlockSize       int      `json:"block_size,omitempty"`
	Medium          string   `json:"medium,omitempty"`
	Retention       string   `json:"retention,omitempty"`
}

// Batch is a numbered group of events.
type Batch struct {
	TS     float64 `json:"ts"`
	Events []Event `json:"events"`
}

// medium is vLLM's name for a tier.
func medium(t kv.Tier) string {
	switch t {
	case kv.TierPool:
		return "GPU"
	case kv.TierHost:
		return "CPU"
	case kv.TierDisk:
		return "DISK"
	}
	return ""
}

// Convert maps a pool event to vLLM's shape.
func Convert(e kv.Event) Event {
	out := Event{Medium: medium(e.Tier)}
	switch e.Kind {
	case kv.BlockStored:
		out.Type = "BlockStored"
		out.BlockSize = e.BlockSize
		out.TokenIDs = e.Tokens
		out.Retention = e.Class.String()
		if !e.Parent.IsZero() {
			p := hex.EncodeToString(e.Parent[:])
			out.ParentBlockHash = &p
		}
	case kv.BlockRemoved:
		out.Type = "BlockRemoved"
	case kv.AllCleared:
		out.Type = "AllBlocksCleared"
	}
	for _, h := range e.Hashes {
		out.BlockHashes = append(out.BlockHashes, hex.EncodeToString(h[:]))
	}
	return out
}

// Source is what the handler reads: the pool's event log and a snapshot of
// the blocks it holds.
type Source struct {
	Log      *kv.EventLog
	Snapshot func() ([]kv.Event, uint64)
}

// keepAlive is how often an idle stream sends a comment, so proxies and
// clients do not take it for dead.
const keepAlive = 15 * time.Second

// Handler streams the events. Query parameters: from=N starts at event N
// (a reconnecting client's Last-Event-ID header does the same); snapshot=1
// first sends every block held now as one message of stored events (event
// name "snapshot") and continues live from there. Without either the stream
// starts with the next event. Events a client asks for that the log no
// longer holds end the stream with an "error" message telling it to resync
// with a snapshot: a consumer never silently misses a removal.
func Handler(src Source) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		from, snap, err := params(r)
		if err != nil { // in OpenAI's error shape, as the server's other operator endpoints
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{
				"message": "kv events: " + err.Error(), "type": "invalid_request_error", "param": nil, "code": nil}})
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		rc := http.NewResponseController(w)
		send := func(event string, id uint64, v any) error {
			b, err := json.Marshal(v)
			if err != nil {
				return err
			}
			var buf []byte
			if event != "" {
				buf = fmt.Appendf(buf, "event: %s\n", event)
			}
			if id > 0 {
				buf = fmt.Appendf(buf, "id: %d\n", id)
			}
			buf = fmt.Appendf(buf, "data: %s\n\n", b)
			if _, err := w.Write(buf); err != nil {
				return err
			}
			return rc.Flush()
		}
		if snap {
			events, next := src.Snapshot()
			batch := Batch{TS: now(), Events: make([]Event, 0, len(events))}
			for _, e := range events {
				batch.Events = append(batch.Events, Convert(e))
			}
			if err := send("snapshot", next-1, batch); err != nil {
				return
			}
			from = next
		} else if from == 0 {
			from = src.Log.Next()
		}
		if err := rc.Flush(); err != nil {
			return
		}
		var buf []kv.Event
		for {
			ctx, cancel := context.WithTimeout(r.Context(), keepAlive)
			var next uint64
			buf, next, err = src.Log.Read(ctx, from, buf[:0])
			cancel()
			switch {
			case errors.Is(err, kv.ErrEventsLost):
				send("error", 0, map[string]any{"error": map[string]any{
					"type":    "events_lost",
					"message": fmt.Sprintf("events from %d on were overwritten before they were read; resync with snapshot=1", from),
					"oldest":  next,
				}})
				return
			case r.Context().Err() != nil:
				return
			case len(buf) == 0: // idle
				if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil || rc.Flush() != nil {
					return
				}
				continue
			}
			batch := Batch{TS: now(), Events: make([]Event, len(buf))}
			for i, e := range buf {
				batch.Events[i] = Convert(e)
			}
			if err := send("", next-1, batch); err != nil {
				return
			}
			from = next
		}
	})
}

func now() float64 { return float64(time.Now().UnixNano()) / 1e9 }

// params reads where the stream starts.
func params(r *http.Request) (from uint64, snapshot bool, err error) {
	q := r.URL.Query()
	switch v := q.Get("snapshot"); v {
	case "", "0", "false":
	case "1", "true":
		snapshot = true
	default:
		return 0, false, fmt.Errorf("snapshot=%q: want 1 or 0", v)
	}
	if v := q.Get("from"); v != "" {
		if from, err = strconv.ParseUint(v, 10, 64); err != nil || from == 0 {
			return 0, false, fmt.Errorf("from=%q: want an event sequence number (from 1)", v)
		}
	} else if v := r.Header.Get("Last-Event-ID"); v != "" {
		id, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, false, fmt.Errorf("Last-Event-ID %q: want an event sequence number", v)
		}
		from = id + 1
	}
	if snapshot && from != 0 {
		return 0, false, errors.New("give snapshot=1 or a position to resume from, not both")
	}
	return from, snapshot, nil
}
