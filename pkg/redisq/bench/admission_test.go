package bench

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// The admission load test, scaled: a global limit of 1,000 jobs per 1s window
// instead of 10 TPS, so the 15,000-job run ideally takes 15 s.
const (
	admitLimit   = 1000
	admitWindow  = time.Second
	admitBatch   = 256                   // jobs asked of one Admit call (the fetcher's default)
	idlePause    = 5 * time.Millisecond  // an admitter's pause when nothing was admitted and no wake time was given
	releaseBatch = 500                   // jobs asked of one Release call (the dispatcher's default)
	releaseEvery = 50 * time.Millisecond // the dispatcher's longest sleep between releases
	admitters    = 2
)

var (
	admissionCap = flag.Duration("admission.cap", 150*time.Second,
		`longest run of one admission scenario; a run cut short reports "capped":true and its figures so far`)
	admissionAlpha = flag.Float64("admission.alpha", serviceAlpha,
		"the fair score's ALPHA; it moves the order only as doneJobs grows (with -admission.record)")
	admissionRecord = flag.Bool("admission.record", false,
		"seal every group and record each done job as SUCCESS (as the aggregator would), so doneJobs moves the fair score's ALPHA term and completed groups leave the active set; Redis commands per job then include the recording")
)

// scenario is a set of groups enqueued at once: sizes[k] jobs for group k.
type scenario struct {
	name  string
	sizes []int
}

var scenarios = []scenario{
	{"S1", []int{15_000}},
	{"S2", []int{5_000, 2_000, 1_000, 500, 100}},
}

// BenchmarkAdmission is the admission load test for both admission modes, with
// admission consumed directly: an admitted job is confirmed and counts as
// done at once. Two admitters call Admit(256) and sleep AdmitResult.WakeMs
// when it is positive (idlePause when nothing waits or nothing came). In
// seed mode a release loop hands due parked jobs on the way the dispatcher
// does (Release(500), sleep until the next due time, at most 50ms); a
// released job counts as done at once, without a second rate check, as in
// the seed. Each mode and scenario runs on a redis-server of its own and
// prints one JSON line. Runs only with -admission; -admission.record adds
// the aggregator's part (see the flag). The tenant scenario T1 (two tenants,
// one with one group and one with twenty, see tenants_test.go) prints the
// tenant fairness figures tenant_share_jain and tenant_weight_ratio; the
// flow-control scenarios (flowcontrol_test.go) print type_limit_max_window_ratio
// and type_limit_utilisation (TL, a per-type rate limit), and
// max_inflight_ratio and max_inflight_utilisation (MIF, groups with an
// in-flight limit).
func BenchmarkAdmission(b *testing.B) {
	if !*admission {
		b.Skip("runs only with -args -admission (make bench-admission)")
	}
	for _, mode := range []string{redisq.ModeSeed, redisq.ModePaced} {
		for _, sc := range scenarios {
			b.Run(mode+"/"+sc.name, func(b *testing.B) { runAdmission(b, mode, sc) })
		}
		b.Run(mode+"/T1", func(b *testing.B) { runTenantAdmission(b, mode) })
		b.Run(mode+"/TL", func(b *testing.B) { runTypeLimitAdmission(b, mode) })
		b.Run(mode+"/MIF", func(b *testing.B) { runMaxInflightAdmission(b, mode) })
	}
}

// event is n jobs of one group handed on at atMs.
type event struct {
	atMs   int64
	gid    string
	n      int
	tenant string
}

// tally collects what the admitters and the release loop did.
type tally struct {
	mu       sync.Mutex
	total    int
	done     int
	parked   int
	calls    int
	maxCall  time.Duration
	events   []event
	seen     map[string]bool
	dup      string
	finished chan struct{}
}

func newTally(total int) *tally {
	return &tally{total: total, seen: make(map[string]bool, total), finished: make(chan struct{})}
}

