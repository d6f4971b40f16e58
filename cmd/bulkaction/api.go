package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/bulkaction/bulkaction/internal/apiclient"
	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/status"
)

// The verbs submit, status, watch, cancel, pause, resume, groups and callback talk to
// the gateway's HTTP API instead of NATS and Redis when --api (or
// $BULKACTION_API) names it. The API key comes from $BULKACTION_API_KEY
// only: a flag would leave it in the shell's history.
const (
	// apiFlag is the persistent flag naming the gateway.
	apiFlag = "api"
	// apiEnv is the default of --api.
	apiEnv = config.Prefix + "_API"
	// apiKeyEnv holds the API key.
	apiKeyEnv = config.Prefix + "_API_KEY"
)

// addAPIFlag adds the persistent --api flag to the root command.
func addAPIFlag(root *cobra.Command) {
	root.PersistentFlags().String(apiFlag, os.Getenv(apiEnv),
		"the gateway's address, e.g. http://127.0.0.1:8090: submit, status, watch, cancel, pause, resume, groups and callback then use the HTTP API "+
			"with the key in $"+apiKeyEnv+"; stats and tenant, which read Redis and NATS directly, refuse it (default $"+apiEnv+")")
}

// apiURL is the --api of cmd ("" = talk to NATS and Redis).
func apiURL(cmd *cobra.Command) string {
	f := cmd.Flag(apiFlag)
	if f == nil {
		return ""
	}
	return f.Value.String()
}

// apiVerb is one verb's connection to the API.
type apiVerb struct {
	c *apiclient.Client
	// tenant is the verb's --tenant (or its default).
	tenant string
	// explicit: the tenant was named (--tenant or $BULKACTION_TENANT), so
	// every call names it; otherwise calls name none (a tenant's key acts
	// on its tenant) unless the key is an admin key, which must name one:
	// then the default tenant is named, as without --api.
	explicit bool
}

// newAPI returns the verb's API connection, nil when --api is not set.
func newAPI(cmd *cobra.Command, tenant string) (*apiVerb, error) {
	base := apiURL(cmd)
	if base == "" {
		return nil, nil
	}
	key := os.Getenv(apiKeyEnv)
	if key == "" {
		return nil, fmt.Errorf("--api %s: set the API key in $%s (\"bulkaction gateway key\" makes one)", base, apiKeyEnv)
	}
	c, err := apiclient.New(apiclient.Config{BaseURL: base, Key: key, UserAgent: "bulkaction-cli"})
	if err != nil {
		return nil, fmt.Errorf("--api: %w", err)
	}
	explicit := os.Getenv(tenantEnv) != ""
	if f := cmd.Flags().Lookup("tenant"); f != nil && f.Changed {
		explicit = true
	}
	return &apiVerb{c: c, tenant: tenant, explicit: explicit}, nil
}

// call runs fn with the tenant option the verb needs (see explicit).
func (a *apiVerb) call(fn func(opts ...apiclient.CallOption) error) error {
	if a.explicit {
		return fn(apiclient.WithTenant(a.tenant))
	}
	err := fn()
	var p *apiclient.Problem
	if errors.As(err, &p) && p.Status == 400 && len(p.Errors) > 0 && p.Errors[0].Field == "tenant" {
		a.explicit = true
		return fn(apiclient.WithTenant(a.tenant))
	}
	return err
}

// group reads a group's full view.
func (a *apiVerb) group(ctx context.Context, id string) (*apiclient.Group, error) {
	var g *apiclient.Group
	err := a.call(func(opts ...apiclient.CallOption) (err error) {
		g, err = a.c.Group(ctx, id, opts...)
		return err
	})
	return g, apiError(err)
}

// apiError explains a 404 the way the verbs do without --api.
func apiError(err error) error {
	if apiclient.IsNotFound(err) {
		return fmt.Errorf("%w (never submitted, not ingested yet, ended longer ago than %s_GROUP_TTL, or of another tenant than the key's)",
			err, config.Prefix)
	}
	return err
}

// withEvent is s with the counts and state of a later event.
func withEvent(s *status.Group, e contracts.GroupEvent) *status.Group {
	c := *s
	c.State, c.Jobs = e.State, e.Jobs
	c.Succeeded, c.Failed, c.Cancelled, c.Done = e.Succeeded, e.Failed, e.Cancelled, e.Succeeded+e.Failed
	if e.Total > 0 {
		c.Total = e.Total
	}
	return &c
}

