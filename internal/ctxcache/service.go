package ctxcache

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/kvserve/kvserve/internal/audit"
)

// Auditor receives the audit records: *audit.Log.
type Auditor interface {
	Append(ctx context.Context, e audit.Entry) (audit.Record, error)
}

// Prefill computes and pins a cache's prefix in the engine so that it is
// kept for ttl from now, and returns the prefix's token count and the
// served model's id. For a new cache (minTokens > 0) it refuses a prefix
// shorter than minTokens before running anything. Its errors are the
// caller's (the API's) and are returned as they are.
type Prefill func(ctx context.Context, c *Cache, ttl time.Duration, minTokens int) (tokens int, model string, err error)

// DefaultMinTokens is the smallest cache by default, in tokens: a shorter
// prefix is cheap to recompute and not worth a pin.
const DefaultMinTokens = 1024

// Options configure a Service. Store and Authorizer are required.
type Options struct {
	Store      Store
	Authorizer Authorizer
	// Audit receives a record of every operation and denial (default:
	// none).
	Audit Auditor
	// MinTokens is the smallest cache in tokens (default DefaultMinTokens).
	MinTokens int
	// Now returns the current time (default time.Now); tests move it.
	Now func() time.Time
	// Ended, when set, is told of every cache that ends — deleted, found
	// expired, swept, or deleted with its tenant — with the time it ended
	// (its expiry if that came first), after the change is committed: the
	// usage ledger books its storage.
	Ended func(ctx context.Context, c Cache, at time.Time)
}

// Service is the context-cache resources of a store and the operations on
// them. It is safe for concurrent use: every change is one transaction of
// the store.
type Service struct {
	store     Store
	authz     Authorizer
	audit     Auditor
	minTokens int
	now       func() time.Time
	ended     func(ctx context.Context, c Cache, at time.Time)
}

