package sample

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
)

// MaxTopLogprobs is the largest accepted Params.TopLogprobs (OpenAI's limit).
const MaxTopLogprobs = 20

// DefaultRepeatLastN is the repetition-penalty window used when
// Params.RepeatLastN is 0 (llama.cpp's default).
const DefaultRepeatLastN = 64

// Params configures a Sampler. The zero value is greedy decoding with no
// penalties, bias or logprobs. Zero means "off" or "default" for every field,
// as documented on each.
type Params struct {
	// Temperature divides the logits before truncation and sampling. 0 means
	// greedy: the highest logit after bias and penalties, ties going to the
	// lowest token id; so does any value below 1e-5 (as in vLLM). Must be
	// finite and ≥ 0.
	Temperature float32 `json:"temperature"`

	// TopK keeps only the K most likely tokens. 0 or -1 (vLLM's spelling)
	// disables it.
	TopK int `json:"top_k,omitempty"`

	// TopP keeps the smallest set of most likely tokens whose probability at
	// the sampling temperature sums to at least TopP. 0 and 1 disable it.
	TopP float32 `json:"top_p"`

	// MinP keeps tokens whose probability at the sampling temperature is at
	// least MinP times the most likely token's. 0 disables it; in [0, 1].
	MinP float32 `json:"min_p,omitempty"`

	// RepeatPenalty is llama.cpp's repetition penalty: for each distinct token
	// among the last RepeatLastN tokens of the sequence, prompt included
	// (Sampler.SampleSeq), a positive logit is divided by it and a negative
	// one multiplied by it. 0 and 1 disable it; otherwise it must be finite
	// and > 0.
	RepeatPenalty float32 `json:"repeat_penalty,omitempty"`

	// RepeatLastN is the repetition-penalty window in tokens: 0 means
	// DefaultRepeatLastN, -1 the whole sequence.
	RepeatLastN int `json:"repeat_last_n,omitempty"`

	// PresencePenalty and FrequencyPenalty are OpenAI's: a token generated
	// c > 0 times so far (the prompt does not count) has its logit lowered
	// by c·FrequencyPenalty + PresencePenalty. Each in [-2, 2].
	PresencePenalty  float32 `json:"presence_penalty,omitempty"`
	FrequencyPenalty float32 `json:"frequency_penalty,omitempty"`

	// Seed seeds the sampler's random source: the same seed, parameters,
	// logits and histories give the same tokens. 0 picks a random seed, which
	// Sampler.Seed reports.
	Seed uint64 `json:"seed,omitempty"`

	// LogitBias is added to the logits of the given token ids before
	// everything else (as in OpenAI and llama.cpp). Ids must be in
	// [0, vocabSize); values in [-100, 100], or -Inf to ban a token.
	LogitBias map[int32]float32 `json:"logit_bias,omitempty"`

	// Logprobs asks for Logprobs.Logprob, the log-probability of the chosen
	// token. It costs one more exponential per vocabulary entry and token, so
	// it is off unless asked for. TopLogprobs > 0 implies it.
	Logprobs bool `json:"logprobs,omitempty"`

	// TopLogprobs is how many of the most likely tokens to report at each
	// step, 0..MaxTopLogprobs.
	TopLogprobs int `json:"top_logprobs,omitempty"`
}

// validate checks p's ranges against a vocabulary of vocabSize tokens.
func (p *Params) validate(vocabSize int) error {
	finite := func(x float32) bool { return !math.IsNaN(float64(x)) && !math.IsInf(float64(x), 0) }
	switch {
	case vocabSize <= 0:
		return fmt.Errorf("sample: vocabulary size must be positive, got %d", vocabSize)
	case !finite(p.Temperature) || p.Temperature < 0:
		return fmt.Errorf("sample: temperature must be finite and ≥ 0, got %v", p.Temperature)
	case p.TopK < -1:
		return fmt.Errorf("sample: top_k must be ≥ -1 (0 and -1 disable it), got %d", p.TopK)
	case !(p.TopP >= 0 && p.TopP <= 1):
		return fmt.Errorf("sample: top_p must be in [0, 1], got %v", p.TopP)
	case !(p.MinP >= 0 && p.MinP <= 1):
		return fmt.Errorf("sample: min_p must be in [0, 1], got %v", p.MinP)
	case !finite(p.RepeatPenalty) || p.RepeatPenalty < 0:
		return fmt.Errorf("sample: repeat_penalty must be finite and > 0 (0 disables it), got %v", p.RepeatPenalty)
	case p.RepeatLastN < -1:
		return fmt.Errorf("sample: repeat_last_n must be ≥ -1 (-1 = whole history, 0 = %d), got %d", DefaultRepeatLastN, p.RepeatLastN)
	case !(p.PresencePenalty >= -2 && p.PresencePenalty <= 2):
		return fmt.Errorf("sample: presence_penalty must be in [-2, 2], got %v", p.PresencePenalty)
	case !(p.FrequencyPenalty >= -2 && p.FrequencyPenalty <= 2):
		return fmt.Errorf("sample: frequency_penalty must be in [-2, 2], got %v", p.FrequencyPenalty)
	case p.TopLogprobs < 0 || p.TopLogprobs > MaxTopLogprobs:
		return fmt.Errorf("sample: top_logprobs must be in [0, %d], got %d", MaxTopLogprobs, p.TopLogprobs)
	}
	for id, b := range p.LogitBias {
		if id < 0 || int(id) >= vocabSize {
			return fmt.Errorf("sample: logit_bias token id %d outside the vocabulary [0, %d)", id, vocabSize)
		}
		if !(b >= -100 && b <= 100) && !math.IsInf(float64(b), -1) {
			return fmt.Errorf("sample: logit_bias for token %d must be in [-100, 100] or -Inf, got %v", id, b)
		}
	}
	return nil
}

// paramsJSON is Params on the wire. JSON has no infinities, so the tokens a
// logit bias bans (-Inf) travel as a list of their own.
type paramsJSON struct {
	paramsFields
	Banned []int32 `json:"banned_tokens,omitempty"`
}

type paramsFields Params // Params without its methods

// MarshalJSON writes p, its banned tokens apart from the finite biases.
func (p Params) MarshalJSON() ([]byte, error) {
	w := paramsJSON{paramsFields: paramsFields(p)}
	var finite map[int32]float32
	for id, b := range p.LogitBias {
		if math.IsInf(float64(b), -1) {
			w.Banned = append(w.Banned, id)
			continue
		}
		if finite == nil {
			finite = make(map[int32]float32, len(p.LogitBias))
		}
		finite[id] = b
	}
	slices.Sort(w.Banned)
	w.LogitBias = finite
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (p *Params) UnmarshalJSON(data []byte) error {
	var w paramsJSON
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*p = Params(w.paramsFields)
	for _, id := range w.Banned {
		if p.LogitBias == nil {
			p.LogitBias = make(map[int32]float32, len(w.Banned))
		}
		p.LogitBias[id] = float32(math.Inf(-1))
	}
	return nil
}
