package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/kvserve/kvserve/internal/audit"
)

// APIKey is one accepted API key given in the server's configuration
// (--api-key). Only the key's SHA-256 digest is kept in memory;
// configuration may give the key itself (Key) or its digest (SHA256, hex).
//
// A configured key without a tenant acts for the default tenant with the
// role admin (it may read /metrics): it is the operator's own key, as
// before tenants existed. A key with a tenant acts for that tenant with
// the role developer. Keys with other roles come from a KeyVerifier (the
// tenant store).
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

// Principal is who a verified key acts as.
type Principal struct {
	// Tenant is the tenant id: the engine scope.
	Tenant string
	// Name is the principal's name within the tenant.
	Name string
	// Role names the key's role (admin, developer, user, viewer).
	Role string
	// KeyID is the key's public id ("" for configured keys); it names the
	// key in audit records, never the secret.
	KeyID string
	// Models, when not empty, lists the only models the key may use.
	Models []string
	// Permissions are what the role grants, by the tenant store's names;
	// this package checks PermissionModelsUse and PermissionAdmin.
	Permissions []string
}

// The permissions the server checks (named as in the tenant store).
const (
	// PermissionModelsUse: generating with a model.
	PermissionModelsUse = "models.use"
	// PermissionAdmin: operating the server (/metrics).
	PermissionAdmin = "admin"
	// PermissionUsageRead: reading the tenant's usage (GET /v1/usage).
	PermissionUsageRead = "usage.read"
)

// KeyVerifier checks keys kept outside the configuration (the tenant
// store, in cmd/kvserve). Verify returns the principal of a key, or an
// error: an *Error (401 for an unknown, expired or revoked key, with the
// message to show) is answered as is; any other error is a server fault.
// With an error, the Principal holds what is known of the key (its public
// id, its tenant) for the audit record.
type KeyVerifier interface {
	Verify(ctx context.Context, key string) (Principal, error)
}

// AuditLog receives the records of denied requests: *audit.Log.
type AuditLog interface {
	Append(ctx context.Context, e audit.Entry) (audit.Record, error)
}

// keyEntry is an APIKey as held by the server.
type keyEntry struct {
	digest    [sha256.Size]byte
	principal Principal
}

// keyring holds the configured keys and the verifier of stored ones. With
// neither, the server is open: no key is required and every caller is the
// default tenant.
type keyring struct {
	keys     []keyEntry
	verifier KeyVerifier
}

func newKeyring(keys []APIKey, verifier KeyVerifier) (*keyring, error) {
	kr := &keyring{verifier: verifier}
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
		// Named by a prefix of its digest: enough to tell configured keys
		// apart in audit records, useless for finding the key.
		// Configured keys carry the permissions this package checks; the
		// full role table is the tenant store's.
		e.principal = Principal{Tenant: k.Tenant, Name: "config-key-" + hex.EncodeToString(e.digest[:4]),
			Role: "developer", Models: slices.Clone(k.Models), Permissions: []string{PermissionModelsUse, PermissionUsageRead}}
		if k.Tenant == "" {
			e.principal.Role = "admin"
			e.principal.Permissions = append(e.principal.Permissions, PermissionAdmin)
		}
		kr.keys = append(kr.keys, e)
	}
	return kr, nil
}

// open reports whether no key is configured.
func (kr *keyring) open() bool { return len(kr.keys) == 0 && kr.verifier == nil }

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
	// Principal names who acts ("" on an open server).
	Principal string
	// Role is the key's role ("" on an open server).
	Role string
	// KeyID is the public id of a stored key ("" otherwise).
	KeyID string
	// models restricts the usable models (nil: all).
	models map[string]bool
	// perms are the key's permissions; open: no key, everything allowed.
	perms map[string]bool
	open  bool
}

// Allows reports whether the identity may use model id.
func (id Identity) Allows(model string) bool { return id.models == nil || id.models[model] }

// Has reports whether the identity holds permission p (every permission on
// an open server).
func (id Identity) Has(p string) bool { return id.open || id.perms[p] }

func identityOf(p Principal) Identity {
	id := Identity{Tenant: p.Tenant, Principal: p.Name, Role: p.Role, KeyID: p.KeyID, perms: map[string]bool{}}
	for _, perm := range p.Permissions {
		id.perms[perm] = true
	}
	if len(p.Models) > 0 {
		id.models = map[string]bool{}
		for _, m := range p.Models {
			id.models[m] = true
		}
	}
	return id
}

// authenticate resolves the request's identity. A refusal comes with the
// principal known of the key (for the audit record).
func (kr *keyring) authenticate(r *http.Request) (Identity, Principal, *Error) {
	if kr.open() {
		return Identity{open: true}, Principal{}, nil
	}
	key := presentedKey(r)
	if key == "" {
		return Identity{}, Principal{}, Errorf(CodeUnauthorized, "missing API key: send it as \"Authorization: Bearer KEY\" (or x-api-key, x-goog-api-key)")
	}
	if e, ok := kr.lookup(key); ok {
		return identityOf(e.principal), e.principal, nil
	}
	if kr.verifier == nil {
		return Identity{}, Principal{}, Errorf(CodeUnauthorized, "invalid API key")
	}
	p, err := kr.verifier.Verify(r.Context(), key)
	if err == nil {
		return identityOf(p), p, nil
	}
	var ae *Error
	if errors.As(err, &ae) {
		return Identity{}, p, ae
	}
	return Identity{}, p, &Error{Code: CodeInternal, Message: "internal server error: the API key could not be checked", Err: err}
}
