// Package tenant keeps kvserve's tenants, principals, API keys and
// bindings, and decides what a principal may do.
//
// # Records and where they live
//
// A Tenant is an isolation boundary: its id is the engine's KV scope, so
// no two tenants ever share a cached block. A Key belongs to one tenant
// and one principal (a name within the tenant: a person, a service), has a
// role and optionally a model allow-list and an expiry, and is kept only
// as the SHA-256 of its secret: the secret is shown once, at creation. A
// binding grants cachedContents.use on one resource to named principals
// beyond their role. Records are plain JSON values in a Store; the
// embedded one is a bbolt file, state.db, in the data directory (see
// docs/tenants.md for why bbolt), and a cluster can keep the same records
// in a replicated key-value store behind the same interface.
//
// # Decisions
//
// Authorize is pure: the role table (roles.go) plus the resource's owner
// and bindings decide. A resource of another tenant is ErrHidden, never
// ErrForbidden, so that a probe cannot tell a cache id that exists from
// one that does not.
//
// # Audit
//
// Every change (tenant create and delete, key create and revoke, grants)
// is appended to the audit log given in Options, with who made it, after
// the change commits; a failed change is recorded with outcome error.
package tenant

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kvserve/kvserve/internal/audit"
)

// Tenant is an isolation boundary: its keys, caches and KV blocks are its
// own.
type Tenant struct {
	// ID is the tenant's permanent id (random): the engine scope. A tenant
	// deleted and created again under the same name gets a new one, so
	// nothing of the old one is reachable by the new.
	ID string `json:"id"`
	// Name is the unique name operators use.
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
}

// Key is an API key's record. The secret itself is never stored.
type Key struct {
	// ID is the key's public id (the hex after "kvs_").
	ID string `json:"id"`
	// Tenant is the owning tenant's id.
	Tenant string `json:"tenant"`
	// Principal is who the key acts as.
	Principal string `json:"principal"`
	Role      Role   `json:"role"`
	// Models, when not empty, are the only models the key may use.
	Models  []string  `json:"models,omitempty"`
	Created time.Time `json:"created"`
	// Expires is when the key stops working (zero: never).
	Expires time.Time `json:"expires,omitzero"`
	// Revoked is when the key was revoked (zero: it was not).
	Revoked time.Time `json:"revoked,omitzero"`
	// Digest is the hex SHA-256 of the key's secret.
	Digest string `json:"sha256"`
}

// Active reports whether the key works at time now.
func (k *Key) Active(now time.Time) bool {
	return k.Revoked.IsZero() && (k.Expires.IsZero() || now.Before(k.Expires))
}

// binding is the principals granted cachedContents.use on one resource.
type binding struct {
	Tenant     string   `json:"tenant"`
	Resource   string   `json:"resource"`
	Principals []string `json:"principals"`
}

// Auditor receives the audit records of changes: *audit.Log.
type Auditor interface {
	Append(ctx context.Context, e audit.Entry) (audit.Record, error)
}

// Actor is who makes a change, for the audit record.
type Actor struct {
	// Principal names the actor ("local:alice" for a CLI user).
	Principal string
	// Tenant is the actor's tenant id, if any.
	Tenant string
}

// Options configure a Directory. The zero value is the default.
type Options struct {
	// Audit receives a record of every change (default: none; the CLI and
	// the server always give one).
	Audit Auditor
	// Now returns the current time (default time.Now); tests move it.
	Now func() time.Time
}

// Directory is the tenants, keys and bindings of a Store, and the
// operations on them.
type Directory struct {
	store Store
	audit Auditor
	now   func() time.Time
}

// New returns a Directory over s.
func New(s Store, o Options) *Directory {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Directory{store: s, audit: o.Audit, now: o.Now}
}

// StateFile is the name of the store's file in the data directory.
const StateFile = "state.db"

// Open opens the Directory kept in dataDir/state.db (created with mode
// 0600 on first use).
func Open(dataDir string, o Options) (*Directory, error) {
	s, err := OpenBolt(filepath.Join(dataDir, StateFile), BoltOptions{})
	if err != nil {
		return nil, err
	}
	return New(s, o), nil
}

// Close closes the store.
func (d *Directory) Close() error { return d.store.Close() }

