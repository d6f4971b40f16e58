package demo

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// GroupResult is one group's line of the summary. The zero value is a
// group of no jobs that was never read.
type GroupResult struct {
	// ID is the group id.
	ID string
	// Priority is the group's level.
	Priority contracts.Priority
	// Type is the job type of the group's jobs.
	Type string
	// Jobs is the number of jobs submitted.
	Jobs int
	// State is the last state read; "" when the group was never read.
	State contracts.GroupState
	// Succeeded, Failed and Cancelled count the jobs by outcome.
	Succeeded, Failed, Cancelled int64
	// Makespan is the time from the group's first admission to its end;
	// 0 while it has not ended.
	Makespan time.Duration
	// Retries counts the times one of its jobs went back to the
	// non-ready queue, after an error or a rate limit (the most seen while
	// it ran).
	Retries int64
	// Throttles counts the retries after a rate limit (a 429 from its
	// downstream), the most seen while it ran.
	Throttles int64
	// SubmittedAt and FinishedAt are times since the start of the demo;
	// FinishedAt is 0 while the group has not ended. FinishedAt is the end
	// Redis recorded when it lies within the run, else when the demo first
	// saw the group ended.
	SubmittedAt, FinishedAt time.Duration
	// BiggestPercent is the biggest group's progress (0-100) when this
	// group ended.
	BiggestPercent float64
}

// ThrottlesPerJob is Throttles divided by Jobs.
func (g GroupResult) ThrottlesPerJob() float64 { return perJob(g.Throttles, g.Jobs) }

// RetriesPerJob is Retries divided by Jobs.
func (g GroupResult) RetriesPerJob() float64 { return perJob(g.Retries, g.Jobs) }

func perJob(n int64, jobs int) float64 {
	if jobs == 0 {
		return 0
	}
	return float64(n) / float64(jobs)
}

// Summary is the outcome of a demo run. The zero value has no groups, and
// AllCompleted reports false for it.
type Summary struct {
	// Groups are the workload's groups, in workload order.
	Groups []GroupResult
	// Biggest is the index in Groups of the group with the most jobs.
	Biggest int
	// Elapsed is the run's duration.
	Elapsed time.Duration
	// Makespan is the time from the start of the demo to the end of its
	// last group; 0 while a group has not ended.
	Makespan time.Duration
	// Limits are the admission limits the run was held to.
	Limits Limits
	// Partner is what the partner API saw and what the adaptive rate
	// learned of it; nil when no group called it.
	Partner *PartnerRun
}

// AllCompleted reports whether every group is COMPLETED.
func (s *Summary) AllCompleted() bool {
	for _, g := range s.Groups {
		if g.State != contracts.StateCompleted {
			return false
		}
	}
	return len(s.Groups) > 0
}

// summarize sums up a run that started at start and lasted elapsed, held
// to limits; jobType is the type of the jobs of groups that name none.
func summarize(groups []*tracked, big int, start time.Time, elapsed time.Duration, limits Limits, jobType string) *Summary {
	s := &Summary{Biggest: big, Elapsed: elapsed, Limits: limits}
	ended := len(groups) > 0
	for _, t := range groups {
		g := GroupResult{ID: t.Tenant + "/" + t.id, Priority: t.Priority.OrDefault(), Type: t.Type, Jobs: t.Jobs, Retries: t.retries, Throttles: t.throttles, SubmittedAt: max(t.submitted, 0)}
		if g.Type == "" {
			g.Type = jobType
		}
		st := t.last
		if st != nil {
			g.State, g.Succeeded, g.Failed, g.Cancelled = st.State, st.Succeeded, st.Failed, st.Cancelled
			if st.Ended() {
				g.Makespan = st.Elapsed()
			}
		}
		if t.ended {
			g.FinishedAt, g.BiggestPercent = t.endedAt, t.bigPercent
			// The demo reads the groups every few hundred ms: the end Redis
			// recorded is exact, when it lies within the run.
			if fin := st.FinishedAt.Sub(start); !st.FinishedAt.IsZero() && fin > 0 && fin <= elapsed {
				g.FinishedAt = fin
			}
			s.Makespan = max(s.Makespan, g.FinishedAt)
		} else {
			ended = false
		}
		s.Groups = append(s.Groups, g)
	}
	if !ended {
		s.Makespan = 0
	}
	return s
}

