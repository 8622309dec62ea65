// Package tokenizer turns text into token ids and back, for the vocabularies
// stored in GGUF model files, exactly as llama.cpp does.
//
// Exactness is the point: a KV-cache block is addressed by the hash of its
// token ids, and a prompt tokenised one id differently from the reference
// misses every cached prefix after that id and changes what the model sees.
// So this package reproduces llama.cpp (commit c392e509) decision for
// decision, including its quirks, and is tested against llama.cpp's own
// tokenizer test vectors.
//
// Two tokenizer models are supported, chosen by tokenizer.ggml.model:
//
//   - "llama": SentencePiece-style (SPM). Spaces become U+2581 "▁", an
//     optional space is prefixed, then adjacent pieces are merged greedily by
//     vocabulary score; characters without a piece fall back to byte tokens
//     <0xXX>.
//   - "gpt2": byte-level BPE. The text is first split into words by a
//     pre-tokenizer chosen by tokenizer.ggml.pre (hand-written splitters for
//     the GPT-2, Llama 3 and Qwen2 patterns, a regular-expression engine for
//     the rest), every byte is mapped to a printable code point, and each
//     word is merged by the ranked merge list.
//
// Before either, special tokens (control and user-defined tokens such as
// <|im_start|>) are cut out of the text, longest first, so that their text
// maps to their id rather than being tokenised as characters.
//
// Decoding comes in two flavours. Decode concatenates token pieces, which is
// what llama-server returns for generated tokens and what a StreamDecoder
// produces one id at a time (holding back incomplete UTF-8). DecodeWith with
// Detokenize inverts Encode the way llama.cpp's llama_detokenize does,
// dropping SPM's prefix space and applying clean_up_tokenization_spaces.
//
// Where llama.cpp throws or aborts, this package does something defined
// instead: an SPM byte with no byte token becomes UNK, a code point beyond
// U+10FFFF from a malformed 4-byte sequence becomes U+FFFD, and hostile
// metadata is an error. Where llama.cpp's result depends on hash-map
// iteration order (which of several end-of-turn texts becomes EOT; the order
// of special tokens of equal length), the choice here is fixed and
// documented. Code point classes come from Go's Unicode 15.0 tables, patched
// with the 15.1 additions so that they equal llama.cpp's.
//
// A Tokenizer's vocabulary is immutable after loading and it is safe for
// concurrent use. Encode keeps its working memory in a per-Tokenizer pool,
// so steady-state encoding allocates only the returned slice; AppendEncode
// avoids even that.
//
// Prompts repeat: an agent re-sends its system prompt, tools and history
// with every turn, and most words of any text were seen before. Two
// bounded caches, shared by all calls on a Tokenizer, make repeated text
// cheap without changing a token (every cache compares its whole key, and
// tests compare cached with uncached encodings):
//
//   - the word cache maps a pre-tokenized BPE word, or an SPM piece (text
//     cut before a ▁ that no merge can cross), to its tokens; every Encode
//     uses it, and a hit costs a hash and a compare instead of a merge;
//   - the fragment cache maps a whole text between special tokens (a
//     system prompt, a tool block, an earlier turn) to its tokens, per
//     scope (a tenant), for calls that ask for it (EncodeOptions); a hit
//     skips pre-tokenization too.
//
// On a 16k-token agent prompt this takes encoding from 3–7 ms to about
// 0.5 ms with the word cache, and to about 0.1 ms for the agent's next turn
// with both (BenchmarkAgentPrompt). Options size the caches; CacheStats
// reports their use.
package tokenizer

import (
	"sync"

	"github.com/kvserve/kvserve/internal/gguf"
)

// Token attributes, as llama.cpp derives them from tokenizer.ggml.token_type
// and its own fix-ups. A token has one of the type attributes plus, for some
// models, the strip flags used when special tokens are cut out of a text.
const (
	attrUnknown     uint16 = 1 << 0
	attrUnused      uint16 = 1 << 1
	attrNormal      uint16 = 1 << 2
	attrControl     uint16 = 1 << 3
	attrUserDefined uint16 = 1 << 4
	attrByte        uint16 = 1 << 5
	attrLStrip      uint16 = 1 << 7
	attrRStrip      uint16 = 1 << 8
)

// Token types as stored in tokenizer.ggml.token_type.
const (
	typeNormal      = 1
	typeUnknown     = 2
	typeControl     = 3
	typeUserDefined = 4
	typeUnused      = 5
	typeByte        = 6
)

