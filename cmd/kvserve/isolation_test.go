package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/api/apitest"
)

// isolationServer is a server with two tenants, a and b.
func isolationServer(t *testing.T, extra ...string) (*servingServer, func(key, prompt string, ext string) (ttftMS float64, cached int)) {
	t.Helper()
	s := startServe(t, append([]string{"--model", apitest.ModelFile(t), "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(),
		"--threads", "1", "--kv-disk", "off", "--api-key", "key-a=tenant-a", "--api-key", "key-b=tenant-b"}, extra...)...)
	chat := func(key, prompt, ext string) (float64, int) {
		t.Helper()
		body := `{"model":"` + s.model + `","max_tokens":1,"messages":[{"role":"user","content":` + quote(prompt) + `}]` + ext + `}`
		req, _ := http.NewRequest("POST", s.base+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var out struct {
			Usage struct {
				Details struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
			Kvserve struct {
				TTFT float64 `json:"ttft_ms"`
			} `json:"kvserve"`
		}
		if resp.StatusCode != 200 || json.Unmarshal(data, &out) != nil {
			t.Fatalf("status %d: %s", resp.StatusCode, data)
		}
		return out.Kvserve.TTFT, out.Usage.Details.CachedTokens
	}
	return s, chat
}

func quote(s string) string { b, _ := json.Marshal(s); return string(b) }

// words is a prompt of n random words, different for every seed.
func words(seed uint64, n int) string {
	rng := rand.New(rand.NewPCG(seed, 7))
	w := make([]string, n)
	for i := range w {
		w[i] = fmt.Sprintf("w%d", rng.IntN(5000))
	}
	return strings.Join(w, " ")
}

// TestTimingProbe: tenant b sends, once each and interleaved, prompts that
// tenant a has cached and prompts nobody sent; the two distributions of
// the TTFT b sees (the server reports it) are indistinguishable
// (two-sample Kolmogorov–Smirnov), while a's own reuse of its prompts is
// at least 5× faster than cold.
func TestTimingProbe(t *testing.T) {
	if testing.Short() {
		t.Skip("a timing probe of 200 requests")
	}
	_, chat := isolationServer(t, "--kv-cache-memory", "64MiB")
	const n, length = 50, 120 // words: about 1,000 tokens each
	var aCold, aWarm []float64
	for i := range n {
		p := words(uint64(i), length)
		cold, _ := chat("key-a", p, "")
		warm, cached := chat("key-a", p, "")
		if cached == 0 {
			t.Fatalf("a's own prompt %d was not a hit", i)
		}
		aCold, aWarm = append(aCold, cold), append(aWarm, warm)
	}
	if ratio := median(aCold) / median(aWarm); ratio < 5 {
		t.Errorf("a's reuse is %.1f× faster than cold (median %.2f vs %.2f ms); want at least 5×", ratio, median(aCold), median(aWarm))
	}
	// b's own requests share the chat template's system prompt (and, by
	// chance, a block of a prompt's first words), which b caches for
	// itself; a hit on a's prompt itself would be most of its thousand
	// tokens.
	var cachedByA, fresh []float64
	for i := range n {
		ttft, hitA := chat("key-b", words(uint64(i), length), "")
		cachedByA = append(cachedByA, ttft)
		ttft, _ = chat("key-b", words(uint64(1000+i), length), "")
		fresh = append(fresh, ttft)
		if hitA > 300 {
			t.Fatalf("b's request %d hit %d tokens of a's prompt", i, hitA)
		}
	}
	d, p := ksTest(cachedByA, fresh)
	t.Logf("b's TTFT on a's cached prompts: median %.2f ms; on fresh ones: %.2f ms; KS D=%.3f p=%.3g (a: cold %.2f ms, warm %.2f ms)",
		median(cachedByA), median(fresh), d, p, median(aCold), median(aWarm))
	if p < 0.001 {
		t.Errorf("b can tell a's cached prompts from fresh ones: KS D=%.3f, p=%.3g", d, p)
	}
}

// TestFloodKeepsPins: b sends ten pools' worth of unique prompts; a's
// pinned prompt still reports all its full blocks cached.
func TestFloodKeepsPins(t *testing.T) {
	_, chat := isolationServer(t, "--kv-cache-memory", "4MiB")
	doc := words(1, 60)
	pin := `,"kvserve":{"retention":"pinned","ttl":"1h"}`
	chat("key-a", doc, pin)
	_, before := chat("key-a", doc, pin)
	if before == 0 {
		t.Fatal("a's pinned prompt was not a hit")
	}
	// The pool of 4 MiB holds 4,096 tokens of this model: ten pools' worth
	// is about fifty prompts of 100 words.
	for i := range 52 {
		chat("key-b", words(uint64(100+i), 100), "")
	}
	if _, after := chat("key-a", doc, pin); after != before {
		t.Fatalf("after b's flood a's pinned prompt had %d cached tokens, %d before", after, before)
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// ksTest is the two-sample Kolmogorov–Smirnov test: the largest distance
// between the samples' empirical distributions, and its asymptotic p-value
// (with the usual small-sample correction).
func ksTest(a, b []float64) (d, p float64) {
	x, y := slices.Clone(a), slices.Clone(b)
	slices.Sort(x)
	slices.Sort(y)
	i, j := 0, 0
	for i < len(x) && j < len(y) {
		v := min(x[i], y[j])
		for i < len(x) && x[i] <= v {
			i++
		}
		for j < len(y) && y[j] <= v {
			j++
		}
		d = max(d, math.Abs(float64(i)/float64(len(x))-float64(j)/float64(len(y))))
	}
	ne := float64(len(x)*len(y)) / float64(len(x)+len(y))
	lambda := (math.Sqrt(ne) + 0.12 + 0.11/math.Sqrt(ne)) * d
	if lambda < 0.2 { // the series converges too slowly here; Q is 1 to within 1e-9
		return d, 1
	}
	for k := 1; k <= 100; k++ {
		term := 2 * math.Pow(-1, float64(k-1)) * math.Exp(-2*float64(k*k)*lambda*lambda)
		p += term
		if math.Abs(term) < 1e-12 {
			break
		}
	}
	return d, min(max(p, 0), 1)
}

// TestKSTest checks the statistic on samples with a known answer.
func TestKSTest(t *testing.T) {
	same := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if d, p := ksTest(same, same); d != 0 || p < 0.99 {
		t.Errorf("identical samples: D=%v p=%v", d, p)
	}
	var lo, hi []float64
	for i := range 50 {
		lo, hi = append(lo, float64(i)), append(hi, float64(i+100))
	}
	if d, p := ksTest(lo, hi); d != 1 || p > 1e-10 {
		t.Errorf("disjoint samples: D=%v p=%v", d, p)
	}
}
