package kv

import (
	"context"
	"errors"
	"sync"
)

// EventKind says what happened to blocks.
type EventKind uint8

// The event kinds, as in vLLM's KV events.
const (
	// BlockStored: full blocks became findable by hash in a tier.
	BlockStored EventKind = iota + 1
	// BlockRemoved: blocks stopped being findable in a tier.
	BlockRemoved
	// AllCleared: every block of the tier was dropped (reset).
	AllCleared
)

func (k EventKind) String() string {
	switch k {
	case BlockStored:
		return "stored"
	case BlockRemoved:
		return "removed"
	case AllCleared:
		return "cleared"
	}
	return "unknown"
}

// Tier names where a block lives.
type Tier uint8

// The tiers of DESIGN.md.
const (
	TierPool Tier = iota + 1 // G1: the engine's block pool
	TierHost                 // G2: host RAM
	TierDisk                 // G3: encrypted local disk
)

func (t Tier) String() string {
	switch t {
	case TierPool:
		return "pool"
	case TierHost:
		return "host"
	case TierDisk:
		return "disk"
	}
	return "unknown"
}

// Event is one change to the set of findable blocks. Seq numbers are
// consecutive per event log, so a consumer can detect a gap.
type Event struct {
	Seq       uint64
	Kind      EventKind
	Tier      Tier
	Hashes    []Hash  // stored/removed blocks, in chain order for stored
	Parent    Hash    // parent of Hashes[0] (stored only; zero for the first block of a chain)
	Tokens    []int32 // the tokens of the stored blocks, BlockSize per block
	BlockSize int
	Class     Class // retention class of the stored blocks when stored (it may rise later)
}

// EventLog is an in-process, bounded stream of events: publishers append,
// subscribers read from a sequence number and block until there is more. A
// subscriber that falls further behind than the log's capacity gets
// ErrEventsLost and must rebuild its view (as a router would after a
// restart). The cluster layer ships the same events over NATS.
type EventLog struct {
	mu     sync.Mutex
	ring   []Event
	next   uint64 // sequence number of the next event
	notify chan struct{}
}

// ErrEventsLost means the requested events were overwritten before they were
// read.
var ErrEventsLost = errors.New("kv: events lost (subscriber fell behind)")

// NewEventLog returns a log keeping the last capacity events.
func NewEventLog(capacity int) *EventLog {
	if capacity <= 0 {
		capacity = 1 << 16
	}
	return &EventLog{ring: make([]Event, capacity), next: 1, notify: make(chan struct{})}
}

// Publish appends an event, assigning its sequence number.
func (l *EventLog) Publish(e Event) {
	l.mu.Lock()
	e.Seq = l.next
	l.ring[l.next%uint64(len(l.ring))] = e
	l.next++
	ch := l.notify
	l.notify = make(chan struct{})
	l.mu.Unlock()
	close(ch)
}

// Next returns the sequence number the next published event will get.
func (l *EventLog) Next() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next
}

// Poll appends to dst the events with sequence numbers from seq on that are
// available now, without waiting, and returns the extended slice and the
// sequence number to read next.
func (l *EventLog) Poll(seq uint64, dst []Event) ([]Event, uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	dst, next, _, err := l.pollLocked(seq, dst)
	return dst, next, err
}

func (l *EventLog) pollLocked(seq uint64, dst []Event) ([]Event, uint64, chan struct{}, error) {
	oldest := uint64(1)
	if l.next > uint64(len(l.ring)) {
		oldest = l.next - uint64(len(l.ring))
	}
	if seq < oldest {
		return dst, oldest, nil, ErrEventsLost
	}
	for ; seq < l.next; seq++ {
		dst = append(dst, l.ring[seq%uint64(len(l.ring))])
	}
	return dst, seq, l.notify, nil
}

// Read is Poll that waits, until ctx ends, for at least one event.
func (l *EventLog) Read(ctx context.Context, seq uint64, dst []Event) ([]Event, uint64, error) {
	for {
		l.mu.Lock()
		n := len(dst)
		dst, next, ch, err := l.pollLocked(seq, dst)
		l.mu.Unlock()
		if err != nil || len(dst) > n {
			return dst, next, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return dst, seq, ctx.Err()
		}
	}
}

// Snapshot describes every block findable now, in every tier, as stored
// events (one per block), and returns the sequence number of the first
// event of the pool's log that may not be reflected in it: a consumer that
// applies the snapshot and then the log from there has the pool's view
// (events between the two are applied twice, which stored and removed
// events bear). Without an event log, next is 0.
func (p *Pool) Snapshot() (events []Event, next uint64) {
	if p.cfg.Events != nil {
		next = p.cfg.Events.Next()
	}
	bs := p.cfg.BlockSize
	p.mu.Lock()
	for i := range p.meta {
		m := &p.meta[i]
		if !m.hashed {
			continue
		}
		var parent Hash
		if m.parent >= 0 {
			parent = p.meta[m.parent].hash
		}
		events = append(events, Event{Kind: BlockStored, Tier: TierPool, Hashes: []Hash{m.hash}, Parent: parent, BlockSize: bs, Class: m.class})
	}
	if p.host != nil {
		for c := range p.host.lists {
			for el := p.host.lists[c].Front(); el != nil; el = el.Next() {
				e := el.Value.(*hostEntry)
				events = append(events, Event{Kind: BlockStored, Tier: TierHost, Hashes: []Hash{e.hash}, BlockSize: bs, Class: e.class})
			}
		}
	}
	p.mu.Unlock()
	if p.disk != nil {
		for _, e := range p.disk.Entries() {
			events = append(events, Event{Kind: BlockStored, Tier: TierDisk, Hashes: []Hash{e.Hash}, BlockSize: bs, Class: Class(e.Class)})
		}
	}
	return events, next
}
