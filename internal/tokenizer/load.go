package tokenizer

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/kvserve/kvserve/internal/gguf"
)

// Metadata keys read by FromMetadata.
const (
	keyModel        = "tokenizer.ggml.model"
	keyPre          = "tokenizer.ggml.pre"
	keyTokens       = "tokenizer.ggml.tokens"
	keyScores       = "tokenizer.ggml.scores"
	keyTokenType    = "tokenizer.ggml.token_type"
	keyMerges       = "tokenizer.ggml.merges"
	keyAddBOS       = "tokenizer.ggml.add_bos_token"
	keyAddEOS       = "tokenizer.ggml.add_eos_token"
	keyAddPrefix    = "tokenizer.ggml.add_space_prefix"
	keyChatTemplate = "tokenizer.chat_template"
	keyName         = "general.name"
)

// maxVocab bounds the vocabulary size; real vocabularies stay below 2^18.
const maxVocab = 1 << 24

// preConfig is what a tokenizer.ggml.pre name selects in llama.cpp: the
// pre-tokenizer expressions and the flags that go with them.
type preConfig struct {
	exprs        []string
	keepSpaces   bool // clean_up_tokenization_spaces off
	ignoreMerges bool // a word that is a whole token is not merged
	addBOS       bool // default for add_bos_token
	noBOS        bool // the vocabulary has no BOS token by default
}

// The pre-tokenizer expressions of llama.cpp, as written there. They are
// applied in order, each splitting the pieces the previous one produced.
const (
	exprGPT2   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)`
	exprLlama3 = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	exprQwen2  = `(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	exprDigit  = `\p{N}`
	exprPoro   = ` ?[^(\s|.,!?…。，、।۔،)]+`
	exprCJK    = `[一-龥ࠀ-一가-퟿]+`
	exprTekken = `[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+`

	exprDeepseekLetters = "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF\U0001E900-\U0001E943]+"
	exprDeepseekPunct   = `\s?[!-/:-~！-／：-～‘-‟　-。]+`
	exprDeepseek3       = "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"
)

var (
	preDefault   = preConfig{exprs: []string{`[\p{P}\$\+<=>\^~\|]+`, exprGPT2, `\p{N}+`, `[0-9][0-9][0-9]`}}
	preLlama3    = preConfig{exprs: []string{exprLlama3}, ignoreMerges: true, addBOS: true}
	preGPT2      = preConfig{exprs: []string{exprGPT2}}
	preStarcoder = preConfig{exprs: []string{exprDigit, exprGPT2}}
	preQwen2     = preConfig{exprs: []string{exprQwen2}}
	prePoro      = preConfig{exprs: []string{exprPoro}}
)

