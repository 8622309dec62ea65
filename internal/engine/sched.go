package engine

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/kvserve/kvserve/internal/batch"
	"github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/sample"
)

// schedule picks the next forward pass into e.entries and reports whether
// there is anything to run. If sequences are running but none can get a
// block, the lowest-priority newest one is preempted and scheduling retried,
// so the engine always makes progress (a sequence alone always fits: Submit
// refuses any that could not).
func (e *Engine) schedule() bool {
	for {
		if e.scheduleOnce() || len(e.running) == 0 {
			return len(e.entries) > 0
		}
		e.preempt(e.running[len(e.running)-1])
	}
}

func (e *Engine) scheduleOnce() bool {
	e.entries = e.entries[:0]
	budget := e.cfg.MaxBatchTokens
	slices.SortFunc(e.running, compareSeq)

	// 1. Decodes: one token each, preempting from the back when dry.
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		if len(s.tokens)-s.kv.Len() != 1 {
			continue
		}
		for !e.reserve(s, s.kv.Len()+1) {
			victim := e.running[len(e.running)-1]
			e.preempt(victim)
			if victim == s {
				break
			}
		}
		if s.kv == nil { // preempted itself
			break
		}
		e.entries = append(e.entries, entry{s: s, n: 1, logits: true})
		budget--
	}

	// 2. Prefills in progress: a chunk each.
	for _, s := range e.running {
		if budget == 0 {
			break
		}
		need := len(s.tokens) - s.kv.Len()
		if need <= 1 {
			continue
		}
		n := min(need, budget)
		if !e.reserve(s, s.kv.Len()+n) {
			continue
		}
		e.entries = append(e.entries, entry{s: s, n: n, logits: n == need})
		budget -= n
	}

	// 3. Admissions, in queue order (priority, then each tenant's fair
	// share: fairShare), while the pool can hold each whole.
	// A request whose next uncached block another sequence is computing
	// right now is passed over until that block is cached.
	for qi := 0; budget > 0 && qi < len(e.queue) && len(e.running) < e.cfg.MaxRunning; {
		s := e.queue[qi]
		ok, deferred := e.admit(s)
		if deferred {
			qi++
			continue
		}
		if !ok {
			break
		}
		e.queue = slices.Delete(e.queue, qi, qi+1)
		e.fair.admitted(s.req.fairStart)
		e.running = append(e.running, s)
		need := len(s.tokens) - s.kv.Len()
		n := min(need, budget)
		if !e.reserve(s, s.kv.Len()+n) {
			continue // admission checked room; only a concurrent change could fail
		}
		e.entries = append(e.entries, entry{s: s, n: n, logits: n == need})
		budget -= n
	}
	return len(e.entries) > 0
}

// reserve makes room for positions [0, n) of s. In contiguous mode the room
// was reserved at admission.
func (e *Engine) reserve(s *seqState, n int) bool {
	if e.cfg.Contiguous && n <= s.reserved {
		return true
	}
	err := s.kv.Reserve(n)
	if err != nil && !errors.Is(err, kv.ErrNoSpace) {
		panic(err)
	}
	return err == nil
}

