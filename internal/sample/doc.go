// Package sample turns a model's next-token logits into a token: penalties,
// logit bias, greedy or temperature sampling with top-k, top-p and min-p
// truncation, logprobs, and stop strings for streaming.
//
// # Why it looks the way it does
//
// Sampling runs once per generated token per sequence, on a vector as long
// as the vocabulary (151,936 entries for Qwen2.5). A textbook implementation
// sorts that vector and takes a softmax of all of it; on this project's CPUs
// that alone costs more than a millisecond. A Sampler instead makes a few
// linear passes over the logits and only ever sorts a handful of entries:
//
//   - one pass finds the maximum (and the TopLogprobs best tokens);
//   - one pass computes the probability mass at the sampling temperature and
//     a 1024-bucket histogram of how far each token lies below the maximum
//     (count and mass per bucket), and, when logprobs are asked for, the
//     log-normalizer of the untempered distribution;
//   - top-k, top-p and min-p each need to know where their cut falls: the
//     histogram names the one bucket that holds the cut, and only that
//     bucket's entries are gathered and sorted (radix selection, the
//     nth_element of this package);
//   - the random draw walks the bucket masses and then the entries of one
//     bucket.
//
// With top-k set to a few hundred or less (the common case) the histogram
// only counts, and the candidates are gathered and sorted directly. A
// Sampler owns all of its scratch space, so Sample allocates nothing once it
// has seen a vocabulary of a given size.
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
// request shaped it. That is what OpenAI reports (top_logprobs do not depend
// on temperature or top_p there) and vLLM's default; it keeps logprobs
// comparable across sampling settings, gives every alternative a finite
// value even when truncation removed it, and with no bias or penalties it is
// exactly the model's log-softmax, which is what the llama.cpp reference
// files in shared/testdata hold. Bias and penalties are included because the
// caller asked for them to change the model's scores: a banned token shows
// as impossible rather than likely.
package sample
