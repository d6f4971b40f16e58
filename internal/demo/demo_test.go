package demo

import (
	"bytes"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

func TestForScale(t *testing.T) {
	full, err := ForScale(ScaleFull)
	if err != nil {
		t.Fatal(err)
	}
	small, err := ForScale(ScaleSmall)
	if err != nil {
		t.Fatal(err)
	}
	if full.TotalJobs() != 23100 || small.TotalJobs() != 2310 {
		t.Errorf("totals %d and %d, want 23100 and 2310", full.TotalJobs(), small.TotalJobs())
	}
	for _, w := range []Workload{full, small} {
		if len(w.Groups) != 9 || w.JobType != "sleep" || w.GlobalRps <= 0 {
			t.Fatalf("%s: %+v", w.Scale, w)
		}
		big, high := w.Groups[0], 0
		perTenant := map[string]int{}
		seen := map[contracts.GroupRef]bool{}
		for _, g := range w.Groups {
			ref := contracts.Group(g.Tenant, g.ID)
			if err := ref.Validate(); err != nil || seen[ref] {
				t.Errorf("%s: group %s: invalid (%v) or repeated", w.Scale, ref, err)
			}
			seen[ref] = true
			perTenant[g.Tenant] += g.Jobs
		}
		// Five tenants; globex splits its work into four bulk actions.
		if len(perTenant) != 5 || big.Tenant != "acme" {
			t.Errorf("%s: tenants %v, the big group's %q", w.Scale, perTenant, big.Tenant)
		}
		if n := len(slices.DeleteFunc(slices.Clone(w.Groups), func(g Group) bool { return g.Tenant != "globex" })); n != 4 {
			t.Errorf("%s: globex has %d groups, want 4", w.Scale, n)
		}
		for tenant, jobs := range perTenant {
			if tenant != big.Tenant && big.Jobs < 20*jobs/2 {
				t.Errorf("%s: %s (%d) is not much bigger than tenant %s (%d)", w.Scale, big.ID, big.Jobs, tenant, jobs)
			}
		}
		for _, g := range w.Groups[1:] {
			if g.Priority == contracts.PriorityHigh {
				high++
				if g.After <= 0 {
					t.Errorf("%s: the urgent group %s should arrive later", w.Scale, g.ID)
				}
			}
		}
		if high != 1 {
			t.Errorf("%s: %d high-priority groups, want 1", w.Scale, high)
		}
		// hooli's jobs alone call the partner API, as "http" jobs: the
		// rate learned for that type is theirs.
		for _, g := range w.Groups {
			if g.Partner != (g.Tenant == "hooli") || (g.Partner && g.Type != "http") || (!g.Partner && g.Type == "http") {
				t.Errorf("%s: group %s/%s: partner %v, type %q", w.Scale, g.Tenant, g.ID, g.Partner, g.Type)
			}
		}
		if err := w.Partner.validate(); err != nil || len(w.Partner.Phases) != 3 {
			t.Errorf("%s: partner capacity %+v: %v", w.Scale, w.Partner, err)
		}
		// The partner lowers its capacity, then raises it above the first.
		if ph := w.Partner.Phases; len(ph) == 3 && (ph[1].Rps >= ph[0].Rps || ph[2].Rps <= ph[0].Rps) {
			t.Errorf("%s: capacity %s does not fall then rise", w.Scale, w.Partner)
		}
		// The partner accepts hooli's calls well within the time the global
		// limit takes for every first attempt: it slows hooli, not the demo.
		var hooli int
		for _, g := range w.Groups {
			if g.Partner {
				hooli += g.Jobs
			}
		}
		partner, global := w.Partner.timeFor(0, float64(hooli)), seconds(float64(w.TotalJobs())/float64(w.GlobalRps))
		if partner >= global {
			t.Errorf("%s: the partner takes %s for hooli's %d calls, the global limit %s for every first attempt", w.Scale, partner, hooli, global)
		}
		// A tenth of the jobs at 3/4 of the rate finishes within ~30 s
		// only if the pure admission time is well below it.
		if secs := float64(w.TotalJobs()) / float64(w.GlobalRps); w.Scale == ScaleSmall && secs > 10 {
			t.Errorf("small scale needs %.1fs of admission alone", secs)
		}
	}
	if _, err := ForScale("huge"); err == nil {
		t.Error("unknown scale accepted")
	}
}

func sampleSummary() *Summary {
	return &Summary{Biggest: 0, Elapsed: 61 * time.Second, Groups: []GroupResult{
		{ID: "acme/big", Priority: "normal", Jobs: 1000, State: "COMPLETED", Succeeded: 990, Failed: 10, Makespan: 60 * time.Second, Retries: 170, Throttles: 150, FinishedAt: 61 * time.Second, BiggestPercent: 100},
		{ID: "globex/mid", Priority: "normal", Jobs: 40, State: "COMPLETED", Succeeded: 40, Makespan: 8 * time.Second, FinishedAt: 9 * time.Second, BiggestPercent: 14},
		{ID: "initech/tiny", Priority: "normal", Jobs: 10, State: "COMPLETED", Succeeded: 10, Makespan: 2 * time.Second, FinishedAt: 3 * time.Second, BiggestPercent: 4},
		{ID: "umbrella/vip", Priority: "high", Jobs: 20, State: "COMPLETED", Succeeded: 20, Makespan: time.Second, SubmittedAt: 5 * time.Second, FinishedAt: 6500 * time.Millisecond, BiggestPercent: 9},
	}}
}

func TestSummaryWrite(t *testing.T) {
	s := sampleSummary()
	if !s.AllCompleted() {
		t.Fatal("AllCompleted = false")
	}
	var b bytes.Buffer
	if err := s.Write(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"group", "priority", "jobs", "succeeded", "failed", "makespan", "retries/job", "throttles/job",
		"umbrella/vip (high priority, submitted at 5.0s) finished at 6.5s while acme/big was 9% done.",
		"globex/mid and initech/tiny finished by 9.0s while acme/big was 14% done: the small tenants did not wait behind the big one.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	bigLine := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "acme/big ") {
			bigLine = l
		}
	}
	if f := strings.Fields(bigLine); len(f) != 10 || f[3] != "1000" || f[4] != "990" || f[5] != "10" || f[6] != "60.0s" || f[7] != "0.17" || f[8] != "0.15" {
		t.Errorf("big's row = %q", bigLine)
	}

	s.Groups[2].State, s.Groups[2].FinishedAt = contracts.StateCancelled, 0
	if s.AllCompleted() {
		t.Error("AllCompleted with a cancelled group")
	}
	v := strings.Join(s.Verdicts(), "\n")
	// Only what finished early is claimed; the cancelled group is named as such.
	if !strings.Contains(v, "Not every group completed: initech/tiny CANCELLED") || strings.Contains(v, "tiny finished") ||
		!strings.Contains(v, "globex/mid finished by 9.0s while acme/big was 14% done") {
		t.Errorf("verdicts with a cancelled group:\n%s", v)
	}
}

