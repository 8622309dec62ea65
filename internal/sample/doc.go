// Package sample turns a model's next-token logits into a token: penalties,
// logit bias, greedy or temperature sampling with top-k, top-p and min-p
// truncation, logprobs, and stop strings for streaming.
//
// # Why it looks the way it does
//
// Sampling runs once per generated token per sequence, on a vector as long
// as the vocabulary (151,936 entries for Qwen2.5). A textbook implementation
// sorts that vector and takes a softmax of all of it; on this project's CPUs
// that alone costs several milliseconds. A Sampler instead makes one or two
// linear passes and sorts a few hundred entries at most:
//
//   - one pass keeps the best few hundred tokens in a small heap (a token
//     costs one comparison unless it gets in). That gives greedy decoding,
//     top logprobs and top-k (k ≤ 256) directly, and holds the min-p set and
//     the top-p nucleus of nearly every real next-token distribution;
//   - top-p and plain temperature sampling need the total probability mass,
//     so they make a second pass that evaluates one exponential per token
//     (exp32, a table-driven float32 exp), keeping partial sums per block of
//     1024 ids for the draw; logprobs need the same kind of pass for the
//     untempered normalizer, shared with it at temperature 1;
//   - when a cut falls outside the heap (top-k above 256, or a top-p or
//     min-p set of more than 512 tokens in a flat distribution) a 1024-bucket
//     histogram of each token's distance below the best one (count and mass
//     per bucket) names the bucket holding the cut, and only that bucket's
//     tokens are gathered and sorted — radix selection, this package's
//     nth_element.
//
// A Sampler owns all of its scratch space, so Sample allocates nothing once
// it has seen a vocabulary of a given size.
//
// # Order of operations
//
// The chain is the one used by vLLM, Hugging Face transformers and OpenAI:
//
//	logit bias → repetition, frequency and presence penalties →
//	(temperature 0: argmax) → temperature → top-k → top-p → min-p → draw
//
// Temperature comes before the truncations (llama.cpp's default chain puts it
// last), so top-p keeps the smallest set of tokens whose probability at the
// requested temperature reaches p, and min-p compares probabilities at that
// temperature — what an OpenAI or vLLM user expects. Where the two worlds
// differ in formulas rather than order, llama.cpp's are used: the
// repetition penalty divides positive logits and multiplies negative ones,
// greedy ties go to the lowest token id, top-p keeps tokens until the running
// sum first reaches p (always at least one), min-p keeps tokens with
// p ≥ min_p · p_max.
//
// Tokens whose scaled logit lies more than 32 nats below the best one (a
// probability under 1.3e-14 of the best token's) are never drawn. That
// bounds the work without changing any probability by more than float32
// rounding.
//
// # Logprobs
//
// Logprobs are the log-softmax of the logits after logit bias and penalties,
// before temperature and truncation: the model's own distribution as the
// request shaped it. Without bias and penalties that is exactly the model's
// log-softmax — what OpenAI documents, what vLLM reports by default (its
// "raw" mode) and what the llama.cpp reference files in shared/testdata
// hold. Leaving temperature and truncation out keeps logprobs comparable
// across sampling settings (the same logits give bit-identical logprobs
// whatever the request's temperature, top-k or top-p) and gives every
// alternative a finite value even when truncation removed it. Bias and
// penalties are included because the caller asked for them to change the
// model's scores: a banned token shows as impossible rather than likely, and
// the greedy choice is always the top alternative.
package sample