// preConfigs maps tokenizer.ggml.pre to its configuration, following the
// pre-tokenizer switch in llama.cpp's vocabulary loader.
var preConfigs = map[string]preConfig{
	"default":          preDefault,
	"llama3":           preLlama3,
	"llama-v3":         preLlama3,
	"llama-bpe":        preLlama3,
	"falcon3":          preLlama3,
	"dbrx":             {exprs: []string{exprLlama3}},
	"smaug-bpe":        {exprs: []string{exprLlama3}},
	"deepseek-llm":     {exprs: []string{"[\r\n]", exprDeepseekLetters, exprDeepseekPunct, `\s+$`, exprCJK, `\p{N}+`}, keepSpaces: true},
	"deepseek-v3":      {exprs: []string{`\p{N}{1,3}`, `[一-龥぀-ゟ゠-ヿ]+`, exprDeepseek3}, keepSpaces: true},
	"deepseek-coder":   {exprs: []string{"[\r\n]", `\s?\p{L}+`, `\s?\p{P}+`, exprCJK, exprDigit}, keepSpaces: true},
	"falcon":           {exprs: []string{"[\\p{P}\\$\\+<=>\\^~\\|`]+", exprGPT2, `[0-9][0-9][0-9]`}},
	"mpt":              preGPT2,
	"starcoder":        preStarcoder,
	"gpt-2":            preGPT2,
	"phi-2":            preGPT2,
	"jina-es":          preGPT2,
	"jina-de":          preGPT2,
	"gigachat":         preGPT2,
	"jina-v1-en":       preGPT2,
	"jina-v2-es":       preGPT2,
	"jina-v2-de":       preGPT2,
	"jina-v2-code":     preGPT2,
	"roberta-bpe":      preGPT2,
	"refact":           preStarcoder,
	"command-r":        {exprs: preStarcoder.exprs, keepSpaces: true},
	"qwen2":            {exprs: preQwen2.exprs, keepSpaces: true},
	"deepseek-r1-qwen": {exprs: preQwen2.exprs, keepSpaces: true},
	"stablelm2":        preQwen2,
	"megrez":           preQwen2,
	"olmo":             preGPT2,
	"poro-chat":        {exprs: prePoro.exprs, keepSpaces: true},
	"chatglm-bpe":      {exprs: []string{exprLlama3}, noBOS: true},
	"viking":           {exprs: []string{exprPoro, exprDigit}, keepSpaces: true},
	"jais":             preGPT2,
	"tekken":           {exprs: []string{exprTekken}, keepSpaces: true, ignoreMerges: true, addBOS: true},
	"smollm":           {exprs: preStarcoder.exprs, keepSpaces: true},
	"codeshell":        preStarcoder,
	"bloom":            prePoro,
	"gpt3-finnish":     prePoro,
	"exaone":           preStarcoder,
	"chameleon": {exprs: []string{`<sentinel:[0-9]+>`, `(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z`, "([\\t\\n]|    |  )", exprDigit, "[\\p{P}!-/:-@\\[-`{-~]", exprGPT2},
		addBOS: true, keepSpaces: true},
	"minerva-7b": preStarcoder,
}

