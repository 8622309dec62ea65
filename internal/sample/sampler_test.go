package sample

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

var (
	inf = float32(math.Inf(1))
	nan = float32(math.NaN())
)

// realistic returns n logits shaped like a language model's: a broad normal
// bulk and a few strong candidates.
func realistic(r *rand.Rand, n int) []float32 {
	z := make([]float32, n)
	for i := range z {
		z[i] = float32(r.NormFloat64() * 2)
	}
	for range min(20, n) {
		z[r.IntN(n)] = 6 + 8*r.Float32()
	}
	return z
}

// flat returns n logits with a narrow spread: many tokens of similar
// probability, so every cut falls among tokens that matter.
func flat(r *rand.Rand, n int) []float32 {
	z := make([]float32, n)
	for i := range z {
		z[i] = float32(r.NormFloat64() * 0.7)
	}
	return z
}

// denseHead returns n logits with a crowd of strong candidates (a plateau
// several nats wide) above a weak bulk.
func denseHead(r *rand.Rand, n int) []float32 {
	z := make([]float32, n)
	for i := range z {
		z[i] = float32(r.NormFloat64())
	}
	for range n / 5 {
		z[r.IntN(n)] = 4 + 3*r.Float32()
	}
	return z
}

func mustNew(t testing.TB, p Params, n int) *Sampler {
	t.Helper()
	s, err := New(p, n)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNewValidation(t *testing.T) {
	bad := []struct {
		name string
		p    Params
		want string
	}{
		{"negative temperature", Params{Temperature: -0.1}, "temperature"},
		{"NaN temperature", Params{Temperature: nan}, "temperature"},
		{"Inf temperature", Params{Temperature: inf}, "temperature"},
		{"top_k", Params{TopK: -2}, "top_k"},
		{"top_p above 1", Params{TopP: 1.01}, "top_p"},
		{"top_p negative", Params{TopP: -0.5}, "top_p"},
		{"top_p NaN", Params{TopP: nan}, "top_p"},
		{"min_p", Params{MinP: 2}, "min_p"},
		{"repeat_penalty negative", Params{RepeatPenalty: -1}, "repeat_penalty"},
		{"repeat_penalty Inf", Params{RepeatPenalty: inf}, "repeat_penalty"},
		{"repeat_last_n", Params{RepeatLastN: -2}, "repeat_last_n"},
		{"presence", Params{PresencePenalty: 2.5}, "presence_penalty"},
		{"frequency", Params{FrequencyPenalty: -3}, "frequency_penalty"},
		{"top_logprobs", Params{TopLogprobs: 21}, "top_logprobs"},
		{"top_logprobs negative", Params{TopLogprobs: -1}, "top_logprobs"},
		{"bias id", Params{LogitBias: map[int32]float32{100: 1}}, "logit_bias token id 100"},
		{"bias negative id", Params{LogitBias: map[int32]float32{-1: 1}}, "logit_bias token id -1"},
		{"bias value", Params{LogitBias: map[int32]float32{3: 101}}, "logit_bias for token 3"},
		{"bias +Inf", Params{LogitBias: map[int32]float32{3: inf}}, "logit_bias for token 3"},
		{"bias NaN", Params{LogitBias: map[int32]float32{3: nan}}, "logit_bias for token 3"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.p, 100)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "sample: ") {
				t.Fatalf("New(%+v) error = %v, want one mentioning %q", tc.p, err, tc.want)
			}
		})
	}
	if _, err := New(Params{}, 0); err == nil {
		t.Fatal("New with vocabulary size 0 must fail")
	}
	good := []Params{
		{},
		{Temperature: 0.7, TopK: -1, TopP: 1, MinP: 1, RepeatPenalty: 1.1, RepeatLastN: -1},
		{Temperature: 100, PresencePenalty: -2, FrequencyPenalty: 2, TopLogprobs: 20},
		{LogitBias: map[int32]float32{0: -100, 99: 100, 5: float32(math.Inf(-1))}},
	}
	for _, p := range good {
		if _, err := New(p, 100); err != nil {
			t.Errorf("New(%+v): %v", p, err)
		}
	}
}