// add records the jobs one call handed on at atMs.
func (t *tally) add(atMs int64, jobs []redisq.LeasedJob, parked int, took time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls++
	t.parked += parked
	t.maxCall = max(t.maxCall, took)
	perGroup := map[contracts.GroupRef]int{}
	for _, j := range jobs {
		k := j.Group.String() + ":" + j.ID
		if t.seen[k] && t.dup == "" {
			t.dup = k
		}
		t.seen[k] = true
		perGroup[j.Group]++
	}
	for g, n := range perGroup {
		t.events = append(t.events, event{atMs: atMs, gid: g.ID, n: n, tenant: g.Tenant})
	}
	before := t.done
	t.done += len(jobs)
	if before < t.total && t.done >= t.total {
		close(t.finished)
	}
}

// admissionLine is the JSON line of one mode and scenario. utilization
// counts a window's capacity as min(limit, jobs waiting at its start), so a
// last window with fewer jobs left than the limit is not held against the
// run; utilization_whole_windows is done / (limit * windows with backlog).
// The fields after worst_group_fair_ratio add context: job counts, seconds,
// and the longest single Admit or Release round trip.
type admissionLine struct {
	Bench                 string  `json:"bench"`
	Mode                  string  `json:"mode"`
	Scenario              string  `json:"scenario"`
	MakespanRatio         float64 `json:"makespan_ratio"`
	ThrottlesPerJob       float64 `json:"throttles_per_job"`
	RedisCmdsPerJob       float64 `json:"redis_cmds_per_job"`
	MaxWindowRatio        float64 `json:"max_window_ratio"`
	MaxSlidingWindowRatio float64 `json:"max_sliding_window_ratio"`
	Utilization           float64 `json:"utilization"`
	WorstGroupFairRatio   float64 `json:"worst_group_fair_ratio"`
	Capped                bool    `json:"capped,omitempty"`
	Recorded              bool    `json:"recorded,omitempty"`
	Alpha                 float64 `json:"alpha"`
	UtilizationWhole      float64 `json:"utilization_whole_windows"`
	Jobs                  int     `json:"jobs"`
	Done                  int     `json:"done"`
	MakespanS             float64 `json:"makespan_s"`
	IdealS                float64 `json:"ideal_s"`
	Calls                 int     `json:"calls"`
	MaxCallMs             float64 `json:"max_call_ms"`
}

