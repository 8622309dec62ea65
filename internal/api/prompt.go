package api

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/kvserve/kvserve/internal/chat"
	"github.com/kvserve/kvserve/internal/engine"
	"github.com/kvserve/kvserve/internal/tokenizer"
)

// Prompt is a request's prompt in token space, with its retention segments.
type Prompt struct {
	// Text is the rendered prompt ("" for token prompts).
	Text string
	// Tokens are the prompt's token ids, BOS and special tokens included.
	Tokens []int32
	// Segments classify the whole prompt by retention class.
	Segments []engine.Segment
}

// Tokenize renders and tokenizes req's prompt on the model it names,
// without running it (for token counting endpoints).
func (c *Call) Tokenize(req *Request) (*Prompt, error) {
	if err := c.resolveCache(req); err != nil {
		return nil, err
	}
	if err := req.validate(); err != nil {
		return nil, err
	}
	_, p, err := c.modelFor(req)
	return p, err
}

// BuildPrompt renders, tokenizes and segments req's prompt for m, as Start
// does, without checking who asks or running it.
func (m *Model) BuildPrompt(req *Request) (*Prompt, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	return buildPrompt(m, req, nil)
}

// buildPrompt renders, tokenizes and segments req's prompt. With a scope,
// tokenization reuses the token ids of text fragments (between special
// tokens) that the same scope sent before, such as an agent's system prompt
// and tool definitions, re-sent every turn.
func buildPrompt(m *Model, req *Request, scope *string) (*Prompt, error) {
	tok := m.Tokenizer
	p := &Prompt{}
	switch {
	case req.PromptTokens != nil:
		p.Tokens = req.PromptTokens
		for i, t := range p.Tokens {
			if t < 0 || int(t) >= tok.VocabSize() {
				return nil, InvalidParam(fmt.Sprintf("prompt[%d]", i), "token id %d outside the vocabulary [0, %d)", t, tok.VocabSize())
			}
		}
	case req.Messages != nil:
		if m.Template == nil {
			return nil, Errorf(CodeInvalidRequest, "the model %q has no chat template; use the completions endpoint", m.ID)
		}
		msgs := normalizeMessages(req.Messages)
		opts := renderOptions(m, req, !req.prefixOnly)
		text, err := m.Template.Render(msgs, opts)
		if err != nil {
			return nil, &Error{Code: CodeInvalidRequest, Param: "messages", Message: "the chat template refused the conversation: " + strings.TrimPrefix(err.Error(), "chat: render: "), Err: err}
		}
		p.Text = text
	default:
		p.Text = req.Prompt
	}
	if req.PromptTokens == nil {
		// Tokenizing costs far more per byte than reading the body (a
		// single word of megabytes takes seconds): a text that needs more
		// tokens than the context holds even at the tokenizer's longest
		// token per token is refused unread.
		if least := len(p.Text) / tok.MaxBytesPerToken(); req.toRun && least >= m.ContextLength {
			return nil, promptTooLarge(req, m, "at least "+itoa(least))
		}
		p.Tokens = encode(tok, p.Text, scope)
	}
	if len(p.Tokens) == 0 {
		return nil, Errorf(CodeInvalidRequest, "the prompt is empty")
	}
	p.Segments = segments(m, req, p)
	return p, nil
}

// promptTooLarge is the error for req's prompt of n tokens on m, more
// than its context holds.
func promptTooLarge(req *Request, m *Model, n string) *Error {
	param := "messages"
	if req.Messages == nil {
		param = "prompt"
	}
	return &Error{Code: CodeTooLarge, Param: param,
		Message: "the prompt is " + n + " tokens; this model's context holds " + itoa(m.ContextLength) + " tokens in all (prompt plus output)"}
}