func TestGreedy(t *testing.T) {
	ninf := float32(math.Inf(-1))
	cases := []struct {
		name   string
		p      Params
		logits []float32
		hist   []int32
		want   int32
	}{
		{"argmax", Params{}, []float32{1, 5, 3}, nil, 1},
		{"tie goes to lowest id", Params{}, []float32{1, 5, 5, 2, 5}, nil, 1},
		{"negative logits", Params{}, []float32{-3, -1, -2}, nil, 1},
		{"NaN never wins", Params{}, []float32{nan, 1, nan, 0}, nil, 1},
		{"NaN first", Params{}, []float32{nan, -5}, nil, 1},
		{"-Inf entries", Params{}, []float32{ninf, ninf, -1e30}, nil, 2},
		{"+Inf wins", Params{}, []float32{1, inf, 3}, nil, 1},
		{"+Inf tie lowest id", Params{}, []float32{1, inf, inf}, nil, 1},
		{"all -Inf", Params{}, []float32{ninf, ninf}, nil, -1},
		{"all NaN", Params{}, []float32{nan, nan}, nil, -1},
		{"empty", Params{}, []float32{}, nil, -1},
		{"bias moves argmax", Params{LogitBias: map[int32]float32{0: 10}}, []float32{1, 5, 3}, nil, 0},
		{"bias bans", Params{LogitBias: map[int32]float32{1: ninf}}, []float32{1, 5, 3}, nil, 2},
		{"ban everything", Params{LogitBias: map[int32]float32{0: ninf, 1: ninf}}, []float32{1, 5}, nil, -1},
		{"repeat penalty applies in greedy", Params{RepeatPenalty: 2}, []float32{3, 5, 1}, []int32{1}, 0},
		{"presence penalty applies in greedy", Params{PresencePenalty: 2}, []float32{3, 4.5, 1}, []int32{1}, 0},
		{"bias id beyond short logits ignored", Params{LogitBias: map[int32]float32{50: 100}}, []float32{1, 2}, nil, 1},
		{"history out of range ignored", Params{RepeatPenalty: 2}, []float32{1, 2}, []int32{-1, 7, 1000}, 1},
		{"top-k 1 at temperature", Params{Temperature: 1, TopK: 1}, []float32{1, 5, 5, 2}, nil, 1},
		{"min-p 1 keeps only the max", Params{Temperature: 5, MinP: 1}, []float32{1, 2, 7, 3}, nil, 2},
		{"temperature below 1e-5 is greedy", Params{Temperature: 1e-6, Seed: 3}, []float32{1, 7, 7, 6.9999}, nil, 1},
		{"temperature 1e-45 is greedy", Params{Temperature: 1e-45}, []float32{1, 7, 7}, nil, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := mustNew(t, tc.p, 100)
			for range 20 {
				got, lp := s.Sample(tc.logits, tc.hist)
				if got != tc.want || lp.Token != got {
					t.Fatalf("Sample = %d (lp.Token %d), want %d", got, lp.Token, tc.want)
				}
			}
		})
	}
}

func TestGreedyMatchesArgmaxOnLargeVocab(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	s := mustNew(t, Params{}, 151936)
	for range 5 {
		z := realistic(r, 151936)
		want := int32(0)
		for i, v := range z {
			if v > z[want] {
				want = int32(i)
			}
		}
		if got, _ := s.Sample(z, nil); got != want {
			t.Fatalf("greedy = %d, want %d", got, want)
		}
	}
}

// refPenalize applies bias and penalties the slow, obvious way, to a
// history of generated tokens only.
func refPenalize(logits []float32, hist []int32, p Params) []float32 {
	return refPenalizeSeq(logits, hist, 0, p)
}

// refPenalizeSeq is refPenalize for a sequence whose first prompt tokens
// are the prompt: the repetition window spans all of seq, the counts only
// seq[prompt:].
func refPenalizeSeq(logits []float32, seq []int32, prompt int, p Params) []float32 {
	hist := seq[prompt:]
	z := slices.Clone(logits)
	for id, b := range p.LogitBias {
		if int(id) < len(z) {
			z[id] += b
		}
	}
	rp := p.RepeatPenalty
	if rp == 0 {
		rp = 1
	}
	lastN := p.RepeatLastN
	if lastN == 0 {
		lastN = DefaultRepeatLastN
	}
	window := seq
	if lastN >= 0 && len(seq) > lastN {
		window = seq[len(seq)-lastN:]
	}
	inWin := map[int32]bool{}
	for _, t := range window {
		inWin[t] = true
	}
	count := map[int32]int{}
	for _, t := range hist {
		count[t]++
	}
	for t := range inWin {
		if _, ok := count[t]; !ok {
			count[t] = 0
		}
	}
	for t, c := range count {
		if t < 0 || int(t) >= len(z) {
			continue
		}
		v := z[t]
		if inWin[t] && rp != 1 {
			if v <= 0 {
				v *= rp
			} else {
				v /= rp
			}
		}
		if c > 0 {
			v -= float32(c)*p.FrequencyPenalty + p.PresencePenalty
		}
		z[t] = v
	}
	return z
}

