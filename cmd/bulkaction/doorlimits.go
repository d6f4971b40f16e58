package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/conns"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// submitRoomFlag is the flag of `tenant limits` that sets a tenant's room
// on SUBMIT, beside the flags of the redisq.DoorLimits.
const submitRoomFlag = "submit-bytes"

// doorLimitFlags are the flags of `tenant limits`, one per gateway limit.
var doorLimitFlags = map[redisq.DoorLimit]string{
	redisq.DoorRequestRate:        "request-rate",
	redisq.DoorJobRate:            "job-rate",
	redisq.DoorByteRate:           "byte-rate",
	redisq.DoorConcurrentRequests: "concurrent-requests",
	redisq.DoorSSEStreams:         "sse-streams",
}

// newTenantLimitsCmd is `tenant limits`: a tenant's limits at the gateway
// (docs/operations.md §9), its own or the defaults.
func newTenantLimitsCmd() *cobra.Command {
	values := map[string]*string{}
	cmd := &cobra.Command{
		Use:   "limits TENANT [--request-rate N|default] [--job-rate N|default] [--byte-rate N|default] [--concurrent-requests N|default] [--sse-streams N|default] [--submit-bytes N|default]",
		Short: "Show a tenant's limits at the gateway, or set its own",
		Long: `The gateway limits each tenant's requests per second, jobs per second,
bytes of jobs requests per second, requests running at once, open event streams, and the bytes of its
submissions SUBMIT may hold before the fetchers apply them. The defaults are
the BULKACTION_GATEWAY_TENANT_* settings; a tenant's own limits, kept in
Redis, replace them on every gateway replica from the next request.

limits prints the tenant's limits in force; with a flag, it first sets the
tenant's own limit: a whole number (0 = unlimited, whatever the default) or
"default" to remove it.`,
		Example: `  bulkaction tenant limits acme --request-rate 500 --sse-streams 1000
  bulkaction tenant limits acme --submit-bytes 1073741824
  bulkaction tenant limits acme --request-rate default`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := refuseAPI(cmd, "tenant limits", false); err != nil {
				return err
			}
			tenant := args[0]
			if err := contracts.ValidateTenant(tenant); err != nil {
				return fmt.Errorf("tenant %q: %w", tenant, err)
			}
			set := map[string]int64{}
			for _, name := range append(doorFlagNames(), submitRoomFlag) {
				if !cmd.Flags().Changed(name) {
					continue
				}
				v := *values[name]
				if v == quotaDefaultWord {
					set[name] = redisq.QuotaDefault
					continue
				}
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil || n < 0 {
					return fmt.Errorf("--%s %q: must be a whole number >= 0 (0 = unlimited) or %q", name, v, quotaDefaultWord)
				}
				set[name] = n
			}
			cfg, err := config.Load()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			c, err := cli.Dial(ctx, cfg, cli.NeedRedis)
			if err != nil {
				return err
			}
			defer c.Close()
			for _, l := range redisq.DoorLimits {
				if n, ok := set[doorLimitFlags[l]]; ok {
					if err := c.Queue.SetTenantDoorLimit(ctx, tenant, l, n); err != nil {
						return err
					}
				}
			}
			if n, ok := set[submitRoomFlag]; ok {
				if err := c.Queue.SetTenantSubmitRoom(ctx, tenant, n); err != nil {
					return err
				}
			}
			own, err := c.Queue.TenantDoorLimits(ctx, tenant)
			if err != nil {
				return err
			}
			room, roomOwn, err := c.Queue.TenantSubmitRoom(ctx, tenant)
			if err != nil {
				return err
			}
			defaults := map[redisq.DoorLimit]int64{
				redisq.DoorRequestRate: int64(cfg.GatewayTenantRequestRate), redisq.DoorJobRate: int64(cfg.GatewayTenantJobRate),
				redisq.DoorByteRate:           int64(cfg.GatewayTenantByteRate),
				redisq.DoorConcurrentRequests: int64(cfg.GatewayTenantConcurrentReqs), redisq.DoorSSEStreams: int64(cfg.GatewayTenantSSEStreams),
			}
			parts := make([]string, 0, len(redisq.DoorLimits)+1)
			for _, l := range redisq.DoorLimits {
				n, ok := own[l]
				if !ok {
					n = defaults[l]
				}
				parts = append(parts, doorLimitFlags[l]+" "+limitText(n, ok))
			}
			if !roomOwn {
				room = conns.TenantSubmitBytes(cfg)
			}
			parts = append(parts, submitRoomFlag+" "+limitText(room, roomOwn))
			fmt.Fprintf(cmd.OutOrStdout(), "tenant %s: %s\n", tenant, strings.Join(parts, ", "))
			return nil
		},
	}
	for _, l := range redisq.DoorLimits {
		name := doorLimitFlags[l]
		values[name] = cmd.Flags().String(name, "", fmt.Sprintf("set the tenant's own %s: N (0 = unlimited) or %q (use the default)", l, quotaDefaultWord))
	}
	values[submitRoomFlag] = cmd.Flags().String(submitRoomFlag, "", fmt.Sprintf("set the tenant's own room on SUBMIT in bytes: N (0 = unlimited) or %q (use the default)", quotaDefaultWord))
	return cmd
}

func doorFlagNames() []string {
	out := make([]string, 0, len(redisq.DoorLimits))
	for _, l := range redisq.DoorLimits {
		out = append(out, doorLimitFlags[l])
	}
	return out
}
