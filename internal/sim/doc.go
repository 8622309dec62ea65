// Package sim is the simulated engine: the real scheduler and the real KV
// block manager (internal/engine, internal/kv) driving a forward pass that
// does no arithmetic.
//
// Each pass costs modelled time — a Profile fitted per model and machine
// from the real engine's passes (Calibrate): a fixed cost, a cost per
// prompt token, per decoding sequence and per attended KV position. The
// logits it returns make the engine's own sampler pick tokens that depend
// only on the sequence's recent content, its position and the simulator's
// seed, so runs repeat; a sample ends at the request's
// expected_output_tokens hint (a trace's output length) or at max_tokens.
// Its KV pool keeps only the bookkeeping (kv.Config.NoStorage), so a pool
// of tens of millions of tokens fits in memory.
//
// Time is one of two clocks:
//   - real time: each pass sleeps its modelled cost, so clients of
//     `kvserve serve --engine sim` see the latencies the real model would
//     give on the profiled machine;
//   - virtual time (VirtualClock): each pass advances the clock by its
//     cost and nothing sleeps; Run drives a stepped engine through a list
//     of arrivals far faster than real time (trace replays, cluster
//     studies), every timing the engine reports being in that time.
package sim
