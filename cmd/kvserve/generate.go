package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/sample"
	"github.com/kvserve/kvserve/internal/tensor"
	"github.com/kvserve/kvserve/internal/tokenizer"
)

type generateOptions struct {
	modelPath    string
	modelMemory  string
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
	modelMemoryFlag(f, &o.modelMemory)
	f.StringVarP(&o.prompt, "prompt", "p", "", "prompt text")
	f.StringVar(&o.promptTokens, "prompt-tokens", "", "prompt as comma-separated token ids, used as given (no BOS added)")
	f.BoolVar(&o.chat, "chat", false, "render the prompt as a user message with the model's chat template")
	f.StringVar(&o.system, "system", "", "system message (with --chat)")
	f.IntVarP(&o.maxTokens, "n", "n", 128, "maximum tokens to generate")
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

func runGenerate(cmd *cobra.Command, o *generateOptions) error {
	ctx := cmd.Context()
	stdout := bufio.NewWriter(cmd.OutOrStdout())
	defer stdout.Flush()
	stderr := cmd.ErrOrStderr()

	if (o.prompt == "") == (o.promptTokens == "") {
		return fmt.Errorf("give exactly one of --prompt or --prompt-tokens")
	}
	if o.maxTokens < 0 {
		return fmt.Errorf("-n must be at least 0")
	}
	mf, err := openModelWithProgress(o.modelPath, o.modelMemory, stderr)
	if err != nil {
		return err
	}
	defer mf.Close()
	m := mf.Model
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
	if len(prompt)+o.maxTokens > m.Config.Context {
		fmt.Fprintf(stderr, "warning: prompt (%d) + generation (%d) exceeds the model's training context %d\n",
			len(prompt), o.maxTokens, m.Config.Context)
	}
	sampler, err := sample.New(o.sampling, m.Config.Vocab)
	if err != nil {
		return err
	}

	pool := tensor.NewPool(o.threads)
	defer pool.Close()
	runner, err := model.NewRunner(m, pool, o.batch, tensor.F16)
	if err != nil {
		return err
	}
	cache := model.NewSeqCache(&m.Config, tensor.F16, 256)
	cache.Reserve(len(prompt) + o.maxTokens)
	logits := make([]float32, m.Config.Vocab)

	stopProfile, err := startCPUProfile(o.cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()

	// Prefill in chunks of --batch tokens; the last chunk yields the logits.
	start := time.Now()
	for pos := 0; pos < len(prompt); pos += o.batch {
		end := min(pos+o.batch, len(prompt))
		seq := model.Seq{Cache: cache, Pos: pos, Tokens: prompt[pos:end]}
		if end == len(prompt) {
			seq.Logits = logits
		}
		if err := runner.Forward(ctx, []model.Seq{seq}); err != nil {
			return err
		}
	}
	prefill := time.Since(start)

	stats := generateStats{PromptTokens: len(prompt), PrefillTokS: float64(len(prompt)) / prefill.Seconds()}
	history := append([]int32(nil), prompt...)
	stream := tok.NewStreamDecoder()
	stop := sample.NewStopMatcher(o.stops)
	emit := func(s string) error {
		if _, err := io.WriteString(stdout, s); err != nil {
			return err
		}
		return stdout.Flush()
	}
	var decode time.Duration
	decodeSteps := 0
	pos := len(prompt)
	for i := 0; i < o.maxTokens; i++ {
		next, _ := sampler.SampleSeq(logits, history, len(prompt))
		history = append(history, next)
		stats.GeneratedTokens++
		eog := tok.IsEOG(next) && !o.ignoreEOS
		if o.printTokens {
			sep := " "
			if i == 0 {
				sep = ""
			}
			if err := emit(sep + strconv.Itoa(int(next))); err != nil {
				return err
			}
		} else if !eog {
			text, stopped := stop.Push(stream.Add(next))
			if err := emit(text); err != nil {
				return err
			}
			if stopped {
				break
			}
		}
		if eog || i == o.maxTokens-1 {
			break
		}
		t0 := time.Now()
		if err := runner.Forward(ctx, []model.Seq{{Cache: cache, Pos: pos, Tokens: []int32{next}, Logits: logits}}); err != nil {
			return err
		}
		decode += time.Since(t0)
		decodeSteps++
		pos++
	}
	if !o.printTokens {
		text, _ := stop.Push(stream.Flush())
		if err := emit(text + stop.Flush()); err != nil {
			return err
		}
	}
	if err := emit("\n"); err != nil {
		return err
	}
	if decodeSteps > 0 {
		stats.DecodeTokS = float64(decodeSteps) / decode.Seconds()
	}
	fmt.Fprintf(stderr, "prefill: %d tokens in %.3f s (%.1f tok/s); decode: %d tokens in %.3f s (%.1f tok/s); %d threads\n",
		stats.PromptTokens, prefill.Seconds(), stats.PrefillTokS, decodeSteps, decode.Seconds(), stats.DecodeTokS, pool.Threads())
	if o.jsonStats {
		line, _ := json.Marshal(stats)
		fmt.Fprintln(stderr, string(line))
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

// openModelWithProgress opens a model with its weights placed as the
// --model-memory setting says, showing a progress bar on w while the
// weights are read or paged in when they are large enough for it to matter.
func openModelWithProgress(path, memory string, w io.Writer) (*model.File, error) {
	placement, err := modelPlacement(path, memory)
	if err != nil {
		return nil, err
	}
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
	mf, err := model.Open(path, placement, progress)
	if bar != nil {
		_ = bar.Finish()
	}
	return mf, err
}
