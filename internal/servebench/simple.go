package servebench

import (
	"fmt"
	"math"
	"strings"
)

// sharedPrefix is the multi-tenant RAG/assistant shape: G groups, each with
// its own long system prompt, and a stream of short user questions, each for
// a random group, so that groups' requests interleave. The first G requests
// visit each group once (in a seeded order): those are the cold ones.
type sharedPrefix struct {
	o        WorkloadOptions
	systems  []string
	order    []int // group of request i for i < G
	question int   // tokens
}

func newSharedPrefix(o WorkloadOptions) (Workload, error) {
	g := pick(o.Groups, 8)
	w := &sharedPrefix{o: o, systems: make([]string, g), question: o.tokens(pick(o.QuestionTokens, 128))}
	n := o.tokens(pick(o.PrefixTokens, 2048))
	for i := range w.systems {
		tg := textGen{rngFor(o.Seed, "shared-prefix/system", i)}
		head := fmt.Sprintf("You are the assistant of team %d. Answer questions using the handbook below.", i)
		w.systems[i] = head + "\n\n" + tg.text(max(1, n-20))
	}
	w.order = rngFor(o.Seed, "shared-prefix/order", 0).Perm(g)
	return w, nil
}

func (w *sharedPrefix) Name() string { return "shared-prefix" }

// Groups returns the number of groups.
func (w *sharedPrefix) Groups() int { return len(w.systems) }

// group returns the group of request i.
func (w *sharedPrefix) group(i int) int {
	if i < len(w.order) {
		return w.order[i]
	}
	return rngFor(w.o.Seed, "shared-prefix/group", i).IntN(len(w.systems))
}

func (w *sharedPrefix) Session(i int) Session {
	g := w.group(i)
	tg := textGen{rngFor(w.o.Seed, "shared-prefix/question", i)}
	label := "prefix-warm"
	if i < len(w.order) {
		label = "prefix-cold"
	}
	q := tg.text(w.question)
	return &oneShot{turn: Turn{Label: label, Request: Request{Messages: []Message{
		{Role: "system", Content: w.systems[g]},
		{Role: "user", Content: strings.TrimSuffix(q, ".") + "?"},
	}}}}
}

// chat is independent single-turn prompts whose lengths are log-uniform
// between 32 and 4,096 tokens (times PromptScale). Each prompt opens with
// its own request number so no two share even a first block.
type chat struct {
	o WorkloadOptions
}

func newChat(o WorkloadOptions) (Workload, error) { return &chat{o: o}, nil }

func (w *chat) Name() string { return "chat" }

// chatTokens draws a prompt length.
func (w *chat) chatTokens(u float64) int {
	const lo, hi = 32, 4096
	return w.o.tokens(int(math.Round(lo * math.Pow(hi/lo, u))))
}

func (w *chat) Session(i int) Session {
	r := rngFor(w.o.Seed, "chat", i)
	n := w.chatTokens(r.Float64())
	tg := textGen{r}
	text := fmt.Sprintf("Request %d-%d. ", w.o.Seed, i) + tg.text(max(1, n-6))
	return &oneShot{turn: Turn{Label: "chat", Request: Request{Messages: []Message{{Role: "user", Content: text}}}}}
}
