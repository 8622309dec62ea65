// Package usagestream is a cluster's usage ledger: every gateway's final
// ledger records in one JetStream stream, so that any gateway answers GET
// /v1/usage (and the dashboard's costs) for the whole cluster.
//
// Each gateway keeps its own ledger file (internal/ledger) as the record of
// truth — it books requests in flight and closes them as interrupted after
// a crash — and a Replicator copies its final records, in commit order,
// into the stream. The copy is at least once: a record is published with a
// message id of its ledger's source and sequence (JetStream drops a
// duplicate within its window) and its cursor saved after the stream's
// acknowledgement; readers drop duplicates older than the window by the
// same pair. While NATS is unreachable records wait in the ledger, and the
// replicator catches up when it returns.
package usagestream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvserve/kvserve/internal/ledger"
)

// StreamName is the JetStream stream holding the records.
const StreamName = "KVSERVE_USAGE"

// subjectPrefix is followed by the record's ledger source.
const subjectPrefix = "kvserve.usage."

// Stream is the cluster's usage stream.
type Stream struct {
	js     jetstream.JetStream
	stream jetstream.Stream
}

// Open returns the stream on nc's server, creating it if needed (file
// storage, records kept until deleted by an operator).
func Open(ctx context.Context, nc *nats.Conn) (*Stream, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("usagestream: %w", err)
	}
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        StreamName,
		Description: "kvserve usage ledger records from every gateway",
		Subjects:    []string{subjectPrefix + ">"},
		Storage:     jetstream.FileStorage,
		Duplicates:  2 * time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("usagestream: the %s stream (does the NATS server run JetStream?): %w", StreamName, err)
	}
	return &Stream{js: js, stream: st}, nil
}

// Publish adds r, from the ledger called source, and waits for the
// stream's acknowledgement.
func (s *Stream) Publish(ctx context.Context, source string, r ledger.Record) error {
	data, err := json.Marshal(sourced{Source: source, Record: r})
	if err != nil {
		return err
	}
	msg := nats.NewMsg(subjectPrefix + source)
	msg.Data = data
	msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s/%d", source, r.Seq))
	if _, err := s.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("usagestream: publishing record %d: %w", r.Seq, err)
	}
	return nil
}

// sourced is a record as the stream carries it.
type sourced struct {
	Source string `json:"source"`
	ledger.Record
}

// Records calls fn with every record f selects, in the order they reached
// the stream (not by start time). Open records never reach it.
func (s *Stream) Records(ctx context.Context, f ledger.Filter, fn func(ledger.Record) error) error {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("usagestream: %w", err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 || (!f.From.IsZero() && f.From.After(info.State.LastTime)) {
		return nil
	}
	cfg := jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy}
	if !f.From.IsZero() {
		// A record is published after it started: those that started at
		// or after From were all published after it.
		from := f.From
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &from
	}
	cons, err := s.stream.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("usagestream: %w", err)
	}
	type key struct {
		source string
		seq    uint64
	}
	seen := map[key]bool{}
	empty := 0
	for {
		batch, err := cons.FetchNoWait(256)
		if err != nil {
			return fmt.Errorf("usagestream: %w", err)
		}
		n := 0
		var streamSeq, pending uint64
		for msg := range batch.Messages() {
			n++
			meta, err := msg.Metadata()
			if err != nil {
				return fmt.Errorf("usagestream: %w", err)
			}
			streamSeq, pending = meta.Sequence.Stream, meta.NumPending
			var r sourced
			if err := json.Unmarshal(msg.Data(), &r); err != nil {
				return fmt.Errorf("usagestream: message %d: %w", streamSeq, err)
			}
			k := key{r.Source, r.Seq}
			if seen[k] || !selected(r.Record, f) {
				seen[k] = true
				continue
			}
			seen[k] = true
			if err := fn(r.Record); err != nil {
				return err
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("usagestream: %w", err)
		}
		if streamSeq >= last || (n > 0 && pending == 0) {
			// Caught up with what the stream held when the read began.
			return nil
		}
		if n == 0 {
			// Nothing delivered yet, or From is past the last record: ask
			// once more after a moment, bounded by ctx.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
			if empty++; empty > 50 {
				return nil
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// selected reports whether f keeps r.
func selected(r ledger.Record, f ledger.Filter) bool {
	return (f.Tenant == "" || r.Tenant == f.Tenant) && (f.From.IsZero() || !r.Start.Before(f.From)) &&
		(f.To.IsZero() || r.Start.Before(f.To))
}

// Replicator copies a ledger's final records into the stream.
type Replicator struct {
	l   *ledger.Ledger
	s   *Stream
	log *slog.Logger
}

// cursorName names the replicator's cursor in the ledger.
const cursorName = "jetstream:" + StreamName

// NewReplicator returns a replicator of l into s.
func NewReplicator(l *ledger.Ledger, s *Stream, log *slog.Logger) *Replicator {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Replicator{l: l, s: s, log: log}
}

// retryEvery is how long the replicator waits after a failure, and at
// most between two looks at the ledger.
const retryEvery = time.Second

// Run copies records until ctx ends: what is waiting first, then each
// commit as it comes.
func (r *Replicator) Run(ctx context.Context) {
	t := time.NewTicker(retryEvery)
	defer t.Stop()
	for {
		if err := r.Sync(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("usagestream: records wait in the local ledger", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-r.l.Committed():
		case <-t.C:
		}
	}
}

// Sync copies every record not yet copied, and returns once the stream has
// them all (or on the first failure).
func (r *Replicator) Sync(ctx context.Context) error {
	cursor, err := r.l.Cursor(cursorName)
	if err != nil {
		return err
	}
	for {
		recs, last, err := r.l.CommittedAfter(ctx, cursor, 256)
		if err != nil || len(recs) == 0 {
			return err
		}
		for _, rec := range recs {
			if err := r.s.Publish(ctx, r.l.Source(), rec); err != nil {
				return err
			}
		}
		if err := r.l.SetCursor(cursorName, last); err != nil {
			return err
		}
		cursor = last
	}
}
