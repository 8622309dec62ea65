package engine

import (
	"slices"
	"sync"
)

// PriorityWaiting counts the requests waiting for admission at one
// priority: a router placing a request of priority p counts only those at
// p or above as ahead of it, since admission takes higher priorities first.
type PriorityWaiting struct {
	Priority     int `json:"priority"`
	Requests     int `json:"requests"`
	PromptTokens int `json:"prompt_tokens"`
}

// waitTally keeps PriorityWaiting per priority as requests are submitted
// and admitted.
type waitTally struct {
	mu sync.Mutex
	by map[int]PriorityWaiting
}

func (w *waitTally) add(r *Request, sign int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.by == nil {
		w.by = map[int]PriorityWaiting{}
	}
	p := w.by[r.Priority]
	p.Priority = r.Priority
	p.Requests += sign
	p.PromptTokens += sign * len(r.Prompt)
	if p.Requests <= 0 {
		delete(w.by, r.Priority)
		return
	}
	w.by[r.Priority] = p
}

// snapshot returns the priorities with requests waiting, highest first.
func (w *waitTally) snapshot() []PriorityWaiting {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.by) == 0 {
		return nil
	}
	out := make([]PriorityWaiting, 0, len(w.by))
	for _, p := range w.by {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b PriorityWaiting) int { return b.Priority - a.Priority })
	return out
}