// refDist is the sampling distribution computed the obvious way: sort
// everything, softmax in float64, cut. ambiguous reports that a cut falls so
// close to its threshold that float32 rounding may legitimately move it.
func refDist(logits []float32, hist []int32, p Params) (probs []float64, ambiguous bool) {
	z := refPenalize(logits, hist, p)
	n := len(z)
	probs = make([]float64, n)
	if p.Temperature == 0 {
		probs[argmax(z)] = 1
		return probs, false
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case z[a] > z[b]:
			return -1
		case z[a] < z[b]:
			return 1
		}
		return 0
	})
	keep := n
	if p.TopK > 0 && p.TopK < n {
		keep = p.TopK
	}
	T := float64(p.Temperature)
	mx := float64(z[idx[0]]) / T
	w := make([]float64, keep)
	var sum float64
	for i := range keep {
		w[i] = math.Exp(float64(z[idx[i]])/T - mx)
		sum += w[i]
	}
	if p.TopP > 0 && p.TopP < 1 {
		var cum float64
		for i := range keep {
			prev := cum
			cum += w[i] / sum
			if math.Abs(cum-float64(p.TopP)) < 1e-5 || math.Abs(prev-float64(p.TopP)) < 1e-5 {
				ambiguous = true
			}
			if cum >= float64(p.TopP) {
				keep = i + 1
				break
			}
		}
	}
	if p.MinP > 0 {
		lim := math.Log(float64(p.MinP))
		for i := range keep {
			d := float64(z[idx[i]])/T - mx
			if math.Abs(d-lim) < 1e-4 {
				ambiguous = true
			}
			if d < lim {
				keep = i
				break
			}
		}
	}
	sum = 0
	for i := range keep {
		sum += w[i]
	}
	for i := range keep {
		probs[idx[i]] = w[i] / sum
	}
	return probs, ambiguous
}

// stratified draws m tokens with the random source replaced by the
// quantiles (i+0.5)/m, so that each token's frequency is within 1/m of its
// probability — an exact, noise-free view of the sampling distribution.
func stratified(s *Sampler, logits []float32, hist []int32, m int) []float64 {
	i := 0
	s.draw = func() float64 { u := (float64(i) + 0.5) / float64(m); i++; return u }
	defer func() { s.draw = nil }()
	freq := make([]float64, len(logits))
	for range m {
		tok, _ := s.Sample(logits, hist)
		freq[tok] += 1 / float64(m)
	}
	return freq
}

func TestDistributionMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	type cfg struct {
		n int
		p Params
	}
	var cases []cfg
	for _, n := range []int{1, 2, 7, 64, 1000, 4096} {
		for _, p := range []Params{
			{Temperature: 1},
			{Temperature: 0.7},
			{Temperature: 1.5, TopK: 5},
			{Temperature: 0.8, TopK: 40, TopP: 0.95},
			{Temperature: 1, TopP: 0.5},
			{Temperature: 0.6, TopP: 0.9},
			{Temperature: 1.3, TopP: 0.99},
			{Temperature: 1, MinP: 0.05},
			{Temperature: 0.5, MinP: 0.2},
			{Temperature: 1, TopK: 300},
			{Temperature: 1.2, TopK: 1000, TopP: 0.9},
			{Temperature: 0.9, TopK: 700, MinP: 0.01},
			{Temperature: 1, TopK: 300, TopP: 0.8, MinP: 0.02},
			{Temperature: 2, TopP: 0.7, MinP: 0.1},
			{Temperature: 1.4, TopK: 50, MinP: 0.3},
			{Temperature: 0.9, TopK: 200, TopP: 0.9, MinP: 0.1},
			{Temperature: 1, TopK: 300, TopP: 0.99},
			{Temperature: 1, TopK: 1000, TopP: 0.995},
			{Temperature: 1, RepeatPenalty: 1.3, PresencePenalty: 0.5, FrequencyPenalty: 0.3, LogitBias: map[int32]float32{0: 3}},
		} {
			cases = append(cases, cfg{n, p})
		}
	}
	skipped := 0
	gens := []func(*rand.Rand, int) []float32{realistic, flat, denseHead}
	for ci, tc := range cases {
		z := gens[ci%len(gens)](r, tc.n)
		if tc.n >= 64 {
			// Exact ties across a cut must rank by id.
			z[1], z[2], z[3] = z[0], z[0], z[0]
		}
		hist := []int32{0, 1, 1, 5, int32(tc.n - 1)}
		want, amb := refDist(z, hist, tc.p)
		if amb {
			skipped++
			continue
		}
		const m = 3000
		got := stratified(mustNew(t, tc.p, tc.n), z, hist, m)
		for i := range got {
			if math.Abs(got[i]-want[i]) > 1.5/m+1e-6 {
				t.Fatalf("n=%d %+v: token %d frequency %.5f, want probability %.5g", tc.n, tc.p, i, got[i], want[i])
			}
			if got[i] > 0 && want[i] == 0 {
				t.Fatalf("n=%d %+v: token %d drawn but outside the truncated set", tc.n, tc.p, i)
			}
		}
	}
	if skipped > len(cases)/10 {
		t.Fatalf("%d of %d cases skipped as ambiguous", skipped, len(cases))
	}
}

func TestDistributionLargeVocab(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	z := realistic(r, 151936)
	for _, p := range []Params{
		{Temperature: 1},
		{Temperature: 0.7, TopP: 0.9},
		{Temperature: 1, TopK: 2000},
		{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.05},
	} {
		want, amb := refDist(z, nil, p)
		if amb {
			t.Fatalf("%+v: test logits sit on a cut; pick another seed", p)
		}
		const m = 300
		got := stratified(mustNew(t, p, len(z)), z, nil, m)
		for i := range got {
			if math.Abs(got[i]-want[i]) > 1.5/m+1e-6 {
				t.Fatalf("%+v: token %d frequency %.5f, want probability %.5f", p, i, got[i], want[i])
			}
		}
	}
}

// chiSquare999 holds the 0.999 quantiles of the chi-square distribution for
// 1..10 degrees of freedom.
var chiSquare999 = []float64{0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59}

func chiSquare(counts []int, probs []float64, draws int) (stat float64, dof int) {
	for i, p := range probs {
		if p == 0 {
			continue
		}
		e := p * float64(draws)
		d := float64(counts[i]) - e
		stat += d * d / e
		dof++
	}
	return stat, dof - 1
}

func TestChiSquare(t *testing.T) {
	logits := []float32{2.5, 2.1, 1.7, 1.0, 0.4, 0.0, -0.5, -1.2, -2.0, -3.0}
	cases := []struct {
		name string
		p    Params
	}{
		{"temperature 1", Params{Temperature: 1}},
		{"temperature 0.7", Params{Temperature: 0.7}},
		{"temperature 1.8", Params{Temperature: 1.8}},
		{"top-p 0.8", Params{Temperature: 1, TopP: 0.8}},
		{"top-p 0.6 at temperature 1.5", Params{Temperature: 1.5, TopP: 0.6}},
		{"top-k 4", Params{Temperature: 1.3, TopK: 4}},
		{"min-p 0.1", Params{Temperature: 1, MinP: 0.1}},
	}
	const draws = 60000
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.p.Seed = 12345
			want, amb := refDist(logits, nil, tc.p)
			if amb {
				t.Fatal("ambiguous cut")
			}
			s := mustNew(t, tc.p, len(logits))
			counts := make([]int, len(logits))
			for range draws {
				tok, _ := s.Sample(logits, nil)
				counts[tok]++
			}
			for i, c := range counts {
				if want[i] == 0 && c != 0 {
					t.Fatalf("token %d drawn %d times but is outside the truncated set", i, c)
				}
			}
			stat, dof := chiSquare(counts, want, draws)
			if dof > 0 && stat > chiSquare999[dof] {
				t.Fatalf("chi-square %.2f with %d dof exceeds %.2f: counts %v, probs %v", stat, dof, chiSquare999[dof], counts, want)
			}
			// The same counts must reject a slightly different distribution
			// (here: temperature 10% higher), or the test proves nothing.
			wrong := tc.p
			wrong.Temperature *= 1.1
			alt, _ := refDist(logits, nil, wrong)
			if st, df := chiSquare(counts, alt, draws); df > 0 && st < chiSquare999[df] {
				t.Fatalf("chi-square cannot tell temperature %v from %v (%.2f)", tc.p.Temperature, wrong.Temperature, st)
			}
		})
	}
}

