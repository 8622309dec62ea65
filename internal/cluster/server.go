package cluster

import (
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Server is a NATS server embedded in this process: what `kvserve cluster
// up` and the tests run instead of an external NATS cluster. It listens on
// a loopback port, so separate processes (workers, gateways) can join it.
type Server struct {
	ns *server.Server
}

// ServerConfig configures an embedded server. The zero value of each field
// means its default.
type ServerConfig struct {
	// Port is the client port (default: a random free port).
	Port int
	// StoreDir holds JetStream's files (required: the caller owns the
	// directory and its lifetime).
	StoreDir string
}

// StartServer starts an embedded NATS server with JetStream on loopback
// and waits until it takes connections.
func StartServer(cfg ServerConfig) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, fmt.Errorf("cluster: embedded NATS needs a JetStream store directory")
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	ns, err := server.NewServer(&server.Options{
		ServerName: "kvserve-embedded",
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   cfg.StoreDir,
		NoSigs:     true, // the process's signals are kvserve's
		NoLog:      true,
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: embedded NATS: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, fmt.Errorf("cluster: embedded NATS did not start within 10s")
	}
	return &Server{ns: ns}, nil
}

// URL is the address clients connect to (nats://127.0.0.1:PORT).
func (s *Server) URL() string { return s.ns.ClientURL() }

// Close shuts the server down and waits until it has.
func (s *Server) Close() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}
