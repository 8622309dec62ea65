package tenant

import (
	"errors"
	"testing"
)

// TestAuthorizeRoles checks every role × permission against the table as
// the issue states it, written out here independently of rolePermissions.
func TestAuthorizeRoles(t *testing.T) {
	const (
		y = true
		n = false
	)
	// Columns: create get list update delete use | models.use usage.read admin.
	want := map[Role][9]bool{
		RoleAdmin:     {y, y, y, y, y, y, y, y, y},
		RoleDeveloper: {y, y, y, y, y, y, y, y, n},
		RoleUser:      {n, y, y, n, n, y, y, n, n},
		RoleViewer:    {n, y, y, n, n, n, n, y, n},
	}
	if len(Permissions) != 9 || len(Roles) != len(want) {
		t.Fatalf("%d permissions, %d roles: update this table", len(Permissions), len(Roles))
	}
	for _, role := range Roles {
		for i, perm := range Permissions {
			p := Principal{Tenant: "tn_a", Name: "alice", Role: role}
			err := Authorize(p, perm, Resource{Tenant: "tn_a", Name: "cachedContents/c1"})
			if got := err == nil; got != want[role][i] {
				t.Errorf("%s %s: allowed %v, want %v (%v)", role, perm, got, want[role][i], err)
			}
			if err != nil && !errors.Is(err, ErrForbidden) {
				t.Errorf("%s %s: %v, want ErrForbidden", role, perm, err)
			}
			// Another tenant's resource is hidden from every role, admin too.
			err = Authorize(p, perm, Resource{Tenant: "tn_b", Name: "cachedContents/c1"})
			if !errors.Is(err, ErrHidden) {
				t.Errorf("%s %s on another tenant's resource: %v, want ErrHidden", role, perm, err)
			}
		}
	}
}

func TestAuthorizeBindingsAndModels(t *testing.T) {
	viewer := Principal{Tenant: "tn_a", Name: "vic", Role: RoleViewer}
	limited := Principal{Tenant: "tn_a", Name: "dev", Role: RoleDeveloper, Models: []string{"m1"}}
	cache := Resource{Tenant: "tn_a", Name: "cachedContents/c1", UseGrants: []string{"vic"}}
	tests := []struct {
		name string
		p    Principal
		perm Permission
		r    Resource
		want error
	}{
		{"granted use", viewer, CachedContentsUse, cache, nil},
		{"grant is only use", viewer, CachedContentsDelete, cache, ErrForbidden},
		{"grant names someone else", Principal{Tenant: "tn_a", Name: "val", Role: RoleViewer}, CachedContentsUse, cache, ErrForbidden},
		{"grant does not cross tenants", Principal{Tenant: "tn_b", Name: "vic", Role: RoleViewer}, CachedContentsUse, cache, ErrHidden},
		{"allowed model", limited, ModelsUse, Resource{Name: "models/m1"}, nil},
		{"model not in the allow-list", limited, ModelsUse, Resource{Name: "models/m2"}, ErrForbidden},
		{"no allow-list", Principal{Role: RoleUser}, ModelsUse, Resource{Name: "models/m2"}, nil},
		{"viewer cannot generate", viewer, ModelsUse, Resource{Name: "models/m1"}, ErrForbidden},
		{"server admin", Principal{Role: RoleAdmin}, Admin, Resource{}, nil},
		{"unknown role", Principal{Role: "root"}, ModelsUse, Resource{}, ErrForbidden},
	}
	for _, tt := range tests {
		err := Authorize(tt.p, tt.perm, tt.r)
		if (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.want)
		}
	}
}

func TestParseRole(t *testing.T) {
	for _, s := range []string{"admin", "Developer", " user ", "viewer"} {
		if _, err := ParseRole(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	for _, s := range []string{"", "root", "admins"} {
		if _, err := ParseRole(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}