func runAdmission(b *testing.B, mode string, sc scenario) {
	b.StopTimer()
	s := startServer(b)
	q := s.queue(b, redisq.Config{Mode: mode, GlobalLimit: admitLimit, Window: admitWindow, Alpha: *admissionAlpha})
	ctx := context.Background()

	sizes := map[contracts.GroupRef]int{}
	var jobs []redisq.Job
	for k, n := range sc.sizes {
		sizes[groupRef(k)] = n
		for i := 0; i < n; i++ {
			jobs = append(jobs, job(k, len(jobs)))
		}
	}
	enqueueAll(b, q, jobs)
	if *admissionRecord {
		for g, n := range sizes {
			if _, err := q.Seal(ctx, g, int64(n)); err != nil {
				b.Fatal(err)
			}
		}
	}
	t := newTally(len(jobs))

	// Start on a window boundary so every window counted is a whole one.
	windowMs := admitWindow.Milliseconds()
	startMs := (time.Now().UnixMilli()/windowMs + 1) * windowMs
	time.Sleep(time.Until(time.UnixMilli(startMs)))
	st0 := s.commandStats(b)
	stopAt := time.UnixMilli(startMs).Add(*admissionCap)
	run, stop := context.WithDeadline(ctx, stopAt)
	defer stop()
	go func() {
		select {
		case <-t.finished:
			stop()
		case <-run.Done():
		}
	}()

	b.StartTimer()
	runLoops(b, run, stop, q, t, mode)
	b.StopTimer()
	stop()
	st1 := s.commandStats(b)
	endMs := time.Now().UnixMilli()

	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dup != "" {
		b.Fatalf("job %s handed on twice", t.dup)
	}
	capped := t.done < t.total
	if capped {
		endMs = stopAt.UnixMilli()
	} else {
		checkDrained(b, s, q)
		if *admissionRecord {
			checkCompleted(b, q, sizes)
		}
	}

	sum := summarize(startMs, windowMs, admitLimit, t.events, sc.sizes, capped, endMs)
	line := admissionLine{
		Bench: "admission", Mode: mode, Scenario: sc.name,
		MakespanRatio:         round(sum.makespanS / sum.idealS),
		ThrottlesPerJob:       round(float64(t.parked) / float64(t.total)),
		RedisCmdsPerJob:       round(float64(callsBetween(st0, st1, "info")) / float64(t.total)),
		MaxWindowRatio:        round(sum.maxWindowRatio),
		MaxSlidingWindowRatio: round(sum.maxSlidingRatio),
		Utilization:           round(sum.utilization),
		WorstGroupFairRatio:   round(sum.worstFairRatio),
		Capped:                capped,
		Recorded:              *admissionRecord,
		Alpha:                 *admissionAlpha,
		UtilizationWhole:      round(sum.utilizationWhole),
		Jobs:                  t.total, Done: t.done,
		MakespanS: round(sum.makespanS), IdealS: round(sum.idealS),
		Calls: t.calls, MaxCallMs: round(msOf(t.maxCall)),
	}
	out, _ := json.Marshal(line)
	fmt.Fprintln(os.Stdout, string(out))
	b.ReportMetric(line.MakespanRatio, "makespan-ratio")
	b.ReportMetric(line.ThrottlesPerJob, "throttles/job")
	b.ReportMetric(line.RedisCmdsPerJob, "cmds/job")
	b.ReportMetric(line.MaxWindowRatio, "max-window-ratio")
	b.ReportMetric(line.MaxSlidingWindowRatio, "max-sliding-ratio")
	b.ReportMetric(line.Utilization, "utilization")
	b.ReportMetric(line.WorstGroupFairRatio, "worst-fair-ratio")
	b.Logf("%s %s: jobs per window: %s; the busiest %s span starts at %.3fs", mode, sc.name, formatWindows(sum.perWindow), admitWindow, sum.busiestSpanS)
	for k := range sc.sizes {
		if len(sc.sizes) == 1 {
			break // one group: no fairness to show
		}
		gid := groupID(k)
		b.Logf("%s %s: %s (%d jobs) done at %.3fs, max-min fair ideal %.3fs", mode, sc.name, gid, sc.sizes[k], sum.groupDoneS[gid], sum.groupIdealS[gid])
	}
}

// admitLoop is one admitter: Admit(256), confirm, count, sleep as told.
func admitLoop(run context.Context, q *redisq.Queue, t *tally) error {
	ctx := context.Background() // a call in flight is never cut short
	for run.Err() == nil {
		began := time.Now()
		r, err := q.Admit(ctx, admitBatch)
		took := time.Since(began)
		if err != nil {
			return err
		}
		if err := finish(ctx, q, r.Jobs); err != nil {
			return err
		}
		t.add(r.NowMs, r.Jobs, r.Parked, took)
		var pause time.Duration
		switch {
		case r.WakeMs > 0:
			pause = time.Duration(r.WakeMs) * time.Millisecond
		case r.WakeMs < 0 || len(r.Jobs) == 0:
			pause = idlePause
		}
		if pause > 0 {
			sleep(run, pause)
		}
	}
	return nil
}

