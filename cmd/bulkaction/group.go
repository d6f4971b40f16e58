package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/conns"
	"github.com/bulkaction/bulkaction/internal/loop"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/status"
)

// watchPoll is how often watch and cancel --wait read the group.
const watchPoll = 500 * time.Millisecond

func newStatusCmd() *cobra.Command {
	var asJSON bool
	var tenant string
	cmd := &cobra.Command{
		Use:   "status GROUP",
		Short: "Show a group's state, counts, position, what holds it, rate, ETA and congestion",
		Long: `Status reads a group of a tenant from Redis: its state and counts (jobs =
queued + in flight + backing off + done + cancelled), its place in the fair
queue (its tenant's place among the waiting tenants, and the group's among
its tenant's groups), what holds it ("waiting": paused, in-flight limit
reached, its tenant's rate share or the global rate used up until the
window ends, no live worker or no READY room for its next job's type, jobs
backing off and when the next is due; "—" when nothing does), its rate over
the last 30 s of its progress (since its first admission when there is too
little history), the ETA at that rate, and its congestion level. READY's
room is checked only when NATS answers.

With --json it prints the group's view as GET /v1/groups/{groupId} answers
it (docs/api.md), with or without --api: tenant, groupId, state, priority,
basePriority, maxInFlight, total, jobs, queued, inFlight, backingOff, done,
succeeded, failed, cancelled, createdAt, startedAt, finishedAt, and under
"status" position, tenantPosition, waitingGroups, waitingTenants, rate,
rateWindowSeconds, etaSeconds, eta, congestion, backoffMs, retries (every
retry of a job, after a rate limit or a retryable error), throttles (the
retries after a rate limit: a 429 from the job's downstream), waiting
([{reason, detail, until?, atLeast?}]) and at; refused, callback, retryOf
and retries when there are. A paused group has no rate and no ETA; a sealed group that has run every
job it received and has fewer distinct jobs than its total waits for the
missing jobs (reason awaiting_jobs) and has no ETA.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if api, err := apiForGroup(cmd, tenant, args[0]); err != nil || api != nil {
				if err != nil {
					return err
				}
				return api.status(cmd, args[0], asJSON) // --api: over HTTP (api.go)
			}
			g, c, err := dialGroup(cmd.Context(), tenant, args[0], cli.NeedRedis|cli.WantNATS)
			if err != nil {
				return err
			}
			defer c.Close()
			s, err := c.Status(cmd.Context(), g)
			if errors.Is(err, status.ErrNotFound) {
				if rf, rerr := c.Queue.GroupRefusals(cmd.Context(), g); rerr == nil && rf != nil {
					return fmt.Errorf("%w: the pipeline refused its submissions: %s", err, cli.RefusedText(rf))
				}
			}
			if err != nil {
				return notFoundHint(err)
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(s)
			}
			return writeStatus(out, s)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	addTenantFlag(cmd, &tenant)
	return cmd
}

// dialGroup parses a verb's group argument (of tenant) and connects as
// need says.
func dialGroup(ctx context.Context, tenant, arg string, need cli.Need) (contracts.GroupRef, *cli.Conn, error) {
	g, err := groupArg(tenant, arg)
	if err != nil {
		return g, nil, err
	}
	c, err := dialFromEnv(ctx, need)
	return g, c, err
}

func dialFromEnv(ctx context.Context, need cli.Need) (*cli.Conn, error) {
	cfg, err := config.Load()
	if err != nil {
		return nil, err
	}
	return cli.Dial(ctx, cfg, need)
}

func notFoundHint(err error) error {
	if errors.Is(err, status.ErrNotFound) {
		return fmt.Errorf("%w (never submitted, not ingested yet, or ended longer ago than %s_GROUP_TTL)", err, config.Prefix)
	}
	return err
}

// writeStatus prints a status as a two-column table.
func writeStatus(w io.Writer, s *status.Group) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, a ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, a...)...) }
	row("group", "%s (tenant %s)", s.GroupID, s.Tenant)
	row("state", "%s", s.State)
	row("priority", "%s (base %d)", s.Priority.OrDefault(), s.BasePriority)
	if s.MaxInFlight > 0 {
		row("max in flight", "%d", s.MaxInFlight)
	}
	sealed := "not sealed yet"
	if s.Total >= 0 {
		sealed = fmt.Sprintf("sealed at %d", s.Total)
	}
	row("jobs", "%d received, %s", s.Jobs, sealed)
	row("progress", "%d/%d done (%d succeeded, %d failed, %d cancelled)", s.Done, s.Target(), s.Succeeded, s.Failed, s.Cancelled)
	if s.Callback != nil {
		row("callback", "%s", cli.CallbackText(s.Callback))
	}
	row("by state", "%d queued + %d in READY or running + %d backing off + %d done + %d cancelled = %s",
		s.Queued, s.InFlight, s.BackingOff, s.Done, s.Cancelled, plural(s.Jobs, "job"))
	row("position", "%s", positionText(s))
	row("waiting", "%s", s.WaitingText())
	if s.ScheduleText() != "—" {
		row("schedule", "%s", s.ScheduleText())
	}
	row("rate", "%s", rateText(s))
	row("eta", "%s", etaText(s))
	row("congestion", "%s (backoff %s; %s, %s, %.2f throttles per job)", s.Congestion, time.Duration(s.BackoffMs)*time.Millisecond,
		plural(s.Retries, "retry"), plural(s.Throttles, "throttle"), s.ThrottlesPerJob())
	if !s.StartedAt.IsZero() {
		row("elapsed", "%s since the first admission", s.Elapsed().Round(100*time.Millisecond))
	}
	if s.Refused != nil {
		row("refused", "%s", cli.RefusedText(s.Refused))
	}
	return tw.Flush()
}

// positionText is the group's place in the fair queue, or why it has none.
func positionText(s *status.Group) string {
	wait := groupsWait(s.WaitingGroups)
	switch {
	case s.Position > 0:
		return fmt.Sprintf("tenant %d of %d waiting tenants; group %d among its tenant's waiting groups (%s in all)",
			s.TenantPosition, s.WaitingTenants, s.Position, wait)
	case s.Ended():
		return "none: the group has ended"
	case s.State == contracts.StatePaused:
		return fmt.Sprintf("paused: not admitted until resumed (%s)", wait)
	case s.Queued == 0:
		return fmt.Sprintf("none: no job of it is queued (%s)", wait)
	case len(s.Holds) > 0:
		return fmt.Sprintf("out of the fair queue while held (see waiting); %s", wait)
	}
	return fmt.Sprintf("none at this reading (%s)", wait)
}

// groupsWait is "no group waits", "1 group waits" or "n groups wait".
func groupsWait(n int64) string {
	switch n {
	case 0:
		return "no group waits"
	case 1:
		return "1 group waits"
	}
	return fmt.Sprintf("%d groups wait", n)
}

// rateText is the rate and what it was measured over.
func rateText(s *status.Group) string {
	switch {
	case s.State == contracts.StatePaused:
		return "none while paused"
	case s.RateWindow <= 0:
		return fmt.Sprintf("%.1f jobs/s", s.Rate)
	case s.Ended():
		return fmt.Sprintf("%.1f jobs/s (over its run)", s.Rate)
	case s.RateWindow < 10*time.Second:
		return fmt.Sprintf("%.1f jobs/s (over the last %s)", s.Rate, s.RateWindow.Round(100*time.Millisecond))
	}
	return fmt.Sprintf("%.1f jobs/s (over the last %s)", s.Rate, s.RateWindow.Round(time.Second))
}

func etaText(s *status.Group) string {
	switch {
	case s.Ended():
		return "ended"
	case s.State == contracts.StatePaused:
		return "none while paused"
	case s.Missing() > 0 && s.Queued+s.InFlight+s.BackingOff == 0:
		return "none until the missing jobs are submitted"
	case s.ETASeconds < 0:
		return "unknown"
	}
	return (time.Duration(math.Ceil(s.ETASeconds)) * time.Second).String()
}

// progressLine is one plain line of watch.
func progressLine(s *status.Group) string {
	pct := 0.0
	if t := s.Target(); t > 0 {
		pct = 100 * float64(s.Done+s.Cancelled) / float64(t)
	}
	line := fmt.Sprintf("%s %s %d/%d (%.1f%%) %.1f/s eta %s congestion %s",
		s.GroupID, s.State, s.Done+s.Cancelled, s.Target(), pct, s.Rate, etaText(s), s.Congestion)
	if len(s.Holds) > 0 {
		line += " waiting " + holdReasons(s)
	}
	if n := s.Unsettled(); n > 0 {
		line += fmt.Sprintf(" (%s still with workers)", plural(n, "job"))
	}
	return line
}

// runningNote returns a follow update that says once that a cancelled
// group waits for the jobs workers had when it was cancelled.
func runningNote(out io.Writer, id string) func(*status.Group) {
	said := false
	return func(s *status.Group) {
		if n := s.Unsettled(); n > 0 && !said {
			said = true
			fmt.Fprintf(out, "group %s is cancelled; waiting for the %s workers already had: those running finish, the others are cancelled\n",
				id, plural(n, "job"))
		}
	}
}

// holdReasons lists the reasons that hold a group, comma-separated.
func holdReasons(s *status.Group) string {
	rs := make([]string, len(s.Holds))
	for i, h := range s.Holds {
		rs[i] = string(h.Reason)
	}
	return strings.Join(rs, ",")
}

// endLine is the line printed when a group has ended.
func endLine(s *status.Group) string {
	return fmt.Sprintf("%s %s: %s (%d succeeded, %d failed, %d cancelled) in %s",
		s.GroupID, s.State, plural(s.Jobs, "job"), s.Succeeded, s.Failed, s.Cancelled, s.Elapsed().Round(100*time.Millisecond))
}

// endCode is watch's result for an ended group: nil for COMPLETED,
// exitCancelled for CANCELLED.
func endCode(s *status.Group) error {
	if s.State == contracts.StateCancelled {
		return exitCancelled
	}
	return nil
}

func newWatchCmd() *cobra.Command {
	var every, appear time.Duration
	var tenant string
	cmd := &cobra.Command{
		Use:   "watch GROUP",
		Short: "Follow a group's progress until it ends",
		Long: `Watch shows a group's progress (a bar on a terminal, a plain line every
--interval otherwise) until the group ends, then prints its counts. A
cancelled group is followed until the jobs that were running when it was
cancelled have finished, so that its counts add up.

A group that does not exist yet is waited for up to --appear-timeout (jobs
just submitted are stored within moments), then watch fails: the id is
most likely mistyped. A group whose jobs are published but not stored yet
is waited for as long as it takes.

Exit codes: 0 when the group COMPLETED, 3 when it was CANCELLED, 1 on
errors (including an interrupt and a group that does not exist).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if api, err := apiForGroup(cmd, tenant, args[0]); err != nil || api != nil {
				if err != nil {
					return err
				}
				return api.watch(cmd, args[0], every, appear) // --api: over HTTP (api.go)
			}
			ctx := cmd.Context()
			g, c, err := dialGroup(ctx, tenant, args[0], cli.NeedRedis|cli.WantNATS)
			if err != nil {
				return err
			}
			defer c.Close()
			out := cmd.OutOrStdout()
			var v watchView = &plainWatch{out: out, every: every}
			if isTerminal(out) {
				v = newBarWatch(out)
			}
			s, err := follow(ctx, c, g, v.update, appearWait(out, g, appear, func() (bool, error) {
				return status.Submitted(ctx, c.JS, c.Names, g)
			}))
			v.close(s)
			if err != nil {
				return err
			}
			fmt.Fprintln(out, endLine(s))
			return endCode(s)
		},
	}
	cmd.Flags().DurationVar(&every, "interval", 2*time.Second, "how often a plain line is printed when the output is not a terminal")
	cmd.Flags().DurationVar(&appear, "appear-timeout", 10*time.Second, "how long to wait for a group that does not exist yet (0 = as long as it takes)")
	addTenantFlag(cmd, &tenant)
	return cmd
}