// PreTokenizers returns the tokenizer.ggml.pre names a BPE vocabulary may
// use, sorted.
func PreTokenizers() []string {
	names := make([]string, 0, len(preConfigs))
	for k := range preConfigs {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// FromMetadata loads a tokenizer from model metadata. It validates
// everything it reads: a missing or mistyped key, arrays of different
// lengths, duplicate token texts or a special-token id outside the
// vocabulary is an error, never a panic.
func FromMetadata(md Metadata) (*Tokenizer, error) {
	return FromMetadataOptions(md, Options{})
}

// FromMetadataOptions is FromMetadata with cache options.
func FromMetadataOptions(md Metadata, opts Options) (*Tokenizer, error) {
	t, err := load(md)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	t.setupCaches(opts)
	return t, nil
}

func load(md Metadata) (*Tokenizer, error) {
	model, ok, err := mdString(md, keyModel)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("missing metadata %q", keyModel)
	}
	t := &Tokenizer{model: model, bos: -1, eos: -1, eot: -1, eom: -1, unk: -1, pad: -1, fim: [6]int32{-1, -1, -1, -1, -1, -1}}
	if t.pre, _, err = mdString(md, keyPre); err != nil {
		return nil, err
	}
	if t.chatTmpl, _, err = mdString(md, keyChatTemplate); err != nil {
		return nil, err
	}

	// Model defaults, as llama.cpp sets them before reading the keys.
	var pc preConfig
	switch model {
	case "llama":
		t.kind = KindSPM
		t.bos, t.eos, t.unk = 1, 2, 0
		t.addSpacePrefix = true
		t.addBOS = true
	case "gpt2":
		t.kind = KindBPE
		t.bos, t.eos = 11, 11
		if t.pre == "" {
			pc = preDefault
		} else if pc, ok = preConfigs[t.pre]; !ok {
			return nil, fmt.Errorf("unknown pre-tokenizer %q for tokenizer model %q", t.pre, model)
		}
		t.cleanSpaces = !pc.keepSpaces
		t.ignoreMerges = pc.ignoreMerges
		t.addBOS = pc.addBOS
		if pc.noBOS {
			t.bos = -1
		}
	default:
		return nil, fmt.Errorf("unsupported tokenizer model %q (supported: \"llama\" SentencePiece, \"gpt2\" byte-level BPE)", model)
	}
	if t.addSpacePrefix, err = mdBool(md, keyAddPrefix, t.addSpacePrefix); err != nil {
		return nil, err
	}

	if err := t.loadVocab(md); err != nil {
		return nil, err
	}
	if t.kind == KindBPE {
		if err := t.loadMerges(md); err != nil {
			return nil, err
		}
		for _, expr := range pc.exprs {
			s, err := newSplitter(expr)
			if err != nil {
				return nil, fmt.Errorf("pre-tokenizer %q: %w", t.pre, err)
			}
			t.splitters = append(t.splitters, s)
		}
	}
	if err := t.loadSpecialIDs(md); err != nil {
		return nil, err
	}
	name, _, err := mdString(md, keyName)
	if err != nil {
		return nil, err
	}
	t.finish(strings.ToLower(name))
	return t, nil
}

// loadVocab reads tokens, scores and types and builds the text index.
func (t *Tokenizer) loadVocab(md Metadata) error {
	tokens, ok, err := mdStrings(md, keyTokens)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("missing metadata %q", keyTokens)
	}
	n := len(tokens)
	if n == 0 || n > maxVocab {
		return fmt.Errorf("%s has %d tokens", keyTokens, n)
	}
	scores, ok, err := mdFloat32s(md, keyScores)
	if err != nil {
		return err
	}
	if ok && len(scores) != n {
		return fmt.Errorf("%s has %d entries for %d tokens", keyScores, len(scores), n)
	}
	types, ok, err := mdInts(md, keyTokenType)
	if err != nil {
		return err
	}
	if ok && len(types) != n {
		return fmt.Errorf("%s has %d entries for %d tokens", keyTokenType, len(types), n)
	}

	t.n = n
	t.scores = make([]float32, n)
	copy(t.scores, scores)
	t.attrs = make([]uint16, n)
	t.eog = make([]bool, n)
	t.textOff = make([]uint32, n+1)
	t.tokenID = make(map[string]int32, n)
	size := 0
	for _, s := range tokens {
		size += len(s)
	}
	if size > 1<<31 {
		return fmt.Errorf("%s: %d bytes of token text", keyTokens, size)
	}
	t.texts = make([]byte, 0, size+n)
	for i, s := range tokens {
		if s == "" {
			// llama.cpp gives empty tokens a placeholder text.
			s = "[EMPTY_" + strconv.Itoa(i) + "]"
		}
		t.texts = append(t.texts, s...)
		t.textOff[i+1] = uint32(len(t.texts))
		if prev, dup := t.tokenID[s]; dup {
			return fmt.Errorf("%s: tokens %d and %d have the same text %q", keyTokens, prev, i, s)
		}
		t.tokenID[s] = int32(i)
		a := attrNormal
		if types != nil {
			switch types[i] {
			case typeNormal:
				a = attrNormal
			case typeUnknown:
				a = attrUnknown
			case typeControl:
				a = attrControl
			case typeUserDefined:
				a = attrUserDefined
			case typeUnused:
				a = attrUnused
			case typeByte:
				a = attrByte
			default:
				a = 0 // undefined
			}
		}
		t.attrs[i] = a
	}
	return nil
}

