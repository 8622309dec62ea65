package engine

// fairShare orders the waiting requests of equal priority between tenants
// (Request.Scope) by start-time fair queuing, weighted by prompt tokens:
// one tenant's burst does not starve another's requests, which would
// otherwise wait behind all of it in arrival order.
//
// Each tenant has a virtual finish time: the prompt tokens of its requests
// queued so far, counted from when it last had nothing waiting. A new
// request starts at its tenant's finish time, or at the engine's virtual
// time if that is later (a tenant that was idle gets no credit for it), and
// moves its tenant's finish on by its prompt tokens. The queue takes
// requests of equal priority by start (then arrival), and the virtual time
// follows the start of each admitted one. So a tenant that queued fifty
// requests has them at starts 0, c, 2c, …, and a request of another tenant
// arriving just after starts at the virtual time, near the front, not
// behind the fifty; two busy tenants are admitted in turn, each to an
// equal share of prompt tokens (more requests for the one whose prompts
// are shorter).
//
// When nothing waits, every tenant starts afresh at the virtual time.
// Within one tenant, starts grow with arrival, so a lone tenant is served
// first come, first served, as before. A preempted request keeps its start
// and so its place. Priorities still come first: the start only orders
// requests of one priority.
//
// Step loop only.
type fairShare struct {
	// vtime is the latest start of an admitted request.
	vtime uint64
	// finish is each tenant's virtual finish time; tenants at or behind
	// vtime are dropped (they would start at vtime anyway).
	finish map[string]uint64
}

// start assigns a new request of scope with prompt tokens its start time.
// waiting is the length of the queue, to bound the memory of tenants
// gone idle.
func (f *fairShare) start(scope string, prompt, waiting int) uint64 {
	if f.finish == nil {
		f.finish = map[string]uint64{}
	}
	if waiting == 0 {
		// Nothing waits, so no tenant has a claim: what a tenant queued and
		// then cancelled before admission is not held against it.
		clear(f.finish)
	}
	if len(f.finish) > 2*waiting+64 {
		for s, fin := range f.finish {
			if fin <= f.vtime {
				delete(f.finish, s)
			}
		}
	}
	st := max(f.vtime, f.finish[scope])
	f.finish[scope] = st + uint64(max(1, prompt))
	return st
}

// admitted moves the virtual time to the start of a request admitted.
func (f *fairShare) admitted(start uint64) { f.vtime = max(f.vtime, start) }

// compareQueued orders the waiting queue: priority (higher first), then
// fair-share start (earlier first), then arrival (older first).
func compareQueued(a, b *seqState) int {
	if a.req.Priority != b.req.Priority {
		return b.req.Priority - a.req.Priority
	}
	if a.req.fairStart != b.req.fairStart {
		if a.req.fairStart < b.req.fairStart {
			return -1
		}
		return 1
	}
	return compareSeq(a, b)
}