// appearWait is watch's answer to a reading that finds no group: it says
// once that it waits, and after timeout (0 = never) it fails with a
// NoSuchGroup error unless submitted (nil: not known) says the group's
// messages are on their way.
func appearWait(out io.Writer, g contracts.GroupRef, timeout time.Duration, submitted func() (bool, error)) func() error {
	start := time.Now()
	warned, onItsWay := false, false
	return func() error {
		if !warned {
			fmt.Fprintf(out, "waiting for group %s to appear...\n", g.ID)
			warned = true
		}
		if timeout <= 0 || time.Since(start) < timeout || onItsWay {
			return nil
		}
		if submitted != nil {
			ok, err := submitted()
			if err == nil && ok {
				onItsWay = true
				fmt.Fprintf(out, "group %s was submitted and is not stored yet (is a fetcher running?); waiting on\n", g.ID)
				return nil
			}
		}
		return fmt.Errorf("waited %s: %w", timeout, cli.NoSuchGroup(g, ""))
	}
}

// follow reads the group every watchPoll until it has ended and settled
// (a cancelled group's running jobs have finished, so its counts add up:
// [status.Group.Settled]), passing each
// reading to update (its rate and ETA are status's: over the group's last
// 30 s of progress); missing is called at each reading that finds no
// group (nil: wait on), and its error ends the wait. It returns the last
// reading.
func follow(ctx context.Context, c *cli.Conn, g contracts.GroupRef, update func(*status.Group), missing func() error) (*status.Group, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	var last *status.Group
	var ended error // why the reading stopped before ctx ended (nil: the group ended)
	read := func(ctx context.Context) bool {
		s, err := status.Read(ctx, c.Queue, g, status.Options{})
		switch {
		case errors.Is(err, status.ErrNotFound):
			if missing != nil {
				if err := missing(); err != nil {
					ended = err
					return false
				}
			}
		case err != nil:
			ended = err
			if ctx.Err() != nil {
				ended = ctx.Err()
			}
			return false
		default:
			last = s
			if update != nil {
				update(last)
			}
			return !s.Settled()
		}
		return true
	}
	if !loop.Until(ctx, watchPoll, read, loop.Now()) {
		return last, ctx.Err()
	}
	return last, ended
}