func TestReproducibleWithSeed(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	z := realistic(r, 2000)
	p := Params{Temperature: 1.1, TopP: 0.97, Seed: 42}
	run := func(p Params) []int32 {
		s := mustNew(t, p, len(z))
		var out []int32
		for range 300 {
			tok, _ := s.Sample(z, out)
			out = append(out, tok)
		}
		return out
	}
	a, b := run(p), run(p)
	if !slices.Equal(a, b) {
		t.Fatal("same seed gave different tokens")
	}
	p.Seed = 43
	if c := run(p); slices.Equal(a, c) {
		t.Fatal("different seeds gave identical sequences")
	}
	p.Seed = 0
	s := mustNew(t, p, len(z))
	if s.Seed() == 0 {
		t.Fatal("Seed() must report the picked seed")
	}
	p.Seed = s.Seed()
	x := run(p)
	var y []int32
	for range 300 {
		tok, _ := s.Sample(z, y)
		y = append(y, tok)
	}
	if !slices.Equal(x, y) {
		t.Fatal("a sampler seeded with Seed() does not repeat the original")
	}
}

func TestPenalties(t *testing.T) {
	cases := []struct {
		name string
		p    Params
		z    []float32
		hist []int32
		want []float32
	}{
		{"repeat divides positive, multiplies negative", Params{RepeatPenalty: 2},
			[]float32{4, -4, 0, 1}, []int32{0, 1, 2}, []float32{2, -8, 0, 1}},
		{"repeat counts distinct tokens once", Params{RepeatPenalty: 2},
			[]float32{4, 4}, []int32{0, 0, 0}, []float32{2, 4}},
		{"repeat window", Params{RepeatPenalty: 2, RepeatLastN: 2},
			[]float32{4, 4, 4}, []int32{0, 1, 2}, []float32{4, 2, 2}},
		{"repeat whole history", Params{RepeatPenalty: 2, RepeatLastN: -1},
			[]float32{4, 4, 4}, []int32{0, 1, 2}, []float32{2, 2, 2}},
		{"repeat below 1 encourages", Params{RepeatPenalty: 0.5},
			[]float32{4, -4}, []int32{0, 1}, []float32{8, -2}},
		{"frequency counts all history", Params{FrequencyPenalty: 0.5, RepeatLastN: 1},
			[]float32{1, 1, 1}, []int32{0, 0, 0, 1}, []float32{-0.5, 0.5, 1}},
		{"presence once per token", Params{PresencePenalty: 1.5},
			[]float32{1, 1, 1}, []int32{0, 0, 2}, []float32{-0.5, 1, -0.5}},
		{"negative presence rewards", Params{PresencePenalty: -1},
			[]float32{1, 1}, []int32{1}, []float32{1, 2}},
		{"all three, repeat first", Params{RepeatPenalty: 2, FrequencyPenalty: 1, PresencePenalty: 1},
			[]float32{6, -2}, []int32{0, 0, 1}, []float32{6/2 - 2 - 1, -2*2 - 1 - 1}},
		{"bias then penalty", Params{RepeatPenalty: 2, LogitBias: map[int32]float32{0: 2}},
			[]float32{2, 0}, []int32{0}, []float32{2, 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := mustNew(t, tc.p, len(tc.z))
			orig := slices.Clone(tc.z)
			got := s.adjust(tc.z, tc.hist, 0)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("adjusted logits %v, want %v", got, tc.want)
			}
			if ref := refPenalize(tc.z, tc.hist, tc.p); !slices.Equal(ref, tc.want) {
				t.Fatalf("reference gives %v (test table wrong?)", ref)
			}
			if !slices.Equal(tc.z, orig) {
				t.Fatal("caller's logits were modified")
			}
			for i, c := range s.counts {
				if c != 0 {
					t.Fatalf("counts[%d] = %d left behind", i, c)
				}
			}
			// A second call must give the same result (scratch reset).
			if again := s.adjust(tc.z, tc.hist, 0); !slices.Equal(again, tc.want) {
				t.Fatalf("second call gave %v", again)
			}
		})
	}
}

