package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"time"

	"github.com/kvserve/kvserve/internal/ctxcache"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/ledger"
)

// UsageLedger books usage: *ledger.Ledger.
type UsageLedger interface {
	Begin(ctx context.Context, r ledger.Record) (uint64, error)
	End(ctx context.Context, r ledger.Record) error
	Add(ctx context.Context, r ledger.Record) (uint64, error)
}

// ledgerWait bounds how long a request's end waits for its record to be
// committed (the response is already written; the wait keeps the record
// ahead of the client's next request).
const ledgerWait = 10 * time.Second

// workerNamer is an optional Stream capability: the cluster's streams name
// the worker that served the request.
type workerNamer interface{ Worker() string }

// beginUsage opens the call's ledger record before its request reaches
// the engine; a ledger that cannot take it refuses the request.
func (c *Call) beginUsage(m *Model, kind ledger.Kind, priority int, tier string) error {
	r, err := c.openRecord(m, kind, c.start, priority, tier)
	c.usage = r
	return err
}

// openRecord books a request of the call as in flight and returns its
// open record (Seq 0 without a ledger).
func (c *Call) openRecord(m *Model, kind ledger.Kind, start time.Time, priority int, tier string) (ledger.Record, error) {
	l := c.server.cfg.Ledger
	if l == nil {
		return ledger.Record{}, nil
	}
	id := newRequestID()
	if kind == ledger.KindRequest {
		if prev := c.W.Header().Get("X-Request-Id"); prev != "" {
			id = prev
		}
		c.W.Header().Set("X-Request-Id", id)
	}
	r := ledger.Record{Kind: kind, ID: id, Start: start, Tenant: c.Identity.Tenant, Principal: c.Identity.Principal,
		KeyID: c.Identity.KeyID, Model: m.ID, Dialect: c.Dialect.Name(), Route: c.route, Priority: priority, ServiceTier: tier}
	seq, err := l.Begin(c.Context(), r)
	if err != nil {
		c.server.log.Error("api: the usage ledger refused a record", "err", err)
		return ledger.Record{}, &Error{Code: CodeUnavailable, Message: "usage metering is unavailable; retry shortly", RetryAfter: 2 * time.Second, Err: err}
	}
	r.Seq = seq
	return r, nil
}

// failed books the call's open record as failed with e (the request never
// ran) and returns e.
func (c *Call) failed(e *Error) *Error {
	c.err = e
	return e
}

// settleUsage books the call's final record as soon as its run has ended,
// before the dialect writes the response's end (the usage, [DONE], a
// non-streamed body): a client that saw its response end is billed for it
// even if the server dies the next instant. Work done is booked as done,
// even if the last bytes then fail to reach the client.
func (c *Call) settleUsage() { c.endUsage(http.StatusOK) }

// endUsage books the call's final record: its tokens as the response
// reported them, its times, and how it ended.
func (c *Call) endUsage(status int) {
	l := c.server.cfg.Ledger
	if l == nil || c.usage.Seq == 0 || c.settled {
		return
	}
	c.settled = true
	r := c.usage
	r.End = time.Now()
	r.Status = status
	r.DurationMs = ms(r.End.Sub(c.start))
	if !c.first.IsZero() {
		r.TTFTMs = ms(c.first.Sub(c.start))
	}
	var failure error
	cancelled := c.R.Context().Err() != nil
	if run := c.run; run != nil {
		r.Tokens = tokensOf(run.Usage())
		if wn, ok := run.stream.(workerNamer); ok {
			r.Worker = wn.Worker()
		}
		failure, cancelled = run.failure, cancelled || run.cancelled
	}
	switch {
	case c.err != nil:
		r.Outcome, r.Error = ledger.OutcomeFailed, c.err.Message
	case status >= http.StatusBadRequest && status != statusClientClosed:
		r.Outcome, r.Error = ledger.OutcomeFailed, http.StatusText(status)
	case failure != nil:
		r.Outcome, r.Error = ledger.OutcomeFailed, failure.Error()
	case cancelled || status == statusClientClosed:
		r.Outcome = ledger.OutcomeCancelled
	default:
		r.Outcome = ledger.OutcomeCompleted
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Context()), ledgerWait)
	defer cancel()
	if err := l.End(ctx, r); err != nil {
		c.server.log.Error("api: the usage ledger lost a record", "id", r.ID, "seq", r.Seq, "err", err)
	}
}

// tokensOf is a response's usage as the ledger counts it.
func tokensOf(u Usage) ledger.Tokens {
	cached := min(u.CachedTokens, u.PromptTokens)
	g2, g3 := min(u.CachedHostTokens, cached), min(u.CachedDiskTokens, cached)
	g3 = min(g3, cached-g2)
	return ledger.Tokens{
		Prompt: int64(u.PromptTokens), Uncached: int64(u.PromptTokens - cached),
		Cached: int64(cached), CachedG1: int64(cached - g2 - g3), CachedG2: int64(g2), CachedG3: int64(g3),
		CacheWrite: int64(min(u.CacheWriteTokens, u.PromptTokens-cached)),
		Output:     int64(u.CompletionTokens), Reasoning: int64(min(u.ReasoningTokens, u.CompletionTokens)),
	}
}

// endPrefill books a context cache's prefill, opened by openRecord: its
// prompt tokens, all asked to be kept, count as written to the cache but
// for those already there. The one token generated to run it is not
// output anyone receives, and is not booked.
func (c *Call) endPrefill(ctx context.Context, r ledger.Record, u engine.Usage, runErr error) {
	l := c.server.cfg.Ledger
	if l == nil || r.Seq == 0 {
		return
	}
	usage := Usage{PromptTokens: u.PromptTokens, CachedTokens: u.CachedTokens, CachedHostTokens: u.CachedHostTokens,
		CachedDiskTokens: u.CachedDiskTokens}
	usage.CacheWriteTokens = CacheWriteTokens(u.PromptTokens, u.CachedTokens, u.PromptTokens)
	r.End = time.Now()
	r.Tokens = tokensOf(usage)
	r.DurationMs = ms(r.End.Sub(r.Start))
	r.Outcome = ledger.OutcomeCompleted
	if runErr != nil {
		r.Outcome, r.Error = ledger.OutcomeFailed, runErr.Error()
		if errors.Is(runErr, context.Canceled) {
			r.Outcome = ledger.OutcomeCancelled
		}
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ledgerWait)
	defer cancel()
	if err := l.End(ctx, r); err != nil {
		c.server.log.Error("api: the usage ledger lost a cache prefill's record", "id", r.ID, "err", err)
	}
}

// CacheStorageRecord is the ledger record of a context cache's storage
// over its life, from its creation to at: its tokens times the hours.
func CacheStorageRecord(cc ctxcache.Cache, at time.Time) ledger.Record {
	hours := max(0, at.Sub(cc.CreateTime).Hours())
	return ledger.Record{Kind: ledger.KindCacheStorage, ID: cc.Name(), Start: cc.CreateTime, End: at, Tenant: cc.Tenant,
		Principal: cc.Owner, Model: cc.Model, Outcome: ledger.OutcomeCompleted, TokenHours: float64(cc.TokenCount) * hours}
}

// newRequestID returns a random request id.
func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}