// admit gives a queued sequence a KV sequence, reusing its cached prefix,
// if the pool has room for all of its remaining tokens plus one generated
// token (contiguous mode: for its maximum length). Otherwise s stays queued
// and admit reports false, with deferred set when s should wait for a block
// another sequence is computing.
func (e *Engine) admit(s *seqState) (ok, deferred bool) {
	r := s.req
	seq := e.kv.NewSequence(e.salt(r.Scope), []byte(e.cfg.ModelID))
	if r.SharedScope != "" {
		seq.SetShared(e.salt(r.SharedScope), r.SharedTokens/e.cfg.BlockSize)
	}
	perBlock, rest := blockClasses(&r.Request, len(s.tokens), e.cfg.BlockSize)
	seq.SetClasses(perBlock, rest)
	if rest == kv.ClassPinned || slices.Contains(perBlock, kv.ClassPinned) {
		// Pinned from the request's arrival for its TTL: a preempted
		// request admitted again does not extend its pins.
		ttl := r.Hints.TTL
		if ttl <= 0 {
			ttl = e.cfg.DefaultPinTTL
		}
		seq.PinUntil(r.stream.arrival.Add(ttl))
	}
	if r.Hints.TTL > 0 && (rest == kv.ClassPersistent || slices.Contains(perBlock, kv.ClassPersistent)) {
		// A TTL on persistent blocks (Anthropic's cache_control ttl, say)
		// keeps their class until then, from the request's arrival; a hit
		// by a later request with a TTL extends it.
		seq.PersistUntil(r.stream.arrival.Add(r.Hints.TTL))
	}
	hit := 0
	var hashes []kv.Hash
	caching := !e.cfg.DisablePrefixCache && !e.cfg.Contiguous
	bs := e.cfg.BlockSize
	limit := (len(s.tokens) - 1) / bs // blocks that can ever hit
	if caching {
		hashes = seq.PromptHashes(s.tokens)
		if e.awaitDisk(s, hashes[:limit]) {
			seq.Release()
			return false, true
		}
		hit = seq.MatchPrefixHashes(s.tokens, hashes)
		if next := hit / bs; next < limit && e.inflight[hashes[next]] > 0 {
			seq.Release()
			return false, true
		}
	}
	// Room for the remaining prompt and the first token, or, with the
	// expected_output_tokens hint, the output expected (within max_tokens):
	// a request that will grow waits for room rather than be preempted.
	target := len(s.tokens) + max(1, min(r.Hints.ExpectedOutputTokens, r.MaxTokens)-s.generated)
	if e.cfg.Contiguous {
		target = len(s.tokens) + (r.MaxTokens - s.generated)
	}
	if seq.BlocksFor(target) > e.kv.Available() {
		seq.Release()
		return false, false
	}
	if e.cfg.Contiguous {
		if err := seq.Reserve(target); err != nil {
			seq.Release()
			return false, false
		}
		s.reserved = target
	}
	s.kv = seq
	if caching && hit/bs < limit {
		s.pending = hashes[hit/bs : limit]
		for _, h := range s.pending {
			e.inflight[h]++
		}
	}
	if !r.admitted {
		r.admitted = true
		e.admitted(r)
		now := e.clock.Now()
		r.stream.mu.Lock()
		r.stream.admitted = now
		r.stream.usage.CachedTokens = hit
		if hit > 0 {
			_, r.stream.usage.CachedHostTokens, r.stream.usage.CachedDiskTokens = seq.MatchedFrom()
		}
		r.stream.mu.Unlock()
		e.m.queueTime.Observe(now.Sub(r.stream.arrival).Seconds())
	}
	e.m.prefix.add(len(s.tokens), hit)
	return true, false
}

// awaitDisk starts moving the prompt's blocks that only the disk tier holds
// up into memory and reports whether s must wait for them: it is passed
// over (others are admitted and run meanwhile) until they arrive, or for
// at most maxDiskWait, after which it takes what has come and recomputes
// the rest.
func (e *Engine) awaitDisk(s *seqState, chain []kv.Hash) bool {
	if !e.kv.HasDisk() {
		return false
	}
	now := e.clock.Now()
	if s.diskGaveUp {
		return false
	}
	if !s.fetching.IsZero() && now.Sub(s.fetching) > maxDiskWait {
		e.m.diskWait.Observe(now.Sub(s.fetching).Seconds())
		s.diskGaveUp = true
		return false
	}
	if e.fetch(&s.req.Request, chain, false) == 0 {
		if !s.fetching.IsZero() {
			e.m.diskWait.Observe(now.Sub(s.fetching).Seconds())
			s.fetching = time.Time{}
		}
		return false
	}
	if s.fetching.IsZero() {
		s.fetching = now
	}
	return true
}

// prefetch starts bringing a newly queued request's prompt blocks up from
// disk, so that they are in memory by the time it reaches the front of
// the queue rather than when it gets there.
func (e *Engine) prefetch(s *seqState) {
	if !e.kv.HasDisk() || e.cfg.DisablePrefixCache || e.cfg.Contiguous {
		return
	}
	bs := e.cfg.BlockSize
	hashes := e.chain(&s.req.Request, s.tokens[:(len(s.tokens)-1)/bs*bs])
	// The wait is counted (and bounded) from when the request reaches the
	// front, in awaitDisk: time queued behind others is not waiting for disk.
	e.fetch(&s.req.Request, hashes, false)
}

// maxDiskWait bounds how long a request waits for its blocks from disk.
const maxDiskWait = 2 * time.Second

// wakeUp makes an idle step loop look at its queue again.
func (e *Engine) wakeUp() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// unannounce withdraws s's in-flight blocks (its prefill ended, or it
// stopped).
func (e *Engine) unannounce(s *seqState) {
	for _, h := range s.pending {
		if e.inflight[h]--; e.inflight[h] <= 0 {
			delete(e.inflight, h)
		}
	}
	s.pending = nil
}

// preempt releases a running sequence's blocks (full ones stay cached) and
// queues it again; it will recompute what is not cached when resumed.
func (e *Engine) preempt(s *seqState) {
	e.unannounce(s)
	s.kv.Release()
	s.kv = nil
	s.reserved = 0
	e.removeRunning(s)
	e.insertWaiting(s)
	e.m.preemptions.Inc()
}