func snap(elapsed time.Duration, rows ...row) *snapshot {
	return &snapshot{elapsed: elapsed, rate: cli.Rate{Admitted: 300, Limit: 300, ActiveTenants: 2}, groups: rows}
}

func TestPlainView(t *testing.T) {
	var b bytes.Buffer
	v := &plainView{out: &b, every: time.Hour}
	running := row{id: "a", priority: "normal", total: 100, settled: 40, state: "RUNNING", rate: 12.5, eta: 5, level: redisq.CongestionLow}
	v.update(snap(time.Second, running, row{id: "b", priority: "high", total: 10, state: "not submitted yet"}))
	first := b.String()
	for _, want := range []string{"admitted 300/s of 300/s limit", "2 active tenant(s)", "a", "40/100", "40.0%", "12.5/s", "eta 5s", "congestion LOW", "not submitted yet"} {
		if !strings.Contains(first, want) {
			t.Errorf("first block lacks %q:\n%s", want, first)
		}
	}
	// Within the interval only the end of a group is printed.
	done := row{id: "b", priority: "high", total: 10, settled: 10, state: "COMPLETED", ended: true, completed: true}
	v.update(snap(2*time.Second, running, done))
	if got := strings.TrimPrefix(b.String(), first); got != "[   2.0s] b COMPLETED: 10/10 jobs\n" {
		t.Errorf("update within the interval printed %q", got)
	}
	v.update(snap(3*time.Second, running, done))
	if strings.Count(b.String(), "b COMPLETED") != 1 {
		t.Error("the end of a group was printed twice")
	}
	v.close()
	if strings.Count(b.String(), "global:") != 2 {
		t.Errorf("close should print a final block:\n%s", b.String())
	}
}

func TestBarView(t *testing.T) {
	var b bytes.Buffer
	groups := []*tracked{
		{Group: Group{Tenant: "t", ID: "alpha", Jobs: 50}, id: "alpha", submitted: 0},
		{Group: Group{Tenant: "t", ID: "beta", Jobs: 5, Priority: contracts.PriorityHigh}, id: "beta", submitted: -1},
	}
	v := newBarView(&b, groups, Workload{})
	v.update(snap(time.Second,
		row{id: "t/alpha", priority: "normal", total: 50, settled: 20, state: "RUNNING", rate: 9, eta: 4, level: redisq.CongestionNone},
		row{id: "t/beta", priority: "high", total: 5, state: "not submitted yet"}))
	v.update(snap(2*time.Second,
		row{id: "t/alpha", priority: "normal", total: 50, settled: 50, state: "COMPLETED", ended: true, completed: true},
		row{id: "t/beta", priority: "high", total: 5, settled: 2, state: "CANCELLED", ended: true}))
	v.close() // returns only once every bar has ended
	out := b.String()
	for _, want := range []string{"t/alpha", "t/beta", "50/50", "COMPLETED", "CANCELLED", "global: admitted 300/s of 300/s limit"} {
		if !strings.Contains(out, want) {
			t.Errorf("bars lack %q:\n%s", want, out)
		}
	}
}

