package jskv_test

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/kvserve/kvserve/internal/cluster"
	"github.com/kvserve/kvserve/internal/tenant"
	"github.com/kvserve/kvserve/internal/tenant/jskv"
	"github.com/kvserve/kvserve/internal/tenant/storetest"
)

// startNATS runs an embedded nats-server with JetStream in a temporary
// directory for the test.
func startNATS(t *testing.T) *cluster.Server {
	t.Helper()
	ns, err := cluster.StartServer(cluster.ServerConfig{StoreDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	return ns
}

// connect opens a connection of its own, as a separate process would.
func connect(t *testing.T, ns *cluster.Server) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(ns.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func open(t *testing.T, nc *nats.Conn, o jskv.Options) *jskv.Store {
	t.Helper()
	s, err := jskv.Open(t.Context(), nc, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestConformance runs the store suite on JetStream KV, each client on its
// own connection. The chunks are small so that most snapshots span
// several.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) func(t *testing.T) tenant.Store {
		ns := startNATS(t)
		return func(t *testing.T) tenant.Store {
			return open(t, connect(t, ns), jskv.Options{ChunkSize: 64 << 10})
		}
	})
}

// TestConformanceDefaultChunks runs the suite's large values with the
// chunks the server's payload limit gives.
func TestConformanceDefaultChunks(t *testing.T) {
	storetest.Run(t, func(t *testing.T) func(t *testing.T) tenant.Store {
		ns := startNATS(t)
		return func(t *testing.T) tenant.Store { return open(t, connect(t, ns), jskv.Options{}) }
	})
}
