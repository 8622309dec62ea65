// Package servebench is kvserve's load generator for OpenAI-compatible
// servers: it drives /v1/chat/completions with streamed requests shaped like
// the traffic kvserve is built for, and measures what a client sees.
//
// Why a package of its own, with its own SSE parser and no SDK: the numbers
// that matter (time to first token, inter-token gaps, prefix-cache hit rate)
// are decided by when each byte of the stream arrives, so the client must
// timestamp chunks itself, as they are parsed, with nothing buffering in
// between; and the same tool must run against kvserve, llama.cpp's server,
// vLLM or any other OpenAI-compatible endpoint.
//
// Workloads are deterministic from a seed: the same seed gives the same
// prompts, tool calls, pauses and session shapes (only the assistant texts
// in an agent's history come from the server):
//
//   - shared-prefix: groups, each with its own long system prompt, and short
//     questions whose groups interleave (multi-tenant assistants, RAG);
//   - agent: multi-turn coding-agent sessions with a long system prompt and
//     tool definitions, a history that grows by an assistant reply and a tool
//     result per turn, tool pauses, and one-shot sub-agents;
//   - chat: independent prompts of mixed lengths, nothing shared.
//
// Load is either closed-loop (N workers, each running one session at a
// time) or open-loop (Poisson session arrivals at a rate), bounded by a
// request count or a duration. Reports give latency percentiles (see
// Percentile for the definition), throughput, the cache hit rate from
// usage.prompt_tokens_details.cached_tokens, kvserve's server-side timings
// when the responses carry them, and errors by class.
package servebench
