package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

func newSubmitCmd() *cobra.Command {
	var (
		group, jobType, priority, file, tenant, format string
		callbackURL, notBefore                         string
		windows                                        []string
		basePriority, maxInFlight                      int64
		chunk                                          int
	)
	cmd := &cobra.Command{
		Use:   "submit [--tenant T] --group G [--type T] --file jobs.jsonl|-",
		Short: "Submit a group's jobs from a JSONL file, then seal the group",
		Long: `Submit reads a JSONL file (or standard input with --file -), one job per
line, in one of two formats, told apart by the first non-blank line (or set
with --format) and named on standard error:

  api      each line is a job as the HTTP API takes it:
           {"jobId":"c1","type":"sleep","payload":{"ms":5}} (jobId required,
           payload optional, type required unless --type gives it to the
           lines that name none)
  payload  each line is the job's payload (any JSON value), or an object
           whose only keys are "jobId" and/or "payload"; --type is every
           job's type, and a job's id is its "jobId", else its line number

A first line that is an object with "jobId" and "type" and no key but those
and "payload" means api; anything else means payload. Blank lines are
skipped.

The whole file is read and every line checked first (ids, payload size,
repeated ids); if any line is bad, each is reported as "line N: field F:
problem" and nothing is submitted. Then the jobs are published in chunks and
the group is sealed with the number of jobs. If publishing fails part-way,
submit says how many jobs were stored; running the same command again is
safe: stored jobs are recognised by their ids.

Before publishing, submit reads the group's state (when Redis is
reachable) and refuses, publishing nothing, a group that already ended, a
group sealed at another number of jobs, and --priority, --base-priority or
--max-in-flight for an existing group that has other settings (a group
keeps the settings it was created with). --callback-url gives a new group a
completion callback (see bulkaction callback). It also refuses a submission that
its tenant's quotas would refuse (see bulkaction tenant quota): one that
would create a group while the tenant has its most active groups, or whose
new jobs would take the tenant beyond its most queued jobs.`,
		Example: `  printf '{"ms":10}\n{"jobId":"a","payload":{"ms":20}}\n' | bulkaction submit --group demo --type sleep --file -`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load()
			if err != nil {
				return err
			}
			if err := contracts.ValidateTenant(tenant); err != nil {
				return fmt.Errorf("--tenant: %w", err)
			}
			if err := contracts.ValidateID("groupId", group); err != nil {
				return fmt.Errorf("--group: %w", err)
			}
			g := contracts.Group(tenant, group)
			if jobType != "" {
				if err := contracts.ValidateType(jobType); err != nil {
					return fmt.Errorf("--type: %w", err)
				}
			}
			fileFormat, err := cli.ParseFormat(format)
			if err != nil {
				return fmt.Errorf("--format %w", err)
			}
			prio, err := contracts.ParsePriority(priority)
			if err != nil {
				return fmt.Errorf("--priority: %w", err)
			}
			if basePriority < contracts.MinBasePriority || basePriority > contracts.MaxBasePriority {
				return fmt.Errorf("--base-priority %d: must be within [%d, %d]", basePriority, int64(contracts.MinBasePriority), int64(contracts.MaxBasePriority))
			}
			if maxInFlight < 0 || maxInFlight > contracts.MaxInFlight {
				return fmt.Errorf("--max-in-flight %d: must be within [0, %d] (0 = unlimited)", maxInFlight, int64(contracts.MaxInFlight))
			}
			settings := contracts.GroupSettings{Priority: prio, BasePriority: basePriority, MaxInFlight: maxInFlight, CallbackURL: callbackURL}
			if err := (contracts.GroupSettings{CallbackURL: callbackURL}).Validate(); err != nil {
				return fmt.Errorf("--callback-url: %w", err)
			}
			if settings.NotBefore, err = cli.ParseNotBeforeFlag(notBefore, time.Now()); err != nil {
				return fmt.Errorf("--not-before: %w", err)
			}
			for i, w := range windows {
				win, err := contracts.ParseWindow(fmt.Sprintf("--window[%d]", i), w)
				if err != nil {
					return err
				}
				settings.Windows = append(settings.Windows, win)
			}
			if err := contracts.ValidateWindows("--window", settings.Windows); err != nil {
				return err
			}
			if prio == contracts.PriorityNormal {
				settings.Priority = "" // the default, sent as such
			}
			var in io.Reader = cmd.InOrStdin()
			name := "standard input"
			if file != "-" {
				f, err := os.Open(file)
				if err != nil {
					return err
				}
				defer f.Close()
				in, name = f, file
			}
			limits := contracts.Limits{MaxPayloadBytes: cfg.MaxPayloadBytes}
			jobs, read, err := cli.ReadJobFile(in, cli.JobSpec{Group: g, Type: jobType, Format: fileFormat, Settings: settings, Limits: limits})
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if len(jobs) == 0 {
				return fmt.Errorf("%s: no jobs (every line is blank); nothing was submitted", name)
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%s: read %s %s\n", name, plural(int64(len(jobs)), "job"), read.Describe())
			if api, err := newAPI(cmd, tenant); err != nil || api != nil {
				if err != nil {
					return err
				}
				return api.submit(cmd, group, jobTypes(jobs), settings, jobs) // --api: over HTTP (api.go)
			}

			ctx := cmd.Context()
			c, err := cli.Dial(ctx, cfg, cli.NeedNATS|cli.NeedRedis)
			if err != nil {
				// The group's state is in Redis; a producer may reach NATS only.
				if c, err = cli.Dial(ctx, cfg, cli.NeedNATS); err != nil {
					return err
				}
				fmt.Fprintln(cmd.ErrOrStderr(), "note: Redis is not reachable, so the group's state was not checked before submitting")
			}
			defer c.Close()
			if err := c.CheckStreams(ctx, c.Names.StreamSubmit()); err != nil {
				return err
			}
			if c.Queue != nil {
				req := cli.GroupRequest{Jobs: int64(len(jobs))}
				if cmd.Flags().Changed("priority") {
					req.Priority = &prio
				}
				if cmd.Flags().Changed("base-priority") {
					req.BasePriority = &basePriority
				}
				if cmd.Flags().Changed("max-in-flight") {
					req.MaxInFlight = &maxInFlight
				}
				if err := cli.CheckGroup(ctx, c.Queue, g, req); err != nil {
					return err
				}
			}
			cl := client.New(c.JS, client.Options{Names: c.Names, Tenant: tenant, Limits: limits})

			progress, finish := submitProgress(cmd.ErrOrStderr(), group, int64(len(jobs)))
			err = cli.SubmitFile(ctx, cl, group, settings, jobs, chunk, progress)
			finish(err == nil)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "submitted %s to group %s of tenant %s (type %s, priority %s) and sealed it at %d; follow it with: bulkaction watch --tenant %s %s\n",
				plural(int64(len(jobs)), "job"), group, tenant, jobTypes(jobs), prio, len(jobs), tenant, group)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&group, "group", "g", "", "group id (^[A-Za-z0-9_-]{1,128}$)")
	f.StringVarP(&jobType, "type", "t", "", "job type of every job, e.g. sleep, http, noop (in the api format: of the lines that name none)")
	f.StringVar(&format, "format", string(cli.FormatAuto), "format of the file's lines: auto, api ({\"jobId\",\"type\",\"payload\"}) or payload")
	f.StringVar(&priority, "priority", "normal", "group priority level: high, normal or low")
	f.Int64Var(&basePriority, "base-priority", 0, "added to the group's fair-queue score (smaller is served earlier)")
	f.Int64Var(&maxInFlight, "max-in-flight", 0, "most of the group's jobs admitted and not finished at once (0 = unlimited)")
	f.StringVar(&callbackURL, "callback-url", "", "completion callback: POST the group's final event, signed with the tenant's callback secret, to this http(s) URL when it ends (see bulkaction callback)")
	f.StringVar(&notBefore, "not-before", "", "start at: hold the group's jobs back until this time, RFC 3339 (2026-11-27T09:00:00+01:00) or a duration from now (90m)")
	f.StringArrayVar(&windows, "window", nil, "sending window, repeatable: \"DAYS FROM-TO ZONE\", e.g. \"mon-fri 09:00-17:00 Europe/Berlin\" (jobs are admitted only while one is open)")
	f.StringVarP(&file, "file", "f", "", "JSONL file of jobs, - for standard input")
	f.IntVar(&chunk, "chunk", cli.DefaultChunk, "jobs per publish call")
	addTenantFlag(cmd, &tenant)
	for _, n := range []string{"group", "file"} {
		_ = cmd.MarkFlagRequired(n)
	}
	return cmd
}

// jobTypes names the jobs' types: "sleep", or "sleep, http" for several
// (in the order met).
func jobTypes(jobs []cli.FileJob) string {
	var types []string
	seen := map[string]bool{}
	for _, j := range jobs {
		if !seen[j.Type] {
			seen[j.Type] = true
			types = append(types, j.Type)
		}
	}
	return strings.Join(types, ", ")
}

// submitProgress returns the progress callback of a submission and a
// function that ends the display: a bar on a terminal, nothing otherwise.
func submitProgress(w io.Writer, group string, total int64) (progress func(int), finish func(ok bool)) {
	if !isTerminal(w) {
		return nil, func(bool) {}
	}
	p := mpb.New(mpb.WithOutput(w))
	bar := p.AddBar(total,
		mpb.PrependDecorators(decor.Name("submit "+group+" "), decor.CountersNoUnit("%d/%d")),
		mpb.AppendDecorators(decor.Percentage(decor.WC{W: 5})),
	)
	return func(n int) { bar.SetCurrent(int64(n)) }, func(ok bool) {
		if !ok {
			bar.Abort(false)
		}
		p.Wait()
	}
}