// forward runs the scheduled pass.
func (e *Engine) forward(ctx context.Context) error {
	vocab := e.shape.Vocab
	nLogits := 0
	for _, en := range e.entries {
		if en.logits {
			nLogits++
		}
	}
	if need := nLogits * vocab; len(e.logits) < need {
		e.logits = make([]float32, need)
	}
	e.batch = e.batch[:0]
	tokens, li := 0, 0
	for _, en := range e.entries {
		s := en.s
		seq := batch.Seq{Cache: s.kv, Pos: s.kv.Len(), Tokens: s.tokens[s.kv.Len() : s.kv.Len()+en.n],
			PromptLen: len(s.req.Prompt), ExpectedOutput: s.req.Hints.ExpectedOutputTokens}
		if en.logits {
			seq.Logits = e.logits[li*vocab : (li+1)*vocab]
			li++
		}
		e.batch = append(e.batch, seq)
		tokens += en.n
		if s.generated == 0 {
			e.m.promptTokens.Add(float64(en.n))
		}
	}
	start := e.clock.Now()
	err := e.fwd.Forward(ctx, e.batch)
	e.m.observeStep(len(e.entries), tokens, e.clock.Now().Sub(start))
	return err
}

// afterForward commits the computed tokens and samples where logits came
// back.
func (e *Engine) afterForward() {
	vocab := e.shape.Vocab
	li := 0
	jobs := e.samples[:0]
	for _, en := range e.entries {
		s := en.s
		s.kv.Commit(s.tokens[s.kv.Len() : s.kv.Len()+en.n])
		if !en.logits {
			continue
		}
		e.unannounce(s) // the prompt is computed: its blocks are cached now
		logits := e.logits[li*vocab : (li+1)*vocab]
		li++
		jobs = append(jobs, sampleJob{s: s, logits: logits})
		if r := s.req; !r.forked {
			r.forked = true
			for i := 1; i < r.N; i++ {
				jobs = append(jobs, sampleJob{s: e.fork(s, i), logits: logits})
			}
		}
	}
	e.sampleAll(jobs)
	// The pool's work for this step is done: its idle threads park now, so
	// their Ps run the handlers the deliveries below wake (see Pool.Rest).
	if r, ok := e.fwd.(rester); ok {
		r.Rest()
	}
	// Samples that end first: each delivery wakes a handler, the handlers
	// run in about the order they were woken once the loop yields, and a
	// stream's last chunk is what its client waits for to finish.
	for i := range jobs {
		if j := &jobs[i]; j.tok >= 0 {
			j.stop = e.stopReason(j.s, j.tok)
		}
	}
	for pass := range 2 {
		for i := range jobs {
			j := &jobs[i]
			ends := j.tok < 0 || j.stop != FinishNone
			if ends == (pass == 0) {
				e.deliver(j)
				if st := j.s.req.stream; ends && st.finishedAll() {
					e.ended = append(e.ended, st)
				}
			}
		}
	}
	clear(jobs) // drop the references until the next step
	e.samples = jobs[:0]
	// Drop finished sequences from the running set.
	keep := e.running[:0]
	for _, s := range e.running {
		if s.kv != nil {
			keep = append(keep, s)
		}
	}
	clear(e.running[len(keep):])
	e.running = keep
}

// sampleJob is one sample's next token to draw from a pass's logits.
type sampleJob struct {
	s      *seqState
	logits []float32 // shared by the samples of one request: read only
	tok    int32
	lp     sample.Logprobs
	stop   FinishReason // why the sample ends with tok, if it does
}

// errNoLogits ends a sample whose logits held no number above -Inf.
var errNoLogits = errors.New("engine: the model produced no usable logits (NaN or -Inf everywhere)")

// parallelSamples is the fewest unconstrained samples worth splitting over
// the compute pool: drawing one from a large vocabulary (top-p, logprobs)
// takes a good part of a millisecond, and while the engine's thread drew
// them one by one the rest of the pool idled and the handlers woken by
// earlier samples waited for a processor.
const parallelSamples = 4

// sampleAll draws every job's token: the constrained ones one by one (they
// share the engine's scratch copy of the logits), the others split over
// the compute pool. Each job touches only its own sequence's sampler and
// history, so the draws do not depend on the split.
func (e *Engine) sampleAll(jobs []sampleJob) {
	free := 0
	for i := range jobs {
		j := &jobs[i]
		s := j.s
		if s.proc == nil {
			free++
			continue
		}
		e.scratch = append(e.scratch[:0], j.logits...)
		s.proc.Process(e.scratch)
		j.tok, j.lp = s.sampler.SampleSeq(e.scratch, s.tokens, len(s.req.Prompt))
		s.proc.Accept(j.tok)
	}
	draw := func(lo, hi int) {
		for i := lo; i < hi; i++ {
			j := &jobs[i]
			if s := j.s; s.proc == nil {
				j.tok, j.lp = s.sampler.SampleSeq(j.logits, s.tokens, len(s.req.Prompt))
			}
		}
	}
	if p, ok := e.fwd.(paralleler); ok && free >= parallelSamples {
		p.Parallel(len(jobs), draw)
	} else {
		draw(0, len(jobs))
	}
}

