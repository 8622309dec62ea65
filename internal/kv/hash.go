package kv

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
)

// Hash identifies the content of a full block: the chained hash
//
//	h_i = SHA-256(h_{i-1} ‖ tokens_i ‖ extra)
//
// where h_{-1} is the scope salt. Equal hashes mean equal KV: the same tokens
// after the same prefix, for the same model (extra), in the same scope.
type Hash [32]byte

// String returns the first 16 hex digits, enough to tell blocks apart in logs.
func (h Hash) String() string { return hex.EncodeToString(h[:8]) }

// IsZero reports whether h is the zero hash.
func (h Hash) IsZero() bool { return h == Hash{} }

// ScopeSalt derives the first parent hash of every chain in a scope (a
// tenant): HMAC-SHA256(secret, scope). The server secret never leaves the
// server, so clients cannot forge another tenant's salt, and the hashes of
// two scopes never collide unless a prefix is deliberately published to a
// shared scope.
func ScopeSalt(secret []byte, scope string) Hash {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(scope))
	var h Hash
	mac.Sum(h[:0])
	return h
}

// Hasher computes chained block hashes without allocating per block.
type Hasher struct {
	extra []byte
	buf   []byte
}

// NewHasher returns a Hasher whose hashes bind extra (model id, adapter).
func NewHasher(extra []byte) *Hasher {
	return &Hasher{extra: append([]byte(nil), extra...)}
}

// Block returns the hash of a block of tokens following parent.
func (h *Hasher) Block(parent Hash, tokens []int32) Hash {
	h.buf = append(h.buf[:0], parent[:]...)
	for _, t := range tokens {
		h.buf = binary.LittleEndian.AppendUint32(h.buf, uint32(t))
	}
	h.buf = append(h.buf, h.extra...)
	return sha256.Sum256(h.buf)
}

// Chain appends to dst the hashes of every full block of tokens, starting
// from parent, and returns the extended slice.
func (h *Hasher) Chain(dst []Hash, parent Hash, tokens []int32, blockSize int) []Hash {
	for i := 0; i+blockSize <= len(tokens); i += blockSize {
		parent = h.Block(parent, tokens[i:i+blockSize])
		dst = append(dst, parent)
	}
	return dst
}

// Continue is the parent a scope's own blocks chain from after a prefix
// published to a shared scope: the shared prefix's last hash bound to the
// scope's salt, so that what a tenant appends to a shared prefix is its own
// (another tenant's identical continuation hashes differently).
func Continue(sharedLast, scope Hash) Hash {
	var buf [2*len(Hash{}) + 8]byte
	copy(buf[:], sharedLast[:])
	copy(buf[len(Hash{}):], scope[:])
	copy(buf[2*len(Hash{}):], "continue")
	return sha256.Sum256(buf[:])
}

// SplitChain appends to dst the hashes of every full block of tokens whose
// first sharedBlocks blocks chain from the shared scope's salt and the rest
// from scope's, continuing the shared prefix (Continue). With sharedBlocks
// 0 it is Chain from scope.
func (h *Hasher) SplitChain(dst []Hash, shared Hash, sharedBlocks int, scope Hash, tokens []int32, blockSize int) []Hash {
	k := min(sharedBlocks, len(tokens)/blockSize)
	if k <= 0 {
		return h.Chain(dst, scope, tokens, blockSize)
	}
	start := len(dst)
	dst = h.Chain(dst, shared, tokens[:k*blockSize], blockSize)
	return h.Chain(dst, Continue(dst[start+k-1], scope), tokens[k*blockSize:], blockSize)
}
