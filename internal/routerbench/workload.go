package routerbench

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/sample"
	"github.com/kvserve/kvserve/internal/sim"
)

// Arrival is a request of a workload. A root request (Parent < 0) arrives
// At after the start; a follow-up (an agent's next turn) arrives At after
// its parent's last output, so a slow placement delays the session's next
// turn as it would a real agent's.
type Arrival struct {
	At      time.Duration
	Parent  int
	Request engine.Request
}

// Vocab is the vocabulary of the workloads' tokens, which stand for
// nothing: a small one keeps the engines' sampling cheap.
const Vocab = 256

// FromTrace turns a Mooncake-format trace into arrivals, the gaps between
// them multiplied by stretch; every request is in scope "trace" (one
// tenant, so requests sharing hash ids share blocks).
func FromTrace(trace []sim.TraceRequest, stretch float64) []Arrival {
	out := make([]Arrival, len(trace))
	for i, t := range trace {
		a := t.Arrival(Vocab, stretch)
		a.Request.Scope = "trace"
		out[i] = Arrival{At: a.At, Parent: -1, Request: a.Request}
	}
	return out
}

// AgentOptions shape the agent workload. The zero value of each field means
// its default.
type AgentOptions struct {
	// Sessions is the number of agent sessions (default 200).
	Sessions int
	// Rate is new sessions per second (default 1), Poisson arrivals.
	Rate float64
	// SystemTokens is the shared system prompt with tool definitions
	// (default 10,000), one per tenant.
	SystemTokens int
	// Tenants share the sessions round-robin (default 4): each has its
	// own system prompt and scope.
	Tenants int
	// TimeScale multiplies the tool pauses (default 1).
	TimeScale float64
	// Seed varies the workload.
	Seed uint64
}

// The agent workload's shape, as `kvserve bench serve --workload agent`
// (internal/servebench): 4 to 16 turns, each after the first adding the
// assistant's reply and a tool result of 150 to 600 tokens after a pause of
// 2 to 30 s; a task of 200 to 500 tokens opens a session; 15% of tool
// results come from a one-shot sub-agent with a 600-token system prompt of
// its own.
const (
	agentMinTurns  = 4
	agentMaxTurns  = 16
	agentSubProb   = 0.15
	agentResultMin = 150
	agentResultMax = 600
	agentTaskMin   = 200
	agentTaskMax   = 500
	agentReplyMin  = 50
	agentReplyMax  = 400
	subSystem      = 600
	pauseMin       = 2 * time.Second
	pauseMax       = 30 * time.Second
)

// Agent builds the agent workload in token space. A turn's prompt is the
// previous turn's prompt, then tokens standing for the assistant's reply
// (the simulator generates other tokens, so the reply's blocks are not
// hits in the next turn: the workload's hit rate is a little lower than a
// real agent's), then the tool result.
func Agent(o AgentOptions) ([]Arrival, error) {
	if o.Sessions <= 0 {
		o.Sessions = 200
	}
	if o.Rate <= 0 {
		o.Rate = 1
	}
	if o.SystemTokens <= 0 {
		o.SystemTokens = 10_000
	}
	if o.Tenants <= 0 {
		o.Tenants = 4
	}
	if o.TimeScale < 0 {
		return nil, fmt.Errorf("routerbench: time scale %v < 0", o.TimeScale)
	}
	if o.TimeScale == 0 {
		o.TimeScale = 1
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0xa9e17))
	fresh := func(n int) []int32 {
		p := make([]int32, n)
		for i := range p {
			p[i] = int32(rng.IntN(Vocab))
		}
		return p
	}
	systems := make([][]int32, o.Tenants)
	for i := range systems {
		systems[i] = fresh(o.SystemTokens)
	}
	subSys := make([][]int32, o.Tenants)
	for i := range subSys {
		subSys[i] = fresh(subSystem)
	}
	between := func(lo, hi int) int { return lo + rng.IntN(hi-lo+1) }
	pause := func() time.Duration {
		return time.Duration(o.TimeScale * float64(pauseMin+time.Duration(rng.Int64N(int64(pauseMax-pauseMin)))))
	}
	var out []Arrival
	var at time.Duration
	for s := range o.Sessions {
		at += time.Duration(rng.ExpFloat64() / o.Rate * float64(time.Second))
		tenant := s % o.Tenants
		scope := fmt.Sprint("tenant-", tenant)
		sid := fmt.Sprint("session-", s)
		prompt := append(append([]int32(nil), systems[tenant]...), fresh(between(agentTaskMin, agentTaskMax))...)
		parent := -1
		turns := between(agentMinTurns, agentMaxTurns)
		for turn := range turns {
			reply := between(agentReplyMin, agentReplyMax)
			a := Arrival{Parent: parent, At: at, Request: request(prompt, reply, scope, sid)}
			if parent >= 0 {
				a.At = pause()
			}
			out = append(out, a)
			parent = len(out) - 1
			if turn == turns-1 {
				break
			}
			prompt = append(prompt, fresh(reply)...)
			if rng.Float64() < agentSubProb {
				// A sub-agent: one request of its own, with no session.
				task := fresh(between(agentTaskMin, agentTaskMax))
				out = append(out, Arrival{Parent: parent, At: 0,
					Request: request(append(append([]int32(nil), subSys[tenant]...), task...), between(agentResultMin, agentResultMax), scope, "")})
				parent = len(out) - 1
			}
			prompt = append(prompt, fresh(between(agentResultMin, agentResultMax))...)
		}
	}
	return out, nil
}

func request(prompt []int32, out int, scope, session string) engine.Request {
	return engine.Request{Prompt: append([]int32(nil), prompt...), MaxTokens: out, IgnoreEOS: true,
		Sampling: sample.Params{TopP: 1}, Scope: scope, Hints: engine.Hints{SessionID: session}}
}
