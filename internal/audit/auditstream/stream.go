// Package auditstream keeps a cluster's audit trail in one JetStream
// stream: the records of audit.log (the same canonical, hash-chained JSON
// lines), one message each, appended by every gateway and by the CLI's
// commands with --nats, in one chain.
//
// # One chain, ordered by compare-and-set
//
// The stream holds nothing but the records, on one subject, and refuses
// deletes and purges, so record n is message n. An append chains its
// record after the last one it knows and publishes it expecting that last
// sequence number: if another process appended first, the server refuses
// it, and the appender reads the new last record and chains after that
// (bounded attempts). Within a process appends take turns on a mutex, so
// only other processes cause retries. An append whose acknowledgement is
// lost reads the last record back: if it is the line it sent, it landed.
//
// # What it guarantees
//
// The chain is checked as the file's is (audit.Verifier): an edited,
// removed or reordered record is evident. A record is acknowledged once
// the stream's replicas have it; JetStream writes it to disk without an
// fsync per message, so on a single server a power loss can lose the
// newest acknowledged records, which the file log (an fsync per record)
// does not. With three replicas, losing them takes losing two servers.
package auditstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/kvserve/kvserve/internal/audit"
)

// StreamName is the stream holding the records.
const StreamName = "KVSERVE_AUDIT"

// Subject is the one subject records are published on.
const Subject = "kvserve.audit"

// Options configure Open. The zero value is the default.
type Options struct {
	// Replicas is how many NATS servers keep the stream: zero keeps an
	// existing stream's and creates a new one with 1.
	Replicas int
	// MaxAttempts is how many times Append chains its record again when
	// other processes keep appending first (default 64).
	MaxAttempts int
	// Now returns the current time (default time.Now).
	Now func() time.Time
}

// ErrConflict is returned (wrapped) by Append when other processes
// appended first on every attempt.
var ErrConflict = errors.New("auditstream: other processes kept appending first")

// Stream is the cluster's audit trail. It is safe for concurrent use.
type Stream struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	o      Options

	mu     sync.Mutex // orders this process's appends; guards what follows
	closed bool
	known  bool   // last is the stream's last record as far as we know
	seq    uint64 // the last record's Seq (0: none)
	prev   string // the last record's line hash
}

// Open returns the audit stream on nc's server, creating it if needed. nc
// stays the caller's.
func Open(ctx context.Context, nc *nats.Conn, o Options) (*Stream, error) {
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 64
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("auditstream: %w", err)
	}
	cfg := jetstream.StreamConfig{
		Name:        StreamName,
		Description: "kvserve audit trail: hash-chained records from every gateway (internal/audit/auditstream)",
		Subjects:    []string{Subject},
		Storage:     jetstream.FileStorage,
		Replicas:    max(o.Replicas, 1),
		// Records stay until an operator deletes the stream: nothing
		// through the API removes one.
		DenyDelete: true,
		DenyPurge:  true,
		MaxMsgSize: audit.MaxLine,
	}
	st, err := js.Stream(ctx, StreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		st, err = js.CreateStream(ctx, cfg)
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) { // another process made it meanwhile
			st, err = js.Stream(ctx, StreamName)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("auditstream: the %s stream (does the NATS server run JetStream?): %w", StreamName, err)
	}
	if o.Replicas > 0 && st.CachedInfo().Config.Replicas != o.Replicas {
		c := st.CachedInfo().Config
		c.Replicas = o.Replicas
		if st, err = js.UpdateStream(ctx, c); err != nil {
			return nil, fmt.Errorf("auditstream: setting %d replicas on %s: %w", o.Replicas, StreamName, err)
		}
	}
	return &Stream{js: js, stream: st, o: o}, nil
}

