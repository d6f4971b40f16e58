package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// Exit codes of the verbs that report a group's end (watch).
const (
	// exitCancelled: the group ended CANCELLED.
	exitCancelled exitCode = 3
	// exitInterrupted: SIGINT/SIGTERM ended a demo early.
	exitInterrupted exitCode = 130
)

// cliCommands are `dev` and the verbs that talk to a running system.
func cliCommands() []*cobra.Command {
	return []*cobra.Command{
		newDevCmd(), newSubmitCmd(), newStatusCmd(), newWatchCmd(), newCancelCmd(),
		newControlCmd(contracts.KindPause), newControlCmd(contracts.KindResume), newScheduleCmd(), newTenantCmd(), newStatsCmd(),
		newGroupsCmd(), newCallbackCmd(),
	}
}

// tenantEnv is the environment variable that gives the verbs' default
// tenant; the --tenant flag wins over it.
const tenantEnv = config.Prefix + "_TENANT"

// addTenantFlag adds --tenant to a verb that names groups. Its default is
// $BULKACTION_TENANT, else "default" (the tenant of [client.DefaultTenant]).
func addTenantFlag(cmd *cobra.Command, tenant *string) {
	def := os.Getenv(tenantEnv)
	if def == "" {
		def = client.DefaultTenant
	}
	cmd.Flags().StringVar(tenant, "tenant", def, "tenant of the group (^[A-Za-z0-9_-]{1,64}$); default $"+tenantEnv+", else \"default\"")
}

// groupArg returns the group of tenant named by a verb's argument.
func groupArg(tenant, id string) (contracts.GroupRef, error) {
	g := contracts.Group(tenant, id)
	if err := contracts.ValidateTenant(tenant); err != nil {
		return g, fmt.Errorf("--tenant: %w", err)
	}
	if err := contracts.ValidateID("groupId", id); err != nil {
		return g, fmt.Errorf("group: %w", err)
	}
	return g, nil
}

// isTerminal reports whether w is a terminal (progress bars are redrawn
// only there; otherwise plain lines are printed).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// envSet reports whether BULKACTION_<name> is set to a non-empty value.
func envSet(name string) bool {
	return os.Getenv(config.Prefix+"_"+name) != ""
}

// plural returns "1 job" or "n jobs" ("1 retry" or "n retries").
func plural(n int64, word string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", word)
	}
	if w, ok := strings.CutSuffix(word, "y"); ok {
		return fmt.Sprintf("%d %sies", n, w)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
