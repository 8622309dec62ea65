package tenant

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Permission is one thing a principal may do.
type Permission string

// The permissions.
const (
	CachedContentsCreate Permission = "cachedContents.create"
	CachedContentsGet    Permission = "cachedContents.get"
	CachedContentsList   Permission = "cachedContents.list"
	CachedContentsUpdate Permission = "cachedContents.update"
	CachedContentsDelete Permission = "cachedContents.delete"
	CachedContentsUse    Permission = "cachedContents.use"
	// ModelsUse is generating with a model; a key's model allow-list
	// narrows it per model.
	ModelsUse Permission = "models.use"
	// UsageRead is reading usage reports.
	UsageRead Permission = "usage.read"
	// Admin is operating the server: /metrics, tenants and keys.
	Admin Permission = "admin"
)

// Permissions lists every permission.
var Permissions = []Permission{
	CachedContentsCreate, CachedContentsGet, CachedContentsList, CachedContentsUpdate,
	CachedContentsDelete, CachedContentsUse, ModelsUse, UsageRead, Admin,
}

// Role is a named set of permissions held by a key.
type Role string

// The roles.
const (
	RoleAdmin     Role = "admin"
	RoleDeveloper Role = "developer"
	RoleUser      Role = "user"
	RoleViewer    Role = "viewer"
)

// Roles lists the roles, most powerful first.
var Roles = []Role{RoleAdmin, RoleDeveloper, RoleUser, RoleViewer}

// rolePermissions is the one table of what each role may do.
var rolePermissions = map[Role][]Permission{
	RoleAdmin: Permissions,
	RoleDeveloper: {CachedContentsCreate, CachedContentsGet, CachedContentsList, CachedContentsUpdate,
		CachedContentsDelete, CachedContentsUse, ModelsUse, UsageRead},
	RoleUser:   {CachedContentsGet, CachedContentsList, CachedContentsUse, ModelsUse},
	RoleViewer: {CachedContentsGet, CachedContentsList, UsageRead},
}

// ParseRole returns the role named s.
func ParseRole(s string) (Role, error) {
	r := Role(strings.ToLower(strings.TrimSpace(s)))
	if _, ok := rolePermissions[r]; !ok {
		return "", fmt.Errorf("%w role %q: want one of admin, developer, user, viewer", ErrInvalid, s)
	}
	return r, nil
}

// Has reports whether the role grants p.
func (r Role) Has(p Permission) bool { return slices.Contains(rolePermissions[r], p) }

// Permissions returns the role's permissions (nil for an unknown role).
func (r Role) Permissions() []Permission { return slices.Clone(rolePermissions[r]) }

// Principal is who a request acts as: a named identity in a tenant, with
// the role and model allow-list of the key it presented.
type Principal struct {
	// Tenant is the tenant's id.
	Tenant string
	// Name is the principal's name, unique within the tenant.
	Name string
	// Role is the key's role.
	Role Role
	// KeyID is the public id of the key presented.
	KeyID string
	// Models, when not empty, are the only models the key may use.
	Models []string
}

// AllowsModel reports whether the principal's key may use model id.
func (p Principal) AllowsModel(id string) bool {
	return len(p.Models) == 0 || slices.Contains(p.Models, id)
}

// Resource is what a permission is checked against.
type Resource struct {
	// Tenant owns the resource; "" for what no tenant owns (the server,
	// a model).
	Tenant string
	// Name is the resource's name: "cachedContents/ID", "models/ID", or ""
	// for the server itself.
	Name string
	// UseGrants are the principals of the owning tenant granted
	// cachedContents.use on this resource by a binding, beyond their role.
	UseGrants []string
}

// The errors of Authorize.
var (
	// ErrForbidden: the principal may see the resource but not do this.
	ErrForbidden = errors.New("tenant: permission denied")
	// ErrHidden: the resource belongs to another tenant. Callers answer as
	// if it did not exist (404, never 403), so existence does not leak.
	ErrHidden = errors.New("tenant: no such resource")
)

// Authorize decides whether p may do perm on r: nil, or an error wrapping
// ErrHidden or ErrForbidden. It is pure: the caller supplies the
// resource's owner and bindings.
func Authorize(p Principal, perm Permission, r Resource) error {
	if r.Tenant != "" && r.Tenant != p.Tenant {
		return fmt.Errorf("%w: %s", ErrHidden, r.Name)
	}
	if perm == ModelsUse {
		if m, ok := strings.CutPrefix(r.Name, "models/"); ok && !p.AllowsModel(m) {
			return fmt.Errorf("%w: this key may not use the model %q", ErrForbidden, m)
		}
	}
	if p.Role.Has(perm) {
		return nil
	}
	if perm == CachedContentsUse && r.Tenant != "" && slices.Contains(r.UseGrants, p.Name) {
		return nil
	}
	return fmt.Errorf("%w: role %q lacks %s", ErrForbidden, p.Role, perm)
}
