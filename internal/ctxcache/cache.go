// Package ctxcache keeps context caches as first-class resources: a
// tenant-owned record (cachedContents/{id}) of a model, a system
// instruction, contents and tools, prefilled once into the engine's KV
// cache and pinned there until it expires.
//
// # What lives where
//
// The record is the resource; the KV blocks are only its acceleration. The
// record is kept in a Store (the tenant store's cachedContents bucket, so a
// restart keeps it) in Gemini's JSON shapes, its canonical form: every
// dialect that references a cache renders it from that. The blocks are the
// engine's, found by prefix hashing like any other prompt's: a request
// that starts with the cache's rendered prefix hits them, and if they are
// gone (a restart without a disk tier) the first use recomputes them, which
// its usage reports as uncached tokens. The service never holds KV itself:
// it asks its caller to prefill (Prefill) when a cache is created or its
// life extended.
//
// # Lifecycle
//
//   - Create: authorize, resolve the expiry (ttl or expireTime), look for a
//     live cache of the same displayName when the caller asks for reuse,
//     prefill with a TTL that reaches the expiry, and only then store the
//     record: a failed prefill leaves nothing behind.
//   - Get, Use: a cache past its expiry is not found (exact to the
//     nanosecond of the clock) and its record is deleted on the way.
//   - List: the caller's tenant's live caches, by id, in pages.
//   - Update: only the expiry. A later expiry prefills again with the new
//     TTL, which raises the pins' expiry (the pool keeps a block's latest
//     pin); an earlier one is recorded, and the pins lapse at the later of
//     the two times, because the pool has no way to lower a pin.
//   - Delete: the record goes; the pins lapse at their expiry, for the same
//     reason. Until then the blocks count against the tenant's pin quota.
//   - Sweep: deletes every expired record; serve runs it periodically.
//
// # Permissions and audit
//
// Every operation is authorized through an Authorizer (the tenant
// directory: role table plus bindings) and recorded in the audit log with
// the principal, tenant, resource and outcome, never the contents. A cache
// of another tenant is ErrNotFound, never ErrForbidden, so a probe cannot
// tell an id that exists from one that does not.
package ctxcache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Cache is one context-cache resource.
type Cache struct {
	// ID is the random id; the resource name is "cachedContents/" + ID.
	ID string `json:"id"`
	// Tenant is the owning tenant's id.
	Tenant string `json:"tenant"`
	// Owner is the principal that created it.
	Owner string `json:"owner"`
	// Model is the served model's id (without "models/").
	Model       string `json:"model"`
	DisplayName string `json:"displayName,omitempty"`
	// SystemInstruction, Contents, Tools and ToolConfig are the request's
	// fields as Gemini JSON (keys normalized to lowerCamelCase), the
	// canonical form every dialect renders the cache from.
	SystemInstruction json.RawMessage `json:"systemInstruction,omitempty"`
	Contents          json.RawMessage `json:"contents,omitempty"`
	Tools             json.RawMessage `json:"tools,omitempty"`
	ToolConfig        json.RawMessage `json:"toolConfig,omitempty"`
	// TokenCount is the prompt tokens of the rendered prefix.
	TokenCount int       `json:"tokenCount"`
	CreateTime time.Time `json:"createTime"`
	UpdateTime time.Time `json:"updateTime"`
	ExpireTime time.Time `json:"expireTime"`
}

// Name returns the resource name, "cachedContents/ID".
func (c *Cache) Name() string { return NamePrefix + c.ID }

// NamePrefix starts every cache's resource name.
const NamePrefix = "cachedContents/"

// sameContent reports whether c and s describe the same cache (model and
// every input field byte for byte): the test of an idempotent create.
func (c *Cache) sameContent(s *Spec) bool {
	return c.Model == s.Model && string(c.SystemInstruction) == string(s.SystemInstruction) &&
		string(c.Contents) == string(s.Contents) && string(c.Tools) == string(s.Tools) &&
		string(c.ToolConfig) == string(s.ToolConfig)
}

// Spec describes a cache to create.
type Spec struct {
	// Model is the model id (without "models/"), already checked to be the
	// served one by the caller's Prefill.
	Model       string
	DisplayName string
	// The input fields, as Gemini JSON (see Cache).
	SystemInstruction, Contents, Tools, ToolConfig json.RawMessage
	// TTL and ExpireTime are the request's ("" when absent): see
	// Expiration.
	TTL, ExpireTime string
	// ReuseByDisplayName asks for an idempotent create: if the tenant has
	// a live cache with this DisplayName and the same model and inputs, it
	// is returned as it is (no prefill, expiry unchanged); if its inputs
	// differ, the create fails with ErrConflict. Without it, display names
	// are labels and need not be unique.
	ReuseByDisplayName bool
	// Shared publishes the cache to every tenant (an administrator's only):
	// it belongs to SharedTenant, any tenant's key that may get or use its
	// own caches may get and use it, and its KV is kept in a scope of its
	// own that every tenant's prompts over it find — the one sharing
	// between tenants there is.
	Shared bool
}

// SharedTenant owns the shared caches (Spec.Shared). It is no tenant's id:
// the API refuses tenant names that begin with "@".
const SharedTenant = "@shared"

// RoleAdmin is the role that may publish, update and delete shared caches.
const RoleAdmin = "admin"

// MaxDisplayName is the longest display name, in characters (Gemini's).
const MaxDisplayName = 128

// Caller is who asks: a principal of a tenant, with its role.
type Caller struct {
	// Tenant is the caller's tenant id ("" for the default tenant of an
	// open server).
	Tenant string
	// Principal names the caller within the tenant.
	Principal string
	// Role is the key's role name (admin, developer, user, viewer).
	Role string
	// Open marks a server without keys: every operation is allowed, on the
	// default tenant.
	Open bool
}

// The permissions, by the tenant store's names.
const (
	PermCreate = "cachedContents.create"
	PermGet    = "cachedContents.get"
	PermList   = "cachedContents.list"
	PermUpdate = "cachedContents.update"
	PermDelete = "cachedContents.delete"
	PermUse    = "cachedContents.use"
)

// Authorizer decides whether a caller may do perm on the resource name of
// tenant owner: nil, or an error wrapping ErrNotFound (another tenant's:
// answered as absent) or ErrForbidden. The tenant directory is one, through
// an adapter; it reads the resource's bindings for PermUse.
type Authorizer interface {
	Authorize(ctx context.Context, c Caller, perm, owner, name string) error
}

// Errors. The API maps them onto statuses: 404, 403, 400, 409.
var (
	ErrNotFound  = errors.New("ctxcache: cached content not found")
	ErrForbidden = errors.New("ctxcache: permission denied")
	ErrInvalid   = errors.New("ctxcache: invalid request")
	ErrConflict  = errors.New("ctxcache: conflict")
)

// FieldError is an invalid request field. It wraps ErrInvalid.
type FieldError struct {
	// Field is the request field at fault, in Gemini's names ("ttl").
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return "ctxcache: " + e.Msg }

// Unwrap makes a FieldError an ErrInvalid.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// Store keeps the records: plain bytes under an id, in transactions. The
// tenant store's cachedContents bucket is one (through an adapter), and
// MemStore is one for a single process.
type Store interface {
	View(ctx context.Context, fn func(Tx) error) error
	// Update may run fn more than once (a cluster's store runs it again
	// when another gateway committed first), so fn changes nothing but the
	// transaction and resets what it collects.
	Update(ctx context.Context, fn func(Tx) error) error
}

// Tx is one transaction on the records.
type Tx interface {
	// Get returns record id, or an error wrapping ErrNotFound.
	Get(id string) ([]byte, error)
	Put(id string, value []byte) error
	// Delete removes record id (no error if absent).
	Delete(id string) error
	// List calls fn for every record in id order.
	List(fn func(id string, value []byte) error) error
}

// newID returns a fresh cache id: 24 lower-case hex digits (96 random bits,
// so ids cannot be guessed).
func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// ParseName returns the id in a resource name "cachedContents/ID" (or a
// bare id), and false when it is not one: ids are what newID makes.
func ParseName(name string) (string, bool) {
	id := strings.TrimPrefix(name, NamePrefix)
	if len(id) != 24 {
		return "", false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	return id, true
}

func decode(id string, b []byte) (Cache, error) {
	var c Cache
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("ctxcache: record %s: %w", id, err)
	}
	return c, nil
}

func put(tx Tx, c *Cache) error {
	b, err := json.Marshal(c)
	if err != nil {
		return fmt.Errorf("ctxcache: encode %s: %w", c.ID, err)
	}
	return tx.Put(c.ID, b)
}