// TestPenaltiesPromptAndOutput checks which part of a sequence each penalty
// sees (SampleSeq): the repetition penalty its last RepeatLastN tokens,
// prompt included; presence and frequency penalties the generated tokens
// only.
func TestPenaltiesPromptAndOutput(t *testing.T) {
	cases := []struct {
		name   string
		p      Params
		z      []float32
		seq    []int32
		prompt int
		want   []float32
	}{
		{"repeat sees the prompt", Params{RepeatPenalty: 2},
			[]float32{4, 4, 4}, []int32{0, 1}, 2, []float32{2, 2, 4}},
		{"repeat sees prompt and output", Params{RepeatPenalty: 2},
			[]float32{4, 4, 4}, []int32{0, 2}, 1, []float32{2, 4, 2}},
		{"repeat window reaches back into the prompt", Params{RepeatPenalty: 2, RepeatLastN: 2},
			[]float32{4, 4, 4}, []int32{0, 1, 2}, 2, []float32{4, 2, 2}},
		{"repeat window ends before an old prompt token", Params{RepeatPenalty: 2, RepeatLastN: 1},
			[]float32{4, 4, 4}, []int32{0, 1, 2}, 2, []float32{4, 4, 2}},
		{"repeat whole sequence", Params{RepeatPenalty: 2, RepeatLastN: -1},
			[]float32{4, 4, 4}, []int32{0, 1, 2}, 1, []float32{2, 2, 2}},
		{"presence ignores the prompt", Params{PresencePenalty: 1},
			[]float32{1, 1, 1}, []int32{0, 1, 1}, 2, []float32{1, 0, 1}},
		{"frequency counts output occurrences only", Params{FrequencyPenalty: 0.5},
			[]float32{1, 1}, []int32{0, 0, 0, 0}, 2, []float32{0, 1}},
		{"prompt only: no presence or frequency", Params{PresencePenalty: 1, FrequencyPenalty: 1},
			[]float32{1, 1}, []int32{0, 1}, 2, []float32{1, 1}},
		{"prompt token in the window, not in the output", Params{RepeatPenalty: 2, PresencePenalty: 1},
			[]float32{4, 4, 4}, []int32{0, 1}, 1, []float32{2, 1, 4}},
		{"all three on prompt and output", Params{RepeatPenalty: 2, FrequencyPenalty: 1, PresencePenalty: 1},
			[]float32{6, -2, 3}, []int32{2, 0, 0, 1}, 2, []float32{6/2 - 1 - 1, -2*2 - 1 - 1, 3.0 / 2}},
		{"no prompt is Sample", Params{RepeatPenalty: 2, FrequencyPenalty: 1},
			[]float32{4, 4}, []int32{0, 0}, 0, []float32{0, 4}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := mustNew(t, tc.p, len(tc.z))
			got := s.adjust(tc.z, tc.seq, tc.prompt)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("adjusted logits %v, want %v", got, tc.want)
			}
			if ref := refPenalizeSeq(tc.z, tc.seq, tc.prompt, tc.p); !slices.Equal(ref, tc.want) {
				t.Fatalf("reference gives %v (test table wrong?)", ref)
			}
			for i, c := range s.counts {
				if c != 0 {
					t.Fatalf("counts[%d] = %d left behind", i, c)
				}
			}
			// The greedy choice follows the adjusted logits.
			want := int32(slices.Index(tc.want, slices.Max(tc.want)))
			if tok, _ := s.SampleSeq(tc.z, tc.seq, tc.prompt); tok != want {
				t.Fatalf("SampleSeq = %d, want %d", tok, want)
			}
		})
	}
}

