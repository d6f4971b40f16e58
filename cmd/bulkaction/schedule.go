package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/bulkaction/bulkaction/internal/apiclient"
	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/internal/tenantset"
	"github.com/bulkaction/bulkaction/pkg/api"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/status"
)

// newScheduleCmd is `schedule GROUP --not-before T`: moves the start of a
// group that has not started.
func newScheduleCmd() *cobra.Command {
	var tenant, notBefore string
	cmd := &cobra.Command{
		Use:   "schedule GROUP --not-before TIME",
		Short: "Move the start (not-before time) of a group that has not started",
		Long: `Schedule moves the start of a group submitted with --not-before (or one
without, before any of its jobs was admitted): earlier or later; "now" or a
past time starts it at once. A group that has started keeps going (its
events carry a notice). TIME is RFC 3339 (2026-11-27T09:00:00+01:00), a
duration from now (90m), or now.`,
		Example: `  bulkaction schedule promo --not-before 2026-11-27T09:00:00+01:00
  bulkaction schedule promo --not-before 2h
  bulkaction schedule promo --not-before now`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if notBefore == "" {
				return fmt.Errorf("--not-before: required (RFC 3339, a duration from now, or now)")
			}
			if notBefore == "now" {
				notBefore = "0s"
			}
			v, err := cli.ParseNotBeforeFlag(notBefore, time.Now())
			if err != nil {
				return fmt.Errorf("--not-before: %w", err)
			}
			nb, _ := contracts.ParseNotBefore(v)
			ctx := cmd.Context()
			if api, err := apiForGroup(cmd, tenant, args[0]); err != nil || api != nil {
				if err != nil {
					return err
				}
				g, err := api.group(ctx, args[0])
				if err != nil {
					if apiclient.IsNotFound(err) {
						return cli.NoSuchGroup(contracts.Group(api.tenant, args[0]), "")
					}
					return err
				}
				if g.Ended() {
					return fmt.Errorf("group %s of tenant %s has already ended (%s): there is nothing to schedule. Nothing was done", g.GroupID, g.Tenant, g.State)
				}
				err = api.call(func(opts ...apiclient.CallOption) error {
					_, err := api.c.Schedule(ctx, args[0], nb, opts...)
					return err
				})
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "schedule of group %s (tenant %s) accepted: not before %s\n", args[0], api.tenant, status.ScheduleTime(nb))
				return nil
			}
			g, c, err := dialControl(cmd, tenant, args[0])
			if err != nil {
				return err
			}
			defer c.Close()
			if _, err := checkTarget(ctx, c, g, contracts.KindSchedule, false, ""); err != nil {
				return err
			}
			cl := client.New(c.JS, client.Options{Names: c.Names, Tenant: g.Tenant})
			if err := cl.Reschedule(ctx, g.ID, nb); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schedule of group %s (tenant %s) accepted: not before %s; \"bulkaction status --tenant %s %s\" shows it\n",
				g.ID, g.Tenant, status.ScheduleTime(nb), g.Tenant, g.ID)
			return nil
		},
	}
	cmd.Flags().StringVar(&notBefore, "not-before", "", "the new start: RFC 3339, a duration from now (90m), or now")
	addTenantFlag(cmd, &tenant)
	return cmd
}

// newTenantWindowsCmd is `tenant windows TENANT [--window W]... [--clear]`:
// a tenant's default sending windows, kept in the tenants bucket and Redis
// (package tenantset), directly or through the gateway (--api).
func newTenantWindowsCmd() *cobra.Command {
	var windows []string
	var clear bool
	cmd := &cobra.Command{
		Use:   "windows TENANT [--window \"DAYS FROM-TO ZONE\"]... [--clear]",
		Short: "Show or set a tenant's default sending windows",
		Long: `A tenant's default sending windows apply to each group it creates afterwards
without windows of its own: its jobs are admitted only while one is open.
With a tenant alone, windows prints them; with --window (repeatable), it
sets them; --clear removes them. Groups that exist keep the windows they
have. With --api (or $BULKACTION_API) it goes through the gateway (GET and
PUT /v1/windows) with the tenant's key or an admin key; otherwise it reads
Redis, and writes the JetStream bucket that keeps them, then Redis.`,
		Example: `  bulkaction tenant windows acme --window "mon-fri 08:00-20:00 Europe/Berlin" --window "sat 10:00-14:00 Europe/Berlin"
  bulkaction tenant windows acme --clear`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := contracts.ValidateTenant(args[0]); err != nil {
				return fmt.Errorf("tenant %q: %w", args[0], err)
			}
			var ws []contracts.Window
			for i, w := range windows {
				win, err := contracts.ParseWindow(fmt.Sprintf("--window[%d]", i), w)
				if err != nil {
					return err
				}
				ws = append(ws, win)
			}
			if err := contracts.ValidateWindows("--window", ws); err != nil {
				return err
			}
			if clear && len(ws) > 0 {
				return fmt.Errorf("--clear and --window: give one")
			}
			ctx := cmd.Context()
			if a, err := newAPI(cmd, args[0]); err != nil || a != nil {
				if err != nil {
					return err
				}
				a.explicit = true // the tenant is named
				var tw *api.TenantWindows
				err := a.call(func(opts ...apiclient.CallOption) (err error) {
					if clear || len(ws) > 0 {
						tw, err = a.c.SetTenantWindows(ctx, ws, opts...)
					} else {
						tw, err = a.c.TenantWindows(ctx, opts...)
					}
					return err
				})
				if err != nil {
					return apiError(err)
				}
				printTenantWindows(cmd, args[0], tw.Windows)
				return nil
			}
			set := clear || len(ws) > 0
			need := cli.NeedRedis
			if set {
				need |= cli.NeedNATS // the tenants bucket, written first
			}
			c, err := dialFromEnv(ctx, need)
			if err != nil {
				return err
			}
			defer c.Close()
			if set {
				ts, err := tenantset.Open(ctx, c.JS, c.Names, c.Queue)
				if err != nil {
					return err
				}
				if err := ts.SetWindows(ctx, args[0], ws); err != nil {
					return err
				}
			}
			ws, err = c.Queue.TenantWindows(ctx, args[0])
			if err != nil {
				return err
			}
			printTenantWindows(cmd, args[0], ws)
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&windows, "window", nil, "a sending window, \"DAYS FROM-TO ZONE\" (repeatable)")
	cmd.Flags().BoolVar(&clear, "clear", false, "remove the tenant's default windows")
	return cmd
}

// printTenantWindows prints a tenant's default sending windows, as read
// from Redis or the gateway.
func printTenantWindows(cmd *cobra.Command, tenant string, ws []contracts.Window) {
	out := cmd.OutOrStdout()
	if len(ws) == 0 {
		fmt.Fprintf(out, "tenant %s: no default sending windows (its groups without windows are always open)\n", tenant)
		return
	}
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = w.String()
	}
	fmt.Fprintf(out, "tenant %s: default sending windows %s\n", tenant, strings.Join(parts, "; "))
}
