package tenant_test

import (
	"path/filepath"
	"testing"

	"github.com/kvserve/kvserve/internal/tenant"
	"github.com/kvserve/kvserve/internal/tenant/storetest"
)

// TestBoltConformance runs the store suite on the bbolt file: two clients
// of one backend are two stores on the same file, as a server and a CLI
// command are.
func TestBoltConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) func(t *testing.T) tenant.Store {
		path := filepath.Join(t.TempDir(), tenant.StateFile)
		return func(t *testing.T) tenant.Store {
			s, err := tenant.OpenBolt(path, tenant.BoltOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
	})
}
