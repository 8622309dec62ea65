package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/model"
	"github.com/kvserve/kvserve/internal/synth"
	"github.com/kvserve/kvserve/internal/tensor"
)

// newModelCmd is `kvserve model`: tools for model files.
func newModelCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "model",
		Short: "Inspect GGUF model files and generate synthetic ones",
	}
	cmd.AddCommand(newModelSynthCmd(), newModelInfoCmd())
	return cmd
}

func newModelSynthCmd() *cobra.Command {
	var (
		arch, shape, typ, out string
		seed                  uint64
		workers               int
		quiet                 bool
	)
	cmd := &cobra.Command{
		Use:   "synth --shape SHAPE [--arch ARCH] [--type TYPE] -o FILE.gguf [--seed N]",
		Short: "Write a random-weight model with the exact layout and metadata of a real one",
		Long: `Writes a GGUF file with random weights and the tensor names, shapes, type mix and
metadata (including a generated tokenizer of the right kind and size) of a real model,
loadable by kvserve and llama.cpp alike. The same shape, type and seed give the same bytes.

Shapes: ` + strings.Join(synth.ShapeNames(), ", ") + `
  smollm2-135m (llama), llama-3.2-1b (llama), qwen2.5-0.5b (qwen2), qwen3-0.6b (qwen3),
  tiny (the shared tiny-f32.gguf; with --arch qwen2 or qwen3 its qwen variants).
Types: f32, f16, q8_0 (every 2-D weight in that type), q4_0 and q5_0 (every 2-D weight but
  the classifier, Q6_K, as llama-quantize makes them), q2_k, q3_k, q4_k and q5_k
  (llama-quantize's Q2_K, Q3_K_M, Q4_K_M and Q5_K_M mixes); 1-D tensors stay F32.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if shape == "" || out == "" {
				return fmt.Errorf("model synth: --shape and -o are required")
			}
			s, err := synth.LookupShape(shape, arch)
			if err != nil {
				return fmt.Errorf("model synth: %w", err)
			}
			ft, err := synth.ParseFileType(typ)
			if err != nil {
				return fmt.Errorf("model synth: %w", err)
			}
			opts := synth.Options{Seed: seed, Workers: workers, Context: cmd.Context()}
			return runSynth(cmd.ErrOrStderr(), s, ft, out, opts, quiet)
		},
	}
	f := cmd.Flags()
	f.StringVar(&shape, "shape", "", "model shape: "+strings.Join(synth.ShapeNames(), ", "))
	f.StringVar(&arch, "arch", "", "architecture (llama, qwen2, qwen3); must match the shape, default the shape's own")
	f.StringVar(&typ, "type", "f32", "weight type: f32, f16, q8_0, q4_0, q5_0, q2_k, q3_k, q4_k, q5_k")
	f.StringVarP(&out, "output", "o", "", "output file")
	f.Uint64Var(&seed, "seed", 0, "random seed of the weights")
	f.IntVar(&workers, "workers", 0, "goroutines generating weights (0 = all CPUs)")
	f.BoolVarP(&quiet, "quiet", "q", false, "no progress bar")
	return cmd
}

// progressMin is the smallest file that gets a progress bar.
const progressMin = 64 << 20

// runSynth writes the model to a temporary file next to out and renames it
// into place, so an interrupted run never leaves a truncated model behind.
func runSynth(stderr io.Writer, s synth.Shape, ft synth.FileType, out string, opts synth.Options, quiet bool) error {
	m, err := synth.New(s, ft)
	if err != nil {
		return fmt.Errorf("model synth: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp*")
	if err != nil {
		return fmt.Errorf("model synth: %w", err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename this fails harmlessly
	var bar *progressbar.ProgressBar
	if !quiet {
		opts.Progress = func(done, total uint64) {
			if bar == nil && total >= progressMin {
				bar = progressbar.NewOptions64(int64(total),
					progressbar.OptionSetWriter(stderr),
					progressbar.OptionSetDescription(fmt.Sprintf("%s %s", s.Name, ft)),
					progressbar.OptionShowBytes(true),
					progressbar.OptionSetWidth(30),
					progressbar.OptionThrottle(200*time.Millisecond),
					progressbar.OptionOnCompletion(func() { fmt.Fprintln(stderr) }),
				)
			}
			if bar != nil {
				_ = bar.Set64(int64(done))
			}
		}
	}
	start := time.Now()
	n, err := m.WriteTo(tmp, opts)
	if err == nil {
		err = tmp.Sync()
	}
	if err == nil {
		err = tmp.Chmod(0o644) // CreateTemp makes files private
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("model synth: %w", err)
	}
	if bar != nil {
		_ = bar.Finish()
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return fmt.Errorf("model synth: %w", err)
	}
	if !quiet {
		fmt.Fprintf(stderr, "wrote %s: %s %s, %s parameters, %s in %.1fs\n", out, synth.Name(&s), ft,
			humanCount(synth.Params(m.Tensors)), humanBytes(uint64(n)), time.Since(start).Seconds())
	}
	return nil
}

func newModelInfoCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "info FILE.gguf",
		Short: "Describe a GGUF model: architecture, sizes, tensor types, KV bytes per token, tokenizer",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			info, err := inspectFile(args[0])
			if err != nil {
				return fmt.Errorf("model info: %w", err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			}
			info.print(out)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// inspectFile opens and describes a GGUF file.
func inspectFile(path string) (*modelInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	info, err := inspect(f)
	if err != nil {
		return nil, err
	}
	info.File = path
	info.FileBytes = st.Size()
	// Where `--model-memory auto` would put the weights on this machine,
	// and the kernels that would compute with them.
	// For kvserve serve's defaults: a KV cache of the default size.
	if p, err := planWeights(path, weightsMemory{placement: "auto"}, defaultKVMemory(memAvailable())); err == nil {
		if p.placement == gguf.HugePages {
			p.why += "; a decode pass and a prompt's timed on both at load, on the command's threads, keep the faster for a 512-token prompt and 128-token reply"
			if slices.ContainsFunc(matrixTypes(f), tensor.TwoStreamKernel) {
				p.why += ", and times the copy's work items read in one stream and in two"
			}
		}
		info.Weights = placementLine(p.placement, p.why, p.placement == gguf.HugePages, f, model.PlanWidening(f, p.widenLimit, p.placement == gguf.HugePages), p.widenWhy, -1)
	}
	return info, nil
}

func humanBytes(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func humanCount(n uint64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.1fK", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