// loadSpecialIDs reads the special-token ids and the add_bos/add_eos flags.
// An id of 0xFFFFFFFF (or -1) means "none given", as some converters
// write; llama.cpp then keeps the model default, and so do we. Other ids
// outside the vocabulary are errors for the tokens that shape encoding and
// generation (BOS, EOS, EOT, EOM, UNK) and are ignored, as llama.cpp does,
// for the padding and separator ids.
func (t *Tokenizer) loadSpecialIDs(md Metadata) error {
	for _, k := range []struct {
		key    string
		id     *int32
		strict bool
	}{
		{"tokenizer.ggml.bos_token_id", &t.bos, true},
		{"tokenizer.ggml.eos_token_id", &t.eos, true},
		{"tokenizer.ggml.eot_token_id", &t.eot, true},
		{"tokenizer.ggml.eom_token_id", &t.eom, true},
		{"tokenizer.ggml.unknown_token_id", &t.unk, true},
		{"tokenizer.ggml.padding_token_id", &t.pad, false},
		{"tokenizer.ggml.fim_pre_token_id", &t.fim[fimPre], false},
		{"tokenizer.ggml.fim_suf_token_id", &t.fim[fimSuf], false},
		{"tokenizer.ggml.fim_mid_token_id", &t.fim[fimMid], false},
		{"tokenizer.ggml.fim_pad_token_id", &t.fim[fimPad], false},
		{"tokenizer.ggml.fim_rep_token_id", &t.fim[fimRep], false},
		{"tokenizer.ggml.fim_sep_token_id", &t.fim[fimSep], false},
		// Deprecated names, read after the current ones as llama.cpp does.
		{"tokenizer.ggml.prefix_token_id", &t.fim[fimPre], false},
		{"tokenizer.ggml.suffix_token_id", &t.fim[fimSuf], false},
		{"tokenizer.ggml.middle_token_id", &t.fim[fimMid], false},
	} {
		v, ok, err := mdInt(md, k.key)
		if err != nil {
			return err
		}
		switch {
		case !ok || v == 0xFFFFFFFF || v == -1:
		case v >= 0 && v < int64(t.n):
			*k.id = int32(v)
		case k.strict:
			return fmt.Errorf("%s = %d is outside the vocabulary of %d tokens", k.key, v, t.n)
		}
		if !t.valid(*k.id) {
			*k.id = -1 // a model default that this small vocabulary lacks
		}
	}
	var err error
	if t.addBOS, err = mdBool(md, keyAddBOS, t.addBOS); err != nil {
		return err
	}
	if t.addEOS, err = mdBool(md, keyAddEOS, t.addEOS); err != nil {
		return err
	}
	if t.addBOS && t.bos < 0 {
		return fmt.Errorf("%s is set but the vocabulary has no BOS token", keyAddBOS)
	}
	if t.addEOS && t.eos < 0 {
		return fmt.Errorf("%s is set but the vocabulary has no EOS token", keyAddEOS)
	}
	return nil
}

// Texts by which llama.cpp recognises end-of-turn, end-of-message and
// fill-in-the-middle tokens that the metadata does not name. Where several
// are present, the first in these lists wins (llama.cpp's choice depends on
// hash-map order).
var (
	eotTexts    = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", "<｜end▁of▁sentence｜>"}
	eomTexts    = []string{"<|eom_id|>"}
	fimPreTexts = []string{"<|fim_prefix|>", "<fim-prefix>", "<｜fim▁begin｜>", "<PRE>"}
	fimSufTexts = []string{"<|fim_suffix|>", "<fim-suffix>", "<｜fim▁hole｜>", "<SUF>"}
	fimMidTexts = []string{"<|fim_middle|>", "<fim-middle>", "<｜fim▁end｜>", "<MID>"}
	fimPadTexts = []string{"<|fim_pad|>", "<fim-pad>", "<PAD>"}
	fimRepTexts = []string{"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"}
	fimSepTexts = []string{"<|file_sep|>"}
	eogTexts    = []string{"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>"}
)

