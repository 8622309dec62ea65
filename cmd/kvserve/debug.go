package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"time"
)

// The debug listener of `kvserve serve --pprof-addr`: Go's profiling
// endpoints on their own address, never on the API's, so that a profile
// can be taken from a loaded production server without exposing it to API
// clients. It is off by default.
//
// Endpoints (see `go tool pprof` and `go tool trace`):
//
//	/debug/pprof/                    index
//	/debug/pprof/profile?seconds=N   CPU profile
//	/debug/pprof/trace?seconds=N     execution trace (scheduling latency, syscalls, GC)
//	/debug/pprof/block, /mutex       where goroutines wait (sampled, see below)
//	/debug/pprof/heap, /allocs, /goroutine, /threadcreate
//
// While the listener is on, blocking events are sampled about once per
// debugBlockRate of blocked time and one mutex contention event in
// debugMutexFraction is recorded, so /block and /mutex have data; both
// cost little at these rates.
const (
	debugBlockRate     = 100 * time.Microsecond
	debugMutexFraction = 100
)

// startDebugServer serves the profiling endpoints on addr until the
// returned server is closed.
func startDebugServer(addr string, log *slog.Logger, stderr io.Writer) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("pprof listener: %w", err)
	}
	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
		log.Warn("serve: the pprof listener is reachable from other machines; profiles reveal prompts in memory", "addr", ln.Addr().String())
	}
	runtime.SetBlockProfileRate(int(debugBlockRate))
	runtime.SetMutexProfileFraction(debugMutexFraction)
	hs := &http.Server{Handler: debugMux(), ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() { _ = hs.Serve(ln) }()
	fmt.Fprintf(stderr, "kvserve: profiling endpoints on http://%s/debug/pprof/\n", ln.Addr())
	return hs, nil
}

// debugMux routes the profiling endpoints (registered here rather than on
// http.DefaultServeMux, which nothing else should serve).
func debugMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