// fork creates sample i of s's request, sharing s's blocks.
func (e *Engine) fork(s *seqState, i int) *seqState {
	p := s.req.Sampling
	if p.Seed != 0 {
		p.Seed += uint64(i)
	}
	sampler, _ := sample.New(p, e.shape.Vocab) // validated at Submit
	t := &seqState{req: s.req, index: i, kv: s.kv.Fork(), tokens: slices.Clone(s.tokens), sampler: sampler, order: s.order}
	if s.req.procs != nil {
		t.proc = s.req.procs[i]
	}
	e.running = append(e.running, t)
	return t
}

// deliver appends j's token to its sample, delivers it, and ends the
// sample when it stops.
func (e *Engine) deliver(j *sampleJob) {
	s, tok, lp := j.s, j.tok, j.lp
	if tok < 0 {
		// The sampler found no logit above -Inf (NaN weights, a broken
		// file): end the sample with an error rather than index by -1.
		e.finish(s, FinishError, errNoLogits)
		return
	}
	r := s.req
	now := e.clock.Now()
	out := Output{Index: s.index, Token: tok, Time: now}
	if r.Sampling.Logprobs || r.Sampling.TopLogprobs > 0 {
		c := lp
		c.Top = slices.Clone(lp.Top)
		out.Logprobs = &c
	}
	s.tokens = append(s.tokens, tok)
	s.generated++
	st := r.stream
	if st.firstToken.IsZero() {
		st.firstToken = now
		e.m.ttft.Observe(now.Sub(st.arrival).Seconds())
	} else {
		e.m.itl.Observe(now.Sub(st.lastToken).Seconds())
	}
	st.lastToken = now
	e.m.generatedTokens.Inc()

	st.push(out)
	if j.stop != FinishNone {
		e.finish(s, j.stop, nil) // right after the token: delivered together
	}
}

// stopReason says whether s stops once tok is appended, and why.
func (e *Engine) stopReason(s *seqState, tok int32) FinishReason {
	r := s.req
	n, generated := len(s.tokens)+1, s.generated+1
	switch {
	case (e.eog[tok] && !r.IgnoreEOS) || slices.Contains(r.StopTokens, tok):
		return FinishStop
	case generated >= r.MaxTokens || n >= e.cfg.MaxContext:
		return FinishLength
	}
	return FinishNone
}

// blockClasses gives each full block of a request's first n tokens its
// retention class for the KV pool: the highest class of the tokens in it
// (segments classify prompt spans; other tokens, generated ones included,
// take the request's retention hint, or session), then raised to the
// highest class of any later block, because a block is only reused as part
// of a prefix: keeping a persistent block is worthless if the session block
// before it is evicted. rest is the class of the blocks past n.
func blockClasses(r *Request, n, blockSize int) ([]kv.Class, kv.Class) {
	rest := r.Hints.Retention
	if rest == RetentionDefault {
		rest = RetentionSession
	}
	tokens := make([]kv.Class, n/blockSize*blockSize)
	for i := range tokens {
		tokens[i] = rest
	}
	for _, sg := range r.Segments {
		c := sg.Retention
		if c == RetentionDefault {
			c = RetentionSession
		}
		for i := max(sg.Start, 0); i < min(sg.End, len(tokens)); i++ {
			tokens[i] = c
		}
	}
	classes := make([]kv.Class, n/blockSize)
	for b := range classes {
		blk := tokens[b*blockSize : (b+1)*blockSize]
		c := slices.Max(blk)
		if c == RetentionPinned && slices.Min(blk) != RetentionPinned {
			// A pin covers whole blocks only: the block where a pinned
			// prefix ends holds what follows it too (a question asked of
			// a context cache), which the pin's owner never asked to keep
			// and, deleting the cache, could not release.
			c = 0
			for _, t := range blk {
				if t != RetentionPinned {
					c = max(c, t)
				}
			}
		}
		classes[b] = c
	}
	for i := len(classes) - 2; i >= 0; i-- {
		classes[i] = max(classes[i], classes[i+1])
	}
	return classes, rest
}

// pins reports whether r pins any of its blocks.
func pins(r *Request) bool {
	if r.Hints.Retention == RetentionPinned {
		return true
	}
	for _, s := range r.Segments {
		if s.Retention == RetentionPinned && s.End > s.Start {
			return true
		}
	}
	return false
}

// maxPinned is the most blocks pins may hold.
func (e *Engine) maxPinned() int {
	return int(float64(e.kv.NumBlocks()) * e.cfg.MaxPinnedFraction)
}