// encode tokenizes text with special tokens parsed, adding BOS only where
// the vocabulary wants one and the text (the template) did not write it.
func encode(tok *tokenizer.Tokenizer, text string, scope *string) []int32 {
	opts := tokenizer.EncodeOptions{ParseSpecial: true}
	if scope != nil {
		// Fragments are cached per tenant: a fragment another tenant sent
		// must not tokenize measurably faster (DESIGN.md: no cross-tenant
		// timing signal).
		opts.ReuseFragments, opts.Scope = true, *scope
	}
	ids := tok.AppendEncodeWith(nil, text, opts)
	if tok.AddBOS() && tok.BOS() >= 0 && (len(ids) == 0 || ids[0] != tok.BOS()) {
		ids = slices.Insert(ids, 0, tok.BOS())
	}
	return ids
}

// normalizeMessages maps OpenAI's developer role to system, which is what
// templates know.
func normalizeMessages(msgs []chat.Message) []chat.Message {
	var out []chat.Message
	for i, m := range msgs {
		if m.Role == "developer" {
			if out == nil {
				out = slices.Clone(msgs)
			}
			out[i].Role = "system"
		}
	}
	if out == nil {
		return msgs
	}
	return out
}

func renderOptions(m *Model, req *Request, genPrompt bool) chat.RenderOptions {
	tok := m.Tokenizer
	opts := chat.RenderOptions{Tools: req.Tools, AddGenerationPrompt: genPrompt, Now: time.Now()}
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

// segments tags the prompt with retention classes: the tools and leading
// system messages persistent, the conversation session (or the client's
// retention hint), spans up to long-lived cache breakpoints persistent, and
// the reasoning of the latest assistant turn, when the template keeps it,
// ephemeral.
//
// Boundaries come from rendering a prefix of the conversation and taking
// its longest common prefix with the full prompt text, then counting the
// prompt's tokens that lie wholly inside that text prefix. That equals the
// longest common token prefix wherever tokenization is stable across the
// boundary (turn boundaries are special tokens, so it is), and costs one
// render per boundary rather than a tokenization of each prefix.
func segments(m *Model, req *Request, p *Prompt) []engine.Segment {
	n := len(p.Tokens)
	session := engine.RetentionSession
	if req.Hints.Retention != engine.RetentionDefault {
		session = req.Hints.Retention
	}
	if p.Text == "" || req.Messages == nil {
		return []engine.Segment{{Start: 0, End: n, Retention: session}}
	}
	msgs := normalizeMessages(req.Messages)
	type span struct {
		start, end int // bytes of p.Text
		ret        engine.Retention
	}
	var spans []span
	prefixEnd := func(prefix []chat.Message) int {
		opts := renderOptions(m, req, false)
		text, err := m.Template.Render(prefix, opts)
		if err != nil || text == "" {
			// Some templates need a user turn: render one that cannot occur
			// in the prompt, so the common prefix stops before it.
			text, err = m.Template.Render(append(slices.Clip(prefix), chat.Message{Role: "user", Content: "\x00\x01"}), opts)
			if err != nil {
				return 0
			}
		}
		return commonPrefix(text, p.Text)
	}
	if req.cacheMessages > 0 && req.cacheMessages <= len(msgs) {
		if b := prefixEnd(msgs[:req.cacheMessages]); b > 0 {
			spans = append(spans, span{0, b, engine.RetentionPinned})
		}
	}
	sys := 0
	for sys < len(msgs) && msgs[sys].Role == "system" {
		sys++
	}
	if sys > 0 || len(req.Tools) > 0 {
		if b := prefixEnd(msgs[:sys]); b > 0 {
			spans = append(spans, span{0, b, engine.RetentionPersistent})
		}
	}
	for _, bp := range req.Breakpoints {
		if bp.Message >= len(msgs) {
			continue
		}
		ret := engine.RetentionSession
		if bp.TTL >= time.Hour {
			ret = engine.RetentionPersistent
		}
		upto := msgs[:bp.Message+1]
		if bp.Message < 0 { // the tools (and system prompt)
			upto = msgs[:sys]
		}
		if b := prefixEnd(upto); b > 0 {
			spans = append(spans, span{0, b, ret})
		}
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "user" {
			break
		}
		if r := msgs[i].ReasoningContent; msgs[i].Role == "assistant" && r != "" {
			if a := strings.LastIndex(p.Text, r); a >= 0 {
				spans = append(spans, span{a, a + len(r), engine.RetentionEphemeral})
			}
			break
		}
	}
	if len(spans) == 0 {
		return []engine.Segment{{Start: 0, End: n, Retention: session}}
	}
	// Token boundaries of every span edge, in one pass over the tokens.
	cuts := []int{0, len(p.Text)}
	for _, s := range spans {
		cuts = append(cuts, s.start, s.end)
	}
	slices.Sort(cuts)
	cuts = slices.Compact(cuts)
	toks := tokensWithin(m.Tokenizer, p.Tokens, p.Text, cuts)
	toks[0], toks[len(toks)-1] = 0, n // the first and last cuts are the ends of the text
	at := func(b int) int { i, _ := slices.BinarySearch(cuts, b); return toks[i] }
	var segs []engine.Segment
	for i := 0; i+1 < len(cuts); i++ {
		a, b := cuts[i], cuts[i+1]
		// The reasoning span wins; else the highest class of the spans
		// covering [a, b); else the conversation's class.
		ret, ephemeral := engine.RetentionDefault, false
		for _, s := range spans {
			if s.start <= a && b <= s.end {
				if s.ret == engine.RetentionEphemeral {
					ephemeral = true
				} else if s.ret > ret {
					ret = s.ret
				}
			}
		}
		switch {
		case ephemeral:
			ret = engine.RetentionEphemeral
		case ret == engine.RetentionDefault:
			ret = session
		}
		ta, tb := at(a), at(b)
		if ta >= tb {
			continue
		}
		if k := len(segs) - 1; k >= 0 && segs[k].Retention == ret && segs[k].End == ta {
			segs[k].End = tb
			continue
		}
		segs = append(segs, engine.Segment{Start: ta, End: tb, Retention: ret})
	}
	if len(segs) == 0 || segs[0].Start != 0 {
		return []engine.Segment{{Start: 0, End: n, Retention: session}}
	}
	segs[len(segs)-1].End = n
	return segs
}

// commonPrefix returns the length of the longest common prefix of a and b.
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// tokensWithin returns, for each byte offset in cuts (ascending), how many
// leading tokens of ids have pieces lying wholly inside text[:cut]. The
// pieces are aligned with the text allowing for what the tokenizer adds or
// loses: a leading BOS the text does not contain, SentencePiece's inserted
// spaces, and unknown tokens (which stand for a few bytes of text, or for
// an inserted "▁" the vocabulary cannot spell): the next piece is looked for
// a little further on. Where the alignment fails, later cuts get the tokens
// aligned so far (a conservative boundary).
func tokensWithin(tok *tokenizer.Tokenizer, ids []int32, text string, cuts []int) []int {
	const unkWindow = 16 // bytes an unknown token may stand for
	out := make([]int, len(cuts))
	var buf []byte
	pos, ci := 0, 0
	afterUnk := false
	for i, id := range ids {
		if (i == 0 && id == tok.BOS()) || id == tok.UNK() {
			afterUnk = afterUnk || id == tok.UNK()
			continue // zero width until the next piece says otherwise
		}
		buf = tok.AppendPiece(buf[:0], id, true)
		rest := text[pos:]
		switch {
		case strings.HasPrefix(rest, string(buf)):
			pos += len(buf)
		case len(buf) > 0 && buf[0] == ' ' && strings.HasPrefix(rest, string(buf[1:])):
			pos += len(buf) - 1
		case afterUnk && len(buf) > 0 && strings.Contains(rest[:min(len(rest), unkWindow+len(buf))], string(buf)):
			pos += strings.Index(rest, string(buf)) + len(buf)
		default:
			for ; ci < len(cuts); ci++ {
				out[ci] = i
			}
			return out
		}
		afterUnk = false
		for ci < len(cuts) && cuts[ci] < pos {
			out[ci] = i
			ci++
		}
	}
	for ; ci < len(cuts); ci++ {
		out[ci] = len(ids)
	}
	return out
}
