package bench

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/redis/go-redis/v9"
)

// The flow-control scenarios of the admission load test
// (docs/ARCHITECTURE.md §5): "TL", a per-type rate limit, and "MIF",
// groups with an in-flight limit.

// The type-limit scenario: a global limit of 1,000 jobs per 1s window and
// sms limited to 100 per window (BULKACTION_TYPE_RATE_LIMITS=sms=100/s).
// Tenant A has one sms group of 2,000 jobs, tenant B five sms groups of
// 400, and tenant C an email group of 12,000 (email has no limit of its
// own). Every group stays backlogged for the typeRun the scenario lasts.
const (
	typeSMS       = "sms"
	typeEmail     = "email"
	typeSMSLimit  = 100
	typeRun       = 10 * time.Second
	typeSMSA      = 2_000
	typeSMSGroups = 5
	typeSMSB      = 400 // per group of B
	typeEmailJobs = 12_000
	tenantC       = "tenant-c"
)

// typeLimitLine is the JSON line of the type-limit scenario for one mode.
// type_limit_max_window_ratio is the most sms handed on in any span of one
// window (sliding; the aligned windows are among them) ÷ the sms limit:
// at most 1 + burst/window (1.04) in paced mode, whose per-type pacer
// admits up to the burst ahead of the even pace; at most 1.0 in every
// aligned window in both modes (type_limit_max_aligned_window_ratio).
// type_limit_utilisation is the sms handed on in the run's whole windows ÷
// the limit × those windows. In seed mode, a fixed-window limiter like its
// global limit, the sms of a window go at its start, so a sliding span
// across a window boundary may hold up to two windows' worth: only the
// aligned windows are bounded there. The fields after them add context: the
// global limit's own ratios, the unlimited type's rate and tenants A's and
// B's shares of the sms (Jain's index, 1 = equal).
type typeLimitLine struct {
	Bench                     string  `json:"bench"`
	Mode                      string  `json:"mode"`
	Scenario                  string  `json:"scenario"`
	TypeLimitMaxWindowRatio   float64 `json:"type_limit_max_window_ratio"`
	TypeLimitUtilisation      float64 `json:"type_limit_utilisation"`
	TypeLimitMaxAlignedRatio  float64 `json:"type_limit_max_aligned_window_ratio"`
	GlobalMaxWindowRatio      float64 `json:"global_max_window_ratio"`
	GlobalMaxAlignedRatio     float64 `json:"global_max_aligned_window_ratio"`
	OtherTypeJobsPerS         float64 `json:"other_type_jobs_per_s"`
	SMSTenantJain             float64 `json:"sms_tenant_jain"`
	SMSJobs                   int     `json:"sms_jobs"`
	Windows                   int     `json:"windows"`
	TypeLimitPerWindow        int     `json:"type_limit_per_window"`
	GlobalLimitPerWindow      int     `json:"global_limit_per_window"`
	Parked                    int     `json:"parked"`
	Calls                     int     `json:"calls"`
	MaxCallMs                 float64 `json:"max_call_ms"`
	TypeLimitMaxWindowBoundOK bool    `json:"type_limit_within_bound"`
}

// groupType is the job type of a scenario group, named "<type>-<n>".
func groupType(gid string) string {
	t, _, _ := strings.Cut(gid, "-")
	return t
}

