// Command natsd runs the embedded NATS server of `kvserve cluster up`
// (cluster.StartServer: loopback, a random port, JetStream) as a process
// of its own, for the multi-process cluster test: the workers and gateways
// that test starts are separate processes, and so is their NATS server.
//
// It prints "nats: URL" on stdout once the server takes connections and
// runs until SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kvserve/kvserve/internal/cluster"
)

func main() {
	store := flag.String("store", "", "JetStream store directory (required)")
	flag.Parse()
	if err := run(*store); err != nil {
		fmt.Fprintln(os.Stderr, "natsd:", err)
		os.Exit(1)
	}
}

func run(store string) error {
	if store == "" {
		return fmt.Errorf("-store is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ns, err := cluster.StartServer(cluster.ServerConfig{StoreDir: store})
	if err != nil {
		return err
	}
	defer ns.Close()
	fmt.Printf("nats: %s\n", ns.URL())
	<-ctx.Done()
	return nil
}
