package engine

import (
	"cmp"
	"slices"
	"time"

	"github.com/kvserve/kvserve/internal/kv"
)

// sessionKey names an agent session within its tenant: two tenants' equal
// session ids are different sessions.
type sessionKey struct{ scope, id string }

// session is what the engine remembers of a conversation between turns:
// the chain of its latest turn's blocks, when that turn ended, and the
// pauses before its recent turns.
type session struct {
	hashes []kv.Hash
	last   time.Time
	// scopes names the salts of hashes (the request's scope, and a shared
	// prefix's), for reading them back from disk.
	scopes Request
	pauses []time.Duration // before its recent turns, oldest first
	// fetchFrom..fetchUntil is when its next turn is expected: its blocks
	// that have gone to disk are read back into memory then (zero: not
	// predicted, or already on their way).
	fetchFrom, fetchUntil time.Time
}

// sessionCheckEvery bounds how often the step loop looks for idle sessions
// and for sessions whose next turn is near.
const sessionCheckEvery = time.Second

// Prefetching a session's next turn. A session's blocks that went to disk
// while it paused (for a tool, or for its user) are read back into memory
// (the disk tier's staging area, where a prefix match onboards them)
// sessionFetchLead before its next turn is expected, so the turn does not
// wait for the disk. Staged blocks wait at most the disk tier's staging TTL
// (30 s) for their request, so the expected pause is a low one — the
// shortest of the session's recent pauses, or for its first pause the lower
// quartile of all sessions' recent ones — and the engine keeps looking for
// blocks gone to disk over the sessionFetchWindow that follows.
const (
	sessionFetchLead   = 2 * time.Second
	sessionFetchWindow = 30 * time.Second
	sessionPauses      = 4  // of a session's own pauses kept
	enginePauses       = 64 // of all sessions' pauses kept
	enginePausesMin    = 8  // needed before they predict a first pause
)

// rememberSession records r's chain as its session's latest turn, or,
// when r ends the session, demotes it now. Called from the step loop when
// r's first sample ends, with its block hashes.
func (e *Engine) rememberSession(r *request, hashes []kv.Hash) {
	id := r.Hints.SessionID
	if id == "" {
		return
	}
	k := sessionKey{r.Scope, id}
	if r.Hints.EndSession {
		e.sessionsMu.Lock()
		delete(e.sessions, k)
		e.sessionsMu.Unlock()
		e.kv.Demote(hashes)
		return
	}
	s := &session{hashes: append([]kv.Hash(nil), hashes...), last: e.clock.Now(),
		scopes: Request{Scope: r.Scope, SharedScope: r.SharedScope, SharedTokens: r.SharedTokens}}
	e.sessionsMu.Lock()
	if prev, ok := e.sessions[k]; ok {
		s.pauses = prev.pauses
		if pause := r.stream.arrival.Sub(prev.last); pause >= 0 {
			if len(s.pauses) == sessionPauses {
				s.pauses = s.pauses[1:]
			}
			s.pauses = append(s.pauses, pause)
			e.notePause(pause)
		}
	}
	if p, ok := e.expectedPause(s.pauses); ok {
		s.fetchFrom = s.last.Add(max(0, p-sessionFetchLead))
		s.fetchUntil = s.fetchFrom.Add(sessionFetchWindow)
	}
	e.sessions[k] = s
	e.sessionsMu.Unlock()
}

// sessionArrived notes that r, a session's next turn, has come: its
// own prefetch takes over from the session's.
func (e *Engine) sessionArrived(r *request) {
	if r.Hints.SessionID == "" {
		return
	}
	if s, ok := e.sessions[sessionKey{r.Scope, r.Hints.SessionID}]; ok {
		s.fetchFrom = time.Time{}
	}
}

// notePause records a pause before a session's turn among the engine's
// recent ones.
func (e *Engine) notePause(p time.Duration) {
	if len(e.pauses) < enginePauses {
		e.pauses = append(e.pauses, p)
		return
	}
	e.pauses[e.pauseNext] = p
	e.pauseNext = (e.pauseNext + 1) % enginePauses
}

