package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/services/gateway"
)

// newGatewayKeyCmd is `bulkaction gateway key`, a subcommand of the
// gateway target's command (which still runs the target by itself).
func newGatewayKeyCmd() *cobra.Command {
	var tenant, name, appendTo string
	var admin bool
	cmd := &cobra.Command{
		Use:   "key --tenant T [--name N] | --admin [--name N]",
		Short: "Make a new API key and print it with the line to add to the gateway's keys file",
		Long: `Key makes a new random API key for a tenant (or, with --admin, a key that
reaches every tenant) and prints it, then the line to add to the gateway's
keys file ($BULKACTION_GATEWAY_KEYS_FILE, re-read when it changes). The
file holds only the key's SHA-256, so the key is shown this once: give it
to the producer, who sends it as "Authorization: Bearer <key>" (the CLI
and the examples read it from $BULKACTION_API_KEY). --name labels the key
in the file and in the gateway's logs. With --append FILE the line is
added to FILE (created with mode 0600 if missing) and only the key is
printed.

Revoke a key by deleting its line.`,
		Example: `  bulkaction gateway key --tenant acme --name billing-export
  bulkaction gateway key --admin --name ops --append /etc/bulkaction/gateway-keys`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case admin && tenant != "":
				return fmt.Errorf("--admin and --tenant: an admin key reaches every tenant; give one of them")
			case admin:
				tenant = gateway.AdminTenant
			case tenant == "":
				return fmt.Errorf("--tenant: required (or --admin for a key that reaches every tenant)")
			default:
				if err := contracts.ValidateTenant(tenant); err != nil {
					return fmt.Errorf("--tenant: %w", err)
				}
			}
			if strings.ContainsAny(name, " \t\r\n#") {
				return fmt.Errorf("--name %q: one word, without white space or #", name)
			}
			key, err := gateway.NewKey()
			if err != nil {
				return err
			}
			who := "tenant " + tenant
			if admin {
				who = "every tenant (admin)"
			}
			out := cmd.OutOrStdout()
			line := gateway.KeyLine(key, tenant, name)
			if appendTo != "" {
				if err := appendKeyLine(appendTo, line); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "added the key of %s to %s; the key, shown only now:\n", who, appendTo)
				fmt.Fprintln(out, key)
				return nil
			}
			fmt.Fprintf(out, "# API key for %s; shown only now (the keys file holds its hash):\n", who)
			fmt.Fprintln(out, key)
			fmt.Fprintln(out, "# line to add to the gateway's keys file ($BULKACTION_GATEWAY_KEYS_FILE):")
			fmt.Fprintln(out, line)
			return nil
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the key's tenant (^[A-Za-z0-9_-]{1,64}$)")
	cmd.Flags().StringVar(&name, "name", "", "a label of the key, in the keys file and the gateway's logs")
	cmd.Flags().BoolVar(&admin, "admin", false, "a key that reaches every tenant's groups")
	cmd.Flags().StringVar(&appendTo, "append", "", "add the line to this keys file instead of printing it")
	return cmd
}

// appendKeyLine adds a line to a keys file, checking first that the file
// parses (so a key is not added to a file the gateway would refuse).
func appendKeyLine(path, line string) error {
	if b, err := os.ReadFile(path); err == nil {
		if _, err := gateway.ParseKeys(bytes.NewReader(b)); err != nil {
			return fmt.Errorf("%s: %w; nothing was added", path, err)
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			line = "\n" + line
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(line + "\n"); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
