// Package batch is the plain data that crosses the seam between a scheduler
// and a forward pass: which sequences run in one pass, their new tokens and
// positions, where their keys and values live, where logits go, and the
// shape a forward pass reports so the scheduler can size its KV pool.
//
// It is a leaf: the engine (the scheduler) and every forward pass (the real
// model, the simulator) import it, and neither imports the other. A forward
// pass is anything with
//
//	Shape() batch.Shape
//	Forward(ctx context.Context, seqs []batch.Seq) error
//
// (engine.Forwarder states it where it is consumed).
package batch

import "github.com/kvserve/kvserve/internal/tensor"

// Cache is one sequence's key/value memory as a forward pass sees it: for
// every layer, logical blocks of BlockSize consecutive positions, each block
// holding the keys (and, separately, the values) of its tokens, token-major
// ([token][kv head][head dim]), in the KV element type of Shape.
//
// The forward pass writes the keys and values of its new tokens at their
// positions and reads all earlier positions; the scheduler makes sure the
// blocks covering those positions exist (and, when blocks are shared between
// sequences, that the ones written to are private). A forward pass that
// computes nothing (the simulator) never calls Block; a cache without
// storage may return nil there.
type Cache interface {
	BlockSize() int
	// Block returns the key and value storage of logical block b of layer.
	Block(layer, b int) (k, v []byte)
}

// Seq is one sequence's part of a forward pass.
type Seq struct {
	// Cache holds the sequence's keys and values; positions [0, Pos) are
	// already filled, and it must have room for Pos+len(Tokens) positions.
	Cache Cache
	// Pos is the position of Tokens[0].
	Pos int
	// Tokens are the new tokens, at positions Pos, Pos+1, ….
	Tokens []int32
	// Logits, when not nil, receives the next-token logits after the last of
	// Tokens (Shape.Vocab values).
	Logits []float32
	// PromptLen and ExpectedOutput describe the request the sequence serves:
	// its prompt's length and the output length the client expects
	// (hints.expected_output_tokens; 0 when unknown). A computing forward
	// pass ignores them; one that models the output instead of computing it
	// (the simulator) ends the sample there.
	PromptLen, ExpectedOutput int
}

// Shape is what a scheduler needs to know of a forward pass to size its KV
// pool and to check requests.
type Shape struct {
	// Vocab is the number of logits per sequence.
	Vocab int
	// Context is the longest sequence the model was trained for.
	Context int
	// Layers and KVDim give one token's KV: in each layer, KVDim keys and
	// KVDim values.
	Layers, KVDim int
	// KVType is the element type the forward pass reads and writes KV in.
	KVType tensor.DType
	// MaxTokens is the most tokens one pass accepts (summed over its
	// sequences).
	MaxTokens int
}
