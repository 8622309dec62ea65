package router

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/kv"
)

// Weights price a placement in prompt tokens. The zero value of each field
// means its default.
type Weights struct {
	// Host is the cost of a token found in a worker's host tier (G2), as
	// a fraction of a token to prefill (default 0.1: onboarding is a
	// copy).
	Host float64
	// Disk is the same for the disk tier (G3) (default 0.3: a read and a
	// decryption).
	Disk float64
	// Waiting is the cost of each request waiting on the worker, or sent
	// to it and not yet reported, in prompt tokens (default 512): what a
	// request ahead in the queue delays this one by, when the router does
	// not know its prefill (Worker.PendingPrefill).
	Waiting float64
	// Running is the cost of each sequence the worker is running, in
	// prompt tokens (default 32): every step decodes it, which slows the
	// new request's prefill chunks.
	Running float64
	// Peer is the cost of a token copied from another worker's memory (its
	// pool or host tier) into the chosen one's, as a fraction of a token to
	// prefill (default 0.2: a copy over the network), between workers that
	// copy (Worker.CopiesKV).
	Peer float64
	// Flex scales the load term for a request that takes a longer wait
	// for a cheaper placement (engine.Hints.Flex; default 0.25): its
	// cached prefix outweighs a queue four times as long.
	Flex float64
}

func (w Weights) withDefaults() Weights {
	def := func(v *float64, d float64) {
		if *v <= 0 || math.IsNaN(*v) || math.IsInf(*v, 0) {
			*v = d
		}
	}
	def(&w.Host, 0.1)
	def(&w.Disk, 0.3)
	def(&w.Waiting, 512)
	def(&w.Running, 32)
	def(&w.Flex, 0.25)
	def(&w.Peer, 0.2)
	w.Flex = min(w.Flex, 1)
	return w
}

