package tenant

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"strings"
)

// A key's secret is "kvs_<id>_<secret>": id is 12 lower-case hex digits
// (the key's public name, shown in listings and audit records), secret 64
// (32 random bytes). The id in the key lets the server fetch one record
// and compare one digest rather than try every key; the store keeps only
// the SHA-256 of the whole string, so a leaked store yields no usable key.
const (
	keyPrefix    = "kvs_"
	keyIDLen     = 12
	keySecretLen = 64
	keyLen       = len(keyPrefix) + keyIDLen + 1 + keySecretLen
)

// ParseKey returns the public id of a key in kvserve's format, and false
// for anything else.
func ParseKey(key string) (id string, ok bool) {
	if len(key) != keyLen || !strings.HasPrefix(key, keyPrefix) || key[len(keyPrefix)+keyIDLen] != '_' {
		return "", false
	}
	id = key[len(keyPrefix) : len(keyPrefix)+keyIDLen]
	if !isLowerHex(id) || !isLowerHex(key[len(keyPrefix)+keyIDLen+1:]) {
		return "", false
	}
	return id, true
}

// newKey returns a fresh key and its id.
func newKey() (key, id string) {
	id = randomHex(keyIDLen / 2)
	return keyPrefix + id + "_" + randomHex(keySecretLen/2), id
}

// keyDigest is the hex SHA-256 of a key: what the store keeps.
func keyDigest(key string) string {
	d := sha256.Sum256([]byte(key))
	return hex.EncodeToString(d[:])
}

// randomHex returns n random bytes in hex. crypto/rand.Read never fails
// (it crashes the program if the system's source does).
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return len(s) > 0
}

// digestEqual compares two digests in constant time.
func digestEqual(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
