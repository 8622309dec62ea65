package ctxcache

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kvserve/kvserve/internal/audit"
)

// fakeAuthz is a real, small decision: a caller may do what its role's
// list holds, on its own tenant's resources; others' are not found.
type fakeAuthz struct{ roles map[string][]string }

func (f fakeAuthz) Authorize(_ context.Context, c Caller, perm, owner, name string) error {
	if owner != c.Tenant {
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if !slices.Contains(f.roles[c.Role], perm) {
		return fmt.Errorf("%w: role %s lacks %s", ErrForbidden, c.Role, perm)
	}
	return nil
}

type auditRecorder struct {
	mu      sync.Mutex
	entries []audit.Entry
}

func (a *auditRecorder) Append(_ context.Context, e audit.Entry) (audit.Record, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.entries = append(a.entries, e)
	return audit.Record{Entry: e}, nil
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newTestService(t *testing.T) (*Service, *clock, *auditRecorder) {
	t.Helper()
	clk := &clock{time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	rec := &auditRecorder{}
	all := []string{PermCreate, PermGet, PermList, PermUpdate, PermDelete, PermUse}
	s, err := New(Options{Store: &MemStore{}, Authorizer: fakeAuthz{map[string][]string{
		"developer": all, "viewer": {PermGet, PermList}}}, Audit: rec, MinTokens: 10, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return s, clk, rec
}

// prefiller records its calls and returns a fixed token count.
type prefiller struct {
	calls []time.Duration
	fail  error
}

func (p *prefiller) prefill(_ context.Context, _ *Cache, ttl time.Duration, min int) (int, string, error) {
	p.calls = append(p.calls, ttl)
	if p.fail != nil {
		return 0, "", p.fail
	}
	if min > 20 {
		return 0, "", errors.New("too short")
	}
	return 20, "m", nil
}

var (
	dev    = Caller{Tenant: "tn_a", Principal: "alice", Role: "developer"}
	viewer = Caller{Tenant: "tn_a", Principal: "vic", Role: "viewer"}
	other  = Caller{Tenant: "tn_b", Principal: "bob", Role: "developer"}
)

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	s, clk, rec := newTestService(t)
	p := &prefiller{}
	spec := Spec{Model: "m", DisplayName: "doc", Contents: []byte(`[{"parts":[{"text":"x"}]}]`), TTL: "60s"}
	c, reused, err := s.Create(ctx, dev, spec, p.prefill)
	if err != nil || reused {
		t.Fatal(err, reused)
	}
	if c.TokenCount != 20 || !c.ExpireTime.Equal(clk.t.Add(time.Minute)) || len(p.calls) != 1 || p.calls[0] != time.Minute {
		t.Fatalf("created %+v after prefills %v", c, p.calls)
	}
	if _, err := s.Get(ctx, viewer, c.Name()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, other, c.Name()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("other tenant's get: %v, want not found", err)
	}
	if _, err := s.Use(ctx, viewer, c.Name()); !errors.Is(err, ErrForbidden) {
		t.Fatalf("viewer's use: %v, want forbidden", err)
	}
	if list, _, err := s.List(ctx, other, 0, ""); err != nil || len(list) != 0 {
		t.Fatalf("other tenant lists %v, %v", list, err)
	}

	// Extending re-pins with the new TTL first; shortening after the record
	// changed, with the shorter TTL.
	clk.t = clk.t.Add(10 * time.Second)
	if c, err = s.Update(ctx, dev, c.Name(), "120s", "", p.prefill); err != nil {
		t.Fatal(err)
	}
	if len(p.calls) != 2 || p.calls[1] != 2*time.Minute || !c.ExpireTime.Equal(clk.t.Add(2*time.Minute)) {
		t.Fatalf("extended to %v after prefills %v", c.ExpireTime, p.calls)
	}
	if c, err = s.Update(ctx, dev, c.Name(), "30s", "", p.prefill); err != nil || len(p.calls) != 3 || p.calls[2] != 30*time.Second {
		t.Fatal(err, p.calls)
	}
	// A failed re-pin changes nothing.
	p.fail = errors.New("quota")
	if _, err := s.Update(ctx, dev, c.Name(), "600s", "", p.prefill); !errors.Is(err, p.fail) {
		t.Fatal(err)
	}
	if got, _ := s.Get(ctx, dev, c.Name()); !got.ExpireTime.Equal(c.ExpireTime) {
		t.Fatalf("expiry %v after a failed update, want %v", got.ExpireTime, c.ExpireTime)
	}
	p.fail = nil

	// Exact expiry: alive one nanosecond before, gone at the instant.
	clk.t = c.ExpireTime.Add(-1)
	if _, err := s.Use(ctx, dev, c.Name()); err != nil {
		t.Fatal(err)
	}
	clk.t = c.ExpireTime
	if _, err := s.Use(ctx, dev, c.Name()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("use at expiry: %v", err)
	}
	if list, _, _ := s.List(ctx, dev, 0, ""); len(list) != 0 {
		t.Fatalf("expired cache listed: %v", list)
	}

	// Delete.
	c2, _, err := s.Create(ctx, dev, spec, p.prefill)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, other, c2.Name()); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, viewer, c2.Name()); !errors.Is(err, ErrForbidden) {
		t.Fatal(err)
	}
	if _, err := s.Delete(ctx, dev, c2.Name()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, dev, c2.Name()); !errors.Is(err, ErrNotFound) {
		t.Fatal(err)
	}
	// Every operation was audited, denials included, never with contents.
	outcomes := map[audit.Outcome]int{}
	for _, e := range rec.entries {
		outcomes[e.Outcome]++
		if e.Resource == "" || e.Action == "" {
			t.Errorf("audit entry without action or resource: %+v", e)
		}
	}
	if outcomes[audit.Denied] < 5 || outcomes[audit.OK] < 8 {
		t.Errorf("audit outcomes %v", outcomes)
	}
}

func TestCreateRefusals(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newTestService(t)
	long := make([]byte, MaxDisplayName+1)
	for i := range long {
		long[i] = 'a'
	}
	for _, tc := range []struct {
		name   string
		who    Caller
		spec   Spec
		fail   error
		want   error
		called bool
	}{
		{"viewer", viewer, Spec{TTL: "60s"}, nil, ErrForbidden, false},
		{"bad ttl", dev, Spec{TTL: "60"}, nil, ErrInvalid, false},
		{"both", dev, Spec{TTL: "60s", ExpireTime: "2030-01-01T00:00:00Z"}, nil, ErrInvalid, false},
		{"long name", dev, Spec{DisplayName: string(long)}, nil, ErrInvalid, false},
		{"reuse without name", dev, Spec{ReuseByDisplayName: true}, nil, ErrInvalid, false},
		{"prefill fails", dev, Spec{TTL: "60s"}, errors.New("pin quota"), nil, true},
	} {
		p := &prefiller{fail: tc.fail}
		_, _, err := s.Create(ctx, tc.who, tc.spec, p.prefill)
		want := tc.want
		if want == nil {
			want = tc.fail
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", tc.name, err, want)
		}
		if called := len(p.calls) > 0; called != tc.called {
			t.Errorf("%s: prefill called %v", tc.name, called)
		}
	}
	// Nothing was half-created.
	if list, _, err := s.List(ctx, dev, 0, ""); err != nil || len(list) != 0 {
		t.Fatalf("after failed creates: %v, %v", list, err)
	}
}

func TestReuseByDisplayName(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newTestService(t)
	p := &prefiller{}
	spec := Spec{Model: "m", DisplayName: "doc", Contents: []byte(`[1]`), ReuseByDisplayName: true}
	a, reused, err := s.Create(ctx, dev, spec, p.prefill)
	if err != nil || reused {
		t.Fatal(err, reused)
	}
	b, reused, err := s.Create(ctx, dev, spec, p.prefill)
	if err != nil || !reused || b.ID != a.ID || len(p.calls) != 1 {
		t.Fatalf("second create: %v %v %v, %d prefills", b.ID, reused, err, len(p.calls))
	}
	// Another tenant's cache of the same name is not reused.
	if c, reused, err := s.Create(ctx, other, spec, p.prefill); err != nil || reused || c.ID == a.ID {
		t.Fatalf("other tenant: %v %v %v", c.ID, reused, err)
	}
	spec.Contents = []byte(`[2]`)
	if _, _, err := s.Create(ctx, dev, spec, p.prefill); !errors.Is(err, ErrConflict) {
		t.Fatalf("different contents: %v", err)
	}
	// Without the flag, names are labels.
	spec.ReuseByDisplayName = false
	if c, reused, err := s.Create(ctx, dev, spec, p.prefill); err != nil || reused || c.ID == a.ID {
		t.Fatalf("plain create: %v %v %v", c.ID, reused, err)
	}
}

func TestListPages(t *testing.T) {
	ctx := context.Background()
	s, _, _ := newTestService(t)
	p := &prefiller{}
	var ids []string
	for range 5 {
		c, _, err := s.Create(ctx, dev, Spec{Model: "m"}, p.prefill)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	if _, _, err := s.Create(ctx, other, Spec{Model: "m"}, p.prefill); err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	var got []string
	token := ""
	for page := 0; ; page++ {
		list, next, err := s.List(ctx, dev, 2, token)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range list {
			got = append(got, c.ID)
		}
		if next == "" {
			break
		}
		if page > 5 {
			t.Fatal("pages never end")
		}
		token = next
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("listed %v, want %v", got, ids)
	}
	for _, bad := range []string{"x", "Zm9v", "!!"} {
		if _, _, err := s.List(ctx, dev, 2, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("pageToken %q: %v", bad, err)
		}
	}
	if _, _, err := s.List(ctx, dev, -1, ""); !errors.Is(err, ErrInvalid) {
		t.Errorf("negative pageSize: %v", err)
	}
}

func TestSweep(t *testing.T) {
	ctx := context.Background()
	s, clk, _ := newTestService(t)
	p := &prefiller{}
	for _, ttl := range []string{"10s", "20s", "30s"} {
		if _, _, err := s.Create(ctx, dev, Spec{Model: "m", TTL: ttl}, p.prefill); err != nil {
			t.Fatal(err)
		}
	}
	clk.t = clk.t.Add(20 * time.Second)
	if n, err := s.Sweep(ctx); err != nil || n != 2 {
		t.Fatalf("swept %d, %v; want 2", n, err)
	}
	if list, _, _ := s.List(ctx, dev, 0, ""); len(list) != 1 {
		t.Fatalf("left %d", len(list))
	}
}

// sizedPrefill prefills a cache to the token count its display name gives.
func sizedPrefill(_ context.Context, c *Cache, _ time.Duration, _ int) (int, string, error) {
	var n int
	_, err := fmt.Sscanf(c.DisplayName, "n%d", &n)
	return n, "m", err
}

func TestLargest(t *testing.T) {
	ctx := context.Background()
	s, clk, rec := newTestService(t)
	create := func(who Caller, tokens int, ttl string) {
		t.Helper()
		spec := Spec{Model: "m", DisplayName: fmt.Sprintf("n%d", tokens), TTL: ttl, Contents: []byte(`[{"parts":[{"text":"secret"}]}]`)}
		if _, _, err := s.Create(ctx, who, spec, sizedPrefill); err != nil {
			t.Fatal(err)
		}
	}
	create(dev, 300, "60s")
	create(other, 900, "60s")
	create(dev, 500, "10s") // expires first
	create(other, 100, "60s")
	create(dev, 700, "60s")
	audited := len(rec.entries)
	type row struct {
		tenant string
		tokens int
	}
	for _, tc := range []struct {
		name  string
		after time.Duration
		n     int
		want  []row
		live  int
	}{
		{"top three of five", 0, 3, []row{{"tn_b", 900}, {"tn_a", 700}, {"tn_a", 500}}, 5},
		{"all", 0, 0, []row{{"tn_b", 900}, {"tn_a", 700}, {"tn_a", 500}, {"tn_a", 300}, {"tn_b", 100}}, 5},
		{"one", 0, 1, []row{{"tn_b", 900}}, 5},
		{"expired left out", 20 * time.Second, 3, []row{{"tn_b", 900}, {"tn_a", 700}, {"tn_a", 300}}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk.t = clk.t.Add(tc.after)
			top, live, err := s.Largest(ctx, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			var got []row
			for _, c := range top {
				got = append(got, row{c.Tenant, c.TokenCount})
				if c.Contents != nil || c.ExpireTime.IsZero() || c.ID == "" {
					t.Errorf("cache %s: contents %q, expiry %v", c.ID, c.Contents, c.ExpireTime)
				}
			}
			if !slices.Equal(got, tc.want) || live != tc.live {
				t.Fatalf("largest %d = %v of %d live, want %v of %d", tc.n, got, live, tc.want, tc.live)
			}
		})
	}
	if len(rec.entries) != audited {
		t.Fatalf("Largest wrote %d audit records; it is a read for operators, audited by their endpoint", len(rec.entries)-audited)
	}
}

func TestDeleteTenant(t *testing.T) {
	ctx := context.Background()
	s, _, rec := newTestService(t)
	p := &prefiller{}
	for _, who := range []Caller{dev, dev, other} {
		if _, _, err := s.Create(ctx, who, Spec{Model: "m"}, p.prefill); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.DeleteTenant(ctx, Caller{Principal: "local:ops"}, dev.Tenant)
	if err != nil || n != 2 {
		t.Fatalf("deleted %d, %v", n, err)
	}
	if list, _, _ := s.List(ctx, dev, 0, ""); len(list) != 0 {
		t.Fatalf("left %d", len(list))
	}
	if list, _, _ := s.List(ctx, other, 0, ""); len(list) != 1 {
		t.Fatalf("the other tenant has %d", len(list))
	}
	if e := rec.entries[len(rec.entries)-3]; e.Action != "cachedContents.delete" || e.Principal != "local:ops" {
		t.Fatalf("audit %+v", e)
	}
}

// allowAll lets anyone do anything: the service itself must still keep
// tenants apart, the default tenant ("") included.
type allowAll struct{}

func (allowAll) Authorize(context.Context, Caller, string, string, string) error { return nil }

func TestTenantsApartWhateverTheAuthorizer(t *testing.T) {
	ctx := context.Background()
	s, err := New(Options{Store: &MemStore{}, Authorizer: allowAll{}, MinTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	p := &prefiller{}
	def := Caller{Tenant: "", Principal: "operator", Role: "admin"}
	c, _, err := s.Create(ctx, def, Spec{Model: "m"}, p.prefill)
	if err != nil {
		t.Fatal(err)
	}
	for _, who := range []Caller{dev, other} {
		if _, err := s.Get(ctx, who, c.Name()); !errors.Is(err, ErrNotFound) {
			t.Errorf("%s/%s reads the default tenant's cache: %v", who.Tenant, who.Principal, err)
		}
	}
	mine, _, err := s.Create(ctx, dev, Spec{Model: "m"}, p.prefill)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Use(ctx, def, mine.Name()); !errors.Is(err, ErrNotFound) {
		t.Errorf("the default tenant uses a tenant's cache: %v", err)
	}
}

// TestEnded: every way a cache ends is reported once, at the time it ended
// or at its expiry if that came first (what its storage is billed to).
func TestEnded(t *testing.T) {
	ctx := context.Background()
	clk := &clock{time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	start := clk.t
	ended := map[string]time.Time{}
	s, err := New(Options{Store: &MemStore{}, Authorizer: allowAll{}, MinTokens: 10, Now: clk.now,
		Ended: func(_ context.Context, c Cache, at time.Time) {
			if _, twice := ended[c.DisplayName]; twice {
				t.Errorf("%s ended twice", c.DisplayName)
			}
			ended[c.DisplayName] = at
		}})
	if err != nil {
		t.Fatal(err)
	}
	p := &prefiller{}
	create := func(who Caller, name, ttl string) Cache {
		c, _, err := s.Create(ctx, who, Spec{Model: "m", DisplayName: name, TTL: ttl}, p.prefill)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	deleted := create(dev, "deleted", "100s")
	create(dev, "swept", "10s")
	read := create(dev, "read after expiry", "20s")
	create(other, "tenant deleted", "100s")
	clk.t = start.Add(30 * time.Second)
	if _, err := s.Delete(ctx, dev, deleted.Name()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, dev, read.Name()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an expired cache read: %v", err)
	}
	if _, err := s.Sweep(ctx); err != nil {
		t.Fatal(err)
	}
	clk.t = start.Add(40 * time.Second)
	if _, err := s.DeleteTenant(ctx, Caller{Principal: "ops"}, other.Tenant); err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Time{
		"deleted":           start.Add(30 * time.Second),
		"swept":             start.Add(10 * time.Second),
		"read after expiry": start.Add(20 * time.Second),
		"tenant deleted":    start.Add(40 * time.Second),
	}
	for name, at := range want {
		if got, ok := ended[name]; !ok || !got.Equal(at) {
			t.Errorf("%s: ended at %v (reported %v), want %v", name, got, ok, at)
		}
	}
	if len(ended) != len(want) {
		t.Errorf("%d ends reported, want %d", len(ended), len(want))
	}
}