func runTypeLimitAdmission(b *testing.B, mode string) {
	b.StopTimer()
	s := startServer(b)
	q := s.queue(b, redisq.Config{Mode: mode, GlobalLimit: admitLimit, Window: admitWindow, Alpha: *admissionAlpha,
		TypeLimits: map[string]int{typeSMS: typeSMSLimit}})
	ref := func(tenant, typ string, k int) contracts.GroupRef {
		return contracts.GroupRef{Tenant: tenant, ID: fmt.Sprintf("%s-%03d", typ, k)}
	}
	var jobs []redisq.Job
	add := func(g contracts.GroupRef, typ string, n int) {
		for i := 0; i < n; i++ {
			jobs = append(jobs, redisq.Job{Group: g, ID: jobID(i), Type: typ, Payload: payload(i)})
		}
	}
	add(ref(tenantA, typeSMS, 0), typeSMS, typeSMSA)
	for k := 0; k < typeSMSGroups; k++ {
		add(ref(tenantB, typeSMS, k), typeSMS, typeSMSB)
	}
	add(ref(tenantC, typeEmail, 0), typeEmail, typeEmailJobs)
	enqueueAll(b, q, jobs)
	t := newTally(len(jobs))

	windowMs := admitWindow.Milliseconds()
	startMs := (time.Now().UnixMilli()/windowMs + 1) * windowMs
	time.Sleep(time.Until(time.UnixMilli(startMs)))
	endMs := startMs + typeRun.Milliseconds()
	run, stop := context.WithDeadline(context.Background(), time.UnixMilli(endMs))
	defer stop()
	b.StartTimer()
	runLoops(b, run, stop, q, t, mode)
	b.StopTimer()

	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dup != "" {
		b.Fatalf("job %s handed on twice", t.dup)
	}
	var sms, all []event
	perTenant := map[string]int{}
	email := 0
	for _, e := range t.events {
		if e.atMs < startMs || e.atMs >= endMs {
			continue
		}
		all = append(all, e)
		switch groupType(e.gid) {
		case typeSMS:
			sms = append(sms, e)
			perTenant[e.tenant] += e.n
		case typeEmail:
			email += e.n
		}
	}
	windows := int(typeRun / admitWindow)
	smsN := 0
	for _, e := range sms {
		smsN += e.n
	}
	burst := 1 + 1/float64(redisq.BurstDivisor)
	line := typeLimitLine{
		Bench: "admission", Mode: mode, Scenario: "TL",
		TypeLimitMaxWindowRatio:  round(float64(maxSpan(sms, windowMs)) / typeSMSLimit),
		TypeLimitUtilisation:     round(float64(smsN) / float64(typeSMSLimit*windows)),
		TypeLimitMaxAlignedRatio: round(float64(maxAligned(sms, windowMs)) / typeSMSLimit),
		GlobalMaxWindowRatio:     round(float64(maxSpan(all, windowMs)) / admitLimit),
		GlobalMaxAlignedRatio:    round(float64(maxAligned(all, windowMs)) / admitLimit),
		OtherTypeJobsPerS:        round(float64(email) / typeRun.Seconds()),
		SMSTenantJain:            round(jain(float64(perTenant[tenantA]), float64(perTenant[tenantB]))),
		SMSJobs:                  smsN, Windows: windows,
		TypeLimitPerWindow: typeSMSLimit, GlobalLimitPerWindow: admitLimit,
		Parked: t.parked, Calls: t.calls, MaxCallMs: round(msOf(t.maxCall)),
	}
	bound := burst
	if mode == redisq.ModeSeed {
		bound = 1
	}
	line.TypeLimitMaxWindowBoundOK = line.TypeLimitMaxAlignedRatio <= 1 && (mode == redisq.ModeSeed || line.TypeLimitMaxWindowRatio <= bound)
	out, _ := json.Marshal(line)
	fmt.Fprintln(os.Stdout, string(out))
	b.ReportMetric(line.TypeLimitMaxWindowRatio, "type-max-window-ratio")
	b.ReportMetric(line.TypeLimitUtilisation, "type-utilisation")
	b.Logf("%s TL: sms per tenant %v, email %d in %d windows", mode, perTenant, email, windows)
	if !line.TypeLimitMaxWindowBoundOK {
		b.Errorf("%s TL: sms window ratios %.3f (sliding) and %.3f (aligned) beyond their bounds", mode,
			line.TypeLimitMaxWindowRatio, line.TypeLimitMaxAlignedRatio)
	}
}

