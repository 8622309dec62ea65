package tokenizer

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/synth"
	"github.com/kvserve/kvserve/internal/testshared"
)

// synthMetadatas caches the synthetic shapes' tokenizer metadata:
// building their vocabularies takes a while.
var synthMetadatas struct {
	mu sync.Mutex
	md map[string]fakeMetadata
}

// synthTokenizer returns the tokenizer (with its chat template) of a
// synthetic model shape, i.e. the vocabulary of a model kvserve serves,
// loaded with opts.
func synthTokenizer(tb testing.TB, shape string, opts Options) *Tokenizer {
	tb.Helper()
	synthMetadatas.mu.Lock()
	md := synthMetadatas.md[shape]
	if md == nil {
		s, err := synth.LookupShape(shape, "")
		if err != nil {
			tb.Fatal(err)
		}
		sm, err := synth.New(s, synth.FileQ8_0)
		if err != nil {
			tb.Fatal(err)
		}
		md = fakeMetadata{}
		for _, kv := range sm.KVs {
			md[kv.Key] = kv.Value
		}
		if synthMetadatas.md == nil {
			synthMetadatas.md = map[string]fakeMetadata{}
		}
		synthMetadatas.md[shape] = md
	}
	synthMetadatas.mu.Unlock()
	tok, err := FromMetadataOptions(md, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// resetCaches empties a tokenizer's caches by replacing them (tests only:
// not safe while other goroutines encode).
func (t *Tokenizer) resetCaches(opts Options) {
	t.words, t.frags, t.spmJoin = nil, nil, nil
	t.setupCaches(opts)
}

// agentDocs are the texts an agent-like prompt is made of: prose for the
// system prompt, code and tool output for the history. They are the
// project's shared documents and chat templates, read in place.
func agentDocs(tb testing.TB) (prose, code []string) {
	tb.Helper()
	read := func(elem ...string) string {
		raw, err := os.ReadFile(testshared.Path(tb, elem...))
		if err != nil {
			tb.Fatal(err)
		}
		return string(raw)
	}
	prose = []string{read("DESIGN.md"), read("STYLE.md"), read("models", "README.md"), read("traces", "README.md"), read("anchors.md")}
	code = []string{
		read("testdata", "chat-templates", "CohereForAI-c4ai-command-r-plus-tool_use.jinja"),
		read("testdata", "chat-templates", "meetkai-functionary-medium-v3.2.jinja"),
		read("testdata", "chat-templates", "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja"),
		read("testdata", "vocab", "ggml-vocab-gpt-2.gguf.inp"),
	}
	return prose, code
}

// agentConversation is an agent session after turns tool round trips: a
// long system prompt (the shared design documents), eight tool
// definitions, and per turn a user request, a tool call and a tool result
// quoting a few hundred bytes of code. Turn i's messages do not depend on
// how many turns follow, so conversation n+1 extends conversation n.
func agentConversation(tb testing.TB, turns int) ([]chat.Message, []chat.Tool) {
	prose, code := agentDocs(tb)
	msgs := []chat.Message{{Role: "system", Content: strings.Join(prose[:3], "\n\n")}}
	var tools []chat.Tool
	for i := range 8 {
		tools = append(tools, chat.Tool{
			Name:        fmt.Sprintf("tool_%d", i),
			Description: fmt.Sprintf("Step %d of the workflow: reads or edits a file in the repository and reports what changed.", i),
			Parameters: []byte(`{"type":"object","properties":{"path":{"type":"string","description":"file path relative to the repository root"},` +
				`"line":{"type":"integer","description":"1-based line number"},"text":{"type":"string"}},"required":["path"]}`),
		})
	}
	for i := range turns {
		src := code[i%len(code)]
		off := (i * 997) % (len(src) - 600)
		msgs = append(msgs,
			chat.Message{Role: "user", Content: fmt.Sprintf("Step %d: the test in package pkg%d fails with a nil map; find out why and fix it.", i, i)},
			chat.Message{Role: "assistant", ToolCalls: []chat.ToolCall{{ID: fmt.Sprintf("call_%d", i), Name: fmt.Sprintf("tool_%d", i%8),
				Arguments: fmt.Sprintf(`{"path":"internal/pkg%d/file_%d.go","line":%d}`, i, i*7, 10+i*13)}}},
			chat.Message{Role: "tool", ToolCallID: fmt.Sprintf("call_%d", i), Name: fmt.Sprintf("tool_%d", i%8), Content: src[off : off+600]})
	}
	return msgs, tools
}

// agentPrompt renders an agent conversation with the tokenizer's own chat
// template, as the API does before tokenizing.
func agentPrompt(tb testing.TB, tok *Tokenizer, turns int) string {
	tb.Helper()
	tmpl, err := chat.Parse(tok.ChatTemplate())
	if err != nil {
		tb.Fatal(err)
	}
	msgs, tools := agentConversation(tb, turns)
	msgs = append(msgs, chat.Message{Role: "user", Content: "Continue."})
	opts := chat.RenderOptions{Tools: tools, AddGenerationPrompt: true}
	if tok.BOS() >= 0 {
		opts.BOS = tok.TokenText(tok.BOS())
	}
	if tok.EOS() >= 0 {
		opts.EOS = tok.TokenText(tok.EOS())
	}
	text, err := tmpl.Render(msgs, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return text
}

// llama2Prompt renders an agent conversation in Llama 2's chat format by
// hand, for the SentencePiece test vocabulary (which has no template).
func llama2Prompt(tb testing.TB, turns int) string {
	msgs, tools := agentConversation(tb, turns)
	var b strings.Builder
	b.WriteString("<s>[INST] <<SYS>>\n")
	b.WriteString(msgs[0].Content)
	b.WriteString("\n\nYou can call these tools:\n")
	for _, t := range tools {
		fmt.Fprintf(&b, "- %s: %s Parameters: %s\n", t.Name, t.Description, t.Parameters)
	}
	b.WriteString("<</SYS>>\n\n")
	for _, m := range msgs[1:] {
		switch m.Role {
		case "user":
			b.WriteString(m.Content + " [/INST]")
		case "assistant":
			for _, c := range m.ToolCalls {
				fmt.Fprintf(&b, ` {"name": %q, "arguments": %s} </s><s>[INST] `, c.Name, c.Arguments)
			}
		case "tool":
			b.WriteString("Result of " + m.Name + ":\n" + m.Content + "\n\n")
		}
	}
	b.WriteString("Continue. [/INST]")
	return b.String()
}

// agentTurns is the number of turns of the benchmarked agent prompt:
// with the synthetic vocabularies it is then about 16k tokens.
const agentTurns = 12

// BenchmarkAgentPrompt tokenises a ~16k-token agent prompt (system prompt,
// tools and history rendered by the model's chat template) as the API
// does, with special tokens parsed:
//
//   - uncached: the caches disabled (the algorithm alone);
//   - cold: empty caches at every encode (a first request, paying for
//     filling them);
//   - warm-words: the same prompt again, word cache only (Encode);
//   - warm-fragments: the same prompt again with ReuseFragments;
//   - next-turn: the prompt of turn n+1 after turn n's was encoded with
//     ReuseFragments into empty caches: an agent's next request.
func BenchmarkAgentPrompt(b *testing.B) {
	type model struct {
		name       string
		load       func(Options) *Tokenizer
		text, prev func(*Tokenizer) string
	}
	var models []model
	for _, shape := range []string{"smollm2-135m", "qwen2.5-0.5b", "llama-3.2-1b"} {
		models = append(models, model{shape, func(o Options) *Tokenizer { return synthTokenizer(b, shape, o) },
			func(t *Tokenizer) string { return agentPrompt(b, t, agentTurns) },
			func(t *Tokenizer) string { return agentPrompt(b, t, agentTurns-1) }})
	}
	spm := testshared.Path(b, "testdata", "vocab", "ggml-vocab-llama-spm.gguf")
	models = append(models, model{"llama-spm", func(o Options) *Tokenizer { return loadTokenizerOptions(b, spm, o) },
		func(*Tokenizer) string { return llama2Prompt(b, agentTurns) },
		func(*Tokenizer) string { return llama2Prompt(b, agentTurns-1) }})

	for _, m := range models {
		tok := m.load(Options{})
		text, prev := m.text(tok), m.prev(tok)
		uncached := m.load(noCaches)
		reuse := EncodeOptions{ParseSpecial: true, ReuseFragments: true}
		plain := EncodeOptions{ParseSpecial: true}
		want := uncached.AppendEncodeWith(nil, text, plain)
		run := func(name string, tok *Tokenizer, opts EncodeOptions, before func()) {
			b.Run(m.name+"/"+name, func(b *testing.B) {
				ids := make([]int32, 0, len(want))
				if before == nil {
					ids = tok.AppendEncodeWith(ids, text, opts) // warm up
				}
				b.SetBytes(int64(len(text)))
				b.ReportAllocs()
				for b.Loop() {
					if before != nil {
						b.StopTimer()
						before()
						b.StartTimer()
					}
					ids = tok.AppendEncodeWith(ids[:0], text, opts)
				}
				if !slices.Equal(ids, want) {
					b.Fatal("cached and uncached encodings differ")
				}
				b.ReportMetric(float64(len(ids)), "tokens")
				b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/prompt")
			})
		}
		run("uncached", uncached, plain, nil)
		// The untimed set-up collects its garbage, so that the timed encode
		// does not pay for it.
		run("cold", tok, reuse, func() {
			tok.resetCaches(Options{})
			runtime.GC()
		})
		tok.resetCaches(Options{})
		run("warm-words", tok, plain, nil)
		run("warm-fragments", tok, reuse, nil)
		run("next-turn", tok, reuse, func() {
			tok.resetCaches(Options{})
			tok.AppendEncodeWith(nil, prev, reuse)
			runtime.GC()
		})
	}
}

// BenchmarkAgentPromptParallel encodes the agent prompt from 64
// goroutines at once with warm caches, as 64 concurrent streams would:
// ns/op is wall time per prompt over all of them.
func BenchmarkAgentPromptParallel(b *testing.B) {
	tok := synthTokenizer(b, "qwen2.5-0.5b", Options{})
	text := agentPrompt(b, tok, agentTurns)
	for _, opts := range []EncodeOptions{{ParseSpecial: true}, {ParseSpecial: true, ReuseFragments: true}} {
		name := "words"
		if opts.ReuseFragments {
			name = "fragments"
		}
		b.Run(name, func(b *testing.B) {
			want := tok.AppendEncodeWith(nil, text, opts)
			b.SetParallelism(64 / max(1, runtime.GOMAXPROCS(0)))
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				var ids []int32
				n := 0
				for pb.Next() {
					ids = tok.AppendEncodeWith(ids[:0], text, opts)
					n++
				}
				if n > 0 && !slices.Equal(ids, want) {
					b.Error("encodings differ")
				}
			})
			b.ReportMetric(b.Elapsed().Seconds()*1e3/float64(b.N), "ms/prompt")
		})
	}
}