// printJSON prints v indented.
func printJSON(cmd *cobra.Command, v any) error {
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// status: GET the group; the same table as without --api, or the API's
// JSON view with --json.
func (a *apiVerb) status(cmd *cobra.Command, id string, asJSON bool) error {
	g, err := a.group(cmd.Context(), id)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(cmd, g)
	}
	return writeStatus(cmd.OutOrStdout(), status.FromView(g))
}

// submit sends the jobs read from the file as an NDJSON stream that seals
// the group at their number.
func (a *apiVerb) submit(cmd *cobra.Command, id, jobType string, settings contracts.GroupSettings, jobs []cli.FileJob) error {
	ctx := cmd.Context()
	if err := a.checkGroup(cmd, id, settings, int64(len(jobs))); err != nil {
		return err
	}
	body := make([]apiclient.Job, len(jobs))
	for i, j := range jobs {
		body[i] = apiclient.Job{ID: j.ID, Type: j.Type, Payload: j.Payload}
	}
	total := int64(len(jobs))
	o := apiclient.SubmitOptions{Priority: settings.Priority, Total: &total, CallbackURL: settings.CallbackURL,
		NotBefore: settings.NotBefore, Windows: settings.Windows}
	if settings.BasePriority != 0 {
		o.BasePriority = &settings.BasePriority
	}
	if settings.MaxInFlight != 0 {
		o.MaxInFlight = &settings.MaxInFlight
	}
	var res *apiclient.SubmitResult
	err := a.call(func(opts ...apiclient.CallOption) (err error) {
		res, err = a.c.Submit(ctx, id, body, o, opts...)
		return err
	})
	if err != nil {
		return fmt.Errorf("nothing was submitted: %w", err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "submitted %s to group %s of tenant %s (type %s, priority %s) and sealed it at %d; follow it with: bulkaction watch --tenant %s %s\n",
		plural(res.Accepted, "job"), res.GroupID, res.Tenant, jobType, settings.Priority.OrDefault(), total, res.Tenant, res.GroupID)
	return nil
}

// checkGroup refuses, as submit does without --api, a submission to a
// group that ended, is sealed at another total, or has other settings
// than the flags ask for. (The gateway itself refuses a submission over
// the tenant's quotas, 429.)
func (a *apiVerb) checkGroup(cmd *cobra.Command, id string, want contracts.GroupSettings, jobs int64) error {
	g, err := a.group(cmd.Context(), id)
	if apiclient.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	changed := func(name string) bool { return cmd.Flags().Changed(name) }
	ref := contracts.Group(g.Tenant, g.GroupID)
	switch {
	case g.Ended():
		return fmt.Errorf("%w: group %s already ended (%s); jobs sent to it are rejected. Nothing was submitted: use a new group id",
			cli.ErrGroupRefuses, ref, g.State)
	case g.Total != nil && *g.Total != jobs:
		return fmt.Errorf("%w: group %s is already sealed at %d jobs and this submission has %d; the seal would be rejected. Nothing was submitted",
			cli.ErrGroupRefuses, ref, *g.Total, jobs)
	case changed("priority") && want.Priority.OrDefault() != g.Priority.OrDefault():
		return fmt.Errorf("%w: --priority %s: group %s exists with priority %s, and a group keeps the settings it was created with. Nothing was submitted",
			cli.ErrGroupRefuses, want.Priority.OrDefault(), ref, g.Priority.OrDefault())
	case changed("base-priority") && want.BasePriority != g.BasePriority:
		return fmt.Errorf("%w: --base-priority %d: group %s exists with base priority %d, and a group keeps the settings it was created with. Nothing was submitted",
			cli.ErrGroupRefuses, want.BasePriority, ref, g.BasePriority)
	case changed("max-in-flight") && want.MaxInFlight != g.MaxInFlight:
		return fmt.Errorf("%w: --max-in-flight %d: group %s exists with max in flight %d, and a group keeps the settings it was created with. Nothing was submitted",
			cli.ErrGroupRefuses, want.MaxInFlight, ref, g.MaxInFlight)
	}
	return nil
}

// follow follows the group's events to the final one, calling update with
// each reading: the group's last full view (read again at a state change
// and at most every refresh) with the event's counts. A group that does
// not exist yet is waited for: missing is called at each attempt that
// finds none (nil: wait on), and its error ends the wait. It returns the
// group's view after its final event.
func (a *apiVerb) follow(ctx context.Context, id string, refresh time.Duration, update func(*status.Group), missing func() error) (*status.Group, error) {
	var view *status.Group
	var read time.Time
	for {
		err := a.call(func(opts ...apiclient.CallOption) error {
			_, err := a.c.Follow(ctx, id, func(e apiclient.Event) error {
				if update == nil {
					return nil
				}
				if view == nil || e.Name == "state" || time.Since(read) >= refresh {
					g, err := a.c.Group(ctx, id, opts...)
					if err != nil {
						return err
					}
					view, read = status.FromView(g), time.Now()
				}
				update(withEvent(view, e.Group))
				return nil
			}, opts...)
			return err
		})
		if !apiclient.IsNotFound(err) {
			if err != nil {
				return view, err
			}
			break
		}
		// The gateway waits a few seconds for a new group; wait on.
		if missing != nil {
			if err := missing(); err != nil {
				return view, err
			}
		}
		select {
		case <-ctx.Done():
			return view, ctx.Err()
		case <-time.After(watchPoll):
		}
	}
	g, err := a.group(ctx, id)
	if err != nil {
		return view, err
	}
	return status.FromView(g), nil
}

// watch follows the group over Server-Sent Events and prints what watch
// prints without --api.
func (a *apiVerb) watch(cmd *cobra.Command, id string, every, appear time.Duration) error {
	out := cmd.OutOrStdout()
	var v watchView = &plainWatch{out: out, every: every}
	if isTerminal(out) {
		v = newBarWatch(out)
	}
	s, err := a.follow(cmd.Context(), id, every, v.update, appearWait(out, contracts.Group(a.tenant, id), appear, nil))
	v.close(s)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, endLine(s))
	return endCode(s)
}