// The errors of key verification, each wrapped with the key's id.
var (
	// ErrInvalidKey: not a key of this directory.
	ErrInvalidKey = errors.New("invalid API key")
	// ErrKeyExpired: the key's expiry has passed.
	ErrKeyExpired = errors.New("API key expired")
	// ErrKeyRevoked: the key was revoked (or its tenant deleted).
	ErrKeyRevoked = errors.New("API key revoked")
	// ErrExists: a tenant of that name exists already.
	ErrExists = errors.New("tenant: already exists")
	// ErrInvalid: a name, role, model or lifetime that is not valid.
	ErrInvalid = errors.New("tenant: invalid")
)

// validName checks a tenant or principal name: 1 to 64 letters, digits
// and . _ - @ : (names appear in audit records and listings, so no spaces
// or control characters).
func validName(what, s string) error {
	if s == "" || len(s) > 64 {
		return fmt.Errorf("%w %s %q: want 1 to 64 characters", ErrInvalid, what, s)
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("._-@:", c)) {
			return fmt.Errorf("%w %s %q: use letters, digits and . _ - @ :", ErrInvalid, what, s)
		}
	}
	return nil
}

// record appends the audit record of a change.
func (d *Directory) record(ctx context.Context, by Actor, action, resource string, err error) error {
	if d.audit == nil {
		return err
	}
	e := audit.Entry{Principal: by.Principal, Tenant: by.Tenant, Action: action, Resource: resource, Outcome: audit.OK}
	if err != nil {
		e.Outcome, e.Reason = audit.Failed, err.Error()
	}
	if _, aerr := d.audit.Append(ctx, e); aerr != nil {
		if err != nil {
			return errors.Join(err, aerr)
		}
		return fmt.Errorf("tenant: %s %s was made but could not be audited: %w", action, resource, aerr)
	}
	return err
}

func get[T any](tx Tx, kind Kind, id string) (T, error) {
	var v T
	b, err := tx.Get(kind, id)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("tenant: record %s/%s: %w", kind, id, err)
	}
	return v, nil
}

func put(tx Tx, kind Kind, id string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("tenant: encode %s/%s: %w", kind, id, err)
	}
	return tx.Put(kind, id, b)
}