// Kind is the tokenizer model of a vocabulary.
type Kind uint8

// The supported tokenizer models.
const (
	KindSPM Kind = iota + 1 // tokenizer.ggml.model "llama"
	KindBPE                 // tokenizer.ggml.model "gpt2"
)

func (k Kind) String() string {
	switch k {
	case KindSPM:
		return "SPM"
	case KindBPE:
		return "BPE"
	}
	return "unknown"
}

// Tokenizer encodes text to token ids and decodes ids to text for one
// vocabulary. It is safe for concurrent use: everything but its caches is
// immutable after loading, and the caches synchronise themselves (see
// wordCache and fragCache).
//
// Layout: token texts live in one byte slice (texts, offsets in textOff) and
// so do the decoded pieces (pieces, pieceOff), so a 150k-token vocabulary
// costs a few large allocations rather than 300k small ones. tokenID maps a text to
// its id; for BPE, the merge table is keyed by pairs of symbol ids (sids),
// where sids below the vocabulary size are token ids and the rest name
// merge operands that are not themselves tokens. The hot loops therefore
// work on integers and do a single map lookup per candidate pair.
type Tokenizer struct {
	kind      Kind
	model     string // tokenizer.ggml.model as written
	pre       string // tokenizer.ggml.pre as written ("" if absent)
	chatTmpl  string
	n         int
	texts     []byte
	textOff   []uint32 // len n+1
	scores    []float32
	attrs     []uint16
	eog       []bool
	tokenID   map[string]int32
	pieces    []byte
	pieceOff  []uint32   // len n+1
	byteToken [256]int32 // SPM byte fallback: <0xXX>, else the raw byte's token, else UNK, else -1

	bos, eos, eot, eom, unk, pad int32
	fim                          [6]int32 // fill-in-the-middle tokens, indexed by fimPre..fimSep
	addBOS, addEOS               bool
	addSpacePrefix               bool
	cleanSpaces                  bool
	ignoreMerges                 bool

	// special lists the control, user-defined and unknown tokens, longest
	// text first, for cutting them out of a text; specialTrie finds which
	// of them occur in a text at all in one pass.
	special     []int32
	specialTrie trie

	maxTokenBytes int // the longest token text in bytes

	// BPE only.
	splitters []splitter
	merges    map[uint64]merge // (left sid, right sid) → rank and result
	sidTexts  []string         // texts of the sids ≥ n
	byteSid   [256]int32       // sid of each byte's GPT-2 code point, or -1
	byteText  [256]string      // UTF-8 of each byte's GPT-2 code point
	rawByte   [256]int32       // token whose text is that single raw byte, or -1

	// Caches (nil when disabled): see Options. spmJoin holds the byte
	// strings (1 to 4 bytes, packed by packSym) that some SPM token
	// contains right before a ▁: SPM text may be cut into pieces before a
	// ▁ whose preceding character is not among them.
	words   *wordCache
	frags   *fragCache
	spmJoin map[uint64]struct{}

	scratch sync.Pool // *encodeState
}

// merge is one BPE merge rule: its rank (lower merges first) and the sid of
// the concatenated symbol.
type merge struct {
	rank   int32
	result int32
}

// Metadata is what FromMetadata needs of a model file: its metadata values
// by key. *gguf.File satisfies it.
type Metadata interface {
	Get(key string) (gguf.Value, bool)
}

var _ Metadata = (*gguf.File)(nil)

// FromGGUF loads the tokenizer described by a GGUF file's metadata, with
// the default caches.
func FromGGUF(f *gguf.File) (*Tokenizer, error) {
	return FromMetadataOptions(f, Options{})
}

// Kind returns the tokenizer model (SPM or BPE).
func (t *Tokenizer) Kind() Kind { return t.kind }

// Model returns tokenizer.ggml.model as written in the file ("llama", "gpt2").
func (t *Tokenizer) Model() string { return t.model }

// Pre returns tokenizer.ggml.pre as written in the file, or "" when absent.
func (t *Tokenizer) Pre() string { return t.pre }

// ChatTemplate returns tokenizer.chat_template, or "" when absent.
func (t *Tokenizer) ChatTemplate() string { return t.chatTmpl }

// VocabSize returns the number of tokens.
func (t *Tokenizer) VocabSize() int { return t.n }

// BOS returns the beginning-of-sequence token id, or -1.
func (t *Tokenizer) BOS() int32 { return t.bos }

