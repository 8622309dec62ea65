package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/kvserve/kvserve/internal/engine"
)

// NewEngine builds the simulated engine: the real engine on a simulated
// forward pass, its KV pool without storage. With o.Clock set it runs in
// virtual time and is stepped by its caller (Run); without, it runs its
// own step loop in real time. Close the engine when done.
func NewEngine(p *Profile, o Options, cfg engine.Config) (*engine.Engine, *Forwarder, error) {
	f, err := NewForwarder(p, o)
	if err != nil {
		return nil, nil, err
	}
	cfg.KVNoStorage = true
	if eog := f.eog; eog >= 0 && !slices.Contains(cfg.EndOfGeneration, eog) {
		cfg.EndOfGeneration = append(slices.Clip(cfg.EndOfGeneration), eog)
	}
	if o.Clock != nil {
		cfg.Clock = o.Clock
		e, err := engine.NewStepped(f, cfg)
		return e, f, err
	}
	e, err := engine.New(f, cfg)
	return e, f, err
}

// Arrival is a request and when it arrives, counted from the start of Run.
type Arrival struct {
	At      time.Duration
	Request engine.Request
}

// Outcome is what a request's client would have seen, in virtual time.
type Outcome struct {
	// Arrival is when the request arrived (from the start of Run).
	Arrival time.Duration
	// TTFT is from arrival to the first token (0 if none came); E2E from
	// arrival to the last output.
	TTFT, E2E time.Duration
	Usage     engine.Usage
	Finish    engine.FinishReason
	Err       error
}

// Run drives a virtual-time engine (NewEngine with a Clock) through
// arrivals: it submits each when the clock reaches it, steps the engine,
// and moves the clock on to the next arrival whenever the engine is idle.
// It returns one outcome per arrival, in the order given.
func Run(ctx context.Context, e *engine.Engine, clock *VirtualClock, arrivals []Arrival) ([]Outcome, error) {
	order := make([]int, len(arrivals))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(arrivals[a].At, arrivals[b].At) })
	out := make([]Outcome, len(arrivals))
	type live struct {
		i      int
		stream *engine.Stream
	}
	var active []live
	var buf []engine.Output
	start := clock.Now()
	next, idle := 0, 0
	for next < len(order) || len(active) > 0 {
		if err := ctx.Err(); err != nil {
			for _, l := range active {
				l.stream.Cancel()
			}
			return out, err
		}
		now := clock.Now()
		for ; next < len(order) && !start.Add(arrivals[order[next]].At).After(now); next++ {
			i := order[next]
			out[i].Arrival = arrivals[i].At
			s, err := e.Submit(ctx, arrivals[i].Request)
			if err != nil {
				out[i].Err = err
				continue
			}
			active = append(active, live{i, s})
		}
		ran := false
		if e.Pending() {
			ran = e.Step(ctx)
		}
		// Collect what the step delivered.
		kept := active[:0]
		for _, l := range active {
			o := &out[l.i]
			var err error
			buf, err = l.stream.Poll(buf[:0])
			for _, ev := range buf {
				if ev.Token >= 0 && o.TTFT == 0 {
					o.TTFT = ev.Time.Sub(start) - o.Arrival
				}
				if ev.Finish != engine.FinishNone {
					o.Finish = ev.Finish
				}
				if ev.Err != nil && o.Err == nil {
					o.Err = ev.Err
				}
			}
			if errors.Is(err, engine.ErrDone) {
				o.Usage = l.stream.Usage()
				o.E2E = l.stream.Ended().Sub(start) - o.Arrival
				continue
			}
			kept = append(kept, l)
		}
		active = kept
		if ran {
			idle = 0
			continue
		}
		if next < len(order) {
			idle = 0
			clock.AdvanceTo(start.Add(arrivals[order[next]].At))
			continue
		}
		// Nothing ran and nothing is due: the streams left hold their last
		// outputs, collected next round, unless the engine is stuck.
		if idle++; len(active) > 0 && (e.Pending() || idle > 1) {
			return out, fmt.Errorf("sim: %d requests wait but the engine cannot run any", len(active))
		}
		continue
	}
	return out, nil
}