func TestVerdictReportsALateThrottledGroup(t *testing.T) {
	s := &Summary{Biggest: 0, Groups: []GroupResult{
		{ID: "acme/big", Priority: contracts.PriorityNormal, Jobs: 1000, State: contracts.StateCompleted, FinishedAt: 60 * time.Second},
		{ID: "hooli/crm", Priority: contracts.PriorityNormal, Jobs: 100, Throttles: 65, State: contracts.StateCompleted,
			FinishedAt: 40 * time.Second, BiggestPercent: 70},
		{ID: "initech/tiny", Priority: contracts.PriorityNormal, Jobs: 10, State: contracts.StateCompleted,
			FinishedAt: 2 * time.Second, BiggestPercent: 3},
	}}
	v := strings.Join(s.Verdicts(), "\n")
	if !strings.Contains(v, "hooli/crm finished at 40.0s, when acme/big was 70% done: its downstream rate-limited it (0.65 throttles per job)") {
		t.Errorf("late group not reported as it is:\n%s", v)
	}
	if !strings.Contains(v, "initech/tiny finished by 2.0s while acme/big was 3% done") || strings.Contains(v, "crm and") {
		t.Errorf("early group claim:\n%s", v)
	}
}

// TestPartnerLine: the summary says how often the partner's callers were
// throttled, and the rate learned over the second half of each phase
// beside the capacity of that phase.
func TestPartnerLine(t *testing.T) {
	w, err := ForScale(ScaleFull)
	if err != nil {
		t.Fatal(err)
	}
	s := sampleSummary()
	s.Groups = append(s.Groups, GroupResult{ID: "hooli/crm-sync", Priority: "normal", Type: "http", Jobs: 1500, State: "COMPLETED",
		Succeeded: 1500, Retries: 90, Throttles: 90, FinishedAt: 31200 * time.Millisecond, BiggestPercent: 48})
	s.Partner = &PartnerRun{Capacity: w.Partner, Destination: "http", Groups: []string{"hooli/crm-sync"}, Accepted: 1500, Throttled: 90,
		End: 31200 * time.Millisecond, Learned: []Reading{
			{At: 500 * time.Millisecond}, {At: 5 * time.Second, Rate: 30}, {At: 11500 * time.Millisecond, Rate: 55.4},
			{At: 12 * time.Second, Rate: 50, Stopped: true}, {At: 18500 * time.Millisecond, Rate: 21}, {At: 20 * time.Second},
			{At: 23500 * time.Millisecond, Rate: 19.2}, {At: 31 * time.Second, Rate: 96.4},
		}}
	// The second halves: 6-12 s, 18-24 s, and 27.5 s to the last reading;
	// a reading without a rate counts in none of the means.
	want := "hooli/crm-sync called hooli's partner API: 0.06 throttles per job (90 429s, 1500 calls accepted); " +
		"learned rate over the second half of each phase (its capacity): 55/s (60/s) 6.0-12.0s, 20/s (20/s) 18.0-24.0s, 96/s (100/s) 27.5-31.0s"
	if got := s.PartnerLine(); got != want {
		t.Errorf("partner line\n%s\nwant\n%s", got, want)
	}
	var b bytes.Buffer
	if err := s.Write(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	// Before the makespan line (none here: no group's end is known).
	if got := lines[len(lines)-1]; got != want+"." {
		t.Errorf("the summary ends with\n%s\nwant the partner line", got)
	}
	// A run that ended before any throttle learned nothing; no reading,
	// no rates; no partner, no line.
	s.Partner.Learned = []Reading{{At: 2 * time.Second}}
	if got := s.PartnerLine(); !strings.HasSuffix(got, "; learned rate over the second half of each phase (its capacity): none (60/s) 1.0-2.0s") {
		t.Errorf("nothing learned: %q", got)
	}
	s.Partner.Learned = nil
	if got := s.PartnerLine(); !strings.HasSuffix(got, "1500 calls accepted)") {
		t.Errorf("no readings: %q", got)
	}
	s.Partner = nil
	if got := s.PartnerLine(); got != "" {
		t.Errorf("no partner: %q", got)
	}
}

// TestPartnerInGlobalLine: while hooli runs, the live view's global line
// shows the partner's capacity and the rate learned of it.
func TestPartnerInGlobalLine(t *testing.T) {
	s := snap(time.Second)
	s.partner = &partnerNow{name: "hooli's partner API", capacity: 60}
	if got := globalLine(s); !strings.HasSuffix(got, "; hooli's partner API: capacity 60.0/s") {
		t.Errorf("before a reading: %q", got)
	}
	s.partner.last = &Reading{Rate: 0}
	if got := globalLine(s); !strings.HasSuffix(got, "capacity 60.0/s, no rate learned yet") {
		t.Errorf("nothing learned: %q", got)
	}
	s.partner.last = &Reading{Rate: 55.25, Stopped: true}
	if got := globalLine(s); !strings.HasSuffix(got, "capacity 60.0/s, learned 55.2/s (stopped by a Retry-After)") {
		t.Errorf("learned: %q", got)
	}
}