// EOS returns the end-of-sequence token id, or -1.
func (t *Tokenizer) EOS() int32 { return t.eos }

// EOT returns the end-of-turn token id (e.g. <|eot_id|>, <|im_end|>), or -1.
func (t *Tokenizer) EOT() int32 { return t.eot }

// EOM returns the end-of-message token id (<|eom_id|>), or -1.
func (t *Tokenizer) EOM() int32 { return t.eom }

// UNK returns the unknown token id, or -1.
func (t *Tokenizer) UNK() int32 { return t.unk }

// PAD returns the padding token id, or -1.
func (t *Tokenizer) PAD() int32 { return t.pad }

// Indexes of Tokenizer.fim.
const (
	fimPre = iota
	fimSuf
	fimMid
	fimPad
	fimRep
	fimSep
)

// FIM returns the fill-in-the-middle tokens (prefix, suffix, middle), -1
// where the vocabulary has none.
func (t *Tokenizer) FIM() (prefix, suffix, middle int32) {
	return t.fim[fimPre], t.fim[fimSuf], t.fim[fimMid]
}

// AddBOS reports whether Encode with addSpecial prepends BOS.
func (t *Tokenizer) AddBOS() bool { return t.addBOS }

// AddEOS reports whether Encode with addSpecial appends EOS.
func (t *Tokenizer) AddEOS() bool { return t.addEOS }

// AddSpacePrefix reports whether SPM encoding puts a space before the text
// (and before text that follows a special token).
func (t *Tokenizer) AddSpacePrefix() bool { return t.addSpacePrefix }

func (t *Tokenizer) valid(id int32) bool { return id >= 0 && int(id) < t.n }

// TokenText returns the raw vocabulary text of a token (for SPM with ▁ for
// spaces, for BPE in GPT-2's byte alphabet), or "" for an id out of range.
func (t *Tokenizer) TokenText(id int32) string {
	if !t.valid(id) {
		return ""
	}
	return string(t.texts[t.textOff[id]:t.textOff[id+1]])
}

// MaxBytesPerToken bounds the bytes of input text one token stands for:
// the longest vocabulary text (a ▁ or a GPT-2 code point is at least as
// long as the byte it stands for), or 4, an unknown character's most. So
// a text of n bytes encodes to at least n / MaxBytesPerToken() tokens,
// which lets a caller refuse a text far too long for a context without
// encoding it.
func (t *Tokenizer) MaxBytesPerToken() int { return max(t.maxTokenBytes, 4) }

// Score returns a token's SPM score (0 for BPE vocabularies and ids out of
// range).
func (t *Tokenizer) Score(id int32) float32 {
	if !t.valid(id) {
		return 0
	}
	return t.scores[id]
}

// TokenID returns the id of the token whose vocabulary text is exactly s.
func (t *Tokenizer) TokenID(s string) (int32, bool) {
	id, ok := t.tokenID[s]
	return id, ok
}

// IsEOG reports whether generating id ends generation: EOS, EOT, EOM, and the
// other tokens llama.cpp treats so (<|im_end|>, <|eot_id|>, <|endoftext|>,
// <end_of_turn>, <|end|>, <|eom_id|>, <EOT>, and FIM pad/repo/file-separator
// tokens).
func (t *Tokenizer) IsEOG(id int32) bool {
	return t.valid(id) && t.eog[id]
}

// EOGs returns all end-of-generation token ids in increasing order.
func (t *Tokenizer) EOGs() []int32 {
	var ids []int32
	for id, e := range t.eog {
		if e {
			ids = append(ids, int32(id))
		}
	}
	return ids
}

// IsControl reports whether id is a control token (BOS, EOS, <|im_start|>,
// ...): Decode renders control tokens only when asked to.
func (t *Tokenizer) IsControl(id int32) bool {
	return t.valid(id) && t.attrs[id]&attrControl != 0
}

// IsUserDefined reports whether id is a user-defined token: such tokens are
// matched as whole strings in any text, even without parseSpecial.
func (t *Tokenizer) IsUserDefined(id int32) bool {
	return t.valid(id) && t.attrs[id]&attrUserDefined != 0
}

// IsByte reports whether id is an SPM byte token <0xXX>.
func (t *Tokenizer) IsByte(id int32) bool {
	return t.valid(id) && t.attrs[id]&attrByte != 0
}

func (t *Tokenizer) text(id int32) []byte {
	return t.texts[t.textOff[id]:t.textOff[id+1]]
}
