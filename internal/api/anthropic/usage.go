package anthropic

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/kvserve/kvserve/internal/api"
	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/tokenizer"
)

// usageJSON is a message's usage. The input counts add up to the prompt's
// tokens (see the package doc for the rule).
type usageJSON struct {
	InputTokens              int                `json:"input_tokens"`
	CacheCreationInputTokens int                `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int                `json:"cache_read_input_tokens"`
	CacheCreation            *cacheCreationJSON `json:"cache_creation,omitempty"`
	OutputTokens             int                `json:"output_tokens"`
	ServiceTier              string             `json:"service_tier,omitempty"`
}

// cacheCreationJSON splits cache_creation_input_tokens by TTL.
type cacheCreationJSON struct {
	Ephemeral5m int `json:"ephemeral_5m_input_tokens"`
	Ephemeral1h int `json:"ephemeral_1h_input_tokens"`
}

// cacheMarks are the prompt token positions where the spans of the last
// breakpoint and of the last 1h breakpoint end (0: no such breakpoint).
type cacheMarks struct {
	end, end1h int
}

// usage reports u with the cache fields computed from the marks.
func usage(u api.Usage, m cacheMarks) usageJSON {
	prompt := u.PromptTokens
	read := min(u.CachedTokens, prompt)
	end1h := min(m.end1h, m.end, prompt)
	creation := u.CacheWriteTokens // the core's count of the same span (Run.SetCacheWriteEnd)
	creation1h := min(creation, max(0, end1h-read))
	return usageJSON{
		InputTokens:              prompt - read - creation,
		CacheCreationInputTokens: creation,
		CacheReadInputTokens:     read,
		CacheCreation:            &cacheCreationJSON{Ephemeral5m: creation - creation1h, Ephemeral1h: creation1h},
		OutputTokens:             u.CompletionTokens,
		ServiceTier:              "standard",
	}
}

// markFinder finds breakpoint positions in prompts. It remembers, per
// template and thinking setting, the text a generation prompt appends, so
// that the commonest breakpoint — on the last message, as Claude Code puts
// it — costs a walk over the last few tokens rather than a render of the
// whole conversation and a walk over all of it.
type markFinder struct {
	mu       sync.Mutex
	suffixes map[suffixKey]string // "" when the template has no fixed one
}

// suffixKey identifies a template and its thinking setting.
type suffixKey struct {
	t         *chat.Template
	reasoning int8 // -1 off, 0 default, 1 on
}

// maxSuffixes bounds markFinder's cache (one entry per served template and
// thinking setting in practice).
const maxSuffixes = 64

// find returns where the spans of req's last breakpoint and last 1h
// breakpoint end in prompt p.
func (f *markFinder) find(m *api.Model, req *api.Request, p *api.Prompt) cacheMarks {
	if len(req.Breakpoints) == 0 || p.Text == "" || m.Template == nil {
		return cacheMarks{}
	}
	const none = -2 // below -1, the tools-and-system breakpoint
	last, last1h := none, none
	for _, bp := range req.Breakpoints {
		last = max(last, bp.Message)
		if bp.TTL >= time.Hour {
			last1h = max(last1h, bp.Message)
		}
	}
	var out cacheMarks
	out.end = -1
	if last == len(req.Messages)-1 {
		// The whole conversation: the prompt without its generation prompt.
		if suffix := f.suffix(m, req); suffix != "" && strings.HasSuffix(p.Text, suffix) {
			if n, ok := tokensBeforeTail(m.Tokenizer, p.Tokens, p.Text, len(p.Text)-len(suffix)); ok {
				out.end = n
			}
		}
	}
	if out.end < 0 {
		out.end = tokensThrough(m, req, p, last)
	}
	switch {
	case last1h == last:
		out.end1h = out.end
	case last1h > none:
		out.end1h = tokensThrough(m, req, p, last1h)
	}
	return out
}

// suffix returns the text the generation prompt appends to a conversation
// with req's template and thinking setting, or "" when rendering with it is
// not rendering without it plus a fixed suffix.
func (f *markFinder) suffix(m *api.Model, req *api.Request) string {
	key := suffixKey{t: m.Template}
	if req.Reasoning != nil {
		key.reasoning = -1
		if *req.Reasoning {
			key.reasoning = 1
		}
	}
	f.mu.Lock()
	s, ok := f.suffixes[key]
	f.mu.Unlock()
	if ok {
		return s
	}
	probe := []chat.Message{{Role: "user", Content: "\x00\x01"}}
	opts := renderOptions(m, req)
	without, err1 := m.Template.Render(probe, opts)
	opts.AddGenerationPrompt = true
	with, err2 := m.Template.Render(probe, opts)
	if err1 == nil && err2 == nil && len(with) > len(without) && strings.HasPrefix(with, without) {
		s = with[len(without):]
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.suffixes == nil || len(f.suffixes) >= maxSuffixes {
		f.suffixes = map[suffixKey]string{}
	}
	f.suffixes[key] = s
	return s
}

// renderOptions are the options the core renders req's prompt with, less
// the generation prompt.
func renderOptions(m *api.Model, req *api.Request) chat.RenderOptions {
	tok := m.Tokenizer
	opts := chat.RenderOptions{Tools: req.Tools, Now: time.Now()}
	if tok.BOS() >= 0 {
		opts.BOS = tok.TokenText(tok.BOS())
	}
	if tok.EOS() >= 0 {
		opts.EOS = tok.TokenText(tok.EOS())
	}
	if req.Reasoning != nil {
		opts.Extra = map[string]any{"enable_thinking": *req.Reasoning}
	}
	return opts
}

// tokensThrough returns how many leading tokens of p lie within the prompt
// text of the conversation up to the end of message msg (-1: the tools and
// the leading system messages). It renders that prefix of the conversation
// as the core renders the whole (without a generation prompt) and counts
// the prompt tokens inside its common prefix with the full prompt text.
func tokensThrough(m *api.Model, req *api.Request, p *api.Prompt, msg int) int {
	msgs := req.Messages
	var prefix []chat.Message
	if msg < 0 {
		sys := 0
		for sys < len(msgs) && msgs[sys].Role == "system" {
			sys++
		}
		prefix = msgs[:sys]
	} else {
		prefix = msgs[:min(msg+1, len(msgs))]
	}
	opts := renderOptions(m, req)
	text, err := m.Template.Render(prefix, opts)
	if err != nil || text == "" {
		// Some templates need a user turn: add one that cannot occur in
		// the prompt, so the common prefix stops before it.
		text, err = m.Template.Render(append(slices.Clip(prefix), chat.Message{Role: "user", Content: "\x00\x01"}), opts)
		if err != nil {
			return 0
		}
	}
	n := 0
	for n < len(text) && n < len(p.Text) && text[n] == p.Text[n] {
		n++
	}
	return tokensBefore(m.Tokenizer, p.Tokens, p.Text, n)
}

// tokensBefore returns how many leading tokens of ids have pieces lying
// wholly inside text[:limit], where ids tokenize text. The walk allows for
// what tokenization adds or loses: a BOS the text does not spell,
// SentencePiece's inserted spaces, and unknown tokens (which stand for a
// few bytes, or for an inserted "▁" the vocabulary cannot spell). Where the
// pieces stop matching the text, the tokens matched so far are returned: a
// conservative count.
func tokensBefore(tok *tokenizer.Tokenizer, ids []int32, text string, limit int) int {
	const unkWindow = 16 // bytes an unknown token may stand for
	var scratch [64]byte
	pos := 0
	afterUnk := false
	for i, id := range ids {
		if id == tok.UNK() {
			afterUnk = true
			continue // zero width until the next piece says otherwise
		}
		piece := tok.AppendPiece(scratch[:0], id, true)
		rest := text[pos:]
		switch {
		case hasPrefix(rest, piece):
			pos += len(piece)
		case i == 0 && id == tok.BOS():
			// A BOS the tokenizer added: not in the text.
		case len(piece) > 0 && piece[0] == ' ' && hasPrefix(rest, piece[1:]):
			pos += len(piece) - 1
		case afterUnk && len(piece) > 0:
			k := strings.Index(rest[:min(len(rest), unkWindow+len(piece))], string(piece))
			if k < 0 {
				return i
			}
			pos += k + len(piece)
		default:
			return i
		}
		afterUnk = false
		if pos > limit {
			return i
		}
	}
	return len(ids)
}

// tokensBeforeTail counts what tokensBefore counts, walking back from the
// end of the prompt: its cost is the tokens after limit. ok is false where
// the pieces do not spell the text's tail plainly (an unknown token, or the
// walk reaching the first token), and the caller walks forward instead.
func tokensBeforeTail(tok *tokenizer.Tokenizer, ids []int32, text string, limit int) (n int, ok bool) {
	var scratch [64]byte
	pos := len(text)
	for j := len(ids) - 1; j > 0; j-- {
		id := ids[j]
		if id == tok.UNK() {
			return 0, false
		}
		piece := tok.AppendPiece(scratch[:0], id, true)
		head := text[:pos]
		switch {
		case hasSuffix(head, piece):
		case len(piece) > 0 && piece[0] == ' ' && hasSuffix(head, piece[1:]):
			piece = piece[1:] // SentencePiece's inserted space
		default:
			return 0, false
		}
		start := pos - len(piece)
		if start < limit {
			if pos <= limit {
				return j + 1, true
			}
			return j, true // token j straddles limit
		}
		pos = start
	}
	return 0, false
}

// hasSuffix reports whether s ends with b, without converting b.
func hasSuffix(s string, b []byte) bool {
	return len(s) >= len(b) && s[len(s)-len(b):] == string(b)
}

// hasPrefix reports whether s begins with b, without converting b.
func hasPrefix(s string, b []byte) bool {
	return len(s) >= len(b) && s[:len(b)] == string(b)
}
