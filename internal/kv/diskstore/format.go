package diskstore

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// A block file is a header followed by the sealed block:
//
//	magic "KVG3" | version u8 | class u8 | reserved u16
//	scope [32] | hash [32] | nonce [12] | plaintext length u64 (LE)
//	ciphertext (plaintext length bytes) | GCM tag [16]
//
// The whole header is the associated data, so the hash, the scope, the
// class and the length are authenticated with the contents: a file moved
// under another name, edited anywhere or cut short fails to open.
const (
	magic      = "KVG3"
	version    = 1
	nonceSize  = 12
	tagSize    = 16
	headerSize = 4 + 1 + 1 + 2 + 32 + 32 + nonceSize + 8
	// keyInfo is HKDF's context string: a key derived for anything else
	// from the same master key differs.
	keyInfo = "kvserve G3 block key v1"
)

// errCorrupt marks a block file that is not a block this store wrote.
var errCorrupt = errors.New("diskstore: corrupt block file")

// header is a block file's clear-text header.
type header struct {
	class       uint8
	scope, hash Hash
	nonce       [nonceSize]byte
	length      uint64
}

func (h *header) marshal(dst []byte) []byte {
	dst = append(dst, magic...)
	dst = append(dst, version, h.class, 0, 0)
	dst = append(dst, h.scope[:]...)
	dst = append(dst, h.hash[:]...)
	dst = append(dst, h.nonce[:]...)
	return binary.LittleEndian.AppendUint64(dst, h.length)
}

// parseHeader reads a header; it checks the framing, not the contents
// (that is the tag's job).
func parseHeader(b []byte) (header, error) {
	var h header
	if len(b) < headerSize {
		return h, fmt.Errorf("%w: %d bytes, shorter than a header", errCorrupt, len(b))
	}
	if string(b[:4]) != magic {
		return h, fmt.Errorf("%w: bad magic", errCorrupt)
	}
	if b[4] != version {
		return h, fmt.Errorf("%w: version %d", errCorrupt, b[4])
	}
	h.class = b[5]
	o := 8
	o += copy(h.scope[:], b[o:])
	o += copy(h.hash[:], b[o:])
	o += copy(h.nonce[:], b[o:])
	h.length = binary.LittleEndian.Uint64(b[o:])
	if h.length > maxBlockBytes {
		return h, fmt.Errorf("%w: block of %d bytes", errCorrupt, h.length)
	}
	return h, nil
}

// maxBlockBytes bounds a block's size, so a corrupt length cannot ask for
// an absurd allocation.
const maxBlockBytes = 1 << 30

// fileSize is the size of the file holding a block of n bytes.
func fileSize(n int) int64 { return int64(headerSize + n + tagSize) }

// seal encrypts a block into a file image.
func seal(aead cipher.AEAD, h header, data []byte) []byte {
	h.length = uint64(len(data))
	out := make([]byte, 0, fileSize(len(data)))
	out = h.marshal(out)
	return aead.Seal(out, h.nonce[:], data, out[:headerSize])
}

// open authenticates and decrypts a file image in place, checking that it
// holds the block hash of scope, and returns the contents (a part of file).
func open(aead cipher.AEAD, file []byte, scope, hash Hash) ([]byte, error) {
	h, err := parseHeader(file)
	if err != nil {
		return nil, err
	}
	if h.scope != scope || h.hash != hash {
		return nil, fmt.Errorf("%w: holds another block", errCorrupt)
	}
	if int64(len(file)) != fileSize(int(h.length)) {
		return nil, fmt.Errorf("%w: %d bytes for a block of %d", errCorrupt, len(file), h.length)
	}
	body := file[headerSize:]
	out, err := aead.Open(body[:0], h.nonce[:], body, file[:headerSize])
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	return out, nil
}

// deriveAEAD is the AES-256-GCM cipher of one scope: its key derived by
// HKDF-SHA256 from the master key with the scope's own random salt.
// Deleting the salt destroys the key (crypto-shredding): the master key
// alone cannot rebuild it.
func deriveAEAD(master, salt []byte, scope Hash) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, master, salt, keyInfo+" "+hex.EncodeToString(scope[:]), 32)
	if err != nil {
		return nil, fmt.Errorf("diskstore: derive key: %w", err)
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("diskstore: %w", err)
	}
	return cipher.NewGCM(block)
}
