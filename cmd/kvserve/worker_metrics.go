package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// workerMetrics is a worker's /metrics listener: a worker takes its
// requests over NATS and has no HTTP API, so its engine's metrics need a
// port of their own for Prometheus to scrape.
type workerMetrics struct {
	reg *prometheus.Registry
	srv *http.Server
	ln  net.Listener
}

// startWorkerMetrics serves a new registry's metrics on addr ("": none,
// and a nil registry).
func startWorkerMetrics(addr string, stderr io.Writer) (*workerMetrics, error) {
	if addr == "" {
		return &workerMetrics{}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	m := &workerMetrics{reg: reg, ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(stderr, "kvserve: worker metrics listener: %v\n", err)
		}
	}()
	fmt.Fprintf(stderr, "kvserve: worker metrics on http://%s/metrics\n", ln.Addr())
	return m, nil
}

// registerer is where the engine registers its metrics (nil: nowhere).
func (m *workerMetrics) registerer() prometheus.Registerer {
	if m.reg == nil {
		return nil
	}
	return m.reg
}

// Close stops the listener.
func (m *workerMetrics) Close() {
	if m.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = m.srv.Shutdown(ctx)
	}
}