func list[T any](tx Tx, kind Kind) ([]T, error) {
	var out []T
	err := tx.List(kind, func(id string, b []byte) error {
		var v T
		if err := json.Unmarshal(b, &v); err != nil {
			return fmt.Errorf("tenant: record %s/%s: %w", kind, id, err)
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// tenantByName finds a tenant by name (tenants are few: a scan).
func tenantByName(tx Tx, name string) (Tenant, error) {
	ts, err := list[Tenant](tx, KindTenants)
	if err != nil {
		return Tenant{}, err
	}
	for _, t := range ts {
		if t.Name == name {
			return t, nil
		}
	}
	return Tenant{}, fmt.Errorf("%w: tenant %q", ErrNotFound, name)
}

// CreateTenant creates the tenant name.
func (d *Directory) CreateTenant(ctx context.Context, by Actor, name string) (Tenant, error) {
	t := Tenant{ID: "tn_" + randomHex(6), Name: name, Created: d.now().UTC()}
	err := validName("tenant name", name)
	if err == nil {
		err = d.store.Update(ctx, func(tx Tx) error {
			if _, err := tenantByName(tx, name); err == nil {
				return fmt.Errorf("%w: tenant %q", ErrExists, name)
			} else if !errors.Is(err, ErrNotFound) {
				return err
			}
			if _, err := tx.Get(KindTenants, t.ID); err == nil {
				return fmt.Errorf("tenant: tenant id %s collides; create the tenant again", t.ID)
			}
			return put(tx, KindTenants, t.ID, t)
		})
	}
	return t, d.record(ctx, by, "tenant.create", "tenants/"+name, err)
}

// Tenant returns the tenant called name.
func (d *Directory) Tenant(ctx context.Context, name string) (Tenant, error) {
	var t Tenant
	err := d.store.View(ctx, func(tx Tx) (err error) {
		t, err = tenantByName(tx, name)
		return err
	})
	return t, err
}

// Tenants lists the tenants by name.
func (d *Directory) Tenants(ctx context.Context) ([]Tenant, error) {
	var ts []Tenant
	err := d.store.View(ctx, func(tx Tx) (err error) {
		ts, err = list[Tenant](tx, KindTenants)
		return err
	})
	slices.SortFunc(ts, func(a, b Tenant) int { return strings.Compare(a.Name, b.Name) })
	return ts, err
}

// DeleteTenant deletes the tenant called name, revokes its keys and drops
// its bindings, in one transaction, and returns the ids of the keys it
// revoked. The revoked keys stay listed, so the audit trail can still name
// them. The tenant's other resources (context caches, KV blocks on disk
// and their per-tenant key) belong to the packages that own them, and
// deleting those is theirs to do; nothing calls them from here yet.
func (d *Directory) DeleteTenant(ctx context.Context, by Actor, name string) ([]string, error) {
	var revoked []string
	err := d.store.Update(ctx, func(tx Tx) error {
		revoked = nil
		t, err := tenantByName(tx, name)
		if err != nil {
			return err
		}
		keys, err := list[Key](tx, KindKeys)
		if err != nil {
			return err
		}
		now := d.now().UTC()
		for _, k := range keys {
			if k.Tenant == t.ID && k.Revoked.IsZero() {
				k.Revoked = now
				if err := put(tx, KindKeys, k.ID, k); err != nil {
					return err
				}
				revoked = append(revoked, k.ID)
			}
		}
		var drop []string
		err = tx.List(KindBindings, func(id string, _ []byte) error {
			if strings.HasPrefix(id, t.ID+"/") {
				drop = append(drop, id)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, id := range drop {
			if err := tx.Delete(KindBindings, id); err != nil {
				return err
			}
		}
		return tx.Delete(KindTenants, t.ID)
	})
	if err = d.record(ctx, by, "tenant.delete", "tenants/"+name, err); err != nil {
		return nil, err
	}
	// Each revoked key gets its own record, so that a key's history is
	// complete under its own name.
	var errs []error
	for _, id := range revoked {
		e := audit.Entry{Principal: by.Principal, Tenant: by.Tenant, Action: "key.revoke", Resource: "keys/" + id,
			Outcome: audit.OK, Reason: "its tenant " + name + " was deleted"}
		if d.audit != nil {
			if _, err := d.audit.Append(ctx, e); err != nil {
				errs = append(errs, fmt.Errorf("tenant: key %s was revoked but could not be audited: %w", id, err))
			}
		}
	}
	return revoked, errors.Join(errs...)
}

// KeySpec describes a key to create.
type KeySpec struct {
	// Tenant is the tenant's name.
	Tenant string
	// Principal is who the key acts as (default: "key-" and the key's id).
	Principal string
	Role      Role
	// Models, when not empty, are the only models the key may use.
	Models []string
	// TTL, when positive, is how long the key works (zero: until revoked).
	TTL time.Duration
}

// CreateKey creates a key and returns its record and its secret. The
// secret is not kept: this is the only time it can be shown.
func (d *Directory) CreateKey(ctx context.Context, by Actor, spec KeySpec) (Key, string, error) {
	k, secret, err := d.newKey(spec)
	if err == nil {
		err = d.store.Update(ctx, func(tx Tx) error { return putKey(tx, &k, spec.Tenant) })
	}
	if err = d.record(ctx, by, "key.create", "keys/"+k.ID, err); err != nil {
		return Key{}, "", err
	}
	return k, secret, nil
}

// newKey makes the record and secret of a key spec describes, checking
// the spec; its tenant is set when it is stored.
func (d *Directory) newKey(spec KeySpec) (Key, string, error) {
	secret, id := newKey()
	now := d.now().UTC()
	k := Key{ID: id, Principal: spec.Principal, Role: spec.Role, Models: slices.Clone(spec.Models),
		Created: now, Digest: keyDigest(secret)}
	if k.Principal == "" {
		k.Principal = "key-" + id
	}
	if spec.TTL > 0 {
		k.Expires = now.Add(spec.TTL)
	}
	err := validName("principal", k.Principal)
	if _, rerr := ParseRole(string(spec.Role)); err == nil && rerr != nil {
		err = rerr
	}
	if err == nil && spec.TTL < 0 {
		err = fmt.Errorf("%w key lifetime %s: want a positive duration, or zero for no expiry", ErrInvalid, spec.TTL)
	}
	for _, m := range spec.Models {
		if err == nil && strings.TrimSpace(m) == "" {
			err = fmt.Errorf("%w model name: empty", ErrInvalid)
		}
	}
	return k, secret, err
}

// putKey stores k for the tenant called tenantName.
func putKey(tx Tx, k *Key, tenantName string) error {
	t, err := tenantByName(tx, tenantName)
	if err != nil {
		return err
	}
	k.Tenant = t.ID
	if _, err := tx.Get(KindKeys, k.ID); err == nil {
		return fmt.Errorf("tenant: key id %s collides; create the key again", k.ID)
	}
	return put(tx, KindKeys, k.ID, k)
}

// errHasKeys ends CreateFirstKey's transaction: a key exists.
var errHasKeys = errors.New("tenant: the directory holds keys")

// CreateFirstKey creates the key spec describes, and its tenant if there
// is none of that name, in one transaction, but only while the directory
// holds no key at all (revoked ones count); created reports whether it
// did. Servers sharing one store and starting together thus make one
// first key between them, whichever commits first.
func (d *Directory) CreateFirstKey(ctx context.Context, by Actor, spec KeySpec) (k Key, secret string, created bool, err error) {
	k, secret, err = d.newKey(spec)
	if err != nil {
		return Key{}, "", false, d.record(ctx, by, "key.create", "keys/"+k.ID, err)
	}
	t := Tenant{ID: "tn_" + randomHex(6), Name: spec.Tenant, Created: d.now().UTC()}
	var newTenant bool
	err = d.store.Update(ctx, func(tx Tx) error {
		newTenant = false
		err := tx.List(KindKeys, func(string, []byte) error { return errHasKeys })
		if err != nil {
			return err
		}
		if _, err := tenantByName(tx, spec.Tenant); errors.Is(err, ErrNotFound) {
			if err := validName("tenant name", spec.Tenant); err != nil {
				return err
			}
			if err := put(tx, KindTenants, t.ID, t); err != nil {
				return err
			}
			newTenant = true
		} else if err != nil {
			return err
		}
		return putKey(tx, &k, spec.Tenant)
	})
	if errors.Is(err, errHasKeys) {
		return Key{}, "", false, nil
	}
	if newTenant && err == nil {
		if err := d.record(ctx, by, "tenant.create", "tenants/"+spec.Tenant, nil); err != nil {
			return Key{}, "", false, err
		}
	}
	if err = d.record(ctx, by, "key.create", "keys/"+k.ID, err); err != nil {
		return Key{}, "", false, err
	}
	return k, secret, true, nil
}

// Keys lists the keys of the tenant with id tenantID ("": every key), by
// creation time.
func (d *Directory) Keys(ctx context.Context, tenantID string) ([]Key, error) {
	var keys []Key
	err := d.store.View(ctx, func(tx Tx) (err error) {
		keys, err = list[Key](tx, KindKeys)
		return err
	})
	keys = slices.DeleteFunc(keys, func(k Key) bool { return tenantID != "" && k.Tenant != tenantID })
	slices.SortFunc(keys, func(a, b Key) int { return a.Created.Compare(b.Created) })
	return keys, err
}

// RevokeKey revokes the key with public id id and returns its record. A
// key revoked before keeps its first revocation time.
func (d *Directory) RevokeKey(ctx context.Context, by Actor, id string) (Key, error) {
	var k Key
	err := d.store.Update(ctx, func(tx Tx) (err error) {
		if k, err = get[Key](tx, KindKeys, id); err != nil {
			return err
		}
		if !k.Revoked.IsZero() {
			return nil
		}
		k.Revoked = d.now().UTC()
		return put(tx, KindKeys, id, k)
	})
	return k, d.record(ctx, by, "key.revoke", "keys/"+id, err)
}

// VerifyKey returns the principal a presented key acts as. A key not in
// this directory is ErrInvalidKey; an expired or revoked one ErrKeyExpired
// or ErrKeyRevoked, returned with its principal (for the audit record).
// Other errors are the store's.
func (d *Directory) VerifyKey(ctx context.Context, key string) (Principal, error) {
	id, ok := ParseKey(key)
	if !ok {
		return Principal{}, ErrInvalidKey
	}
	var k Key
	err := d.store.View(ctx, func(tx Tx) (err error) {
		k, err = get[Key](tx, KindKeys, id)
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return Principal{KeyID: id}, ErrInvalidKey
	}
	if err != nil {
		return Principal{}, err
	}
	if !digestEqual(k.Digest, keyDigest(key)) {
		return Principal{KeyID: id}, ErrInvalidKey
	}
	p := Principal{Tenant: k.Tenant, Name: k.Principal, Role: k.Role, KeyID: k.ID, Models: k.Models}
	switch now := d.now(); {
	case !k.Revoked.IsZero():
		return p, ErrKeyRevoked
	case !k.Expires.IsZero() && !now.Before(k.Expires):
		return p, ErrKeyExpired
	}
	return p, nil
}

// KeyCounts returns how many keys the directory holds and how many of
// them work now.
func (d *Directory) KeyCounts(ctx context.Context) (total, active int, err error) {
	keys, err := d.Keys(ctx, "")
	now := d.now()
	for _, k := range keys {
		if k.Active(now) {
			active++
		}
	}
	return len(keys), active, err
}

// bindingID is the store id of the binding on resource of tenant.
func bindingID(tenantID, resource string) string { return tenantID + "/" + resource }

// checkBindable checks that resource can carry a binding: only context
// caches can.
func checkBindable(resource string) error {
	if id, ok := strings.CutPrefix(resource, "cachedContents/"); !ok || id == "" || strings.Contains(id, "/") {
		return fmt.Errorf("tenant: resource %q: bindings are on one context cache, cachedContents/ID", resource)
	}
	return nil
}

// Grant lets principal use (cachedContents.use) the resource of the
// tenant with id tenantID, whatever the principal's role.
func (d *Directory) Grant(ctx context.Context, by Actor, tenantID, resource, principal string) error {
	return d.changeGrant(ctx, by, "binding.grant", tenantID, resource, principal, true)
}

// Ungrant withdraws a Grant.
func (d *Directory) Ungrant(ctx context.Context, by Actor, tenantID, resource, principal string) error {
	return d.changeGrant(ctx, by, "binding.ungrant", tenantID, resource, principal, false)
}

func (d *Directory) changeGrant(ctx context.Context, by Actor, action, tenantID, resource, principal string, add bool) error {
	err := checkBindable(resource)
	if err == nil {
		err = validName("principal", principal)
	}
	if err == nil {
		err = d.store.Update(ctx, func(tx Tx) error {
			if _, err := get[Tenant](tx, KindTenants, tenantID); err != nil {
				return err
			}
			id := bindingID(tenantID, resource)
			b, err := get[binding](tx, KindBindings, id)
			if errors.Is(err, ErrNotFound) {
				b, err = binding{Tenant: tenantID, Resource: resource}, nil
			}
			if err != nil {
				return err
			}
			b.Principals = slices.DeleteFunc(b.Principals, func(p string) bool { return p == principal })
			if add {
				b.Principals = append(b.Principals, principal)
				slices.Sort(b.Principals)
			}
			if len(b.Principals) == 0 {
				return tx.Delete(KindBindings, id)
			}
			return put(tx, KindBindings, id, b)
		})
	}
	return d.record(ctx, by, action, resource+" to "+principal, err)
}

// Grants returns the principals granted use of the resource of the tenant
// with id tenantID.
func (d *Directory) Grants(ctx context.Context, tenantID, resource string) ([]string, error) {
	var b binding
	err := d.store.View(ctx, func(tx Tx) (err error) {
		b, err = get[binding](tx, KindBindings, bindingID(tenantID, resource))
		return err
	})
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	return b.Principals, err
}

// Authorize decides whether p may do perm on the resource called name
// owned by the tenant with id owner ("" for what no tenant owns), reading
// the resource's bindings when they matter. See the function Authorize.
func (d *Directory) Authorize(ctx context.Context, p Principal, perm Permission, owner, name string) error {
	r := Resource{Tenant: owner, Name: name}
	if perm == CachedContentsUse && owner == p.Tenant && !p.Role.Has(perm) {
		grants, err := d.Grants(ctx, owner, name)
		if err != nil {
			return err
		}
		r.UseGrants = grants
	}
	return Authorize(p, perm, r)
}