// Close ends the stream's use by this process: Append fails after it.
func (s *Stream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// Append records e as the chain's next record and returns it once the
// stream has acknowledged it.
func (s *Stream) Append(ctx context.Context, e audit.Entry) (audit.Record, error) {
	if err := ctx.Err(); err != nil {
		return audit.Record{}, fmt.Errorf("auditstream: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return audit.Record{}, errors.New("auditstream: closed")
	}
	var unknown [][]byte // lines of attempts whose fate is unknown: they may yet land
	for range s.o.MaxAttempts {
		if !s.known {
			last, err := s.readLast(ctx)
			if err != nil {
				return audit.Record{}, err
			}
			for _, line := range unknown {
				if bytes.Equal(last, line) {
					// An earlier attempt landed; its acknowledgement did not.
					r, err := audit.ParseRecord(last)
					if err != nil {
						return audit.Record{}, fmt.Errorf("auditstream: %w", err)
					}
					return r, nil
				}
			}
		}
		r, line, err := audit.Chain(e, s.seq, s.prev, s.o.Now())
		if err != nil {
			return audit.Record{}, err
		}
		msg := nats.NewMsg(Subject)
		msg.Data = line
		ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequence(s.seq))
		if err == nil {
			if ack.Sequence != r.Seq {
				s.known = false
				return audit.Record{}, fmt.Errorf("auditstream: record %d was stored as message %d: the %s stream holds something else", r.Seq, ack.Sequence, StreamName)
			}
			s.seq, s.prev = r.Seq, audit.LineHash(line)
			return r, nil
		}
		s.known = false
		if !wrongLastSeq(err) {
			if ctx.Err() != nil {
				return audit.Record{}, fmt.Errorf("auditstream: appending record %d (it may or may not have been recorded): %w", r.Seq, err)
			}
			unknown = append(unknown, line) // find out whether it landed, then chain again if not
		}
	}
	return audit.Record{}, fmt.Errorf("auditstream: %d attempts: %w", s.o.MaxAttempts, ErrConflict)
}

// wrongLastSeq reports the server's refusal of a publish whose expected
// last sequence is not the stream's (code 10071, or 10164 on a replicated
// stream).
func wrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// readLast reads the stream's last record into seq and prev and returns
// its line (nil for an empty stream). The caller holds mu.
func (s *Stream) readLast(ctx context.Context) ([]byte, error) {
	m, err := s.stream.GetLastMsgForSubject(ctx, Subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		s.seq, s.prev, s.known = 0, audit.GenesisPrev, true
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("auditstream: reading the last record: %w", err)
	}
	r, err := audit.ParseRecord(m.Data)
	if err != nil {
		return nil, fmt.Errorf("auditstream: the last record (message %d) is damaged, so the chain cannot continue (run kvserve audit verify --nats): %w", m.Sequence, err)
	}
	if r.Seq != m.Sequence {
		return nil, fmt.Errorf("auditstream: message %d holds record %d: the %s stream holds something else (run kvserve audit verify --nats)", m.Sequence, r.Seq, StreamName)
	}
	s.seq, s.prev, s.known = r.Seq, audit.LineHash(m.Data), true
	return m.Data, nil
}

// Verify checks the whole chain, as it stands when Verify starts, and
// returns its summary, or a *audit.VerifyError (its Line the message's
// sequence number) for the first broken record.
func (s *Stream) Verify(ctx context.Context) (audit.Summary, error) {
	var v audit.Verifier
	info, err := s.stream.Info(ctx)
	if err != nil {
		return audit.Summary{}, fmt.Errorf("auditstream: %w", err)
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return v.Summary(), nil
	}
	cons, err := s.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return audit.Summary{}, fmt.Errorf("auditstream: %w", err)
	}
	next := uint64(1)
	for next <= last {
		// No more than remain: a fetch waits for its whole batch.
		batch, err := cons.Fetch(int(min(256, last-next+1)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return v.Summary(), fmt.Errorf("auditstream: reading the records: %w", err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			meta, err := msg.Metadata()
			if err != nil {
				return v.Summary(), fmt.Errorf("auditstream: %w", err)
			}
			seq := meta.Sequence.Stream
			if seq > last {
				continue // appended after Verify began
			}
			if seq != next {
				return v.Summary(), &audit.VerifyError{Line: int(next), Seq: v.Summary().Records + 1,
					Reason: fmt.Sprintf("message %d is missing", next)}
			}
			if err := v.Add(int(seq), msg.Data()); err != nil {
				return v.Summary(), err
			}
			next++
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return v.Summary(), fmt.Errorf("auditstream: reading the records: %w", err)
		}
		if n == 0 && next <= last {
			return v.Summary(), fmt.Errorf("auditstream: the stream stopped at message %d of %d", next-1, last)
		}
		if err := ctx.Err(); err != nil {
			return v.Summary(), fmt.Errorf("auditstream: %w", err)
		}
	}
	return v.Summary(), nil
}

// Tail returns the last n records (fewer if the stream holds fewer),
// oldest first. A damaged record among them is an error (run Verify).
func (s *Stream) Tail(ctx context.Context, n int) ([]audit.Record, error) {
	if n <= 0 {
		return nil, nil
	}
	info, err := s.stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("auditstream: %w", err)
	}
	if info.State.Msgs == 0 {
		return nil, nil
	}
	first := info.State.FirstSeq
	if last := info.State.LastSeq; last >= uint64(n) && last-uint64(n)+1 > first {
		first = last - uint64(n) + 1
	}
	var out []audit.Record
	for seq := first; seq <= info.State.LastSeq; seq++ {
		m, err := s.stream.GetMsg(ctx, seq)
		if err != nil {
			return out, fmt.Errorf("auditstream: message %d: %w (run kvserve audit verify --nats)", seq, err)
		}
		r, err := audit.ParseRecord(m.Data)
		if err != nil {
			return out, fmt.Errorf("auditstream: message %d: %w (run kvserve audit verify --nats)", seq, err)
		}
		out = append(out, r)
	}
	return out, nil
}
