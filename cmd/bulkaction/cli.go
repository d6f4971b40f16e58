package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/bulkaction/bulkaction/internal/config"
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
		newDevCmd(), newSubmitCmd(), newStatusCmd(), newWatchCmd(), newCancelCmd(), newStatsCmd(),
	}
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

// plural returns "1 job" or "n jobs".
func plural(n int64, word string) string {
	if n == 1 {
		return fmt.Sprintf("1 %s", word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
