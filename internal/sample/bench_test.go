package sample

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkSample measures one sampling step on a Qwen2.5-sized vocabulary
// (151,936 entries) with language-model-like logits, for the configurations
// clients send most.
func BenchmarkSample(b *testing.B) {
	const vocab = 151936
	r := rand.New(rand.NewPCG(1, 2))
	logits := realistic(r, vocab)
	hist := make([]int32, 256)
	for i := range hist {
		hist[i] = int32(r.IntN(vocab))
	}
	cases := []struct {
		name string
		p    Params
		hist []int32
	}{
		{"greedy", Params{}, nil},
		{"greedy+logprobs5", Params{TopLogprobs: 5}, nil},
		{"temp0.7+topk40+topp0.95", Params{Temperature: 0.7, TopK: 40, TopP: 0.95}, nil},
		{"temp1 (full vocab)", Params{Temperature: 1}, nil},
		{"temp0.8+topp0.9", Params{Temperature: 0.8, TopP: 0.9}, nil},
		{"temp0.8+minp0.05", Params{Temperature: 0.8, MinP: 0.05}, nil},
		{"temp0.7+topk40+topp0.95+logprobs", Params{Temperature: 0.7, TopK: 40, TopP: 0.95, TopLogprobs: 5}, nil},
		{"temp0.8+topp0.9+logprobs", Params{Temperature: 0.8, TopP: 0.9, TopLogprobs: 5}, nil},
		{"temp0.7+topk40+penalties(256 history)", Params{Temperature: 0.7, TopK: 40, RepeatPenalty: 1.1, PresencePenalty: 0.5, FrequencyPenalty: 0.5}, hist},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			tc.p.Seed = 1
			s, err := New(tc.p, vocab)
			if err != nil {
				b.Fatal(err)
			}
			cpuLoop(b, func() { s.Sample(logits, tc.hist) })
		})
	}
}

func BenchmarkStopMatcher(b *testing.B) {
	pieces := []string{"The", " quick", " brown", " fox", " <", "|", "im", "_st", "art", "|>", " jumps", "\n", "\n"}
	for b.Loop() {
		m := NewStopMatcher([]string{"<|im_end|>", "\n\nUser:"})
		for _, p := range pieces {
			m.Push(p)
		}
		m.Flush()
	}
}