// releaseLoop is a plain dispatcher: due parked jobs are handed on with
// no second rate check.
func releaseLoop(run context.Context, q *redisq.Queue, t *tally) error {
	ctx := context.Background()
	for run.Err() == nil {
		began := time.Now()
		r, err := q.Release(ctx, releaseBatch)
		at := time.Now()
		if err != nil {
			return err
		}
		if err := finish(ctx, q, r.Jobs); err != nil {
			return err
		}
		t.add(at.UnixMilli(), r.Jobs, 0, at.Sub(began))
		if len(r.Jobs) == releaseBatch {
			continue
		}
		pause := releaseEvery
		if r.NextDueMs >= 0 {
			pause = min(pause, max(time.Millisecond, time.Until(time.UnixMilli(r.NextDueMs))))
		}
		sleep(run, pause)
	}
	return nil
}

// finish makes handed-on jobs done: their leases end and, with
// -admission.record, their results are recorded.
func finish(ctx context.Context, q *redisq.Queue, jobs []redisq.LeasedJob) error {
	if len(jobs) == 0 {
		return nil
	}
	if err := q.Confirm(ctx, jobs...); err != nil {
		return err
	}
	if !*admissionRecord {
		return nil
	}
	rs := make([]contracts.JobResult, len(jobs))
	for i, j := range jobs {
		rs[i] = contracts.JobResult{Tenant: j.Group.Tenant, GroupID: j.Group.ID, JobID: j.ID, Attempt: j.Attempt, Status: contracts.ResultSuccess}
	}
	out, err := q.RecordBatch(ctx, rs)
	if err != nil {
		return err
	}
	for i, o := range out {
		if o.Outcome != redisq.Recorded {
			return fmt.Errorf("record %s/%s: %s", rs[i].Ref(), rs[i].JobID, o.Outcome)
		}
	}
	return nil
}

func sleep(run context.Context, d time.Duration) {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-run.Done():
	case <-tm.C:
	}
}

// checkDrained fails b unless every job left the fair queue, the non-ready
// queue and the inflight set.
func checkDrained(b *testing.B, s *server, q *redisq.Queue) {
	b.Helper()
	ctx := context.Background()
	k := keysOf(q)
	for _, key := range append(k.FairQueues(), k.NonReadyQueue(), k.Inflight()) {
		n, err := s.rdb.ZCount(ctx, key, "-inf", "(+inf").Result() // not the inflight set's pin
		if err != nil {
			b.Fatal(err)
		}
		if n != 0 {
			b.Fatalf("%s holds %d members after every job was done", key, n)
		}
	}
}

// checkCompleted fails b unless every group completed with all its jobs
// counted once.
func checkCompleted(b *testing.B, q *redisq.Queue, sizes map[contracts.GroupRef]int) {
	b.Helper()
	for ref, n := range sizes {
		g, ok, err := q.Group(context.Background(), ref)
		if err != nil || !ok {
			b.Fatalf("group %s: %v (exists %v)", ref, err, ok)
		}
		if g.State != contracts.StateCompleted || g.Succeeded != int64(n) {
			b.Fatalf("group %s: %s with %d of %d succeeded", ref, g.State, g.Succeeded, n)
		}
	}
}

// summary is what a run's timeline says.
type summary struct {
	makespanS, idealS float64
	maxWindowRatio    float64 // most jobs in one aligned window / limit
	maxSlidingRatio   float64 // most jobs in any window-long span / limit
	busiestSpanS      float64 // where that span starts (s from the start)
	utilization       float64 // done / sum over windows with backlog of min(limit, jobs waiting at the window's start)
	utilizationWhole  float64 // done / (limit * windows with backlog)
	worstFairRatio    float64 // max over groups of done time / max-min fair ideal (0 for one group)
	perWindow         []int   // jobs per aligned window from the start
	groupDoneS        map[string]float64
	groupIdealS       map[string]float64
}