// Verdicts are one-line conclusions: how each high-priority group fared,
// and how the smaller groups of the biggest group's level fared beside it.
func (s *Summary) Verdicts() []string {
	if len(s.Groups) == 0 {
		return nil
	}
	big := s.Groups[s.Biggest]
	var out []string
	for i, g := range s.Groups {
		if i == s.Biggest || g.Priority != contracts.PriorityHigh || g.FinishedAt == 0 {
			continue
		}
		out = append(out, fmt.Sprintf("%s (%s priority, submitted at %s) finished at %s while %s was %.0f%% done.",
			g.ID, g.Priority, secs(g.SubmittedAt), secs(g.FinishedAt), big.ID, g.BiggestPercent))
	}
	// Groups of the big one's level that finished while it was under half
	// done did not wait behind it; any other is reported as it is.
	var early []string
	var last GroupResult
	for i, g := range s.Groups {
		if i == s.Biggest || g.Priority != big.Priority || g.FinishedAt == 0 {
			continue
		}
		if g.BiggestPercent < 50 {
			early = append(early, g.ID)
			if g.FinishedAt >= last.FinishedAt {
				last = g
			}
			continue
		}
		line := fmt.Sprintf("%s finished at %s, when %s was %.0f%% done", g.ID, secs(g.FinishedAt), big.ID, g.BiggestPercent)
		if tpj := g.ThrottlesPerJob(); tpj >= 0.2 {
			line += fmt.Sprintf(": its downstream rate-limited it (%.2f throttles per job), so its jobs backed off", tpj)
		}
		out = append(out, line+".")
	}
	if len(early) > 0 {
		out = append(out, fmt.Sprintf("%s finished by %s while %s was %.0f%% done: the small tenants did not wait behind the big one.",
			joinAnd(early), secs(last.FinishedAt), big.ID, last.BiggestPercent))
	}
	if !s.AllCompleted() {
		var open []string
		for _, g := range s.Groups {
			if g.State != contracts.StateCompleted {
				st := string(g.State)
				if st == "" {
					st = "not started"
				}
				open = append(open, g.ID+" "+st)
			}
		}
		out = append(out, "Not every group completed: "+strings.Join(open, ", ")+".")
	}
	return out
}

// Write prints the summary table (group, priority, jobs, succeeded,
// failed, makespan, retries and throttles per job, finished at), the
// verdicts, the partner API's line (PartnerLine) and the makespan line.
func (s *Summary) Write(w io.Writer) error {
	fmt.Fprintf(w, "\nSummary (%s):\n", secs(s.Elapsed))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "group\tpriority\tstate\tjobs\tsucceeded\tfailed\tmakespan\tretries/job\tthrottles/job\tfinished at")
	for _, g := range s.Groups {
		state := string(g.State)
		if state == "" {
			state = "-"
		}
		fin, span := "-", "-"
		if g.FinishedAt > 0 {
			fin = secs(g.FinishedAt)
		}
		if g.Makespan > 0 {
			span = secs(g.Makespan)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%.2f\t%.2f\t%s\n",
			g.ID, g.Priority, state, g.Jobs, g.Succeeded, g.Failed, span, g.RetriesPerJob(), g.ThrottlesPerJob(), fin)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, v := range s.Verdicts() {
		if _, err := fmt.Fprintln(w, v); err != nil {
			return err
		}
	}
	if line := s.PartnerLine(); line != "" {
		if _, err := fmt.Fprintln(w, line+"."); err != nil {
			return err
		}
	}
	if line := s.MakespanLine(); line != "" {
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

// MakespanLine is the summary's last line: the run's makespan beside the
// shortest its limits allow for the admissions it made, and their ratio,
// e.g. "makespan 72.3s, limit allows 66.8s (1.08×): 26716 admissions
// (23100 first attempts, 3616 retries) at the global limit of 400/s; first
// attempts alone 57.8s". When a downstream's capacity binds (Limits.Capacity)
// it counts the calls the downstream accepted instead: "1500 calls accepted
// at the capacity of hooli's partner API (60/s, 20/s from 12s, 100/s from
// 24s)". "" while a group has not ended; without a rate limit, the
// makespan alone.
func (s *Summary) MakespanLine() string {
	if s.Makespan <= 0 {
		return ""
	}
	b := s.Bound()
	if b.Makespan <= 0 {
		return fmt.Sprintf("makespan %s, no rate limit", secs(s.Makespan))
	}
	from := "" // said only of a group submitted later: the others are a few ms in
	if b.From >= 50*time.Millisecond {
		from = fmt.Sprintf(" from %s", secs(b.From))
	}
	if b.Downstream {
		return fmt.Sprintf("makespan %s, limit allows %s (%.2f×): %d calls accepted at %s%s; first attempts alone %s",
			secs(s.Makespan), secs(b.Makespan), b.Ratio(s.Makespan), b.Jobs, b.Limit, from, secs(b.FirstAttempts))
	}
	return fmt.Sprintf("makespan %s, limit allows %s (%.2f×): %d admissions (%d first attempts, %d retries) at %s%s; first attempts alone %s",
		secs(s.Makespan), secs(b.Makespan), b.Ratio(s.Makespan), b.Jobs+b.Retries, b.Jobs, b.Retries, b.Limit, from, secs(b.FirstAttempts))
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }

func joinAnd(s []string) string {
	switch len(s) {
	case 0:
		return ""
	case 1:
		return s[0]
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