// watchView shows watch's readings.
type watchView interface {
	update(*status.Group)
	close(last *status.Group)
}

type plainWatch struct {
	out   io.Writer
	every time.Duration
	last  time.Time
}

func (v *plainWatch) update(s *status.Group) {
	if s.Settled() || time.Since(v.last) < v.every {
		return
	}
	v.last = time.Now()
	fmt.Fprintln(v.out, progressLine(s))
}

func (v *plainWatch) close(*status.Group) {}

// barWatch is a progress bar with done/total, rate, ETA and congestion.
type barWatch struct {
	p   *mpb.Progress
	bar *mpb.Bar
	mu  sync.Mutex
	cur *status.Group
}

func newBarWatch(out io.Writer) *barWatch {
	return &barWatch{p: mpb.New(mpb.WithOutput(out), mpb.WithRefreshRate(200*time.Millisecond))}
}

func (v *barWatch) update(s *status.Group) {
	v.mu.Lock()
	v.cur = s
	v.mu.Unlock()
	if v.bar == nil {
		v.bar = v.p.AddBar(0,
			mpb.PrependDecorators(decor.Name(s.GroupID+" "), decor.CountersNoUnit("%d/%d")),
			mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
				v.mu.Lock()
				defer v.mu.Unlock()
				line := fmt.Sprintf(" %s  %.1f/s  eta %s  congestion %s", v.cur.State, v.cur.Rate, etaText(v.cur), v.cur.Congestion)
				if len(v.cur.Holds) > 0 {
					line += "  waiting " + holdReasons(v.cur)
				}
				return line
			})),
		)
	}
	v.bar.SetTotal(s.Target(), false)
	v.bar.SetCurrent(s.Done + s.Cancelled)
}

