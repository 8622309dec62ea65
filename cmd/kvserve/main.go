// Command kvserve is an LLM serving system built around the KV cache: one
// binary that loads GGUF models, runs them on the CPU and serves them.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRootCmd()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "kvserve:", err)
		stop()
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "kvserve",
		Short:         "kvserve serves LLMs on the CPU, built around keeping and sharing the KV cache",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newModelCmd(), newGenerateCmd(), newTokenizeCmd(), newBenchCmd())
	root.AddCommand(newServeCmd(), newSimCmd(), newWorkerCmd(), newGatewayCmd(), newClusterCmd())
	root.AddCommand(newTenantCmd(), newKeyCmd(), newCacheCmd(), newAuditCmd(), newReportCmd(), newSimulateCmd())
	return root
}
