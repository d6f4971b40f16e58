// Command bulkaction runs bulkaction's services and is its command-line
// tool: one binary, many targets (fetcher, dispatcher, worker, aggregator),
// `dev` for everything in one process, and verbs to submit and watch bulk
// actions. Configuration comes from BULKACTION_* environment variables.
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
	root := newRoot()
	if err := execute(ctx, root); err != nil {
		if ec, ok := err.(exitCode); ok {
			os.Exit(int(ec))
		}
		fmt.Fprintln(os.Stderr, "bulkaction:", err)
		os.Exit(1)
	}
}

// exitCode ends the process with a code and no message.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit %d", int(e)) }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "bulkaction",
		Short:         "Fair, rate-limited bulk actions for multi-tenant systems",
		SilenceUsage:  true,
		SilenceErrors: true,
		Long: `bulkaction runs tenants' bulk actions fairly across tenants, at a bounded rate,
and counts every job exactly once. Settings come from BULKACTION_* environment
variables (see "bulkaction config").`,
	}
	addAPIFlag(root)
	root.AddCommand(targetCommands()...)
	root.AddCommand(newRunCmd(), newConfigCmd())
	root.AddCommand(cliCommands()...)
	return root
}