func TestLogprobs(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	z := realistic(r, 20)
	z[3], z[11] = z[0], z[0] // a tie: lower id first
	hist := []int32{4, 4, 7}
	for _, p := range []Params{
		{TopLogprobs: 20, RepeatPenalty: 1.2, LogitBias: map[int32]float32{5: 2}},
		{Temperature: 0.3, TopK: 3, TopLogprobs: 20, RepeatPenalty: 1.2, LogitBias: map[int32]float32{5: 2}},
		{Temperature: 1, TopP: 0.5, TopLogprobs: 20, RepeatPenalty: 1.2, LogitBias: map[int32]float32{5: 2}},
		{Temperature: 0.6, TopP: 0.8, TopLogprobs: 20, RepeatPenalty: 1.2, LogitBias: map[int32]float32{5: 2}},
		{Temperature: 1.4, TopLogprobs: 20, RepeatPenalty: 1.2, LogitBias: map[int32]float32{5: 2}},
		{Temperature: 1.7, MinP: 0.3, TopLogprobs: 20, RepeatPenalty: 1.2, LogitBias: map[int32]float32{5: 2}},
	} {
		adj := refPenalize(z, hist, p)
		var lse float64
		for _, v := range adj {
			lse += math.Exp(float64(v))
		}
		lse = math.Log(lse)
		s := mustNew(t, p, len(z))
		var first []TokenLogprob
		for step := range 50 {
			tok, lp := s.Sample(z, hist)
			if lp.Token != tok {
				t.Fatal("Logprobs.Token differs from the returned token")
			}
			if want := float64(adj[tok]) - lse; math.Abs(float64(lp.Logprob)-want) > 2e-6 {
				t.Fatalf("%+v: logprob %v, want %v", p, lp.Logprob, want)
			}
			if len(lp.Top) != 20 {
				t.Fatalf("%d top entries, want 20", len(lp.Top))
			}
			var sum float64
			for i, e := range lp.Top {
				sum += math.Exp(float64(e.Logprob))
				if want := float64(adj[e.Token]) - lse; math.Abs(float64(e.Logprob)-want) > 2e-6 {
					t.Fatalf("top %d: token %d logprob %v, want %v", i, e.Token, e.Logprob, want)
				}
				if i > 0 {
					prev := lp.Top[i-1]
					if prev.Logprob < e.Logprob || (prev.Logprob == e.Logprob && prev.Token > e.Token) {
						t.Fatalf("top not ranked: %v", lp.Top)
					}
				}
			}
			if math.Abs(sum-1) > 1e-5 {
				t.Fatalf("probabilities of all 20 tokens sum to %v", sum)
			}
			if step == 0 {
				first = slices.Clone(lp.Top)
			} else if !slices.Equal(first, lp.Top) {
				t.Fatal("top logprobs changed between steps on the same logits")
			}
		}
		// Temperature and truncation must not change the reported logprobs.
		g := mustNew(t, Params{TopLogprobs: 20, RepeatPenalty: 1.2, LogitBias: map[int32]float32{5: 2}}, len(z))
		if _, lp := g.Sample(z, hist); !slices.Equal(lp.Top, first) {
			t.Fatalf("%+v: top logprobs depend on sampling settings", p)
		}
	}

	// Fewer requested than the vocabulary; ties rank by id; banned tokens
	// are never listed.
	s := mustNew(t, Params{TopLogprobs: 3, LogitBias: map[int32]float32{2: float32(math.Inf(-1))}}, 6)
	_, lp := s.Sample([]float32{1, 3, 9, 3, 3, 0}, nil)
	if ids := []int32{lp.Top[0].Token, lp.Top[1].Token, lp.Top[2].Token}; !slices.Equal(ids, []int32{1, 3, 4}) {
		t.Fatalf("top ids %v, want [1 3 4]", ids)
	}
	s = mustNew(t, Params{TopLogprobs: 5, LogitBias: map[int32]float32{0: float32(math.Inf(-1))}}, 3)
	if _, lp := s.Sample([]float32{1, 2, 3}, nil); len(lp.Top) != 2 {
		t.Fatalf("top %v: want the two tokens that are not banned", lp.Top)
	}
	// Not requested: NaN, no list.
	s = mustNew(t, Params{Temperature: 1}, 3)
	if _, lp := s.Sample([]float32{1, 2, 3}, nil); !math.IsNaN(float64(lp.Logprob)) || lp.Top != nil {
		t.Fatalf("unrequested logprobs: %+v", lp)
	}
	// Logprobs alone.
	s = mustNew(t, Params{Logprobs: true}, 3)
	if _, lp := s.Sample([]float32{0, 0, 0}, nil); math.Abs(float64(lp.Logprob)+math.Log(3)) > 1e-6 || len(lp.Top) != 0 {
		t.Fatalf("uniform logprob %+v, want -ln 3", lp)
	}
}

