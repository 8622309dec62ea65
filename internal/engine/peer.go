package engine

import (
	"fmt"

	"github.com/kvserve/kvserve/internal/kv"
)

// MissingBlocks returns the hashes of r's full prompt blocks as this
// engine's pool names them (its scope, its shared prefix), up to the last a
// prefix match can take (one that leaves a token to compute), and how many
// of them from the start this engine's memory (pool or host tier) holds: a
// peer is asked for hashes[held:] (ExportKV), and ImportKV stores its
// answer.
func (e *Engine) MissingBlocks(r *Request) (hashes []kv.Hash, held int) {
	hashes = e.chain(r, r.Prompt)
	hashes = hashes[:min(len(hashes), max(0, len(r.Prompt)-1)/e.cfg.BlockSize)]
	return hashes, e.kv.Held(hashes)
}

// ExportKV returns the contents of the leading blocks of hashes that this
// engine's memory holds (pool or host tier), for a peer to import
// (ImportKV). It stops at the first block it lacks.
func (e *Engine) ExportKV(hashes []kv.Hash) [][]byte { return e.kv.Export(hashes) }

// BlockBytes is the size of one KV block's contents, which a peer's must
// equal for its blocks to be imported.
func (e *Engine) BlockBytes() int64 {
	c := e.kv.Config()
	return c.BlockBytes()
}

// ImportKV stores blocks of r's prompt copied from a peer (its ExportKV of
// hashes[from:], hashes from MissingBlocks(r)) in this engine's pool as
// cached blocks with the classes r gives them, so that r, submitted next,
// finds them. Pins are not taken here (the request's validation decides
// them when it is submitted): pinned blocks are imported as persistent. It
// returns how many blocks it stored.
func (e *Engine) ImportKV(r *Request, hashes []kv.Hash, from int, data [][]byte) (int, error) {
	if e.cfg.DisablePrefixCache || e.cfg.Contiguous {
		return 0, nil
	}
	if len(r.Prompt) == 0 {
		return 0, fmt.Errorf("%w: empty prompt", ErrInvalid)
	}
	if err := checkShared(r); err != nil {
		return 0, err
	}
	seq := e.kv.NewSequence(e.salt(r.Scope), []byte(e.cfg.ModelID))
	if r.SharedScope != "" {
		seq.SetShared(e.salt(r.SharedScope), r.SharedTokens/e.cfg.BlockSize)
	}
	perBlock, rest := blockClasses(r, len(r.Prompt), e.cfg.BlockSize)
	for i, c := range perBlock {
		perBlock[i] = min(c, kv.ClassPersistent)
	}
	seq.SetClasses(perBlock, min(rest, kv.ClassPersistent))
	n, err := seq.Import(r.Prompt, hashes, from, data)
	if err != nil {
		return 0, fmt.Errorf("engine: importing a peer's KV: %w", err)
	}
	return n, nil
}
