// Package ledger is the durable usage ledger: one record per generation
// request, per context cache's creation and per cache's storage, kept in an
// embedded bbolt database in the data directory (ledger.db).
//
// A request is written twice: an open record when it is handed to the
// engine, and its final record when it ends (the open one removed in the
// same transaction). A process killed in between leaves open records, which
// the next Open turns into records of outcome "interrupted": a kill loses
// at most the requests in flight, and those are on the books as failed.
//
// Writes go through one writer goroutine that commits whatever is queued
// in one transaction (group commit: one fsync for many requests). Begin
// does not wait for the disk; End waits until its record is committed, so
// a response the client has seen end is on the books.
package ledger

import (
	"fmt"
	"time"
)

// Kind says what a record meters.
type Kind string

// The record kinds.
const (
	// KindRequest is one generation request (any dialect).
	KindRequest Kind = "request"
	// KindCacheCreate is a context cache's prefill: its prompt tokens
	// computed and written to the cache.
	KindCacheCreate Kind = "cache_create"
	// KindCacheStorage is a context cache's storage over its life, in
	// token-hours (written when it ends: deleted, expired or its tenant
	// deleted).
	KindCacheStorage Kind = "cache_storage"
)

// Outcome says how a request ended.
type Outcome string

// The outcomes.
const (
	// OutcomeCompleted: the response was sent whole.
	OutcomeCompleted Outcome = "completed"
	// OutcomeCancelled: the client went away or cancelled.
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeFailed: an error ended the request (Status and Error say which).
	OutcomeFailed Outcome = "failed"
	// OutcomeInterrupted: the server stopped (a crash or kill) while the
	// request was in flight; written by the next Open.
	OutcomeInterrupted Outcome = "interrupted"
	// OutcomeOpen: the request has not ended yet (only in open records).
	OutcomeOpen Outcome = "open"
)

// Tokens counts a record's tokens. Prompt = Uncached + Cached; Cached =
// CachedG1 + CachedG2 + CachedG3.
type Tokens struct {
	Prompt int64 `json:"prompt"`
	// Uncached prompt tokens were computed.
	Uncached int64 `json:"uncached"`
	// Cached prompt tokens were read from the cache, split by the tier
	// they were found in: the pool (G1), host memory (G2), disk (G3).
	Cached   int64 `json:"cached"`
	CachedG1 int64 `json:"cached_g1"`
	CachedG2 int64 `json:"cached_g2"`
	CachedG3 int64 `json:"cached_g3"`
	// CacheWrite tokens were computed and kept because the request asked
	// (cache breakpoints, a context cache's creation); a part of Uncached.
	CacheWrite int64 `json:"cache_write"`
	Output     int64 `json:"output"`
	// Reasoning tokens are the part of Output that went into reasoning.
	Reasoning int64 `json:"reasoning"`
}

// Add adds u to t.
func (t *Tokens) Add(u Tokens) {
	t.Prompt += u.Prompt
	t.Uncached += u.Uncached
	t.Cached += u.Cached
	t.CachedG1 += u.CachedG1
	t.CachedG2 += u.CachedG2
	t.CachedG3 += u.CachedG3
	t.CacheWrite += u.CacheWrite
	t.Output += u.Output
	t.Reasoning += u.Reasoning
}

// Check reports whether the counts are consistent.
func (t Tokens) Check() error {
	switch {
	case t.Prompt < 0 || t.Uncached < 0 || t.Cached < 0 || t.CachedG1 < 0 || t.CachedG2 < 0 || t.CachedG3 < 0 ||
		t.CacheWrite < 0 || t.Output < 0 || t.Reasoning < 0:
		return fmt.Errorf("ledger: negative token count in %+v", t)
	case t.Prompt != t.Uncached+t.Cached:
		return fmt.Errorf("ledger: prompt %d ≠ uncached %d + cached %d", t.Prompt, t.Uncached, t.Cached)
	case t.Cached != t.CachedG1+t.CachedG2+t.CachedG3:
		return fmt.Errorf("ledger: cached %d ≠ G1 %d + G2 %d + G3 %d", t.Cached, t.CachedG1, t.CachedG2, t.CachedG3)
	case t.CacheWrite > t.Uncached:
		return fmt.Errorf("ledger: cache write %d > uncached %d", t.CacheWrite, t.Uncached)
	case t.Reasoning > t.Output:
		return fmt.Errorf("ledger: reasoning %d > output %d", t.Reasoning, t.Output)
	}
	return nil
}

// Record is one entry of the ledger.
type Record struct {
	// Seq numbers records in the order their requests began; the ledger
	// assigns it.
	Seq  uint64 `json:"seq"`
	Kind Kind   `json:"kind"`
	// ID is the request's id (the response's x-request-id), or the cache's
	// name for cache records.
	ID    string    `json:"id"`
	Start time.Time `json:"start"`
	End   time.Time `json:"end,omitzero"`
	// Tenant, Principal and KeyID say who: the tenant id, the principal's
	// name and the key's public id (never the key).
	Tenant    string `json:"tenant"`
	Principal string `json:"principal,omitempty"`
	KeyID     string `json:"key_id,omitempty"`
	Model     string `json:"model,omitempty"`
	// Worker names the worker that served the request (in a cluster).
	Worker string `json:"worker,omitempty"`
	// Dialect and Route say which endpoint: "openai", "/v1/chat/completions".
	Dialect  string `json:"dialect,omitempty"`
	Route    string `json:"route,omitempty"`
	Priority int    `json:"priority,omitempty"`
	// ServiceTier is the OpenAI service tier the request was served in
	// ("flex" is priced by the book's flex factor), when it named one.
	ServiceTier string `json:"service_tier,omitempty"`
	Tokens      Tokens `json:"tokens"`
	// TTFTMs is the time to the first generated token, DurationMs the time
	// to the end of the response, both from the request's arrival.
	TTFTMs     float64 `json:"ttft_ms,omitempty"`
	DurationMs float64 `json:"duration_ms,omitempty"`
	Outcome    Outcome `json:"outcome"`
	// Status is the HTTP status sent; Error the failure's message.
	Status int    `json:"status,omitempty"`
	Error  string `json:"error,omitempty"`
	// TokenHours is a cache's storage: its tokens times the hours it was
	// kept (KindCacheStorage).
	TokenHours float64 `json:"token_hours,omitempty"`
}