func TestInfiniteLogits(t *testing.T) {
	s := mustNew(t, Params{Temperature: 1, Logprobs: true}, 4)
	logits := []float32{1, inf, 2, inf}
	seen := map[int32]int{}
	for range 400 {
		tok, lp := s.Sample(logits, nil)
		seen[tok]++
		if math.Abs(float64(lp.Logprob)+math.Log(2)) > 1e-6 {
			t.Fatalf("logprob %v, want -ln 2", lp.Logprob)
		}
	}
	if len(seen) != 2 || seen[1] == 0 || seen[3] == 0 {
		t.Fatalf("draws %v: want only and both +Inf tokens", seen)
	}
	if logits[1] != inf {
		t.Fatal("caller's logits were modified")
	}
}

func TestNoAllocations(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 11))
	z := realistic(r, 32000)
	hist := []int32{1, 2, 3, 4, 5, 5, 5}
	for _, p := range []Params{
		{},
		{TopLogprobs: 5},
		{Temperature: 0.8, TopK: 40, TopP: 0.95, Logprobs: true},
		{Temperature: 1, TopP: 0.9, RepeatPenalty: 1.1, PresencePenalty: 0.2},
		{Temperature: 0.7, MinP: 0.05, LogitBias: map[int32]float32{3: 1}},
		{Temperature: 1, TopK: 5000, TopP: 0.9, MinP: 0.01},
	} {
		s := mustNew(t, p, len(z))
		s.Sample(z, hist) // grow scratch
		if n := testing.AllocsPerRun(20, func() { s.Sample(z, hist) }); n != 0 {
			t.Errorf("%+v: %v allocations per Sample", p, n)
		}
	}
}

// Every sampling path computes the logprob normalizer with its own loop;
// they must agree bit for bit, on a vocabulary large enough to take each.
func TestLogprobsIdenticalAcrossPaths(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 13))
	for _, z := range [][]float32{realistic(r, 5000), flat(r, 5000)} {
		var want []TokenLogprob
		for _, p := range []Params{
			{},
			{Temperature: 1},
			{Temperature: 1.4},
			{Temperature: 0.6, TopP: 0.8},
			{Temperature: 1, TopP: 0.8},
			{Temperature: 0.8, TopK: 40},
			{Temperature: 0.8, TopK: 3000},
			{Temperature: 0.9, MinP: 0.05},
			{Temperature: 0.9, MinP: 0.001},
			{Temperature: 1.2, TopP: 0.999},
		} {
			p.TopLogprobs = 20
			s := mustNew(t, p, len(z))
			_, lp := s.Sample(z, nil)
			if want == nil {
				want = slices.Clone(lp.Top)
				continue
			}
			if !slices.Equal(lp.Top, want) {
				t.Fatalf("%+v: top logprobs %v differ from greedy's %v", p, lp.Top[:3], want[:3])
			}
		}
	}
}

// TestParamsJSON: parameters cross a process boundary unchanged, a banned
// token (bias -Inf, which JSON cannot hold) included.
func TestParamsJSON(t *testing.T) {
	p := Params{Temperature: 0.5, TopK: 3, TopP: 0.9, MinP: 0.1, RepeatPenalty: 1.1, RepeatLastN: -1,
		PresencePenalty: 0.5, FrequencyPenalty: -0.5, Seed: 7, Logprobs: true, TopLogprobs: 4,
		LogitBias: map[int32]float32{2: 1.5, 9: float32(math.Inf(-1)), 4: float32(math.Inf(-1))}}
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var back Params
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, back) {
		t.Fatalf("round trip:\n got %+v\nwant %+v\njson %s", back, p, data)
	}
	if err := json.Unmarshal([]byte(`{"banned_tokens":"x"}`), &back); err == nil {
		t.Fatal("a malformed ban list was accepted")
	}
}
