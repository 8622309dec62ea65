package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kvserve/kvserve/internal/gguf"
	"github.com/kvserve/kvserve/internal/synth"
	"github.com/kvserve/kvserve/internal/tensor"
	"github.com/kvserve/kvserve/internal/testshared"
)

func sharedModel(t *testing.T, name string) string {
	t.Helper()
	return testshared.Path(t, "models", name)
}

// runModel runs `model ARGS...` and returns stdout and stderr.
func runModel(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return runCommand(newModelCmd(), args...)
}

func TestModelInfoShared(t *testing.T) {
	tests := []struct {
		file  string
		check func(t *testing.T, m *modelInfo)
	}{
		{"tiny-f32.gguf", func(t *testing.T, m *modelInfo) {
			want := modelInfo{Architecture: "llama", Name: "synthetic-tiny-llama", FileType: "F32", Parameters: 1443072,
				Layers: 2, Heads: 4, KVHeads: 2, HeadDim: 64, ValueDim: 64, Embedding: 256, FFN: 512, Vocab: 512, Context: 256,
				KVBytesPerToken: 2 * 2 * 2 * 64 * 2, TensorCount: 21}
			got := *m
			got.File, got.FileBytes, got.Version, got.RMSEps, got.Rope, got.TensorTypes, got.Tokenizer = "", 0, 0, 0, ropeInfo{}, nil, tokenizerInfo{}
			got.Weights = ""
			if !strings.Contains(m.Weights, "kernels ") || !strings.Contains(m.Weights, "auto: ") {
				t.Errorf("weights %q: want the placement, why, and the kernels", m.Weights)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %+v\nwant %+v", got, want)
			}
			if m.Rope != (ropeInfo{FreqBase: 10000, Dimensions: 64, Style: "normal"}) {
				t.Errorf("rope %+v", m.Rope)
			}
			if tk := m.Tokenizer; tk.Kind != "SentencePiece" || tk.Size != 512 || tk.ChatTemplate || *tk.BOS != 1 || *tk.EOS != 2 {
				t.Errorf("tokenizer %+v", tk)
			}
			if len(m.TensorTypes) != 1 || m.TensorTypes[0] != (typeSummary{"F32", 21, 1443072 * 4}) {
				t.Errorf("types %+v", m.TensorTypes)
			}
		}},
		{"tiny-q4_k_m.gguf", func(t *testing.T, m *modelInfo) {
			want := []typeSummary{{"Q4_K", 13, 0}, {"F32", 5, 0}, {"Q6_K", 3, 0}}
			for i := range m.TensorTypes {
				m.TensorTypes[i].Bytes = 0
			}
			if m.FileType != "Q4_K_M" || !reflect.DeepEqual(m.TensorTypes, want) {
				t.Errorf("file type %s, types %+v", m.FileType, m.TensorTypes)
			}
		}},
		{"tiny-qwen2-f32.gguf", func(t *testing.T, m *modelInfo) {
			if !m.TiedOutput || m.Rope.Style != "neox" || m.HeadDim != 64 || m.Parameters != 1313024 || m.RMSEps < 9e-7 || m.RMSEps > 1.1e-6 {
				t.Errorf("%+v", m)
			}
		}},
		{"aidreams260K-f32.gguf", func(t *testing.T, m *modelInfo) {
			if m.HeadDim != 16 || m.KVHeads != 4 || m.Rope.FreqBase != 10000 || m.Vocab != 512 || m.TiedOutput {
				t.Errorf("%+v", m)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			m, err := inspectFile(sharedModel(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, m)
		})
	}
}

// TestModelSynthThenInfo runs both commands end to end on the tiny shape.
func TestModelSynthThenInfo(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "tiny.gguf")
	if _, stderr, err := runModel(t, "synth", "--shape", "tiny", "--arch", "qwen2", "--type", "f32", "-o", out, "--seed", "3"); err != nil {
		t.Fatalf("synth: %v\n%s", err, stderr)
	} else if !strings.Contains(stderr, "wrote") {
		t.Errorf("stderr %q", stderr)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
	stdout, _, err := runModel(t, "info", "--json", out)
	if err != nil {
		t.Fatal(err)
	}
	var m modelInfo
	if err := json.Unmarshal([]byte(stdout), &m); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	if m.Architecture != "qwen2" || m.Name != "synthetic-tiny-qwen2" || m.Parameters != 1313024 || !m.TiedOutput {
		t.Errorf("%+v", m)
	}
	text, _, err := runModel(t, "info", out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"architecture", "qwen2", "KV bytes/token", "1024", "neox", "chat template", "no"} {
		if !strings.Contains(text, want) {
			t.Errorf("info output lacks %q:\n%s", want, text)
		}
	}
}

func TestModelSynthErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"synth", "--shape", "smollm2-135m", "--arch", "qwen2", "-o", filepath.Join(dir, "x")}, "is a llama model, not qwen2"},
		{[]string{"synth", "--shape", "tiny", "--type", "iq4_xs", "-o", filepath.Join(dir, "x")}, "unknown type"},
		{[]string{"synth", "--shape", "tiny"}, "required"},
		{[]string{"synth", "--shape", "nope", "-o", filepath.Join(dir, "x")}, "unknown shape"},
		{[]string{"synth", "--shape", "tiny", "-o", filepath.Join(dir, "missing", "x.gguf")}, "no such file"},
		{[]string{"info", filepath.Join(dir, "missing.gguf")}, "no such file"},
	}
	for _, tc := range tests {
		_, _, err := runModel(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestInfoOfSyntheticHeaders checks info on the metadata of the big
// synthetic shapes (no tensor data needed): head dims, KV bytes per token,
// tokenizer and template family.
func TestInfoOfSyntheticHeaders(t *testing.T) {
	tests := []struct {
		shape, family string
		kv            int
	}{
		{"smollm2-135m", "chatml", 30 * 2 * 3 * 64 * 2},
		{"llama-3.2-1b", "llama3", 16 * 2 * 8 * 64 * 2},
		{"qwen2.5-0.5b", "chatml (qwen2.5, tools)", 24 * 2 * 2 * 64 * 2},
		{"qwen3-0.6b", "chatml (qwen3, thinking)", 28 * 2 * 8 * 128 * 2},
	}
	for _, tc := range tests {
		t.Run(tc.shape, func(t *testing.T) {
			s, err := synth.LookupShape(tc.shape, "")
			if err != nil {
				t.Fatal(err)
			}
			m, err := synth.New(s, synth.FileF32)
			if err != nil {
				t.Fatal(err)
			}
			w := &gguf.Writer{}
			for _, kv := range m.KVs {
				w.Set(kv.Key, kv.Value)
			}
			var buf bytes.Buffer
			if _, err := w.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Parse(buf.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			info, err := inspect(f)
			if err != nil {
				t.Fatal(err)
			}
			if info.KVBytesPerToken != tc.kv || info.Tokenizer.TemplateFamily != tc.family || info.Vocab != s.Vocab ||
				info.HeadDim != s.HeadDim || info.Tokenizer.Kind != "byte-level BPE" || info.Tokenizer.Merges == 0 {
				t.Errorf("kv %d family %q vocab %d head dim %d tokenizer %+v", info.KVBytesPerToken, info.Tokenizer.TemplateFamily,
					info.Vocab, info.HeadDim, info.Tokenizer)
			}
		})
	}
}

// TestModelInfoStreams: where auto would make a private copy, `model info`
// says the load probe times it, and times one stream against two only for
// files with a type this CPU reads in two streams.
func TestModelInfoStreams(t *testing.T) {
	for _, file := range []string{"tiny-q8_0.gguf", "tiny-f16.gguf", "tiny-q4_k_m.gguf", "tiny-f32.gguf"} {
		m, err := inspectFile(sharedModel(t, file))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(m.Weights, "transparent huge pages") {
			t.Logf("%s: auto makes no private copy here: %q", file, m.Weights)
			continue
		}
		f, err := gguf.Open(sharedModel(t, file))
		if err != nil {
			t.Fatal(err)
		}
		want := slices.ContainsFunc(matrixTypes(f), tensor.TwoStreamKernel)
		f.Close()
		if !strings.Contains(m.Weights, "a decode pass and a prompt's timed on both at load, on the command's threads") {
			t.Errorf("%s: %q names no probe", file, m.Weights)
		}
		if got := strings.Contains(m.Weights, "one stream and in two"); got != want {
			t.Errorf("%s: streams timed %v, want %v: %q", file, got, want, m.Weights)
		}
	}
}