// finish applies llama.cpp's post-load fix-ups (special tokens found by
// text become control tokens; the end-of-generation set; per-model strip
// flags) and builds the derived tables.
func (t *Tokenizer) finish(name string) {
	detect := func(id *int32, texts []string) {
		if *id >= 0 {
			return
		}
		for _, s := range texts {
			if x, ok := t.tokenID[s]; ok {
				*id = x
				if t.attrs[x]&attrControl == 0 {
					t.attrs[x] = attrControl
				}
				return
			}
		}
	}
	detect(&t.eot, eotTexts)
	detect(&t.eom, eomTexts)
	detect(&t.fim[fimPre], fimPreTexts)
	detect(&t.fim[fimSuf], fimSufTexts)
	detect(&t.fim[fimMid], fimMidTexts)
	detect(&t.fim[fimPad], fimPadTexts)
	detect(&t.fim[fimRep], fimRepTexts)
	detect(&t.fim[fimSep], fimSepTexts)

	for _, id := range []int32{t.fim[fimPad], t.fim[fimRep], t.fim[fimSep]} {
		if id >= 0 {
			t.eog[id] = true
		}
	}
	for _, s := range eogTexts {
		if id, ok := t.tokenID[s]; ok {
			t.eog[id] = true
			if t.attrs[id]&attrControl == 0 {
				t.attrs[id] = attrControl
			}
		}
	}
	for _, id := range []int32{t.eos, t.eot, t.eom} {
		if id >= 0 {
			t.eog[id] = true
		}
	}

	// Special tokens, longest text first; ties keep id order (llama.cpp's
	// unstable sort leaves them in an unspecified order).
	for id := range t.n {
		if t.attrs[id]&(attrControl|attrUserDefined|attrUnknown) != 0 {
			t.special = append(t.special, int32(id))
		}
	}
	slices.SortStableFunc(t.special, func(a, b int32) int {
		return len(t.text(b)) - len(t.text(a))
	})
	t.specialTrie = newTrie(t, t.special)
	for id := range t.n {
		t.maxTokenBytes = max(t.maxTokenBytes, len(t.text(int32(id))))
	}

	t.buildPieces()
	t.buildByteTokens()

	// Per-model strip flags (llama.cpp sets them by model and pre name).
	setAttr := func(s string, a uint16, on bool) {
		if id, ok := t.tokenID[s]; ok {
			if on {
				t.attrs[id] |= a
			} else {
				t.attrs[id] &^= a
			}
		}
	}
	if strings.Contains(t.pre, "jina-v2-de") || strings.Contains(t.pre, "jina-v2-es") || strings.Contains(t.pre, "jina-v2-code") {
		setAttr("<mask>", attrLStrip, true)
	} else if strings.Contains(name, "phi-3") || strings.Contains(name, "phi3") {
		for _, id := range t.special {
			t.attrs[id] |= attrRStrip
		}
		setAttr("</s>", attrRStrip, true)
		for _, s := range []string{"<unk>", "<s>", "<|endoftext|>"} {
			setAttr(s, attrRStrip, false)
		}
	}
}

// buildByteTokens fills the byte-fallback tables: for SPM the <0xXX> token
// of each byte (or the token whose text is the byte itself, or UNK when the
// vocabulary has neither); for BPE the token whose text is the raw byte.
func (t *Tokenizer) buildByteTokens() {
	const hex = "0123456789ABCDEF"
	for b := range 256 {
		t.byteToken[b] = -1
		t.rawByte[b] = -1
		if id, ok := t.tokenID[string([]byte{byte(b)})]; ok {
			t.rawByte[b] = id
		}
		if t.kind != KindSPM {
			continue
		}
		if id, ok := t.tokenID[string([]byte{'<', '0', 'x', hex[b>>4], hex[b&15], '>'})]; ok {
			t.byteToken[b] = id
		} else if t.rawByte[b] >= 0 {
			t.byteToken[b] = t.rawByte[b]
		} else {
			t.byteToken[b] = t.unk
		}
	}
}

// loadMerges reads the BPE merge list into the pair table.
func (t *Tokenizer) loadMerges(md Metadata) error {
	merges, ok, err := mdStrings(md, keyMerges)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("missing metadata %q (required for tokenizer model %q)", keyMerges, t.model)
	}
	if len(merges) >= 1<<31-1 {
		return fmt.Errorf("%s has %d entries", keyMerges, len(merges))
	}
	extra := map[string]int32{}
	sid := func(s string) int32 {
		if id, ok := t.tokenID[s]; ok {
			return id
		}
		if id, ok := extra[s]; ok {
			return id
		}
		id := int32(t.n + len(t.sidTexts))
		extra[s] = id
		t.sidTexts = append(t.sidTexts, s)
		return id
	}
	t.merges = make(map[uint64]merge, len(merges))
	for i, m := range merges {
		// llama.cpp splits at the first space after the first byte; a line
		// without one is the pair ("", ""), which can never apply.
		if len(m) < 2 {
			continue
		}
		p := strings.IndexByte(m[1:], ' ')
		if p < 0 {
			continue
		}
		first, second := m[:p+1], m[p+2:]
		if second == "" {
			continue
		}
		key := uint64(uint32(sid(first)))<<32 | uint64(uint32(sid(second)))
		if _, dup := t.merges[key]; dup {
			continue // the first (lowest-ranked) occurrence wins
		}
		t.merges[key] = merge{rank: int32(i), result: sid(first + second)}
	}
	for b := range 256 {
		t.byteText[b] = string(appendCodePoint(nil, byteRunes[b]))
		t.byteSid[b] = -1
		if id, ok := t.tokenID[t.byteText[b]]; ok {
			t.byteSid[b] = id
		} else if id, ok := extra[t.byteText[b]]; ok {
			t.byteSid[b] = id
		}
	}
	return nil
}