// cancel cancels the group, as cancel does without --api.
func (a *apiVerb) cancel(cmd *cobra.Command, id string, wait, create bool) error {
	ctx := cmd.Context()
	out := cmd.OutOrStdout()
	g, err := a.group(ctx, id)
	switch {
	case apiclient.IsNotFound(err) && !create:
		return cli.NoSuchGroup(contracts.Group(a.tenant, id), "--create")
	case apiclient.IsNotFound(err):
	case err != nil:
		return err
	case g.Ended():
		fmt.Fprintf(out, "group %s has already ended: %s\n", id, endLine(status.FromView(g)))
		return nil
	}
	if err := a.call(func(opts ...apiclient.CallOption) error {
		if create {
			opts = append(opts, apiclient.WithCreate())
		}
		_, err := a.c.Cancel(ctx, id, opts...)
		return err
	}); err != nil {
		return a.controlError(err, id, "--create")
	}
	fmt.Fprintf(out, "cancel of group %s accepted\n", id)
	if !wait {
		return nil
	}
	s, err := a.follow(ctx, id, time.Hour, runningNote(out, id), nil)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, endLine(s))
	return nil
}

// controlError is the error of a refused control: the gateway's 404 for a
// group that does not exist is said as without --api.
func (a *apiVerb) controlError(err error, id, createFlag string) error {
	if apiclient.IsNotFound(err) {
		return cli.NoSuchGroup(contracts.Group(a.tenant, id), createFlag)
	}
	return err
}

// control pauses or resumes the group. The gateway refuses (404) a group
// that does not exist unless create; an ended group is refused here.
func (a *apiVerb) control(cmd *cobra.Command, kind contracts.Kind, id string, create bool) error {
	ctx := cmd.Context()
	createFlag := ""
	if kind == contracts.KindPause {
		createFlag = "--create"
	}
	g, err := a.group(ctx, id)
	switch {
	case apiclient.IsNotFound(err) && !create:
		return cli.NoSuchGroup(contracts.Group(a.tenant, id), createFlag)
	case apiclient.IsNotFound(err):
	case err != nil:
		return err
	case g.Ended():
		return fmt.Errorf("group %s of tenant %s has already ended (%s): there is nothing to %s. Nothing was done", g.GroupID, g.Tenant, g.State, kind)
	}
	var res *apiclient.ControlResult
	err = a.call(func(opts ...apiclient.CallOption) (err error) {
		if create {
			opts = append(opts, apiclient.WithCreate())
		}
		if kind == contracts.KindResume {
			res, err = a.c.Resume(ctx, id, opts...)
		} else {
			res, err = a.c.Pause(ctx, id, opts...)
		}
		return err
	})
	if err != nil {
		return a.controlError(err, id, createFlag)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s of group %s (tenant %s) accepted; \"bulkaction status --tenant %s %s\" shows its state\n",
		kind, res.GroupID, res.Tenant, res.Tenant, res.GroupID)
	return nil
}

// apiForGroup checks a verb's group argument and returns its API
// connection, nil when --api is not set.
func apiForGroup(cmd *cobra.Command, tenant, id string) (*apiVerb, error) {
	if apiURL(cmd) == "" {
		return nil, nil
	}
	if _, err := groupArg(tenant, id); err != nil {
		return nil, err
	}
	return newAPI(cmd, tenant)
}
