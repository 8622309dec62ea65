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
// the chain of its latest turn's blocks, and when that turn ended.
type session struct {
	hashes []kv.Hash
	last   time.Time
}

// sessionCheckEvery bounds how often the step loop looks for idle sessions.
const sessionCheckEvery = time.Second

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
	s := &session{hashes: append([]kv.Hash(nil), hashes...), last: e.clock.Now()}
	e.sessionsMu.Lock()
	e.sessions[k] = s
	e.sessionsMu.Unlock()
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
