package engine

import (
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
		delete(e.sessions, k)
		e.kv.Demote(hashes)
		return
	}
	e.sessions[k] = &session{hashes: append([]kv.Hash(nil), hashes...), last: e.clock.Now()}
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
	for k, s := range e.sessions {
		if now.Sub(s.last) >= e.cfg.SessionIdleTimeout {
			delete(e.sessions, k)
			e.kv.Demote(s.hashes)
			e.m.sessionsIdled.Inc()
		}
	}
}