// expectedPause is how long after its latest turn a session's next turn is
// expected, given its recent pauses (a low estimate: see sessionFetchLead),
// and whether anything predicts it.
func (e *Engine) expectedPause(own []time.Duration) (time.Duration, bool) {
	if len(own) > 0 {
		return slices.Min(own), true
	}
	if len(e.pauses) < enginePausesMin {
		return 0, false
	}
	all := slices.Clone(e.pauses)
	slices.Sort(all)
	return all[len(all)/4], true
}

// prefetchSessions reads back from disk the blocks of the sessions whose
// next turn is near (sessionFetchLead). Not while requests are queued: a
// turn arriving now would queue too, and its own prefetch would read its
// blocks meanwhile, while guesses would take disk reads and CPU from the
// requests at hand.
func (e *Engine) prefetchSessions(now time.Time) {
	if !e.kv.HasDisk() || e.cfg.DisablePrefixCache || e.cfg.Contiguous || len(e.queue) > 0 {
		return
	}
	for _, s := range e.sessions {
		if s.fetchFrom.IsZero() || now.Before(s.fetchFrom) {
			continue
		}
		if now.After(s.fetchUntil) {
			s.fetchFrom = time.Time{}
			continue
		}
		if n := e.fetch(&s.scopes, s.hashes, true); n > 0 {
			s.fetchFrom = time.Time{}
			e.m.sessionsPrefetched.Inc()
			e.m.sessionBlocksPrefetched.Add(float64(n))
		}
	}
}

// expireSessions demotes the sessions idle longer than the timeout: their
// blocks move down a tier (or become the first to go) instead of waiting
// to be evicted by whatever comes next.
func (e *Engine) expireSessions() {
	if len(e.sessions) == 0 {
		return
	}
	now := e.clock.Now()
	if now.Sub(e.sessionsChecked) < sessionCheckEvery {
		return
	}
	e.sessionsChecked = now
	e.prefetchSessions(now)
	e.sessionsMu.Lock()
	var idle []*session
	for k, s := range e.sessions {
		if now.Sub(s.last) >= e.cfg.SessionIdleTimeout {
			delete(e.sessions, k)
			idle = append(idle, s)
		}
	}
	e.sessionsMu.Unlock()
	for _, s := range idle {
		e.kv.Demote(s.hashes)
		e.m.sessionsIdled.Inc()
	}
}

// SessionInfo describes one agent session the engine remembers between
// turns (for display: the dashboard's biggest sessions).
type SessionInfo struct {
	// ID is the client's session id (hints.session_id) and Tenant the
	// scope it belongs to.
	ID, Tenant string
	// Blocks and Tokens are the size of its latest turn's chain: the KV a
	// next turn would find cached, wherever its blocks now are.
	Blocks, Tokens int
	// LastTurn is when its latest turn ended; IdleAt is when, without a
	// further turn, its blocks are demoted.
	LastTurn, IdleAt time.Time
}

// Sessions returns the largest n agent sessions (n <= 0: all), largest
// first. It may be called from any goroutine.
func (e *Engine) Sessions(n int) []SessionInfo {
	e.sessionsMu.Lock()
	out := make([]SessionInfo, 0, len(e.sessions))
	for k, s := range e.sessions {
		out = append(out, SessionInfo{ID: k.id, Tenant: k.scope, Blocks: len(s.hashes), Tokens: len(s.hashes) * e.cfg.BlockSize,
			LastTurn: s.last, IdleAt: s.last.Add(e.cfg.SessionIdleTimeout)})
	}
	e.sessionsMu.Unlock()
	slices.SortFunc(out, func(a, b SessionInfo) int {
		return cmp.Or(cmp.Compare(b.Tokens, a.Tokens), cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.ID, b.ID))
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}