// New returns a Service.
func New(o Options) (*Service, error) {
	if o.Store == nil || o.Authorizer == nil {
		return nil, errors.New("ctxcache: a Store and an Authorizer are required")
	}
	if o.MinTokens <= 0 {
		o.MinTokens = DefaultMinTokens
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Service{store: o.Store, authz: o.Authorizer, audit: o.Audit, minTokens: o.MinTokens, now: o.Now, ended: o.Ended}, nil
}

// end tells Options.Ended that caches ended at now (or at their expiry,
// when that came first).
func (s *Service) end(ctx context.Context, now time.Time, caches ...Cache) {
	if s.ended == nil {
		return
	}
	for _, c := range caches {
		at := now
		if c.ExpireTime.Before(at) {
			at = c.ExpireTime
		}
		s.ended(context.WithoutCancel(ctx), c, at)
	}
}

// All returns every cache not yet expired, of every tenant, for the
// operator's reports (usage, the dashboard); it checks no permission.
func (s *Service) All(ctx context.Context) ([]Cache, error) {
	now := s.now()
	var out []Cache
	err := s.store.View(ctx, func(tx Tx) error {
		out = out[:0]
		return tx.List(func(id string, b []byte) error {
			cc, err := decode(id, b)
			if err != nil {
				return err
			}
			if cc.ExpireTime.After(now) {
				out = append(out, cc)
			}
			return nil
		})
	})
	return out, err
}

// MinTokens is the smallest cache in tokens.
func (s *Service) MinTokens() int { return s.minTokens }

// record appends the audit record of an operation; err decides the
// outcome (a refusal is Denied, another error Failed). It returns err,
// joined with a failure to record.
func (s *Service) record(ctx context.Context, c Caller, action, resource string, err error) error {
	if s.audit == nil {
		return err
	}
	e := audit.Entry{Principal: c.Principal, Tenant: c.Tenant, Action: action, Resource: resource, Outcome: audit.OK}
	switch {
	case errors.Is(err, ErrForbidden), errors.Is(err, ErrNotFound):
		e.Outcome, e.Reason = audit.Denied, strings.TrimPrefix(err.Error(), "ctxcache: ")
	case err != nil:
		e.Outcome, e.Reason = audit.Failed, strings.TrimPrefix(err.Error(), "ctxcache: ")
	}
	if _, aerr := s.audit.Append(context.WithoutCancel(ctx), e); aerr != nil {
		return errors.Join(err, fmt.Errorf("ctxcache: %s %s could not be audited: %w", action, resource, aerr))
	}
	return err
}

// authorize checks c's permission on the resource name of owner. Another
// tenant's cache is not found before the Authorizer is asked: every cache
// has an owner, the default tenant ("") included, and must not look like
// a resource no tenant owns (which an Authorizer may let anyone see).
func (s *Service) authorize(ctx context.Context, c Caller, perm, owner, name string) error {
	if owner == SharedTenant && owner != c.Tenant {
		return s.authorizeShared(ctx, c, perm, name)
	}
	if owner != c.Tenant {
		return fmt.Errorf("%w: %s belongs to another tenant", ErrNotFound, name)
	}
	if c.Open {
		return nil
	}
	return s.authz.Authorize(ctx, c, perm, owner, name)
}

// authorizeShared decides on a shared cache: any caller whose role may get
// or use its own tenant's caches may get or use it; only an administrator
// may change or delete it (or create one).
func (s *Service) authorizeShared(ctx context.Context, c Caller, perm, name string) error {
	switch perm {
	case PermGet, PermUse:
		if c.Open {
			return nil
		}
		return s.authz.Authorize(ctx, c, perm, c.Tenant, name)
	case PermCreate, PermUpdate, PermDelete:
		if c.Open || c.Role == RoleAdmin {
			return nil
		}
		return fmt.Errorf("%w: only an administrator may %s a shared context cache", ErrForbidden, strings.TrimPrefix(perm, "cachedContents."))
	}
	return fmt.Errorf("%w: %s is shared: it can be read and used, not %s", ErrForbidden, name, perm)
}

// Create creates a cache from spec: authorize, resolve the expiry, reuse by
// display name if asked, prefill, then store. Nothing is stored when any
// step fails.
func (s *Service) Create(ctx context.Context, c Caller, spec Spec, prefill Prefill) (Cache, bool, error) {
	out, reused, err := s.create(ctx, c, spec, prefill)
	res := NamePrefix + "-"
	if out.ID != "" {
		res = out.Name()
	}
	action := "cachedContents.create"
	if reused {
		action = "cachedContents.reuse"
	}
	err = s.record(ctx, c, action, res, err)
	if err != nil {
		return Cache{}, false, err
	}
	return out, reused, nil
}

func (s *Service) create(ctx context.Context, c Caller, spec Spec, prefill Prefill) (Cache, bool, error) {
	owner := c.Tenant
	if spec.Shared {
		owner = SharedTenant
	}
	if err := s.authorize(ctx, c, PermCreate, owner, NamePrefix+"-"); err != nil {
		return Cache{}, false, err
	}
	if n := utf8.RuneCountInString(spec.DisplayName); n > MaxDisplayName {
		return Cache{}, false, &FieldError{Field: "displayName", Msg: fmt.Sprintf("displayName has %d characters; at most %d are allowed", n, MaxDisplayName)}
	}
	if spec.ReuseByDisplayName && spec.DisplayName == "" {
		return Cache{}, false, &FieldError{Field: "displayName", Msg: "reuse by display name needs a displayName"}
	}
	now := s.now()
	expire, err := Expiration(spec.TTL, spec.ExpireTime, now)
	if err != nil {
		return Cache{}, false, err
	}
	if spec.ReuseByDisplayName {
		found, ok, err := s.byDisplayName(ctx, owner, spec.DisplayName, now)
		if err != nil {
			return Cache{}, false, err
		}
		if ok {
			if !found.sameContent(&spec) {
				return found, false, fmt.Errorf("%w: the cache %s already has the displayName %q with other contents", ErrConflict, found.Name(), spec.DisplayName)
			}
			return found, true, nil
		}
	}
	cc := Cache{ID: newID(), Tenant: owner, Owner: c.Principal, Model: spec.Model, DisplayName: spec.DisplayName,
		SystemInstruction: spec.SystemInstruction, Contents: spec.Contents, Tools: spec.Tools, ToolConfig: spec.ToolConfig,
		CreateTime: now.UTC(), UpdateTime: now.UTC(), ExpireTime: expire}
	tokens, model, err := prefill(ctx, &cc, expire.Sub(now), s.minTokens)
	if err != nil {
		return Cache{}, false, err
	}
	cc.TokenCount, cc.Model = tokens, model
	err = s.store.Update(ctx, func(tx Tx) error {
		if _, err := tx.Get(cc.ID); err == nil {
			return fmt.Errorf("ctxcache: cache id %s collides; create the cache again", cc.ID)
		}
		if spec.ReuseByDisplayName {
			// Two creates racing with the same name: the first to commit
			// wins, the other is a conflict (its pins lapse unused).
			if other, ok, err := displayNameIn(tx, owner, spec.DisplayName, now); err != nil {
				return err
			} else if ok {
				return fmt.Errorf("%w: the cache %s was created with the displayName %q meanwhile", ErrConflict, other.Name(), spec.DisplayName)
			}
		}
		return put(tx, &cc)
	})
	if err != nil {
		return Cache{}, false, err
	}
	return cc, false, nil
}

// byDisplayName finds the live cache of tenant called name.
func (s *Service) byDisplayName(ctx context.Context, tenant, name string, now time.Time) (found Cache, ok bool, err error) {
	err = s.store.View(ctx, func(tx Tx) error {
		found, ok, err = displayNameIn(tx, tenant, name, now)
		return err
	})
	return found, ok, err
}

func displayNameIn(tx Tx, tenant, name string, now time.Time) (found Cache, ok bool, err error) {
	err = tx.List(func(id string, b []byte) error {
		c, err := decode(id, b)
		if err != nil {
			return err
		}
		if !ok && c.Tenant == tenant && c.DisplayName == name && c.ExpireTime.After(now) {
			found, ok = c, true
		}
		return nil
	})
	return found, ok, err
}

// load returns the live cache called name after checking perm. An expired
// record is deleted on the way and answered as not found; so are a
// malformed name and another tenant's cache.
func (s *Service) load(ctx context.Context, c Caller, perm, name string) (Cache, error) {
	id, ok := ParseName(name)
	if !ok {
		return Cache{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	var cc Cache
	err := s.store.View(ctx, func(tx Tx) error {
		b, err := tx.Get(id)
		if err != nil {
			return err
		}
		cc, err = decode(id, b)
		return err
	})
	if err != nil {
		return Cache{}, err
	}
	if err := s.authorize(ctx, c, perm, cc.Tenant, cc.Name()); err != nil {
		return Cache{}, err
	}
	if now := s.now(); !cc.ExpireTime.After(now) {
		if err := s.expire(ctx, id, now); err != nil {
			return Cache{}, err
		}
		return Cache{}, fmt.Errorf("%w: %s expired at %s", ErrNotFound, cc.Name(), cc.ExpireTime.Format(time.RFC3339))
	}
	return cc, nil
}

// expire deletes record id if it is still expired at now.
func (s *Service) expire(ctx context.Context, id string, now time.Time) error {
	var gone *Cache
	err := s.store.Update(ctx, func(tx Tx) error {
		gone = nil
		b, err := tx.Get(id)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		cc, err := decode(id, b)
		if err != nil {
			return err
		}
		if cc.ExpireTime.After(now) {
			return nil // extended meanwhile
		}
		gone = &cc
		return tx.Delete(id)
	})
	if err == nil && gone != nil {
		s.end(ctx, now, *gone)
	}
	return err
}

// Get returns the cache called name ("cachedContents/ID").
func (s *Service) Get(ctx context.Context, c Caller, name string) (Cache, error) {
	cc, err := s.load(ctx, c, PermGet, name)
	return cc, s.record(ctx, c, "cachedContents.get", name, err)
}

// Contents returns the cache called name for reading its contents back:
// its owner may (and an administrator, and anyone on an open server);
// others of the tenant who may get it see its metadata only.
func (s *Service) Contents(ctx context.Context, c Caller, name string) (Cache, error) {
	cc, err := s.load(ctx, c, PermGet, name)
	if err == nil && !c.Open && c.Role != "admin" && c.Principal != cc.Owner {
		err = fmt.Errorf("%w: only the cache's owner (%s) or an administrator reads its contents", ErrForbidden, cc.Owner)
	}
	return cc, s.record(ctx, c, "cachedContents.read", name, err)
}

// Use returns the cache called name for a request that generates with it.
func (s *Service) Use(ctx context.Context, c Caller, name string) (Cache, error) {
	cc, err := s.load(ctx, c, PermUse, name)
	return cc, s.record(ctx, c, "cachedContents.use", name, err)
}

// MaxPageSize bounds List's page size, and DefaultPageSize is its default.
const (
	MaxPageSize     = 1000
	DefaultPageSize = 100
)

// List returns a page of the caller's tenant's live caches, by id, and the
// token of the next page ("" after the last). The token is opaque to
// clients: the last id of the page, encoded.
func (s *Service) List(ctx context.Context, c Caller, pageSize int, pageToken string) ([]Cache, string, error) {
	out, next, err := s.list(ctx, c, pageSize, pageToken)
	if err = s.record(ctx, c, "cachedContents.list", NamePrefix+"*", err); err != nil {
		return nil, "", err
	}
	return out, next, nil
}

func (s *Service) list(ctx context.Context, c Caller, pageSize int, pageToken string) ([]Cache, string, error) {
	if err := s.authorize(ctx, c, PermList, c.Tenant, NamePrefix+"*"); err != nil {
		return nil, "", err
	}
	switch {
	case pageSize < 0:
		return nil, "", &FieldError{Field: "pageSize", Msg: "pageSize must not be negative"}
	case pageSize == 0:
		pageSize = DefaultPageSize
	case pageSize > MaxPageSize:
		pageSize = MaxPageSize // as Google does: coerced, not refused
	}
	after := ""
	if pageToken != "" {
		b, err := base64.RawURLEncoding.DecodeString(pageToken)
		if _, ok := ParseName(string(b)); err != nil || !ok {
			return nil, "", &FieldError{Field: "pageToken", Msg: "pageToken is not one this server returned"}
		}
		after = string(b)
	}
	now := s.now()
	var out []Cache
	more := false
	err := s.store.View(ctx, func(tx Tx) error {
		return tx.List(func(id string, b []byte) error {
			if id <= after || more {
				return nil
			}
			cc, err := decode(id, b)
			if err != nil {
				return err
			}
			if cc.Tenant != c.Tenant || !cc.ExpireTime.After(now) {
				return nil
			}
			if len(out) == pageSize {
				more = true
				return nil
			}
			out = append(out, cc)
			return nil
		})
	})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if more {
		next = base64.RawURLEncoding.EncodeToString([]byte(out[len(out)-1].ID))
	}
	return out, next, nil
}

// Largest returns the n live caches of every tenant with the most tokens
// (largest first, then by id) without their contents, and how many live
// caches there are in all. It is an operator's view across tenants, for
// the dashboard behind the admin guard: nothing is authorized or audited
// here, so only an operator endpoint may call it.
func (s *Service) Largest(ctx context.Context, n int) (top []Cache, live int, err error) {
	now := s.now()
	err = s.store.View(ctx, func(tx Tx) error {
		top, live = top[:0], 0
		return tx.List(func(id string, b []byte) error {
			cc, err := decode(id, b)
			if err != nil {
				return err
			}
			if !cc.ExpireTime.After(now) {
				return nil
			}
			live++
			cc.SystemInstruction, cc.Contents, cc.Tools, cc.ToolConfig = nil, nil, nil, nil
			top = append(top, cc)
			if n > 0 && len(top) > 2*n { // keep the work bounded on a large store
				top = largestFirst(top)[:n]
			}
			return nil
		})
	})
	if err != nil {
		return nil, 0, fmt.Errorf("ctxcache: largest caches: %w", err)
	}
	top = largestFirst(top)
	if n > 0 && len(top) > n {
		top = top[:n]
	}
	return top, live, nil
}

// largestFirst sorts caches by token count, largest first, then by id.
func largestFirst(cs []Cache) []Cache {
	slices.SortFunc(cs, func(a, b Cache) int {
		if a.TokenCount != b.TokenCount {
			return b.TokenCount - a.TokenCount
		}
		return strings.Compare(a.ID, b.ID)
	})
	return cs
}

// Update changes the expiry of the cache called name to the one ttl or
// expireTime gives (exactly one of them). A later expiry prefills again
// (repin) with the new TTL first, so that the pins reach it; if that
// fails, nothing changes. An earlier one changes the record, then calls
// repin with the shorter TTL, so that the pins end with the cache; if that
// fails, they lapse at the old expiry (repin reports its own failures).
func (s *Service) Update(ctx context.Context, c Caller, name, ttl, expireTime string, repin Prefill) (Cache, error) {
	cc, err := s.update(ctx, c, name, ttl, expireTime, repin)
	return cc, s.record(ctx, c, "cachedContents.update", name, err)
}

func (s *Service) update(ctx context.Context, c Caller, name, ttl, expireTime string, repin Prefill) (Cache, error) {
	cc, err := s.load(ctx, c, PermUpdate, name)
	if err != nil {
		return Cache{}, err
	}
	if ttl == "" && expireTime == "" {
		return Cache{}, &FieldError{Field: "ttl", Msg: "an update changes the expiration only: give ttl or expireTime"}
	}
	now := s.now()
	expire, err := Expiration(ttl, expireTime, now)
	if err != nil {
		return Cache{}, err
	}
	before := cc
	if expire.After(before.ExpireTime) {
		if _, _, err := repin(ctx, &cc, expire.Sub(now), 0); err != nil {
			return Cache{}, err
		}
	}
	err = s.store.Update(ctx, func(tx Tx) error {
		b, err := tx.Get(cc.ID)
		if err != nil {
			return err
		}
		cur, err := decode(cc.ID, b)
		if err != nil {
			return err
		}
		if !cur.ExpireTime.After(now) {
			return fmt.Errorf("%w: %s expired", ErrNotFound, cc.Name())
		}
		cur.ExpireTime, cur.UpdateTime = expire, now.UTC()
		cc = cur
		return put(tx, &cur)
	})
	if err != nil {
		return Cache{}, err
	}
	if expire.Before(before.ExpireTime) {
		_, _, _ = repin(ctx, &before, expire.Sub(now), 0)
	}
	return cc, nil
}

// Delete deletes the cache called name and returns what it was, so that
// the caller can release its pins (the service keeps records, not KV).
func (s *Service) Delete(ctx context.Context, c Caller, name string) (Cache, error) {
	cc, err := s.del(ctx, c, name)
	return cc, s.record(ctx, c, "cachedContents.delete", name, err)
}

func (s *Service) del(ctx context.Context, c Caller, name string) (Cache, error) {
	cc, err := s.load(ctx, c, PermDelete, name)
	if err != nil {
		return Cache{}, err
	}
	if err := s.store.Update(ctx, func(tx Tx) error { return tx.Delete(cc.ID) }); err != nil {
		return cc, err
	}
	s.end(ctx, s.now(), cc)
	return cc, nil
}

// DeleteTenant deletes every cache of the tenant with id tenantID (its
// tenant was deleted), recording each deletion as by, and returns how many
// it deleted. Their pins lapse at their expiry, as any deleted cache's.
func (s *Service) DeleteTenant(ctx context.Context, by Caller, tenantID string) (int, error) {
	var gone []Cache
	err := s.store.Update(ctx, func(tx Tx) error {
		gone = gone[:0]
		err := tx.List(func(id string, b []byte) error {
			cc, err := decode(id, b)
			if err != nil {
				return err
			}
			if cc.Tenant == tenantID {
				gone = append(gone, cc)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, cc := range gone {
			if err := tx.Delete(cc.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	s.end(ctx, s.now(), gone...)
	var errs []error
	for _, cc := range gone {
		id := cc.ID
		if s.audit == nil {
			break
		}
		e := audit.Entry{Principal: by.Principal, Tenant: by.Tenant, Action: "cachedContents.delete", Resource: NamePrefix + id,
			Outcome: audit.OK, Reason: "its tenant " + tenantID + " was deleted"}
		if _, err := s.audit.Append(context.WithoutCancel(ctx), e); err != nil {
			errs = append(errs, fmt.Errorf("ctxcache: %s was deleted but could not be audited: %w", NamePrefix+id, err))
		}
	}
	return len(gone), errors.Join(errs...)
}

// Sweep deletes every expired record and returns how many it deleted.
func (s *Service) Sweep(ctx context.Context) (int, error) {
	now := s.now()
	var gone []Cache
	err := s.store.Update(ctx, func(tx Tx) error {
		gone = gone[:0]
		err := tx.List(func(id string, b []byte) error {
			cc, err := decode(id, b)
			if err != nil {
				return err
			}
			if !cc.ExpireTime.After(now) {
				gone = append(gone, cc)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, cc := range gone {
			if err := tx.Delete(cc.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	s.end(ctx, now, gone...)
	return len(gone), nil
}

// MemStore is a Store in memory, for a single process that need not keep
// its caches across restarts (tests, tools). The zero value is ready. A
// write transaction works on a copy and swaps it in on success, so a
// failed fn changes nothing, as in the tenant store.
type MemStore struct {
	mu      sync.Mutex
	records map[string][]byte
}

var _ Store = (*MemStore)(nil)

// View runs fn on the records.
func (m *MemStore) View(ctx context.Context, fn func(Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ctxcache: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return fn(memTx{m.records})
}

// Update runs fn on a copy of the records and keeps it if fn succeeds.
func (m *MemStore) Update(ctx context.Context, fn func(Tx) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ctxcache: %w", err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	work := maps.Clone(m.records)
	if work == nil {
		work = map[string][]byte{}
	}
	if err := fn(memTx{work}); err != nil {
		return err
	}
	m.records = work
	return nil
}

type memTx struct{ m map[string][]byte }

func (t memTx) Get(id string) ([]byte, error) {
	v, ok := t.m[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return slices.Clone(v), nil
}

func (t memTx) Put(id string, v []byte) error { t.m[id] = slices.Clone(v); return nil }

func (t memTx) Delete(id string) error { delete(t.m, id); return nil }

func (t memTx) List(fn func(string, []byte) error) error {
	ids := make([]string, 0, len(t.m))
	for id := range t.m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if err := fn(id, slices.Clone(t.m[id])); err != nil {
			return err
		}
	}
	return nil
}

// PageTokenAfter returns the page token of the page that starts after the
// cache with id: for APIs that page by the last id seen (OpenAI's after=).
func PageTokenAfter(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }
