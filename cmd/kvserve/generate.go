package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/kvserve/kvserve/internal/batch"
	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/kv"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/sample"
	"github.com/kvserve/kvserve/internal/tensor"
	"github.com/kvserve/kvserve/internal/tokenizer"
)

type generateOptions struct {
	modelPath    string
	weights      weightsMemory
	prompt       string
	promptTokens string
	system       string
	chat         bool
	maxTokens    int
	printTokens  bool
	jsonStats    bool
	threads      int
	batch        int
	stops        []string
	ignoreEOS    bool
	cpuProfile   string
	sampling     sample.Params
}

func newGenerateCmd() *cobra.Command {
	var o generateOptions
	cmd := &cobra.Command{
		Use:   "generate --model FILE (--prompt TEXT | --prompt-tokens IDS) [flags]",
		Short: "Generate a continuation of a prompt (stdout: the text, streamed; stderr: timings)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runGenerate(cmd, &o) },
	}
	f := cmd.Flags()
	f.StringVarP(&o.modelPath, "model", "m", "", "GGUF model file (required)")
	weightsMemoryFlags(f, &o.weights)
	f.StringVarP(&o.prompt, "prompt", "p", "", "prompt text")
	f.StringVar(&o.promptTokens, "prompt-tokens", "", "prompt as comma-separated token ids, used as given (no BOS added)")
	f.BoolVar(&o.chat, "chat", false, "render the prompt as a user message with the model's chat template")
	f.StringVar(&o.system, "system", "", "system message (with --chat)")
	f.IntVarP(&o.maxTokens, "n", "n", 128, "maximum tokens to generate; 0 runs the prompt only (prefill timing)")
	f.BoolVar(&o.printTokens, "print-tokens", false, "print generated token ids (space-separated) instead of text")
	f.BoolVar(&o.jsonStats, "json-stats", false, "end stderr with one JSON line of statistics")
	f.IntVarP(&o.threads, "threads", "t", 0, "compute threads (default: all cores)")
	f.IntVar(&o.batch, "batch", 512, "prompt tokens per forward pass")
	f.StringArrayVar(&o.stops, "stop", nil, "stop string (repeatable)")
	f.BoolVar(&o.ignoreEOS, "ignore-eos", false, "keep generating past end-of-generation tokens")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the generation to this file (for developers)")
	s := &o.sampling
	f.Float32Var(&s.Temperature, "temperature", 0.8, "sampling temperature; 0 = greedy")
	f.IntVar(&s.TopK, "top-k", 40, "keep the k most likely tokens; 0 = all")
	f.Float32Var(&s.TopP, "top-p", 0.95, "nucleus sampling mass; 1 = off")
	f.Float32Var(&s.MinP, "min-p", 0.05, "drop tokens below this fraction of the top probability; 0 = off")
	f.Float32Var(&s.RepeatPenalty, "repeat-penalty", 1, "penalty for tokens in the last --repeat-last-n; 1 = off")
	f.IntVar(&s.RepeatLastN, "repeat-last-n", 64, "window of the repeat penalty")
	f.Float32Var(&s.PresencePenalty, "presence-penalty", 0, "OpenAI-style presence penalty")
	f.Float32Var(&s.FrequencyPenalty, "frequency-penalty", 0, "OpenAI-style frequency penalty")
	f.Uint64Var(&s.Seed, "seed", 0, "random seed for reproducible sampling (default: random)")
	_ = cmd.MarkFlagRequired("model")
	return cmd
}

type generateStats struct {
	PromptTokens    int     `json:"prompt_tokens"`
	PrefillTokS     float64 `json:"prefill_tok_s"`
	GeneratedTokens int     `json:"generated_tokens"`
	DecodeTokS      float64 `json:"decode_tok_s"`
}

// generateBlockSize is the KV block size of generate's engine (the
// engine's default), fixed here because the KV pool is sized in blocks.
const generateBlockSize = 16