// Metadata accessors: (value, present, error). A present key of the wrong
// type is an error.

func mdString(md Metadata, key string) (string, bool, error) {
	v, ok := md.Get(key)
	if !ok {
		return "", false, nil
	}
	s, ok := v.V.(string)
	if !ok {
		return "", false, fmt.Errorf("metadata %q is %s, want string", key, v.Type)
	}
	return s, true, nil
}

func mdStrings(md Metadata, key string) ([]string, bool, error) {
	v, ok := md.Get(key)
	if !ok {
		return nil, false, nil
	}
	s, ok := v.V.([]string)
	if !ok {
		return nil, false, fmt.Errorf("metadata %q is %s, want array of string", key, describe(v))
	}
	return s, true, nil
}

func mdFloat32s(md Metadata, key string) ([]float32, bool, error) {
	v, ok := md.Get(key)
	if !ok {
		return nil, false, nil
	}
	s, ok := v.V.([]float32)
	if !ok {
		return nil, false, fmt.Errorf("metadata %q is %s, want array of float32", key, describe(v))
	}
	return s, true, nil
}

func mdInts(md Metadata, key string) ([]int64, bool, error) {
	v, ok := md.Get(key)
	if !ok {
		return nil, false, nil
	}
	var out []int64
	switch a := v.V.(type) {
	case []int32:
		out = make([]int64, len(a))
		for i, x := range a {
			out[i] = int64(x)
		}
	case []uint32:
		out = make([]int64, len(a))
		for i, x := range a {
			out[i] = int64(x)
		}
	case []int8:
		out = make([]int64, len(a))
		for i, x := range a {
			out[i] = int64(x)
		}
	case []uint8:
		out = make([]int64, len(a))
		for i, x := range a {
			out[i] = int64(x)
		}
	case []int16:
		out = make([]int64, len(a))
		for i, x := range a {
			out[i] = int64(x)
		}
	case []uint16:
		out = make([]int64, len(a))
		for i, x := range a {
			out[i] = int64(x)
		}
	case []int64:
		out = a
	case []uint64:
		out = make([]int64, len(a))
		for i, x := range a {
			out[i] = int64(x)
		}
	default:
		return nil, false, fmt.Errorf("metadata %q is %s, want array of integers", key, describe(v))
	}
	return out, true, nil
}

func mdInt(md Metadata, key string) (int64, bool, error) {
	v, ok := md.Get(key)
	if !ok {
		return 0, false, nil
	}
	i, ok := v.AsInt64()
	if !ok || v.Type == gguf.TypeArray {
		return 0, false, fmt.Errorf("metadata %q is %s, want an integer", key, describe(v))
	}
	return i, true, nil
}

func mdBool(md Metadata, key string, def bool) (bool, error) {
	v, ok := md.Get(key)
	if !ok {
		return def, nil
	}
	b, ok := v.V.(bool)
	if !ok {
		return def, fmt.Errorf("metadata %q is %s, want bool", key, describe(v))
	}
	return b, nil
}

func describe(v gguf.Value) string {
	if v.Type == gguf.TypeArray {
		return "array of " + v.ElemType.String()
	}
	return v.Type.String()
}