// summarize reads a timeline that starts at startMs (a window boundary).
// sizes[k] is group k's job count (groupID(k)). When capped, the run ended at
// endMs with jobs left, and unfinished groups count as done at endMs (their
// ratios are lower bounds).
func summarize(startMs, windowMs int64, limit int, events []event, sizes []int, capped bool, endMs int64) summary {
	sort.Slice(events, func(i, j int) bool { return events[i].atMs < events[j].atMs })
	total := 0
	for _, n := range sizes {
		total += n
	}
	s := summary{
		idealS:      float64(total) / float64(limit) * float64(windowMs) / 1000,
		groupDoneS:  map[string]float64{},
		groupIdealS: map[string]float64{},
	}
	lastMs := startMs
	left := map[string]int{}
	for k, n := range sizes {
		left[groupID(k)] = n
	}
	done, perWindow := 0, map[int64]int{}
	for _, e := range events {
		at := max(e.atMs, startMs)
		lastMs = max(lastMs, at)
		done += e.n
		perWindow[(at-startMs)/windowMs] += e.n
		if left[e.gid] -= e.n; left[e.gid] <= 0 {
			s.groupDoneS[e.gid] = float64(at-startMs) / 1000
		}
	}
	windows := (lastMs-startMs)/windowMs + 1
	if capped {
		// every window the run was cut short in still had backlog
		windows = max(windows, (endMs-startMs+windowMs-1)/windowMs)
		lastMs = max(lastMs, endMs)
	}
	s.makespanS = float64(lastMs-startMs) / 1000
	s.perWindow = make([]int, windows)
	for w, n := range perWindow {
		s.perWindow[w] = n
		s.maxWindowRatio = max(s.maxWindowRatio, float64(n)/float64(limit))
	}
	// A window can use at most the limit, and no more than the jobs still
	// waiting at its start (every job is queued before the start).
	capacity, before := 0, 0
	for _, n := range s.perWindow {
		capacity += min(limit, total-before)
		before += n
	}
	s.utilization = float64(done) / float64(capacity)
	s.utilizationWhole = float64(done) / (float64(limit) * float64(windows))

	// Sliding: the busiest span [t, t+window) starts at some event.
	inSpan, j := 0, 0
	for i := range events {
		for j < len(events) && events[j].atMs < events[i].atMs+windowMs {
			inSpan += events[j].n
			j++
		}
		if r := float64(inSpan) / float64(limit); r > s.maxSlidingRatio {
			s.maxSlidingRatio, s.busiestSpanS = r, float64(events[i].atMs-startMs)/1000
		}
		inSpan -= events[i].n
	}

	if len(sizes) > 1 {
		ideal := waterFill(sizes, float64(limit)*1000/float64(windowMs))
		for k := range sizes {
			gid := groupID(k)
			s.groupIdealS[gid] = ideal[k]
			d, ok := s.groupDoneS[gid]
			if !ok {
				d = float64(endMs-startMs) / 1000
				s.groupDoneS[gid] = d
			}
			s.worstFairRatio = max(s.worstFairRatio, d/ideal[k])
		}
	}
	return s
}

// waterFill returns each group's completion time (s) under max-min fair
// sharing of rate jobs/s: the groups still unfinished split it equally.
func waterFill(sizes []int, rate float64) []float64 {
	left := make([]float64, len(sizes))
	for i, n := range sizes {
		left[i] = float64(n)
	}
	out := make([]float64, len(sizes))
	now, active := 0.0, 0
	for _, l := range left {
		if l > 0 {
			active++
		}
	}
	for active > 0 {
		share := rate / float64(active)
		step := -1.0
		for _, l := range left {
			if l > 0 && (step < 0 || l < step) {
				step = l
			}
		}
		now += step / share
		for i := range left {
			if left[i] <= 0 {
				continue
			}
			if left[i] -= step; left[i] <= 1e-9 {
				left[i] = 0
				out[i] = now
				active--
			}
		}
	}
	return out
}

// formatWindows renders per-window counts compactly for logs.
func formatWindows(w []int) string {
	var sb strings.Builder
	for i, n := range w {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%d", n)
	}
	return sb.String()
}
