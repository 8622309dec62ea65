package main

import (
	"bytes"
	"context"

	"github.com/spf13/cobra"
)

// runCommand runs cmd with args and returns its stdout and stderr.
func runCommand(cmd *cobra.Command, args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs(args)
	cmd.SilenceUsage = true
	cmd.SilenceErrors = true
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}