// Config configures a Router. The zero value of each field means its
// default.
type Config struct {
	// Secret is the workers' server secret (required): the router hashes
	// a request's blocks as they do, from the scope salt
	// kv.ScopeSalt(Secret, scope).
	Secret []byte
	// ModelID is bound into every block hash, as the workers'
	// engine.Config.ModelID.
	ModelID string
	// Weights price tier hits and load.
	Weights Weights
	// Temperature > 0 draws the placement with probabilities softmax(−cost
	// / (Temperature × spread)), spread being the costs' range; 0 (the
	// default) takes the cheapest.
	Temperature float64
	// Seed seeds the draws (with Temperature > 0).
	Seed uint64
	// SessionTTL is how long a session's worker is remembered after its
	// last turn (default 10 minutes).
	SessionTTL time.Duration
	// AffinitySlack is how much more load (in prompt tokens, as load(w) in
	// the package doc) the worker of a session's last turn may carry than
	// the least loaded candidate and still take the next turn (default
	// 8192).
	AffinitySlack float64
	// StaleAfter: a worker none of whose KV events has been applied for
	// this long while it announced later ones (Worker.EventSeq), or, when
	// that is unknown, while it reports load, gets no credit for its cache
	// (default 30s).
	StaleAfter time.Duration
	// HashCacheBlocks bounds the block hashes remembered to score the
	// next prompt with the same prefix without SHA-256: those the router
	// computed and those it learnt from the workers' events (Learn)
	// (default 4,194,304; up to about 250 bytes each with the maps' own
	// overhead once filled). It should hold what the index holds, the
	// blocks of every worker, or long prefixes are hashed again on the
	// way to their placement.
	HashCacheBlocks int
	// MaxSessions bounds the sessions remembered (default 100,000); past
	// it, expired ones are dropped, then the oldest.
	MaxSessions int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Worker is a candidate for a placement and its load.
type Worker struct {
	ID string
	// BlockSize is the worker's KV block size (from its heartbeat; 0:
	// what its events said, else 16).
	BlockSize int
	// Running and Waiting are the worker's sequences running and
	// requests waiting (from its heartbeat).
	Running, Waiting int
	// WaitingByPriority splits Waiting by priority (from its heartbeat;
	// nil: unknown). The worker admits higher priorities first, so only
	// those at the request's priority or above wait ahead of it.
	WaitingByPriority []engine.PriorityWaiting
	// Queued counts requests sent to the worker whose admission it has
	// not reported yet (a gateway's dispatched count).
	Queued int
	// PendingPrefill is prompt tokens sent to the worker whose prefill
	// has not finished, when the caller keeps that account (0: unknown,
	// Weights.Waiting prices the queue instead).
	PendingPrefill int
	// EventSeq is the sequence number the worker's next KV event gets, as
	// its heartbeat announced it (0: unknown). Events announced and not
	// applied mean the index is behind.
	EventSeq uint64
	// CopiesKV: the worker copies KV blocks from its peers and to them
	// (kvserve workers do; external engines do not). Such a candidate is
	// also credited with the longest prefix another such candidate holds
	// in memory beyond its own, at Weights.Peer a token, and its score
	// names that candidate (Score.PeerFrom) to copy from.
	CopiesKV bool
}

// Score is the cost of one placement, in prompt tokens.
type Score struct {
	// Cached is the prompt tokens found on the worker, in any tier.
	Cached int
	// ByTier splits Cached by tier: pool, host, disk.
	ByTier [numTiers]int
	// Prefill is the tier-weighted tokens left to compute: prefill(w).
	Prefill float64
	// Load is load(w).
	Load float64
	// Stale: the worker's index was not trusted (Config.StaleAfter).
	Stale bool
	// Peer is the prompt tokens past Cached that candidate PeerFrom holds
	// in memory, to copy from it (Worker.CopiesKV; PeerFrom -1: none).
	Peer     int
	PeerFrom int
}

// Cost is Prefill + Load.
func (s Score) Cost() float64 { return s.Prefill + s.Load }

// Router scores placements against an Index.
type Router struct {
	cfg Config
	w   Weights
	idx *Index
	// hashes is safe for concurrent use: Score runs in many goroutines.
	hashes  *hashCache
	scratch sync.Pool // *scratch
	// linear walks every block (walkLinear) instead of probing the chain
	// (walkGallop): the reference, for tests.
	linear bool

	saltMu sync.Mutex
	salts  map[string]kv.Hash

	mu       sync.Mutex
	rng      *rand.Rand
	sessions map[string]session
}

// session is where a session's last turn went.
type session struct {
	worker string
	last   time.Time
}

// New returns a router over idx.
func New(idx *Index, cfg Config) (*Router, error) {
	if len(cfg.Secret) == 0 {
		return nil, errors.New("router: the workers' secret is required to hash prompts as they do")
	}
	if idx == nil {
		return nil, errors.New("router: no index")
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 10 * time.Minute
	}
	if cfg.AffinitySlack <= 0 {
		cfg.AffinitySlack = 8192
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = 30 * time.Second
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 100_000
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.HashCacheBlocks <= 0 {
		cfg.HashCacheBlocks = 1 << 22
	}
	if cfg.Temperature < 0 || math.IsNaN(cfg.Temperature) || math.IsInf(cfg.Temperature, 0) {
		return nil, errors.New("router: the temperature must be a finite number ≥ 0")
	}
	r := &Router{cfg: cfg, w: cfg.Weights.withDefaults(), idx: idx, hashes: newHashCache(cfg.HashCacheBlocks),
		salts: map[string]kv.Hash{},
		rng:   rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), sessions: map[string]session{}}
	r.scratch.New = func() any { return &scratch{hasher: kv.NewHasher([]byte(cfg.ModelID))} }
	return r, nil
}

// Learn remembers the cheap keys of the blocks stored events name, from
// their tokens (see hashCache.learn), so that the next request continuing
// them is scored without hashing them with SHA-256: call it with every
// batch applied to the index, off the requests' way. Safe for concurrent
// use.
func (r *Router) Learn(events []kv.Event) {
	var buf []byte
	for i := range events {
		buf = r.hashes.learn(&events[i], buf)
	}
}

// Index returns the router's index.
func (r *Router) Index() *Index { return r.idx }

// load is load(w) of the package doc for a request of priority prio.
func (r *Router) load(w *Worker, prio int) float64 {
	return float64(w.PendingPrefill) + r.w.Waiting*float64(ahead(w, prio)+w.Queued) + r.w.Running*float64(w.Running)
}

// ahead is how many of w's waiting requests a request of priority prio
// waits behind: all of them, unless the worker said their priorities.
func ahead(w *Worker, prio int) int {
	if w.WaitingByPriority == nil {
		return w.Waiting
	}
	n := 0
	for _, p := range w.WaitingByPriority {
		if p.Priority >= prio {
			n += p.Requests
		}
	}
	return n
}

// Score appends to dst the score of placing req on each of ws, in order.
func (r *Router) Score(dst []Score, req *engine.Request, ws []Worker) []Score {
	start := len(dst)
	for i := range ws {
		load := r.load(&ws[i], req.Priority)
		if req.Hints.Flex {
			load *= r.w.Flex
		}
		dst = append(dst, Score{Load: load, Prefill: float64(len(req.Prompt)), PeerFrom: -1})
	}
	scores := dst[start:]
	now := r.cfg.Now()
	salt := r.salt(req.Scope)
	sc := r.scratch.Get().(*scratch)
	defer r.scratch.Put(sc)
	hasher, buf := sc.hasher, sc.buf
	defer func() { sc.buf = buf }()

	x := r.idx
	x.mu.RLock()
	defer x.mu.RUnlock()
	// Each candidate's slot, or -1: unknown, stale, or its prefix ended.
	slots := slices.Grow(sc.slots[:0], len(ws))[:len(ws)]
	sizes := slices.Grow(sc.sizes[:0], len(ws))[:len(ws)]
	sc.slots, sc.sizes = slots, sizes
	tiersOf := slices.Grow(sc.tiersOf[:0], len(x.workers))[:len(x.workers)] // zero between uses
	sc.tiersOf = tiersOf
	for i := range ws {
		sizes[i] = 0
		slots[i] = -1
		s, ok := x.slots[ws[i].ID]
		if !ok {
			continue
		}
		st := &x.workers[s]
		if now.Sub(st.updated) > r.cfg.StaleAfter && r.behind(&ws[i], st) {
			scores[i].Stale = true
			continue
		}
		if st.blocks > 0 {
			slots[i] = s
		}
		sizes[i] = ws[i].BlockSize
		if sizes[i] <= 0 {
			sizes[i] = st.blockSize
		}
		if sizes[i] <= 0 {
			sizes[i] = 16
		}
	}
	blockSizes := append(sc.blockSizes[:0], sizes...)
	sc.blockSizes = blockSizes
	// Walk the chain once per block size among the candidates (one, in
	// a homogeneous cluster), probing it (walkGallop) rather than reading
	// every block, hashing only as far as some candidate's prefix may go.
	for i := range ws {
		bs := sizes[i]
		if slots[i] < 0 || bs == 0 {
			continue
		}
		group := sc.group[:0] // candidates of this block size still matching
		for j := i; j < len(ws); j++ {
			if slots[j] >= 0 && sizes[j] == bs {
				group = append(group, j)
				sizes[j] = 0 // done after this walk
			}
		}
		if r.linear {
			group, buf = r.walkLinear(req.Prompt, bs, salt, group, slots, scores, tiersOf, hasher, buf)
		} else {
			group, buf = r.walkGallop(req.Prompt, bs, salt, group, slots, scores, tiersOf, sc, buf)
		}
		sc.group = group[:0]
	}
	r.creditPeers(scores, ws, blockSizes)
	return dst
}

// creditPeers credits each candidate with the prefix the candidate holding
// the longest one in memory (pool and host tiers: a prefix of the chain,
// tiers not rising along it) has beyond the candidate's own, at the cost
// of copying it (Weights.Peer), where their block sizes agree.
func (r *Router) creditPeers(scores []Score, ws []Worker, blockSizes []int) {
	best, from := 0, -1
	for i := range scores {
		if mem := scores[i].ByTier[0] + scores[i].ByTier[1]; mem > best && blockSizes[i] > 0 && ws[i].CopiesKV {
			best, from = mem, i
		}
	}
	if from < 0 {
		return
	}
	for i := range scores {
		if i == from || blockSizes[i] != blockSizes[from] || !ws[i].CopiesKV {
			continue
		}
		if n := best - scores[i].Cached; n > 0 {
			scores[i].Peer, scores[i].PeerFrom = n, from
			scores[i].Prefill -= float64(n) * (1 - r.w.Peer)
		}
	}
}

// walkLinear scores group (candidates holding blocks of bs tokens) block
// by block along prompt, each candidate's prefix ending at its first miss:
// one hash and one index lookup per block some candidate still holds. It
// is the reference walkGallop agrees with where prefixes have no holes
// (tests). Called with the index's read lock held.
func (r *Router) walkLinear(prompt []int32, bs int, salt kv.Hash, group []int, slots []int32, scores []Score, tiersOf []uint8,
	hasher *kv.Hasher, buf []byte) ([]int, []byte) {
	x := r.idx
	parent := salt
	var key uint64
	key, buf = r.hashes.start(salt, bs, buf)
	for b := 0; len(group) > 0 && (b+1)*bs <= len(prompt); b++ {
		tokens := prompt[b*bs : (b+1)*bs]
		key, buf = r.hashes.next(key, tokens, buf)
		if h, ok := r.hashes.get(key); ok {
			parent = h
		} else {
			parent = hasher.Block(parent, tokens)
			r.hashes.put(key, parent)
		}
		// The holders, by slot, so each candidate looks its own up
		// (a shared system prompt is held by most workers: a scan per
		// candidate would be quadratic in the workers).
		hs := x.blocks[keyOf(parent)]
		for _, hd := range hs {
			tiersOf[hd.slot] = hd.tiers
		}
		kept := group[:0]
		for _, j := range group {
			tiers := tiersOf[slots[j]]
			if tiers == 0 {
				continue // j's prefix ends here
			}
			r.credit(&scores[j], tierOf(tiers), bs)
			kept = append(kept, j)
		}
		for _, hd := range hs {
			tiersOf[hd.slot] = 0
		}
		group = kept
	}
	return group, buf
}

// tierOf is the best tier (0 pool, 1 host, 2 disk) of a holder's tier
// bits, or -1 for none.
func tierOf(tiers uint8) int {
	switch {
	case tiers == 0:
		return -1
	case tiers&1 != 0:
		return 0
	case tiers&2 != 0:
		return 1
	}
	return 2
}

// credit counts n prompt tokens found in tier for sc.
func (r *Router) credit(sc *Score, tier, n int) {
	sc.ByTier[tier] += n
	sc.Cached += n
	switch tier {
	case 0:
		sc.Prefill -= float64(n)
	case 1:
		sc.Prefill -= float64(n) * (1 - r.w.Host)
	default:
		sc.Prefill -= float64(n) * (1 - r.w.Disk)
	}
}

// walkGallop scores group as walkLinear does, but probes the chain
// instead of reading every block: from a block where the candidates' best
// tiers are known, it probes 1, 2, 4, … blocks further while they are all
// the same, then halves the last step to find where one changes, and
// credits the run between at once. Workers drop a chain's blocks from its
// tail and move them down the tiers from the tail (kv's eviction order,
// and vLLM's), so along a prompt each candidate holds a prefix, best tiers
// not rising: a run of equal states is a run of equal blocks, and a prompt
// whose 1,000 blocks a worker holds costs a few dozen lookups instead of
// 1,000. A hole inside a candidate's prefix that no probe lands on is
// credited as held (a worse placement, never a wrong answer).
//
// The cheap keys are computed as far as the probes reach (they chain,
// without the index); a block's SHA-256 comes from the remembered hashes
// by its key, or is computed from the nearest block before it whose hash
// is known. Called with the index's read lock held.
func (r *Router) walkGallop(prompt []int32, bs int, salt kv.Hash, group []int, slots []int32, scores []Score, tiersOf []uint8,
	sc *scratch, buf []byte) ([]int, []byte) {
	n := len(prompt) / bs
	if n == 0 || len(group) == 0 {
		return group, buf
	}
	x := r.idx
	keys := slices.Grow(sc.keys[:0], n)[:n]
	hashes := slices.Grow(sc.hashes[:0], n)[:n]
	known := slices.Grow(sc.known[:0], n)[:n]
	sc.keys, sc.hashes, sc.known = keys, hashes, known
	// The cheap keys chain: they are computed as far as a probe reaches.
	var key uint64
	key, buf = r.hashes.start(salt, bs, buf)
	keyed := 0
	// hashAt returns block b's hash, from the remembered ones or computed
	// from the nearest known one before it.
	hashAt := func(b int) kv.Hash {
		for ; keyed <= b; keyed++ {
			key, buf = r.hashes.next(key, prompt[keyed*bs:(keyed+1)*bs], buf)
			keys[keyed], known[keyed] = key, false
		}
		if known[b] {
			return hashes[b]
		}
		if h, ok := r.hashes.get(keys[b]); ok {
			hashes[b], known[b] = h, true
			return h
		}
		from := b
		for from > 0 && !known[from-1] {
			if h, ok := r.hashes.get(keys[from-1]); ok {
				hashes[from-1], known[from-1] = h, true
				break
			}
			from--
		}
		parent := salt
		if from > 0 {
			parent = hashes[from-1]
		}
		for i := from; i <= b; i++ {
			parent = sc.hasher.Block(parent, prompt[i*bs:(i+1)*bs])
			hashes[i], known[i] = parent, true
			r.hashes.put(keys[i], parent)
		}
		return parent
	}
	// state writes the group's best tiers at block b into dst.
	state := func(b int, dst []int8) {
		hs := x.blocks[keyOf(hashAt(b))]
		for _, hd := range hs {
			tiersOf[hd.slot] = hd.tiers
		}
		for i, j := range group {
			dst[i] = int8(tierOf(tiersOf[slots[j]]))
		}
		for _, hd := range hs {
			tiersOf[hd.slot] = 0
		}
	}
	cur := slices.Grow(sc.cur[:0], len(group))[:len(group)]
	probe := slices.Grow(sc.probe[:0], len(group))[:len(group)]
	sc.cur, sc.probe = cur, probe
	same := func(b int) bool {
		state(b, probe[:len(group)])
		return slices.Equal(probe[:len(group)], cur[:len(group)])
	}
	for b := 0; b < n && len(group) > 0; {
		state(b, cur)
		kept := group[:0]
		for i, j := range group {
			if cur[i] >= 0 {
				cur[len(kept)] = cur[i]
				kept = append(kept, j)
			}
		}
		group, cur = kept, cur[:len(kept)]
		if len(group) == 0 {
			break
		}
		// lo: the last block known to be in state cur; hi: the first
		// known not to be (n: none).
		lo, hi := b, n
		for step := 1; lo+step < n; step *= 2 {
			if !same(lo + step) {
				hi = lo + step
				break
			}
			lo += step
		}
		if hi == n && lo < n-1 && same(n-1) {
			lo = n - 1
		} else if hi == n && lo < n-1 {
			hi = n - 1
		}
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			if same(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
		for i, j := range group {
			r.credit(&scores[j], int(cur[i]), (lo-b+1)*bs)
		}
		b = lo + 1
	}
	return group, buf
}

// behind reports whether w's index misses events: the worker announced
// later ones than were applied; or, where either number is unknown (no
// heartbeat sequence, or a snapshot and no event since), it reports work,
// which makes events. A worker decoding without filling a block makes
// none: with sequence numbers it is not mistaken for a stale one.
func (r *Router) behind(w *Worker, st *workerState) bool {
	if w.EventSeq > 0 && st.seq > 0 {
		return w.EventSeq > st.seq+1
	}
	return w.Running+w.Waiting > 0
}

// scratch is one Score's working memory, reused: a decision allocates
// almost nothing, so it adds no garbage-collection work to the gateway.
type scratch struct {
	hasher *kv.Hasher
	buf    []byte
	// walkGallop's: each block's cheap key and hash (known: computed),
	// the group's tiers at the current block and at a probe.
	keys       []uint64
	hashes     []kv.Hash
	known      []bool
	cur, probe []int8
	slots      []int32
	sizes      []int
	blockSizes []int // each candidate's block size (0: not scored), for Peers
	group      []int
	tiersOf    []uint8 // by index slot; all zero between uses
}

// salt returns scope's salt, remembered (HMAC per decision is avoidable
// work; the scopes are the tenants, few).
func (r *Router) salt(scope string) kv.Hash {
	r.saltMu.Lock()
	defer r.saltMu.Unlock()
	h, ok := r.salts[scope]
	if !ok {
		if len(r.salts) >= maxSalts {
			clear(r.salts)
		}
		h = kv.ScopeSalt(r.cfg.Secret, scope)
		r.salts[scope] = h
	}
	return h
}

// maxSalts bounds the salts remembered.
const maxSalts = 1 << 16

// Decision is a placement and why.
type Decision struct {
	// Index is the chosen candidate.
	Index int
	// Affinity: the session's previous worker took it.
	Affinity bool
	Score    Score
}

// Choose places req on one of ws (not empty) and remembers the choice for
// its session.
func (r *Router) Choose(req *engine.Request, ws []Worker) Decision {
	if len(ws) == 0 {
		return Decision{Index: -1}
	}
	scores := r.Score(make([]Score, 0, len(ws)), req, ws)
	d := r.pick(req, ws, scores)
	d.Score = scores[d.Index]
	return d
}

func (r *Router) pick(req *engine.Request, ws []Worker, scores []Score) Decision {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cfg.Now()
	sid := req.Hints.SessionID
	if sid != "" {
		sid = req.Scope + "\x00" + sid // sessions are a tenant's own
		if s, ok := r.sessions[sid]; ok && now.Sub(s.last) <= r.cfg.SessionTTL {
			minLoad := math.Inf(1)
			for _, sc := range scores {
				minLoad = min(minLoad, sc.Load)
			}
			for i := range ws {
				if ws[i].ID == s.worker && scores[i].Load <= minLoad+r.cfg.AffinitySlack {
					r.remember(sid, ws[i].ID, now)
					return Decision{Index: i, Affinity: true}
				}
			}
		}
	}
	best := 0
	for i := 1; i < len(scores); i++ {
		if scores[i].Cost() < scores[best].Cost() {
			best = i
		}
	}
	if t := r.cfg.Temperature; t > 0 && len(scores) > 1 {
		best = r.draw(scores, best, t)
	}
	if sid != "" {
		r.remember(sid, ws[best].ID, now)
	}
	return Decision{Index: best}
}

// draw samples a candidate with probability ∝ exp(−(cost−min) / (t ×
// spread)): costs are normalised by their range so one temperature means
// the same on short and long prompts. Called with mu held.
func (r *Router) draw(scores []Score, best int, t float64) int {
	lo, hi := scores[best].Cost(), scores[best].Cost()
	for _, s := range scores {
		hi = max(hi, s.Cost())
	}
	spread := hi - lo
	if spread <= 0 {
		return r.rng.IntN(len(scores))
	}
	var sum float64
	ps := make([]float64, len(scores))
	for i, s := range scores {
		ps[i] = math.Exp(-(s.Cost() - lo) / (t * spread))
		sum += ps[i]
	}
	u := r.rng.Float64() * sum
	for i, p := range ps {
		if u -= p; u < 0 {
			return i
		}
	}
	return best
}

// remember notes a session's worker. Called with mu held.
func (r *Router) remember(sid, worker string, now time.Time) {
	if _, ok := r.sessions[sid]; !ok && len(r.sessions) >= r.cfg.MaxSessions {
		r.prune(now)
	}
	r.sessions[sid] = session{worker: worker, last: now}
}

// prune drops expired sessions, and if none had expired the oldest
// quarter. Called with mu held; amortised over the sessions added since.
func (r *Router) prune(now time.Time) {
	for k, s := range r.sessions {
		if now.Sub(s.last) > r.cfg.SessionTTL {
			delete(r.sessions, k)
		}
	}
	if len(r.sessions) < r.cfg.MaxSessions {
		return
	}
	cut := now.Add(-r.cfg.SessionTTL * 3 / 4)
	for len(r.sessions) >= r.cfg.MaxSessions {
		for k, s := range r.sessions {
			if s.last.Before(cut) {
				delete(r.sessions, k)
			}
		}
		cut = cut.Add(r.cfg.SessionTTL / 4)
	}
}

// Forget drops what the router knows of worker: its blocks and the
// sessions it served.
func (r *Router) Forget(worker string) {
	r.idx.Remove(worker)
	r.mu.Lock()
	for k, s := range r.sessions {
		if s.worker == worker {
			delete(r.sessions, k)
		}
	}
	r.mu.Unlock()
}
