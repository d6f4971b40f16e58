package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/bulkaction/bulkaction/internal/apiclient"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// groupsPage is the most groups asked for per request.
const groupsPage = 200

func newGroupsCmd() *cobra.Command {
	var (
		tenant, cursor string
		states         []string
		limit          int
		all, asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "groups [--state S] [--limit N] [--cursor C | --all]",
		Short: "List groups, newest first, through the HTTP API (--api)",
		Long: `Groups lists groups newest first, through the gateway's HTTP API: --api (or
$BULKACTION_API) names it and $BULKACTION_API_KEY holds the key. A tenant's
key lists its own groups; an admin key lists every tenant's, or one's with
--tenant.

--state keeps groups in the given states (repeat it, or separate them with
commas: CREATED, RUNNING, PAUSED, AGGREGATING, COMPLETED, CANCELLED).
--limit is the most groups printed (default 50); when more are left, the
command to list the next ones (--cursor) is printed on standard error.
--all lists every group.

With --json it prints {"groups": [...], "next": cursor or null}, each
group as GET /v1/groups/{groupId} shows it without its "status".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := newAPI(cmd, tenant)
			if err != nil {
				return err
			}
			if a == nil {
				return fmt.Errorf("groups lists groups through the HTTP API: name the gateway with --api or $%s, and set the key in $%s", apiEnv, apiKeyEnv)
			}
			o := apiclient.ListOptions{Cursor: cursor}
			for _, s := range states {
				for _, one := range strings.Split(s, ",") {
					st := contracts.GroupState(strings.ToUpper(strings.TrimSpace(one)))
					if !st.Valid() {
						return fmt.Errorf("--state %q: want CREATED, RUNNING, PAUSED, AGGREGATING, COMPLETED or CANCELLED", one)
					}
					o.States = append(o.States, st)
				}
			}
			if limit < 1 && !all {
				return fmt.Errorf("--limit %d: must be at least 1", limit)
			}
			var opts []apiclient.CallOption
			if tenant != "" {
				opts = append(opts, apiclient.WithTenant(tenant))
			}
			var groups []*apiclient.Group
			var next *string
			for {
				o.Limit = groupsPage
				if !all {
					o.Limit = min(limit-len(groups), groupsPage)
				}
				page, err := a.c.ListGroups(cmd.Context(), o, opts...)
				if err != nil {
					return err
				}
				groups = append(groups, page.Groups...)
				next = page.Next
				if next == nil || (!all && len(groups) >= limit) {
					break
				}
				o.Cursor = *next
			}
			if asJSON {
				return printJSON(cmd, apiclient.GroupList{Groups: groups, Next: next})
			}
			if err := writeGroups(cmd, groups); err != nil {
				return err
			}
			if next != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "more groups: bulkaction groups%s --cursor %s\n", stateArgs(o.States), *next)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&states, "state", nil, "keep groups in these states (comma-separated or repeated)")
	f.IntVar(&limit, "limit", 50, "most groups printed")
	f.StringVar(&cursor, "cursor", "", "continue a list where an earlier one stopped")
	f.BoolVar(&all, "all", false, "list every group (follow every page)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	f.StringVar(&tenant, "tenant", os.Getenv(tenantEnv), "with an admin key, list this tenant's groups only (default $"+tenantEnv+", else every tenant)")
	return cmd
}

// stateArgs repeats the --state filter of a listing.
func stateArgs(states []contracts.GroupState) string {
	if len(states) == 0 {
		return ""
	}
	s := make([]string, len(states))
	for i, st := range states {
		s[i] = string(st)
	}
	return " --state " + strings.Join(s, ",")
}

// writeGroups prints groups as a table.
func writeGroups(cmd *cobra.Command, groups []*apiclient.Group) error {
	out := cmd.OutOrStdout()
	if len(groups) == 0 {
		fmt.Fprintln(out, "no groups")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tGROUP\tSTATE\tPRIORITY\tDONE\tSUCCEEDED\tFAILED\tCANCELLED\tCREATED")
	for _, g := range groups {
		target := "?"
		if g.Total != nil {
			target = fmt.Sprint(*g.Total)
		}
		created := "—"
		if g.CreatedAt != nil {
			created = g.CreatedAt.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%s\t%d\t%d\t%d\t%s\n", g.Tenant, g.GroupID, g.State, g.Priority.OrDefault(),
			g.Done+g.Cancelled, target, g.Succeeded, g.Failed, g.Cancelled, created)
	}
	return tw.Flush()
}