// runLoops runs the scenario's admitters (and, in seed mode, the release
// loop) until run ends.
func runLoops(b *testing.B, run context.Context, stop context.CancelFunc, q *redisq.Queue, t *tally, mode string) {
	var wg sync.WaitGroup
	errs := make(chan error, admitters+1)
	loops := []func(context.Context, *redisq.Queue, *tally) error{}
	for a := 0; a < admitters; a++ {
		loops = append(loops, admitLoop)
	}
	if mode == redisq.ModeSeed {
		loops = append(loops, releaseLoop)
	}
	for _, loop := range loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := loop(run, q, t); err != nil {
				errs <- err
				stop()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// maxSpan is the most jobs of events in any span [t, t+spanMs).
func maxSpan(events []event, spanMs int64) int {
	ev := append([]event(nil), events...)
	sort.Slice(ev, func(i, j int) bool { return ev[i].atMs < ev[j].atMs })
	best, in, j := 0, 0, 0
	for i := range ev {
		for j < len(ev) && ev[j].atMs < ev[i].atMs+spanMs {
			in += ev[j].n
			j++
		}
		best = max(best, in)
		in -= ev[i].n
	}
	return best
}

// maxAligned is the most jobs of events in one aligned window.
func maxAligned(events []event, windowMs int64) int {
	per := map[int64]int{}
	best := 0
	for _, e := range events {
		per[e.atMs/windowMs] += e.n
		best = max(best, per[e.atMs/windowMs])
	}
	return best
}

// The in-flight scenario: mifGroups groups of one tenant, each with
// maxInFlight mifLimit and more jobs than the run takes, admitted by two
// admitters (no rate limit binds: the global limit is far above what the
// slots let through) while a completer records each admitted job's result
// after a random service time (uniform in mifServiceMin..mifServiceMax), in
// the order the times fall due.
const (
	mifGroups     = 10
	mifLimit      = 8
	mifJobs       = 5_000 // per group
	mifRun        = 5 * time.Second
	mifSample     = 5 * time.Millisecond
	mifServiceMin = 10 * time.Millisecond
	mifServiceMax = 90 * time.Millisecond
)

// maxInflightLine is the JSON line of the in-flight scenario for one mode.
// max_inflight_ratio is the highest in-flight count of any group at any
// sample ÷ its maxInFlight (1.0 = at the limit, never above it); a sample
// is taken with no Admit or Record call under way, so the count (jobs
// admitted minus results recorded) is exact, and it is compared with the
// group's own counter (meta inFlight). max_inflight_utilisation is the
// time-average of the in-flight jobs ÷ the slots (groups × maxInFlight),
// with work always waiting: what the slots are used, given how soon a freed
// slot is filled again (the admitters poll every 5 ms when nothing is
// admissible).
type maxInflightLine struct {
	Bench                  string  `json:"bench"`
	Mode                   string  `json:"mode"`
	Scenario               string  `json:"scenario"`
	MaxInflightRatio       float64 `json:"max_inflight_ratio"`
	MaxInflightUtilisation float64 `json:"max_inflight_utilisation"`
	Groups                 int     `json:"groups"`
	MaxInFlight            int     `json:"max_in_flight"`
	Samples                int     `json:"samples"`
	CounterMismatches      int     `json:"counter_mismatches"`
	Recorded               int     `json:"recorded"`
	JobsPerS               float64 `json:"jobs_per_s"`
	ServiceMsMin           float64 `json:"service_ms_min"`
	ServiceMsMax           float64 `json:"service_ms_max"`
}

// running is an admitted job and when its result is recorded.
type running struct {
	job redisq.LeasedJob
	due time.Time
}

type runningHeap []running

func (h runningHeap) Len() int           { return len(h) }
func (h runningHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h runningHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *runningHeap) Push(x any)        { *h = append(*h, x.(running)) }
func (h *runningHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// inflightState is the scenario's own count of each group's admitted and
// unrecorded jobs. Admit and Record calls hold gate for reading while they
// run and update the counts; the sampler holds it for writing, so it reads
// the counts with no call under way.
type inflightState struct {
	gate  sync.RWMutex
	mu    sync.Mutex // counts, pending and recorded, between callers
	count map[contracts.GroupRef]int
	pend  runningHeap
	done  int
}

func runMaxInflightAdmission(b *testing.B, mode string) {
	b.StopTimer()
	s := startServer(b)
	q := s.queue(b, redisq.Config{Mode: mode, GlobalLimit: 1_000_000, Window: admitWindow, Alpha: *admissionAlpha,
		Lease: time.Hour})
	ctx := context.Background()
	var refs []contracts.GroupRef
	var jobs []redisq.Job
	for g := 0; g < mifGroups; g++ {
		ref := contracts.GroupRef{Tenant: tenantA, ID: groupID(g)}
		refs = append(refs, ref)
		for i := 0; i < mifJobs; i++ {
			jobs = append(jobs, redisq.Job{Group: ref, ID: jobID(i), Type: "send-promotion", Payload: payload(i), MaxInFlight: mifLimit})
		}
	}
	enqueueAll(b, q, jobs)
	st := &inflightState{count: map[contracts.GroupRef]int{}}
	run, stop := context.WithTimeout(ctx, mifRun)
	defer stop()
	errs := make(chan error, admitters+2)
	fail := func(err error) {
		errs <- err
		stop()
	}
	var wg sync.WaitGroup
	b.StartTimer()
	for a := 0; a < admitters; a++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for run.Err() == nil {
				st.gate.RLock()
				r, err := q.Admit(ctx, admitBatch)
				if err == nil {
					now := time.Now()
					st.mu.Lock()
					for _, j := range r.Jobs {
						st.count[j.Group]++
						d := mifServiceMin + rand.N(mifServiceMax-mifServiceMin)
						heap.Push(&st.pend, running{job: j, due: now.Add(d)})
					}
					st.mu.Unlock()
				}
				st.gate.RUnlock()
				if err != nil {
					fail(err)
					return
				}
				if err := q.Confirm(ctx, r.Jobs...); err != nil {
					fail(err)
					return
				}
				if len(r.Jobs) == 0 {
					sleep(run, idlePause)
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // the completer: records results as their times fall due
		defer wg.Done()
		for run.Err() == nil {
			now := time.Now()
			var due []running
			st.mu.Lock()
			for st.pend.Len() > 0 && !st.pend[0].due.After(now) {
				due = append(due, heap.Pop(&st.pend).(running))
			}
			st.mu.Unlock()
			if len(due) == 0 {
				sleep(run, time.Millisecond)
				continue
			}
			rand.Shuffle(len(due), func(i, j int) { due[i], due[j] = due[j], due[i] })
			rs := make([]contracts.JobResult, len(due))
			for i, d := range due {
				rs[i] = contracts.JobResult{Tenant: d.job.Group.Tenant, GroupID: d.job.Group.ID, JobID: d.job.ID,
					Attempt: d.job.Attempt, Status: contracts.ResultSuccess}
			}
			st.gate.RLock()
			out, err := q.RecordBatch(ctx, rs)
			if err == nil {
				st.mu.Lock()
				for i, o := range out {
					if o.Outcome == redisq.Recorded {
						st.count[due[i].job.Group]--
						st.done++
					}
				}
				st.mu.Unlock()
			}
			st.gate.RUnlock()
			if err != nil {
				fail(err)
				return
			}
		}
	}()
	samples, mismatches := 0, 0
	maxRatio, sumUsed := 0.0, 0.0
	for run.Err() == nil {
		sleep(run, mifSample)
		st.gate.Lock()
		cmds := make([]*redis.StringCmd, len(refs))
		_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, ref := range refs {
				cmds[i] = p.HGet(ctx, keysOf(q).GroupMeta(ref), "inFlight")
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			st.gate.Unlock()
			b.Fatal(err)
		}
		counters := make([]int64, len(refs))
		for i, c := range cmds {
			counters[i], _ = c.Int64()
		}
		st.mu.Lock()
		used := 0
		for i, ref := range refs {
			n := st.count[ref]
			used += n
			maxRatio = max(maxRatio, float64(n)/mifLimit)
			if int64(n) != counters[i] {
				mismatches++
			}
		}
		st.mu.Unlock()
		st.gate.Unlock()
		samples++
		sumUsed += float64(used) / float64(mifGroups*mifLimit)
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	line := maxInflightLine{
		Bench: "admission", Mode: mode, Scenario: "MIF",
		MaxInflightRatio: round(maxRatio), MaxInflightUtilisation: round(sumUsed / float64(max(samples, 1))),
		Groups: mifGroups, MaxInFlight: mifLimit, Samples: samples, CounterMismatches: mismatches,
		Recorded: st.done, JobsPerS: round(float64(st.done) / mifRun.Seconds()),
		ServiceMsMin: msOf(mifServiceMin), ServiceMsMax: msOf(mifServiceMax),
	}
	out, _ := json.Marshal(line)
	fmt.Fprintln(os.Stdout, string(out))
	b.ReportMetric(line.MaxInflightRatio, "max-inflight-ratio")
	b.ReportMetric(line.MaxInflightUtilisation, "inflight-utilisation")
	if line.MaxInflightRatio > 1 || mismatches > 0 {
		b.Errorf("%s MIF: max in-flight ratio %.3f, %d samples where the counter disagreed", mode, line.MaxInflightRatio, mismatches)
	}
}
