package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/internal/tenantset"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/status"
	"github.com/bulkaction/bulkaction/pkg/webhook"
)

// newCallbackCmd is `callback`: completion callbacks, `callback retry` (a
// failed delivery, by hand) and `callback secret` (a tenant's signing
// secret). Both read and write Redis directly, as an operator does, or with
// --api the gateway's POST …/callback/retry and /v1/callback-secret, as a
// tenant does with its key.
func newCallbackCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "callback",
		Short: "Retry a group's failed completion callback, or show and rotate a tenant's callback secret",
		Long: `A group submitted with a callback URL (submit --callback-url, the API's
?callbackUrl=, group.callbackUrl in a NATS jobs message) has its final event
POSTed there when it ends, signed in the Standard Webhooks format with its
tenant's secret, and retried for BULKACTION_CALLBACK_RETRY_FOR. bulkaction
status shows the delivery (pending, delivered, failed with the last error).`,
	}
	cmd.AddCommand(newCallbackRetryCmd(), newCallbackSecretCmd())
	return cmd
}

func newCallbackRetryCmd() *cobra.Command {
	var tenant string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "retry GROUP",
		Short: "Make a group's failed callback delivery pending again, with a new retry budget",
		Long: `Retry makes a failed delivery of a group's completion callback pending
again, due at once, with a new retry budget (BULKACTION_CALLBACK_RETRY_FOR);
the webhook id and the body stay the same, so receivers can drop a duplicate.
A delivery that is pending or delivered is left alone, and so said.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if a, err := newAPI(cmd, tenant); err != nil {
				return err
			} else if a != nil {
				return a.retryCallback(cmd, args[0], asJSON)
			}
			g, c, err := dialGroup(cmd.Context(), tenant, args[0], cli.NeedRedis)
			if err != nil {
				return err
			}
			defer c.Close()
			before, err := c.Queue.RetryCallback(cmd.Context(), g)
			if errors.Is(err, redisq.ErrNoCallback) {
				if cb, cerr := status.CallbackOf(cmd.Context(), c.Queue, g); cerr == nil && cb != nil {
					return fmt.Errorf("group %s has not ended: its callback is not due yet", g)
				}
				return fmt.Errorf("group %s has no callback delivery (no callback URL, no such group, or it expired)", g)
			}
			if err != nil {
				return err
			}
			cb, err := status.CallbackOf(cmd.Context(), c.Queue, g)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(cb)
			}
			if before != redisq.CallbackFailed {
				return fmt.Errorf("the callback of group %s is %s: only a failed one is retried", g, before)
			}
			fmt.Fprintf(out, "callback of group %s to %s is pending again (attempts so far %d, webhook id %s)\n", g, cb.URL, cb.Attempts, cb.WebhookID)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the callback's state as JSON")
	addTenantFlag(cmd, &tenant)
	return cmd
}

func newCallbackSecretCmd() *cobra.Command {
	var tenant string
	var rotate bool
	cmd := &cobra.Command{
		Use:   "secret --tenant T [--rotate]",
		Short: "Show whether a tenant has a callback signing secret, or make a new one (--rotate)",
		Long: `Secret says whether the tenant has a callback signing secret, since when, and
until when a rotated one still signs; never the secret. With --rotate it
makes a new secret (whsec_ and base64) and prints it once, on standard
output: give it to the receiver; it is not shown again. The secret it
replaces keeps signing beside the new one for BULKACTION_CALLBACK_SECRET_GRACE
(24h by default), so receivers can switch without losing a delivery.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := contracts.ValidateTenant(tenant); err != nil {
				return fmt.Errorf("--tenant: %w", err)
			}
			if a, err := newAPI(cmd, tenant); err != nil {
				return err
			} else if a != nil {
				return a.callbackSecret(cmd, rotate)
			}
			need := cli.NeedRedis
			if rotate {
				need |= cli.NeedNATS // the tenants bucket, written first
			}
			c, err := dialFromEnv(cmd.Context(), need)
			if err != nil {
				return err
			}
			defer c.Close()
			out := cmd.OutOrStdout()
			ctx := cmd.Context()
			if rotate {
				ts, err := tenantset.Open(ctx, c.JS, c.Names, c.Queue)
				if err != nil {
					return err
				}
				secret := webhook.NewSecret()
				s, err := ts.RotateCallbackSecret(ctx, tenant, secret, c.Config.CallbackSecretGrace)
				if err != nil {
					return err
				}
				fmt.Fprintln(out, secret)
				if s.Previous != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "new callback secret of tenant %s (shown only now); the previous one also signs until %s\n",
						tenant, s.PreviousUntil.UTC().Format(time.RFC3339))
				} else {
					fmt.Fprintf(cmd.ErrOrStderr(), "new callback secret of tenant %s (shown only now)\n", tenant)
				}
				return nil
			}
			s, err := c.Queue.CallbackSecretsOf(ctx, tenant)
			if err != nil {
				return err
			}
			if s.Current == "" {
				fmt.Fprintf(out, "tenant %s has no callback secret: its callbacks cannot be signed (make one: bulkaction callback secret --tenant %s --rotate)\n", tenant, tenant)
				return nil
			}
			fmt.Fprintf(out, "tenant %s has a callback secret since %s", tenant, s.CreatedAt.UTC().Format(time.RFC3339))
			now, err := c.Queue.Now(ctx)
			if err == nil && s.Previous != "" && now.Before(s.PreviousUntil) {
				fmt.Fprintf(out, "; the previous one also signs until %s", s.PreviousUntil.UTC().Format(time.RFC3339))
			}
			fmt.Fprintln(out)
			return nil
		},
	}
	cmd.Flags().BoolVar(&rotate, "rotate", false, "make a new secret and print it (once)")
	addTenantFlag(cmd, &tenant)
	return cmd
}
