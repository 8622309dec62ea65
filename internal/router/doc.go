// Package router places requests on workers by their KV caches: a global
// block index (which worker holds which block hash in which tier), fed by
// the workers' KV events, and a cost per placement that weighs the prefill
// a worker would still have to do against the work it already has.
//
// The core (Index, Router) knows nothing of NATS: the gateway feeds the
// index from cluster.Follow and asks through Picker (a cluster.Picker),
// and `kvserve bench router` feeds it from simulated engines' event logs
// in virtual time. The cost, for a request of P prompt tokens on worker w:
//
//	prefill(w) = Σ over the request's full blocks, in chain order, of
//	             BlockSize × (0 for a pool (G1) hit, Weights.Host for a
//	             host (G2) hit, Weights.Disk for a disk (G3) hit, 1 for a
//	             miss: the first miss ends w's prefix, every later block
//	             is a miss too), plus the tokens of the partial last block
//	load(w)    = PendingPrefill(w) + Weights.Waiting × (Ahead + Queued)
//	             + Weights.Running × Running
//	cost(w)    = prefill(w) + load(w) (× Weights.Flex for a flex request)
//
// where Ahead counts the requests waiting on w at the request's priority
// or above (w admits higher priorities first; every waiting request when
// w does not say their priorities). Both are in prompt tokens, so one unit prices both: a token of prefill the
// placement saves is worth a token of queued prefill it adds. The lowest
// cost wins; with a temperature, placements are drawn with probabilities
// softmax(−cost / (temperature × spread)) instead, to spread load.
// Between workers that copy KV from each other (Worker.CopiesKV), the
// blocks past w's own prefix that another candidate holds in memory (pool
// or host: the longest such prefix) count Weights.Peer each instead of 1,
// and the score names that candidate for w to copy them from.
// Session affinity sends a session's turns to the worker of its last turn
// while that worker's load is within Config.AffinitySlack of the least
// loaded; a worker whose index is behind (events it announced in its
// heartbeat not applied, or, without sequence numbers, load reported)
// and has not moved for Config.StaleAfter gets no credit for its cache,
// which leaves load alone to place on it: least-loaded.
//
// Lock order: Router.mu (sessions, random source) is never held while
// Index.mu is taken for writing; Score takes Index.mu for reading only.
package router