func runGenerate(cmd *cobra.Command, o *generateOptions) error {
	stdout := bufio.NewWriter(cmd.OutOrStdout())
	defer stdout.Flush()
	stderr := cmd.ErrOrStderr()

	if err := o.check(); err != nil {
		return err
	}
	mf, err := openModelWithProgress(o.modelPath, o.weights, 0, o.threads, stderr)
	if err != nil {
		return err
	}
	defer mf.Close()
	tok, err := tokenizer.FromGGUF(mf.GGUF)
	if err != nil {
		return fmt.Errorf("load tokenizer of %s: %w", o.modelPath, err)
	}
	prompt, err := buildPrompt(o, tok)
	if err != nil {
		return err
	}
	if len(prompt) == 0 {
		return fmt.Errorf("the prompt is empty")
	}
	// The engine checks the sampling settings too, but only once the
	// forward pass is built: fail before that.
	if _, err := sample.New(o.sampling, mf.Model.Config.Vocab); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	maxTokens, err := fitContext(len(prompt), o.maxTokens, mf.Model.Config.Context, stderr)
	if err != nil {
		return err
	}
	return generateOnEngine(cmd.Context(), mf.Model, tok, o, prompt, maxTokens, stdout, stderr)
}

// generateOnEngine runs prompt on an engine of its own, writing the output
// to stdout and the timings to stderr.
func generateOnEngine(ctx context.Context, m *model.Model, tok *tokenizer.Tokenizer, o *generateOptions,
	prompt []int32, maxTokens int, stdout *bufio.Writer, stderr io.Writer) error {
	fwd, err := model.NewForwarder(m, model.ForwarderOptions{Threads: o.threads, MaxTokens: o.batch, KVType: tensor.F16})
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	defer fwd.Close()
	e, err := newGenerateEngine(fwd, tok, o, len(prompt)+max(maxTokens, 1))
	if err != nil {
		return err
	}
	defer e.Close() // before the forward pass it drives (defers run last first)

	stopProfile, err := startCPUProfile(o.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()

	out := newGenerateOutput(stdout, tok, o)
	times, err := generate(ctx, e, o, prompt, maxTokens, out.token)
	if err != nil {
		return err
	}
	if err := out.finish(); err != nil {
		return err
	}
	reportTimes(stderr, times, len(prompt), fwd.Threads(), o.jsonStats)
	return nil
}

// reportTimes writes the timing line and, with asJSON, the statistics as
// one JSON line that scripts read.
func reportTimes(w io.Writer, times *tokenTimes, promptTokens, threads int, asJSON bool) {
	stats := times.stats(promptTokens)
	fmt.Fprintf(w, "prefill: %d tokens in %.3f s (%.1f tok/s); decode: %d tokens in %.3f s (%.1f tok/s); %d threads\n",
		stats.PromptTokens, times.prefill().Seconds(), stats.PrefillTokS, times.decodeTokens(), times.decode().Seconds(),
		stats.DecodeTokS, threads)
	if asJSON {
		line, _ := json.Marshal(stats)
		fmt.Fprintln(w, string(line))
	}
}

// check validates the options that need no model.
func (o *generateOptions) check() error {
	switch {
	case (o.prompt == "") == (o.promptTokens == ""):
		return fmt.Errorf("give exactly one of --prompt or --prompt-tokens")
	case o.maxTokens < 0:
		return fmt.Errorf("-n must be at least 0")
	case o.batch < 1:
		return fmt.Errorf("--batch must be at least 1")
	}
	return nil
}

// fitContext bounds the tokens to generate by the model's training context,
// which the engine does not let a sequence exceed: past it a model without
// learned positions drifts into noise.
func fitContext(prompt, n, context int, warn io.Writer) (int, error) {
	switch {
	case prompt >= context:
		return 0, fmt.Errorf("the prompt (%d tokens) leaves no room in the model's context of %d tokens", prompt, context)
	case prompt+n > context:
		fmt.Fprintf(warn, "warning: prompt (%d) + generation (%d) exceeds the model's training context %d: generating at most %d tokens\n",
			prompt, n, context, context-prompt)
		return context - prompt, nil
	}
	return n, nil
}

// newGenerateEngine starts an engine for one sequence of up to seqLen
// tokens on fwd. The caller closes it before fwd.
func newGenerateEngine(fwd *model.Forwarder, tok *tokenizer.Tokenizer, o *generateOptions, seqLen int) (*engine.Engine, error) {
	kvBytes, err := kvMemoryFor(fwd.Shape(), seqLen)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	e, err := engine.New(fwd, engine.Config{
		MaxBatchTokens: o.batch,
		BlockSize:      generateBlockSize,
		KVMemoryBytes:  kvBytes,
		// One request never meets a prefix of another: hashing its
		// blocks would be wasted work inside the prefill timing.
		DisablePrefixCache: true,
		ModelID:            strings.TrimSuffix(filepath.Base(o.modelPath), ".gguf"),
		EndOfGeneration:    tok.EOGs(),
	})
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	return e, nil
}

// kvMemoryFor sizes a KV pool for one sequence of n tokens: whole blocks,
// plus one spare so that admission (which wants room for the next token
// too) never waits on rounding.
func kvMemoryFor(shape batch.Shape, n int) (int64, error) {
	typ, err := kv.ElemTypeOf(shape.KVType)
	if err != nil {
		return 0, err
	}
	c := kv.Config{BlockSize: generateBlockSize, Layers: shape.Layers, KVDim: shape.KVDim, Type: typ}
	blocks := (n+generateBlockSize-1)/generateBlockSize + 1
	return int64(blocks) * c.BlockBytes(), nil
}

// generate submits prompt to e and passes every generated token to emit
// until the request ends or emit asks to stop (a stop string matched; the
// request is then cancelled). With maxTokens 0 only the prompt runs: the
// engine samples one token, which emit does not see, so that the prefill
// can still be timed.
func generate(ctx context.Context, e *engine.Engine, o *generateOptions, prompt []int32, maxTokens int,
	emit func(int32) (stop bool, err error)) (*tokenTimes, error) {
	req := engine.Request{Prompt: prompt, MaxTokens: max(maxTokens, 1), Sampling: o.sampling, IgnoreEOS: o.ignoreEOS, N: 1}
	times := &tokenTimes{submit: time.Now()}
	st, err := e.Submit(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("generate: %w", err)
	}
	defer st.Cancel() // frees the request's blocks if it is left early
	var buf []engine.Output
	for {
		buf, err = st.Recv(ctx, buf[:0])
		for _, out := range buf {
			if out.Err != nil {
				return nil, fmt.Errorf("generate: %w", out.Err)
			}
			if out.Token < 0 {
				continue
			}
			times.add(out.Time)
			if maxTokens == 0 {
				continue
			}
			times.generated++
			stop, err := emit(out.Token)
			if err != nil {
				return nil, err
			}
			if stop {
				return times, nil
			}
		}
		if errors.Is(err, engine.ErrDone) {
			return times, nil
		}
		if err != nil {
			return nil, fmt.Errorf("generate: %w", err)
		}
	}
}

// tokenTimes are the timings of one request from its stream: when it was
// submitted and when the engine sampled its first and last tokens.
type tokenTimes struct {
	submit, first, last time.Time
	// generated counts the tokens passed on to the output.
	generated int
}

func (t *tokenTimes) add(at time.Time) {
	if t.first.IsZero() {
		t.first = at
	}
	t.last = at
}

// prefill is the time to the first token: the prompt's forward passes and
// the first draw.
func (t *tokenTimes) prefill() time.Duration {
	if t.first.IsZero() {
		return 0
	}
	return t.first.Sub(t.submit)
}

// decodeTokens counts the tokens after the first, each of which cost one
// decode step.
func (t *tokenTimes) decodeTokens() int { return max(t.generated-1, 0) }

func (t *tokenTimes) decode() time.Duration {
	if t.decodeTokens() == 0 {
		return 0
	}
	return t.last.Sub(t.first)
}

func (t *tokenTimes) stats(promptTokens int) generateStats {
	s := generateStats{PromptTokens: promptTokens, GeneratedTokens: t.generated}
	if d := t.prefill(); d > 0 {
		s.PrefillTokS = float64(promptTokens) / d.Seconds()
	}
	if d := t.decode(); d > 0 {
		s.DecodeTokS = float64(t.decodeTokens()) / d.Seconds()
	}
	return s
}

// generateOutput writes generated tokens to stdout as they come: their ids,
// or their text cut at the first stop string. Each token is flushed at
// once, so the text streams.
type generateOutput struct {
	w           *bufio.Writer
	tok         *tokenizer.Tokenizer
	dec         *tokenizer.StreamDecoder
	stop        *sample.StopMatcher
	printTokens bool
	ignoreEOS   bool
	n           int
}

func newGenerateOutput(w *bufio.Writer, tok *tokenizer.Tokenizer, o *generateOptions) *generateOutput {
	return &generateOutput{w: w, tok: tok, dec: tok.NewStreamDecoder(), stop: sample.NewStopMatcher(o.stops),
		printTokens: o.printTokens, ignoreEOS: o.ignoreEOS}
}

// token writes one generated token and reports whether a stop string has
// ended the text. Token ids are printed as they are, end-of-generation
// included; text leaves the end-of-generation token out.
func (g *generateOutput) token(id int32) (bool, error) {
	g.n++
	if g.printTokens {
		sep := " "
		if g.n == 1 {
			sep = ""
		}
		return false, g.write(sep + strconv.Itoa(int(id)))
	}
	if g.tok.IsEOG(id) && !g.ignoreEOS {
		return false, nil
	}
	text, stopped := g.stop.Push(g.dec.Add(id))
	return stopped, g.write(text)
}

// finish writes the text held back (an incomplete character or a possible
// start of a stop string) and ends the line.
func (g *generateOutput) finish() error {
	if !g.printTokens {
		text, _ := g.stop.Push(g.dec.Flush())
		if err := g.write(text + g.stop.Flush()); err != nil {
			return err
		}
	}
	return g.write("\n")
}

func (g *generateOutput) write(s string) error {
	if _, err := io.WriteString(g.w, s); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if err := g.w.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// buildPrompt turns the prompt options into token ids.
func buildPrompt(o *generateOptions, tok *tokenizer.Tokenizer) ([]int32, error) {
	if o.promptTokens != "" {
		return parseTokenList(o.promptTokens, tok.VocabSize())
	}
	if !o.chat {
		return tok.Encode(o.prompt, true, false), nil
	}
	src := tok.ChatTemplate()
	tmpl, err := chat.Parse(src)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	var msgs []chat.Message
	if o.system != "" {
		msgs = append(msgs, chat.Message{Role: "system", Content: o.system})
	}
	msgs = append(msgs, chat.Message{Role: "user", Content: o.prompt})
	text, err := tmpl.Render(msgs, chat.RenderOptions{
		AddGenerationPrompt: true,
		BOS:                 tok.TokenText(tok.BOS()),
		EOS:                 tok.TokenText(tok.EOS()),
	})
	if err != nil {
		return nil, fmt.Errorf("render chat template: %w", err)
	}
	// The template writes the special tokens (BOS included) itself.
	return tok.Encode(text, false, true), nil
}

func parseTokenList(s string, vocab int) ([]int32, error) {
	var ids []int32
	for _, field := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		v, err := strconv.Atoi(field)
		if err != nil {
			return nil, fmt.Errorf("--prompt-tokens: %q is not a token id", field)
		}
		if v < 0 || v >= vocab {
			return nil, fmt.Errorf("--prompt-tokens: token id %d out of range [0, %d)", v, vocab)
		}
		ids = append(ids, int32(v))
	}
	return ids, nil
}

// openModelWithProgress opens a model with its weights placed and widened
// as the --model-memory and --widen-memory settings say, for a command that
// keeps reserved bytes of memory besides (its KV cache) and computes on
// threads threads (its --threads; <= 0: all cores), showing a progress bar
// on w while the weights are read or paged in when they are large enough
// for it to matter.
func openModelWithProgress(path string, memory weightsMemory, reserved int64, threads int, w io.Writer) (*model.File, error) {
	plan, err := planWeights(path, memory, reserved)
	if err != nil {
		return nil, err
	}
	placement, why := plan.placement, plan.why
	var bar *progressbar.ProgressBar
	progress := func(done, total int64) {
		if total < 256<<20 {
			return
		}
		if bar == nil {
			bar = progressbar.NewOptions64(total,
				progressbar.OptionSetWriter(w),
				progressbar.OptionSetDescription("loading "+path),
				progressbar.OptionShowBytes(true),
				progressbar.OptionClearOnFinish())
		}
		_ = bar.Set64(done)
	}
	mf, err := model.OpenWith(path, placement, progress, model.Options{WidenLimit: plan.widenLimit})
	if bar != nil {
		_ = bar.Finish()
	}
	if err != nil {
		return nil, err
	}
	if (memory.placement == "auto" || memory.placement == "") && mf.GGUF.Private() {
		mf, placement, why = probePlacement(path, mf, why, plan.widenLimit, threads)
	}
	fmt.Fprintf(w, "kvserve: weights %s\n", placementLine(placement, why, mf.GGUF.Private(), mf.GGUF, mf.Model.Widening, plan.widenWhy, mf.Model.ReleasedBytes))
	return mf, nil
}

// matrixTypes lists the types of f's 2-D tensors (its weight matrices),
// each once, in the file's order.
func matrixTypes(f *gguf.File) []tensor.DType {
	var ts []tensor.DType
	for _, t := range f.Tensors {
		if len(t.Dims) == 2 && !slices.Contains(ts, t.Type) {
			ts = append(ts, t.Type)
		}
	}
	return ts
}
