package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"time"

	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/sample"
)

// TraceRequest is one request of a Mooncake-format trace (FAST'25): when it
// arrived, its prompt and output lengths, and one id per 512-token block
// of its prompt that identifies the block together with every block
// before it (equal ids at the same place, equal prefixes).
type TraceRequest struct {
	Timestamp    int64   `json:"timestamp"` // ms since the trace's start
	InputLength  int     `json:"input_length"`
	OutputLength int     `json:"output_length"`
	HashIDs      []int64 `json:"hash_ids"`
}

// TraceBlockTokens is the tokens one trace hash id stands for.
const TraceBlockTokens = 512

// maxTraceInput bounds a trace prompt (a malformed line must not make the
// replay allocate without limit).
const maxTraceInput = 1 << 22

// ReadTrace reads a Mooncake-format JSON-lines trace and checks every line:
// lengths in range, as many hash ids as 512-token blocks, timestamps never
// going back.
func ReadTrace(r io.Reader) ([]TraceRequest, error) {
	var out []TraceRequest
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Bytes()
		if len(text) == 0 {
			continue
		}
		var t TraceRequest
		if err := json.Unmarshal(text, &t); err != nil {
			return nil, fmt.Errorf("sim: trace line %d: %w", line, err)
		}
		switch {
		case t.InputLength < 1 || t.InputLength > maxTraceInput:
			return nil, fmt.Errorf("sim: trace line %d: input_length %d out of range [1, %d]", line, t.InputLength, maxTraceInput)
		case t.OutputLength < 0 || t.OutputLength > maxTraceInput:
			return nil, fmt.Errorf("sim: trace line %d: output_length %d out of range", line, t.OutputLength)
		case len(t.HashIDs) != (t.InputLength+TraceBlockTokens-1)/TraceBlockTokens:
			return nil, fmt.Errorf("sim: trace line %d: %d hash ids for %d input tokens (want one per %d)", line, len(t.HashIDs), t.InputLength, TraceBlockTokens)
		case t.Timestamp < 0 || t.Timestamp > math.MaxInt64/int64(time.Millisecond):
			return nil, fmt.Errorf("sim: trace line %d: timestamp %d out of range", line, t.Timestamp)
		case len(out) > 0 && t.Timestamp < out[len(out)-1].Timestamp:
			return nil, fmt.Errorf("sim: trace line %d: timestamp %d before the previous line's", line, t.Timestamp)
		}
		out = append(out, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("sim: trace line %d: %w", line+1, err)
	}
	return out, nil
}

// Arrival turns t into an engine request arriving at its timestamp times
// stretch. Each hash id becomes 512 tokens derived from it (below vocab),
// so requests that share ids share prompt blocks in the engine too; the
// output is exactly output_length tokens (at least 1).
func (t TraceRequest) Arrival(vocab int, stretch float64) Arrival {
	prompt := make([]int32, 0, t.InputLength)
	for _, id := range t.HashIDs {
		n := min(TraceBlockTokens, t.InputLength-len(prompt))
		h := mix(uint64(id))
		for range n {
			h = mix(h)
			prompt = append(prompt, int32(h%uint64(vocab)))
		}
	}
	out := max(t.OutputLength, 1)
	return Arrival{
		At: time.Duration(float64(t.Timestamp) * stretch * float64(time.Millisecond)),
		Request: engine.Request{Prompt: prompt, MaxTokens: out, IgnoreEOS: true,
			Sampling: sample.Params{TopP: 1}},
	}
}

// Summary condenses a run's outcomes.
type Summary struct {
	Requests, Failed int
	// TTFT and E2E percentiles, in virtual time.
	TTFTp50, TTFTp90, TTFTp99, E2Ep50        time.Duration
	PromptTokens, CachedTokens, OutputTokens int64
	// HitRate is CachedTokens / PromptTokens.
	HitRate float64
}

// Summarize condenses outcomes.
func Summarize(outs []Outcome) Summary {
	var s Summary
	var ttft, e2e []time.Duration
	for _, o := range outs {
		s.Requests++
		if o.Err != nil || o.Finish == engine.FinishError {
			s.Failed++
			continue
		}
		ttft = append(ttft, o.TTFT)
		e2e = append(e2e, o.E2E)
		s.PromptTokens += int64(o.Usage.PromptTokens)
		s.CachedTokens += int64(o.Usage.CachedTokens)
		s.OutputTokens += int64(o.Usage.CompletionTokens)
	}
	slices.Sort(ttft)
	slices.Sort(e2e)
	pct := func(d []time.Duration, p int) time.Duration {
		if len(d) == 0 {
			return 0
		}
		return d[min(len(d)-1, len(d)*p/100)]
	}
	s.TTFTp50, s.TTFTp90, s.TTFTp99, s.E2Ep50 = pct(ttft, 50), pct(ttft, 90), pct(ttft, 99), pct(e2e, 50)
	if s.PromptTokens > 0 {
		s.HitRate = float64(s.CachedTokens) / float64(s.PromptTokens)
	}
	return s
}
