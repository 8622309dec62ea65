package sim

import "container/heap"

// OptimalHitRate is the offline optimum (Belady's MIN) of a trace's
// token-weighted prefix hit rate with a cache of capacity tokens, counted
// at the trace's 512-token blocks as ../shared/traces/README.md counts it:
// a request hits the longest run of its leading blocks present in the
// cache (the last, partial block at its real size); then all its blocks
// are inserted or touched, and while the cache holds more than capacity,
// the block whose next use is farthest away (or never comes) goes, the
// deeper one of a chain on a tie. It is
// the bound a policy that knew the future would reach, for comparing
// online policies against.
func OptimalHitRate(tr []TraceRequest, capacity int64) float64 {
	slots := int(capacity / TraceBlockTokens)
	// next[r][k]: the next request after r that uses r's k-th block.
	next := make([][]int, len(tr))
	seen := map[int64]int{}
	for r := len(tr) - 1; r >= 0; r-- {
		next[r] = make([]int, len(tr[r].HashIDs))
		for k, id := range tr[r].HashIDs {
			if n, ok := seen[id]; ok {
				next[r][k] = n
			} else {
				next[r][k] = len(tr) // never again
			}
		}
		for _, id := range tr[r].HashIDs {
			seen[id] = r
		}
	}
	cached := map[int64]int{} // block id → its next use
	far := &farthest{}
	var hit, total int64
	for r, q := range tr {
		total += int64(q.InputLength)
		for k, id := range q.HashIDs {
			if _, ok := cached[id]; !ok {
				break
			}
			hit += int64(min(TraceBlockTokens, q.InputLength-k*TraceBlockTokens))
		}
		for k, id := range q.HashIDs {
			cached[id] = next[r][k]
			heap.Push(far, use{id, next[r][k], k})
		}
		for len(cached) > slots {
			u := heap.Pop(far).(use)
			if n, ok := cached[u.id]; ok && n == u.next { // not a stale entry
				delete(cached, u.id)
			}
		}
	}
	if total == 0 {
		return 0
	}
	return float64(hit) / float64(total)
}

// use is a block, when it is next used, and its place in the chain that
// used it last.
type use struct {
	id   int64
	next int
	pos  int
}

// farthest is a max-heap of uses by next use; entries made stale by a later
// touch are skipped when popped.
type farthest []use

func (h farthest) Len() int { return len(h) }
func (h farthest) Less(i, j int) bool {
	// Equal next uses: the deeper block goes first, its prefix being
	// needed for it to hit at all.
	if h[i].next != h[j].next {
		return h[i].next > h[j].next
	}
	return h[i].pos > h[j].pos
}
func (h farthest) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *farthest) Push(x any)   { *h = append(*h, x.(use)) }
func (h *farthest) Pop() any {
	old := *h
	u := old[len(old)-1]
	*h = old[:len(old)-1]
	return u
}
