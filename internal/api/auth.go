package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
)

// APIKey is one accepted API key. Only the key's SHA-256 digest is kept in
// memory; configuration may give the key itself (Key) or its digest
// (SHA256, hex).
type APIKey struct {
	// Key is the secret as clients send it. Hashed at New and then dropped.
	Key string
	// SHA256 is the hex SHA-256 digest of the key, for configurations that
	// do not store keys in clear.
	SHA256 string
	// Tenant is the tenant the key acts for; it becomes the engine scope,
	// so tenants never share KV blocks. Empty means the default tenant.
	Tenant string
	// Models, when not empty, lists the model ids the key may use; other
	// models are refused with 403.
	Models []string
}

// keyEntry is an APIKey as held by the server.
type keyEntry struct {
	digest [sha256.Size]byte
	tenant string
	models map[string]bool
}

// keyring holds the accepted keys. An empty keyring means the server is
// open: no key is required and every caller is the default tenant.
type keyring struct {
	keys []keyEntry
}

func newKeyring(keys []APIKey) (*keyring, error) {
	kr := &keyring{}
	for i, k := range keys {
		var e keyEntry
		switch {
		case k.Key != "" && k.SHA256 != "":
			return nil, fmt.Errorf("api: key %d: give Key or SHA256, not both", i)
		case k.Key != "":
			e.digest = sha256.Sum256([]byte(k.Key))
		case k.SHA256 != "":
			b, err := hex.DecodeString(k.SHA256)
			if err != nil || len(b) != sha256.Size {
				return nil, fmt.Errorf("api: key %d: SHA256 must be 64 hex digits", i)
			}
			copy(e.digest[:], b)
		default:
			return nil, fmt.Errorf("api: key %d is empty", i)
		}
		e.tenant = k.Tenant
		if len(k.Models) > 0 {
			e.models = map[string]bool{}
			for _, m := range k.Models {
				e.models[m] = true
			}
		}
		kr.keys = append(kr.keys, e)
	}
	return kr, nil
}

// open reports whether no key is configured.
func (kr *keyring) open() bool { return len(kr.keys) == 0 }

// lookup finds the entry of a presented key. Every entry is compared, in
// constant time, so the time taken does not reveal which key matched.
func (kr *keyring) lookup(key string) (*keyEntry, bool) {
	d := sha256.Sum256([]byte(key))
	found := -1
	for i := range kr.keys {
		if subtle.ConstantTimeCompare(d[:], kr.keys[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return nil, false
	}
	return &kr.keys[found], true
}

// presentedKey returns the API key of a request from, in order, the
// Authorization: Bearer header (OpenAI), x-api-key (Anthropic),
// x-goog-api-key and the key query parameter (Gemini).
func presentedKey(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		if scheme, tok, ok := strings.Cut(h, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
	}
	if k := r.Header.Get("X-Api-Key"); k != "" {
		return k
	}
	if k := r.Header.Get("X-Goog-Api-Key"); k != "" {
		return k
	}
	return r.URL.Query().Get("key")
}

// Identity is who a request acts for, from its API key.
type Identity struct {
	// Tenant is the tenant id ("" for the default tenant of an open
	// server).
	Tenant string
	// models restricts the usable models (nil: all).
	models map[string]bool
}

// Allows reports whether the identity may use model id.
func (id Identity) Allows(model string) bool { return id.models == nil || id.models[model] }

// authenticate resolves the request's identity.
func (kr *keyring) authenticate(r *http.Request) (Identity, *Error) {
	if kr.open() {
		return Identity{}, nil
	}
	key := presentedKey(r)
	if key == "" {
		return Identity{}, Errorf(CodeUnauthorized, "missing API key: send it as \"Authorization: Bearer KEY\" (or x-api-key, x-goog-api-key)")
	}
	e, ok := kr.lookup(key)
	if !ok {
		return Identity{}, Errorf(CodeUnauthorized, "invalid API key")
	}
	return Identity{Tenant: e.tenant, models: e.models}, nil
}
