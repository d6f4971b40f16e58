package main

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// quotaDefaultWord, as a flag value of `tenant quota`, removes the tenant's
// own limit.
const quotaDefaultWord = "default"

// newTenantQuotaCmd is `tenant quota`: the tenants' quotas
// (docs/ARCHITECTURE.md §5).
func newTenantQuotaCmd() *cobra.Command {
	flags := map[redisq.Quota]string{
		redisq.QuotaQueuedJobs:   "max-queued-jobs",
		redisq.QuotaActiveGroups: "max-active-groups",
	}
	values := map[redisq.Quota]*string{}
	cmd := &cobra.Command{
		Use:   "quota [TENANT [--max-queued-jobs N|default] [--max-active-groups N|default]]",
		Short: "Show the tenants' quotas (most queued jobs, most active groups), or set a tenant's own",
		Long: `A tenant may have at most a number of queued jobs (jobs accepted and not
finished, in its groups that have not ended) and of active groups (groups that
exist and have not ended). A jobs message that would go beyond is
dead-lettered whole as over_quota, and submit refuses before publishing.
The defaults are BULKACTION_TENANT_MAX_QUEUED_JOBS and
BULKACTION_TENANT_MAX_ACTIVE_GROUPS (0 = unlimited); a tenant's own limits,
kept in Redis, replace them.

With no argument, quota prints the defaults (as this environment sets them)
and lists the tenants with limits of their own; with a tenant, it prints that
tenant's limits in force and its counts; with --max-queued-jobs or
--max-active-groups, it first sets the tenant's own limit: a whole number
(0 = unlimited, whatever the default) or "default" to remove it. A limit
applies to the messages that follow; nothing already accepted is refused.`,
		Example: `  bulkaction tenant quota acme --max-queued-jobs 100000 --max-active-groups 50
  bulkaction tenant quota acme --max-active-groups default
  bulkaction tenant quota`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := refuseAPI(cmd, "tenant quota", false); err != nil {
				return err
			}
			set := map[redisq.Quota]int64{}
			for _, qt := range redisq.Quotas {
				if !cmd.Flags().Changed(flags[qt]) {
					continue
				}
				if len(args) == 0 {
					return fmt.Errorf("--%s: name the tenant whose limit to set", flags[qt])
				}
				v := *values[qt]
				if v == quotaDefaultWord {
					set[qt] = redisq.QuotaDefault
					continue
				}
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n < 0 {
					return fmt.Errorf("--%s %q: must be a whole number >= 0 (0 = unlimited) or %q", flags[qt], v, quotaDefaultWord)
				}
				set[qt] = n
			}
			if len(args) == 1 {
				if err := contracts.ValidateTenant(args[0]); err != nil {
					return err
				}
			}
			ctx := cmd.Context()
			c, err := dialFromEnv(ctx, cli.NeedRedis)
			if err != nil {
				return err
			}
			defer c.Close()
			out := cmd.OutOrStdout()
			if len(args) == 1 {
				for _, qt := range redisq.Quotas {
					if n, ok := set[qt]; ok {
						if err := c.Queue.SetTenantQuota(ctx, args[0], qt, n); err != nil {
							return err
						}
					}
				}
				tq, err := c.Queue.TenantQuota(ctx, args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "tenant %s: max queued jobs %s, %d queued now; max active groups %s, %d active now\n",
					tq.Tenant, limitText(tq.MaxQueuedJobs, tq.OwnQueuedJobs), tq.QueuedJobs,
					limitText(tq.MaxActiveGroups, tq.OwnActiveGroups), tq.ActiveGroups)
				return nil
			}
			list, err := c.Queue.TenantQuotas(ctx)
			if err != nil {
				return err
			}
			return writeQuotas(out, c.Queue.Config(), list)
		},
	}
	for _, qt := range redisq.Quotas {
		values[qt] = cmd.Flags().String(flags[qt], "", fmt.Sprintf("set the tenant's own %s: N (0 = unlimited) or %q (use the default)", qt, quotaDefaultWord))
	}
	return cmd
}

// limitText is a limit in force: "1000", "unlimited", "default (1000)" or
// "default (unlimited)".
func limitText(limit int64, own bool) string {
	s := "unlimited"
	if limit > 0 {
		s = strconv.FormatInt(limit, 10)
	}
	if own {
		return s
	}
	return quotaDefaultWord + " (" + s + ")"
}

// writeQuotas prints the defaults and the tenants with limits of their own.
func writeQuotas(w io.Writer, cfg redisq.Config, list []redisq.TenantQuota) error {
	fmt.Fprintf(w, "defaults (%s_TENANT_MAX_QUEUED_JOBS, %s_TENANT_MAX_ACTIVE_GROUPS here): max queued jobs %s, max active groups %s\n",
		config.Prefix, config.Prefix, limitText(cfg.TenantMaxQueuedJobs, true), limitText(cfg.TenantMaxActiveGroups, true))
	if len(list) == 0 {
		fmt.Fprintln(w, "no tenant has a quota of its own")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tMAX QUEUED JOBS\tMAX ACTIVE GROUPS\tQUEUED JOBS\tACTIVE GROUPS")
	for _, tq := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", tq.Tenant, limitText(tq.MaxQueuedJobs, tq.OwnQueuedJobs),
			limitText(tq.MaxActiveGroups, tq.OwnActiveGroups), tq.QueuedJobs, tq.ActiveGroups)
	}
	return tw.Flush()
}