func (v *barWatch) close(last *status.Group) {
	if v.bar != nil {
		if last != nil && last.State == contracts.StateCompleted {
			v.bar.SetTotal(-1, true)
		} else {
			v.bar.Abort(false)
		}
	}
	v.p.Wait()
}

func newCancelCmd() *cobra.Command {
	var wait, create bool
	var tenant string
	cmd := &cobra.Command{
		Use:   "cancel GROUP",
		Short: "Cancel a group: queued and backed-off jobs are dropped and counted as cancelled",
		Long: `Cancel asks for a group to end early: its queued and backed-off jobs are
dropped and counted as cancelled; jobs already running finish and are
counted. With --wait it waits until the group has ended and those jobs
have finished, and prints its counts (succeeded + failed + cancelled = its
jobs). A group that has already ended is left as it is. A group that does
not exist is refused (a mistyped id would otherwise create an empty
cancelled group); --create cancels it before its first job, so that jobs
sent to it later are refused.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if api, err := apiForGroup(cmd, tenant, args[0]); err != nil || api != nil {
				if err != nil {
					return err
				}
				return api.cancel(cmd, args[0], wait, create) // --api: over HTTP (api.go)
			}
			ctx := cmd.Context()
			g, c, err := dialControl(cmd, tenant, args[0])
			if err != nil {
				return err
			}
			defer c.Close()
			if c.Queue == nil && wait {
				return fmt.Errorf("cancel --wait follows the group in Redis, which is not reachable: cancel without --wait, and check the group later")
			}
			out := cmd.OutOrStdout()
			info, err := checkTarget(ctx, c, g, contracts.KindCancel, create, "--create")
			if err != nil {
				return err
			}
			if info == nil && create {
				fmt.Fprintf(out, "group %s is not known yet; it will be created cancelled\n", g.ID)
			}
			if info != nil && info.State.Terminal() {
				s, err := status.Read(ctx, c.Queue, g, status.Options{})
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "group %s has already ended: %s\n", g.ID, endLine(s))
				return nil
			}
			cl := client.New(c.JS, client.Options{Names: c.Names, Tenant: g.Tenant})
			if err := cl.Cancel(ctx, g.ID); err != nil {
				return err
			}
			fmt.Fprintf(out, "cancel of group %s accepted\n", g.ID)
			if !wait {
				return nil
			}
			s, err := follow(ctx, c, g, runningNote(out, g.ID), nil)
			if err != nil {
				return err
			}
			fmt.Fprintln(out, endLine(s))
			return nil
		},
	}
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the group has ended and print its counts")
	cmd.Flags().BoolVar(&create, "create", false, "cancel a group that does not exist yet (it is created cancelled; jobs sent to it later are refused)")
	addTenantFlag(cmd, &tenant)
	return cmd
}

// newControlCmd is `pause` or `resume`.
func newControlCmd(kind contracts.Kind) *cobra.Command {
	var tenant string
	var create bool
	short := "Pause a group: its jobs are not admitted until it is resumed; it keeps its place"
	long := `Pause stops admitting a group's jobs. The group keeps its place in the fair
queue; jobs already running finish and are counted, and jobs submitted while
it is paused are stored and wait. Resume it with "bulkaction resume".

A group that does not exist is refused (a mistyped id would otherwise
create an empty paused group); --create pauses it before its first job, so
that its jobs wait until it is resumed. A group that has ended is refused.`
	if kind == contracts.KindResume {
		short = "Resume a paused group: its jobs are admitted again from the place it had"
		long = `Resume lets a paused group's jobs be admitted again, from the place the group
had in the fair queue when it was paused. A group that does not exist or
has ended is refused.`
	}
	cmd := &cobra.Command{
		Use:   string(kind) + " GROUP",
		Short: short,
		Long:  long,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if api, err := apiForGroup(cmd, tenant, args[0]); err != nil || api != nil {
				if err != nil {
					return err
				}
				return api.control(cmd, kind, args[0], create) // --api: over HTTP (api.go)
			}
			ctx := cmd.Context()
			g, c, err := dialControl(cmd, tenant, args[0])
			if err != nil {
				return err
			}
			defer c.Close()
			createFlag := ""
			if kind == contracts.KindPause {
				createFlag = "--create"
			}
			if _, err := checkTarget(ctx, c, g, kind, create, createFlag); err != nil {
				return err
			}
			cl := client.New(c.JS, client.Options{Names: c.Names, Tenant: g.Tenant})
			op := cl.Pause
			if kind == contracts.KindResume {
				op = cl.Resume
			}
			if err := op(ctx, g.ID); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s of group %s (tenant %s) accepted; \"bulkaction status --tenant %s %s\" shows its state\n",
				kind, g.ID, g.Tenant, g.Tenant, g.ID)
			return nil
		},
	}
	if kind == contracts.KindPause {
		cmd.Flags().BoolVar(&create, "create", false, "pause a group that does not exist yet (it is created paused; its jobs wait until it is resumed)")
	}
	addTenantFlag(cmd, &tenant)
	return cmd
}

// dialControl connects a verb that publishes a control (pause, resume,
// cancel) for the group named by arg: NATS, and Redis to check the group
// first. When Redis cannot be reached the control is still published, with
// a note that the group was not checked.
func dialControl(cmd *cobra.Command, tenant, arg string) (contracts.GroupRef, *cli.Conn, error) {
	ctx := cmd.Context()
	g, err := groupArg(tenant, arg)
	if err != nil {
		return g, nil, err
	}
	cfg, err := config.Load()
	if err != nil {
		return g, nil, err
	}
	c, err := cli.Dial(ctx, cfg, cli.NeedNATS|cli.NeedRedis)
	if err != nil {
		if c, err = cli.Dial(ctx, cfg, cli.NeedNATS); err != nil {
			return g, nil, err
		}
		fmt.Fprintln(cmd.ErrOrStderr(), "note: Redis is not reachable, so whether the group exists was not checked")
	}
	if err := c.CheckStreams(ctx, c.Names.StreamSubmit()); err != nil {
		c.Close()
		return g, nil, err
	}
	return g, c, nil
}

// checkTarget reads the group a control is for (nil when Redis is not
// connected, or the group is not stored yet) and refuses what the control
// cannot do: a group nobody submitted to, unless create (then it is listed
// in the group indexes, so that "bulkaction groups" shows it), and a pause
// or resume of a group that has ended. createFlag is the flag that creates
// the group ("" when the verb has none). A group whose messages are in the
// SUBMIT stream but not stored yet passes.
func checkTarget(ctx context.Context, c *cli.Conn, g contracts.GroupRef, kind contracts.Kind, create bool, createFlag string) (*redisq.GroupInfo, error) {
	if c.Queue == nil {
		return nil, nil
	}
	info, pending, err := status.Find(ctx, c.Queue, c.JS, c.Names, g)
	switch {
	case err != nil:
		return nil, err
	case info != nil && info.State.Terminal() && kind != contracts.KindCancel:
		return info, fmt.Errorf("group %s of tenant %s has already ended (%s): there is nothing to %s. Nothing was done",
			g.ID, g.Tenant, info.State, kind)
	case info != nil || pending:
		return info, nil
	case !create:
		return nil, cli.NoSuchGroup(g, createFlag)
	}
	now, err := c.Queue.Now(ctx)
	if err != nil {
		return nil, err
	}
	return nil, c.Queue.IndexGroup(ctx, g, now.UnixMilli())
}

// newTenantCmd is `tenant weight`: a tenant's share of the fair queue, and
// `tenant quota` (quota.go): its most queued jobs and active groups.
func newTenantCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenant",
		Short: "Show or set tenants' weights in the fair queue and their quotas",
	}
	cmd.AddCommand(newTenantQuotaCmd(), newTenantLimitsCmd(), newTenantWindowsCmd())
	var force bool
	weight := &cobra.Command{
		Use:   "weight [TENANT [WEIGHT]]",
		Short: "Show the tenants' weights, or set one (1 to 1000; 1 is the default)",
		Long: `Within a priority level, tenants are served by weighted round robin: a
tenant of weight 2 is admitted twice as many jobs as one of weight 1 while
both wait. With no argument, weight lists the tenants whose weight is not 1;
with a tenant, it prints that tenant's weight; with a tenant and a weight,
it sets it (taking effect at the next admission).`,
		Args: cobra.MaximumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := refuseAPI(cmd, "tenant weight", false); err != nil {
				return err
			}
			ctx := cmd.Context()
			if len(args) == 2 {
				if err := contracts.ValidateTenant(args[0]); err != nil {
					return fmt.Errorf("tenant %q: %w", args[0], err)
				}
				w, err := strconv.Atoi(args[1])
				if err != nil {
					return fmt.Errorf("weight %q: must be an integer from 1 to %d", args[1], redisq.MaxTenantWeight)
				}
				if w < 1 || w > redisq.MaxTenantWeight {
					return fmt.Errorf("weight %d: must be between 1 and %d", w, redisq.MaxTenantWeight)
				}
			}
			c, err := dialFromEnv(ctx, cli.NeedRedis)
			if err != nil {
				return err
			}
			defer c.Close()
			out := cmd.OutOrStdout()
			if len(args) == 2 {
				w, _ := strconv.Atoi(args[1])
				seen, err := c.Queue.TenantSeen(ctx, args[0])
				if err != nil {
					return err
				}
				if !seen && !force {
					return fmt.Errorf("tenant %s has no groups, weight or quota here (a mistyped name?): its weight was not set; "+
						"to set the weight of a tenant before its first group, add --force", args[0])
				}
				if err := c.Queue.SetTenantWeight(ctx, args[0], w); err != nil {
					return err
				}
				fmt.Fprintf(out, "tenant %s: weight %d\n", args[0], w)
				return nil
			}
			weights, err := c.Queue.TenantWeights(ctx)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				if err := contracts.ValidateTenant(args[0]); err != nil {
					return err
				}
				w := weights[args[0]]
				if w == 0 {
					w = 1
				}
				fmt.Fprintf(out, "tenant %s: weight %d\n", args[0], w)
				return nil
			}
			if len(weights) == 0 {
				fmt.Fprintln(out, "every tenant has weight 1")
				return nil
			}
			for _, t := range slices.Sorted(maps.Keys(weights)) {
				fmt.Fprintf(out, "%s\t%d\n", t, weights[t])
			}
			return nil
		},
	}
	weight.Flags().BoolVar(&force, "force", false, "set the weight of a tenant that has no groups yet")
	cmd.AddCommand(weight)
	return cmd
}

// refuseAPI decides what a verb that reads Redis (and NATS, when
// needNATS) directly does when a gateway is named: it cannot use the HTTP
// API, and must not silently show the system at the default addresses
// instead. --api on the command line is refused; $BULKACTION_API is
// accepted when the environment also names the servers to read
// (BULKACTION_REDIS_URL, and BULKACTION_NATS_URL when needNATS), as the
// export line of "bulkaction dev" does, with a note on standard error
// saying what is read; otherwise it is refused.
func refuseAPI(cmd *cobra.Command, verb string, needNATS bool) error {
	base := apiURL(cmd)
	if base == "" {
		return nil
	}
	explicit := false
	if f := cmd.Flag(apiFlag); f != nil && f.Changed {
		explicit = true
	}
	named := envSet("REDIS_URL") && (!needNATS || envSet("NATS_URL"))
	if !explicit && named {
		servers := "Redis at " + config.RedactURL(os.Getenv(config.Prefix+"_REDIS_URL"))
		if needNATS {
			servers += " and NATS at " + config.RedactURL(os.Getenv(config.Prefix+"_NATS_URL"))
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "note: %s reads %s directly; it does not use $%s\n", verb, servers, apiEnv)
		return nil
	}
	where := "--api names " + base
	if !explicit {
		where = "$" + apiEnv + " names " + base + " and " + config.Prefix + "_REDIS_URL is not set"
	}
	return fmt.Errorf("%s reads Redis and NATS directly and cannot use the HTTP API, and %s: "+
		"set %s_REDIS_URL and %s_NATS_URL to that system's servers, or run it with --api \"\" to read the ones configured here "+
		"(the dashboard at %s/ui/ shows tenants and the system over HTTP)",
		verb, where, config.Prefix, config.Prefix, strings.TrimRight(base, "/"))
}

func newStatsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show the system: waiting groups per level, READY depth, backoff queue, active tenants, congestion",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := refuseAPI(cmd, "stats", true); err != nil {
				return err
			}
			ctx := cmd.Context()
			c, err := dialFromEnv(ctx, cli.NeedRedis|cli.NeedNATS)
			if err != nil {
				return err
			}
			defer c.Close()
			if err := c.CheckStreams(ctx, c.Names.StreamReady()); err != nil {
				return err
			}
			s, err := cli.Stats(ctx, c)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(s)
			}
			return writeStats(out, s, conns.Ready(c.Config).Capacity)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func writeStats(w io.Writer, s *cli.SystemStats, readyCap int) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	var levels []string
	for _, p := range contracts.Priorities {
		levels = append(levels, fmt.Sprintf("%s %d", p, s.GroupsPerLevel[string(p)]))
	}
	fmt.Fprintf(tw, "waiting groups\t%d (%s)\n", s.WaitingGroups, strings.Join(levels, ", "))
	fmt.Fprintf(tw, "active tenants\t%d (share %.0f jobs/s each, times its weight)\n", s.Rate.ActiveTenants, s.Rate.TenantShare)
	fmt.Fprintf(tw, "admitted\t%.0f jobs/s of %.0f jobs/s limit (last window)\n", s.Rate.Admitted, s.Rate.Limit)
	fmt.Fprintf(tw, "READY depth\t%d (capacity %d)\n", s.ReadyDepth, readyCap)
	fmt.Fprintf(tw, "non-ready\t%d backing off, %d admitted awaiting READY\n", s.NonReadySize, s.InflightSize)
	cg := s.Congestion
	var per []string
	for _, l := range redisq.CongestionLevels {
		per = append(per, fmt.Sprintf("%s %d", l, cg.GroupsPerLevel[l]))
	}
	worst := string(cg.WorstLevel)
	if cg.WorstGroupID != "" {
		worst += " (" + cg.WorstGroup().String() + ")"
	}
	fmt.Fprintf(tw, "congestion\tworst %s; %s\n", worst, strings.Join(per, ", "))
	return tw.Flush()
}
