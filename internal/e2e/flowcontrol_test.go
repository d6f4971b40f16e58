package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/status"
)

// Flow control end to end (docs/ARCHITECTURE.md §5 "In-flight limit" and
// §6): a group's maxInFlight holds across several fetcher and worker
// processes, a crashed worker leaks no slot, 429s with Retry-After never
// fail a job nor come back early, and `status` adds up at every reading.
// The tests run in parallel (each has its own Redis prefix and NATS): most
// of their time is spent waiting (the crash test on the READY ack wait).

// submitWith sends n jobs (ids job-000000…) of one type to a group of the
// tenant "default" with settings, chunk jobs per message, then seals.
func (e *env) submitWith(gid, typ string, n, chunk int, settings contracts.GroupSettings) {
	e.t.Helper()
	ctx := context.Background()
	jobs := make([]client.Job, 0, chunk)
	for i := 0; i < n; i++ {
		jobs = append(jobs, client.Job{ID: fmt.Sprintf("job-%06d", i), Type: typ, Payload: []byte(`{}`)})
		if len(jobs) == chunk || i == n-1 {
			if err := e.client.SubmitGroup(ctx, gid, settings, jobs...); err != nil {
				e.t.Fatal(err)
			}
			jobs = jobs[:0]
		}
	}
	if err := e.client.Seal(ctx, gid, int64(n)); err != nil {
		e.t.Fatal(err)
	}
}

// hashOf is a deterministic hash of its arguments, for seeded per-job
// decisions that do not depend on the order the calls arrive in.
func hashOf(args ...any) uint64 {
	h := fnv.New64a()
	fmt.Fprintln(h, args...)
	// FNV's low bits follow the input's last bytes (its lowest bit is their
	// parity): mix them all in (splitmix64's finalizer).
	x := h.Sum64()
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// concurrency counts the processors running per group and the highest
// count each group reached.
type concurrency struct {
	mu      sync.Mutex
	running map[string]int
	max     map[string]int
	calls   map[string]int
}

func newConcurrency() *concurrency {
	return &concurrency{running: map[string]int{}, max: map[string]int{}, calls: map[string]int{}}
}

func (c *concurrency) enter(gid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[gid]++
	c.calls[gid]++
	c.max[gid] = max(c.max[gid], c.running[gid])
}

func (c *concurrency) leave(gid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[gid]--
}

func (c *concurrency) now(gid string) (running, maxSeen, calls int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.running[gid], c.max[gid], c.calls[gid]
}

// metaSampler reads a group's meta every few ms until stopped and keeps
// the highest meta inFlight seen.
type metaSampler struct {
	maxInFlight atomic.Int64
	samples     atomic.Int64
	stop        chan struct{}
	done        chan struct{}
}

func sampleMeta(q *redisq.Queue, gid string, every time.Duration, extra func()) *metaSampler {
	s := &metaSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			case <-time.After(every):
			}
			if extra != nil {
				extra()
			}
			info, ok, err := q.Group(context.Background(), ref(gid))
			if err != nil || !ok {
				continue
			}
			s.samples.Add(1)
			if info.InFlight > s.maxInFlight.Load() {
				s.maxInFlight.Store(info.InFlight)
			}
		}
	}()
	return s
}

func (s *metaSampler) finish() {
	close(s.stop)
	<-s.done
}

// TestMaxInFlightAcrossProcesses: a group with maxInFlight 5 runs through
// 4 fetchers and 2 workers sharing Redis and NATS, beside a group without
// a limit. At no moment do more than 5 of its processors run, nor does its
// meta inFlight exceed 5, and both groups complete with exact counts.
func TestMaxInFlightAcrossProcesses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config(func(c *config.Config) { c.WorkerInstances = 2 })
	core := e.start(cfg, []string{stack.TargetAggregator, stack.TargetDispatcher}, nil)
	q := core.st.Conns.Queue
	side := *cfg
	side.HTTPAddr = ""

	conc := newConcurrency()
	newMux := func() *processor.Mux {
		m := processor.NewMux()
		m.HandleFunc("work", func(ctx context.Context, job *processor.Job) error {
			conc.enter(job.GroupID)
			defer conc.leave(job.GroupID)
			// 20–50 ms, fixed per job and attempt.
			time.Sleep(time.Duration(20+hashOf(job.GroupID, job.JobID, job.Attempt)%31) * time.Millisecond)
			return nil
		})
		return m
	}
	e.start(&side, []string{stack.TargetWorker}, newMux())
	e.start(&side, []string{stack.TargetWorker}, newMux())
	var fetchers []*running
	for range 4 {
		fetchers = append(fetchers, e.start(&side, []string{stack.TargetFetcher}, nil))
	}

	const limit, nLimited = 5, 400
	var maxProcs atomic.Int64
	s := sampleMeta(q, "limited", 2*time.Millisecond, func() {
		if n, _, _ := conc.now("limited"); int64(n) > maxProcs.Load() {
			maxProcs.Store(int64(n))
		}
	})
	start := time.Now()
	// The group without a limit keeps receiving jobs (about 300/s, half
	// the workers' capacity) until the limited group has completed, so
	// the two compete all along. (Were the limited group left alone, it
	// would run at about 5 jobs/s: TestLoneLimitedGroupKeepsPace.)
	stopFeed := make(chan struct{})
	fed := make(chan int64, 1)
	go func() {
		ctx := context.Background()
		var n int64
		defer func() { fed <- n }()
		for {
			jobs := make([]client.Job, 15)
			for i := range jobs {
				jobs[i] = client.Job{ID: fmt.Sprintf("job-%06d", n+int64(i)), Type: "work", Payload: []byte(`{}`)}
			}
			if err := e.client.SubmitGroup(ctx, "free", contracts.GroupSettings{}, jobs...); err != nil {
				t.Error(err)
				return
			}
			n += int64(len(jobs))
			select {
			case <-stopFeed:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	e.submitWith("limited", "work", nLimited, 100, contracts.GroupSettings{MaxInFlight: limit})
	wctx, cancelWait := context.WithTimeout(context.Background(), time.Minute)
	ev, err := e.client.Wait(wctx, "limited")
	cancelWait()
	if err != nil {
		// what held it: its meta (in flight, queued, backing off, done)
		// and the processors running its jobs now
		info := group(t, q, "limited")
		n, _, _ := conc.now("limited")
		t.Fatalf("group limited did not end within a minute: %v; %s, %d of %d done, inFlight %d (max %d), %d queued, %d backing off, "+
			"%d running now; meta %v", err, info.State, info.Done, nLimited, info.InFlight, info.MaxInFlight, info.Pending, info.NonReady, n, info.Meta)
	}
	limitedTook := time.Since(start)
	close(stopFeed)
	nFree := <-fed
	if err := e.client.Seal(context.Background(), "free", nFree); err != nil {
		t.Fatal(err)
	}
	if ev.State != contracts.StateCompleted || ev.Total != nLimited || ev.Jobs != nLimited || ev.Succeeded != nLimited || ev.Failed != 0 || ev.Cancelled != 0 {
		t.Errorf("limited group: %+v, want COMPLETED with %d succeeded", ev, nLimited)
	}
	if ev := e.wait("free", time.Minute); ev.State != contracts.StateCompleted || ev.Total != nFree || ev.Jobs != nFree || ev.Succeeded != nFree || ev.Failed != 0 {
		t.Errorf("free group: %+v, want COMPLETED with %d succeeded", ev, nFree)
	}
	s.finish()

	_, maxEntered, calls := conc.now("limited")
	_, maxFree, _ := conc.now("free")
	t.Logf("limited: %d calls in %v, at most %d processors at once (entry), %d (sampled), meta inFlight at most %d over %d samples; free group: %d jobs, at most %d at once",
		calls, limitedTook.Round(time.Millisecond), maxEntered, maxProcs.Load(), s.maxInFlight.Load(), s.samples.Load(), nFree, maxFree)
	if maxEntered > limit || maxProcs.Load() > limit {
		t.Errorf("%d processors of the limited group ran at once, limit %d", max(int64(maxEntered), maxProcs.Load()), limit)
	}
	if s.maxInFlight.Load() > limit {
		t.Errorf("meta inFlight reached %d, limit %d", s.maxInFlight.Load(), limit)
	}
	if maxEntered < 2 || s.maxInFlight.Load() < 2 || s.samples.Load() < 50 {
		t.Errorf("the limit was never exercised: %d processors at once, meta inFlight at most %d, %d samples",
			maxEntered, s.maxInFlight.Load(), s.samples.Load())
	}
	if calls != nLimited {
		t.Errorf("the limited group's processor ran %d times for %d jobs", calls, nLimited)
	}
	info := group(t, q, "limited")
	if info.InFlight != 0 || info.Succeeded != nLimited || info.Done != nLimited || info.Pending != 0 || info.MaxInFlight != limit {
		t.Errorf("limited group after completion: %+v, inFlight %d, maxInFlight %d, pending %d",
			info.GroupCounts, info.InFlight, info.MaxInFlight, info.Pending)
	}
	for i, f := range fetchers {
		t.Logf("fetcher %d admitted %.0f jobs", i, testkit.Value(t, f.st.Metrics.BackpressureAdmitted.WithLabelValues(telemetry.DestinationReady)))
	}
}

// TestCrashedWorkerLeaksNoSlot: a worker dies (its NATS connection drops,
// nothing is acknowledged or handed back) while it runs jobs of a group
// with maxInFlight 3. Those jobs hold their slots until JetStream
// redelivers them to the other worker (after the READY ack wait, about
// 16 s here: a claimed job has no Redis lease, so LeaseMs does not apply);
// then the group completes with exact counts and its meta inFlight is back
// to 0.
func TestCrashedWorkerLeaksNoSlot(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config(func(c *config.Config) {
		c.LeaseMs = 500
		c.JobTimeoutMs = 1000 // the READY ack wait is JobTimeout + 15 s
		c.WorkerInstances = 2
	})
	core := e.start(cfg, []string{stack.TargetAggregator, stack.TargetDispatcher, stack.TargetFetcher}, nil)
	q := core.st.Conns.Queue
	wcfg := *cfg
	wcfg.HTTPAddr = ""
	dcfg := wcfg
	dcfg.ShutdownGracePeriodMs = 0 // no grace: stop at once

	// The doomed worker finishes nothing: each of its processors blocks,
	// deaf to its context (so that no job timeout ends it first), until
	// after the crash.
	var (
		mu         sync.Mutex
		held       []string // jobs the doomed worker was running
		healthyRan = map[string]int{}
	)
	firstHeld, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	doomed := processor.NewMux()
	doomed.HandleFunc("slow", func(ctx context.Context, job *processor.Job) error {
		mu.Lock()
		held = append(held, job.JobID)
		mu.Unlock()
		once.Do(func() { close(firstHeld) })
		<-release
		return errors.New("the process is gone")
	})
	healthy := processor.NewMux()
	healthy.HandleFunc("slow", func(ctx context.Context, job *processor.Job) error {
		mu.Lock()
		healthyRan[job.JobID]++
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		return nil
	})
	d := e.start(&dcfg, []string{stack.TargetWorker}, doomed)
	e.start(&wcfg, []string{stack.TargetWorker}, healthy)

	const limit, n = 3, 30
	s := sampleMeta(q, "g", 5*time.Millisecond, nil)
	e.submitWith("g", "slow", n, n, contracts.GroupSettings{MaxInFlight: limit})
	select {
	case <-firstHeld:
	case <-time.After(30 * time.Second):
		t.Fatal("the doomed worker never got a job")
	}
	time.Sleep(50 * time.Millisecond) // let it take a slot or two more
	// Crash: the connection drops first, so nothing the worker does next
	// (the shutdown's hand-back, a Nak) reaches the server, as after
	// kill -9. Stop then abandons the running jobs at once (no grace): a
	// processor that returns afterwards publishes nothing.
	d.st.Conns.NC.Close()
	crashedAt := time.Now()
	d.stopped = true
	_ = d.st.Stop() // the worker fails on the closed connection: its error is expected
	mu.Lock()
	crashed := append([]string(nil), held...)
	mu.Unlock()
	close(release)
	atCrash := group(t, q, "g")
	t.Logf("the worker crashed holding %v; %v later the group had %d done, meta inFlight %d",
		crashed, time.Since(crashedAt).Round(time.Millisecond), atCrash.Done, atCrash.InFlight)
	if atCrash.InFlight < int64(len(crashed)) {
		t.Errorf("meta inFlight %d after the crash: the %d jobs the dead worker held should still hold their slots", atCrash.InFlight, len(crashed))
	}

	ev := e.wait("g", 45*time.Second)
	recovered := time.Since(crashedAt)
	s.finish()
	if ev.State != contracts.StateCompleted || ev.Succeeded != n || ev.Failed != 0 || ev.Cancelled != 0 || ev.Jobs != n {
		t.Fatalf("after the crash: %+v, want COMPLETED with %d succeeded", ev, n)
	}
	mu.Lock()
	for _, id := range crashed {
		if healthyRan[id] == 0 {
			t.Errorf("job %s, held by the crashed worker, was never run again", id)
		}
	}
	runs := 0
	for _, c := range healthyRan {
		runs += c
	}
	mu.Unlock()
	info := group(t, q, "g")
	t.Logf("completed %v after the crash; the healthy worker ran %d times for %d jobs; meta inFlight at most %d over %d samples, %d at the end",
		recovered.Round(time.Millisecond), runs, len(healthyRan), s.maxInFlight.Load(), s.samples.Load(), info.InFlight)
	if s.maxInFlight.Load() > limit {
		t.Errorf("meta inFlight reached %d, limit %d", s.maxInFlight.Load(), limit)
	}
	if info.InFlight != 0 || info.Succeeded != n || info.Failed != 0 || info.Pending != 0 {
		t.Errorf("after completion: %+v, inFlight %d, pending %d", info.GroupCounts, info.InFlight, info.Pending)
	}
}

// TestHalfRateLimitedAllSucceed: half of the calls answer 429 with a
// Retry-After. With MaxRetryCount 3, every job still succeeds (a 429
// spends none of the retry budget, and some jobs get four or more in a
// row), and no job is called again sooner than its Retry-After.
func TestHalfRateLimitedAllSucceed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const (
		n          = 200
		seed       = 20240611
		retryAfter = 150 * time.Millisecond
		slack      = 5 * time.Millisecond
	)
	cfg := e.config(func(c *config.Config) {
		c.MaxRetryCount = 3
		c.BaseBackoffMs = 20
		c.MaxBackoffMs = 1000 // ≥ retryAfter: the Retry-After is not cut
	})
	limited := func(job string, call int) bool { return hashOf(seed, job, call)%2 == 0 }

	type call struct {
		start, end time.Time
		limited    bool
	}
	var mu sync.Mutex
	calls := map[string][]call{}
	mux := processor.NewMux()
	mux.HandleFunc("rl", func(ctx context.Context, job *processor.Job) error {
		c := call{start: time.Now()}
		mu.Lock()
		i := len(calls[job.JobID])
		calls[job.JobID] = append(calls[job.JobID], c)
		mu.Unlock()
		c.limited = limited(job.JobID, i)
		c.end = time.Now()
		mu.Lock()
		calls[job.JobID][i] = c
		mu.Unlock()
		if c.limited {
			return processor.RateLimited(retryAfter, errors.New("429 Too Many Requests"))
		}
		return nil
	})
	r := e.start(cfg, stack.PipelineTargets, mux)
	q := r.st.Conns.Queue

	// The seed gives some jobs more 429s in a row than the retry budget.
	streak := 0
	for i := range n {
		k := 0
		for limited(fmt.Sprintf("job-%06d", i), k) {
			k++
		}
		if k > cfg.MaxRetryCount {
			streak++
		}
	}
	if streak == 0 {
		t.Fatal("the seed gives no job more 429s in a row than MaxRetryCount: pick another")
	}

	e.submitWith("rl", "rl", n, n, contracts.GroupSettings{})
	ev := e.wait("rl", time.Minute)
	if ev.State != contracts.StateCompleted || ev.Succeeded != n || ev.Failed != 0 || ev.Jobs != n {
		t.Errorf("final event %+v, want COMPLETED with %d succeeded and none failed", ev, n)
	}
	if info := group(t, q, "rl"); info.Succeeded != n || info.Failed != 0 || info.InFlight != 0 {
		t.Errorf("meta: %+v, inFlight %d", info.GroupCounts, info.InFlight)
	}

	mu.Lock()
	defer mu.Unlock()
	total, throttled, longest := 0, 0, 0
	minGap := time.Hour
	for i := range n {
		id := fmt.Sprintf("job-%06d", i)
		cs := calls[id]
		total += len(cs)
		if len(cs) == 0 || cs[len(cs)-1].limited {
			t.Errorf("job %s: %d calls, the last rate limited: it never succeeded", id, len(cs))
			continue
		}
		k := 0
		for k < len(cs) && cs[k].limited {
			k++
		}
		if k != len(cs)-1 {
			t.Errorf("job %s ran %d times after %d 429s", id, len(cs), k)
		}
		longest = max(longest, k)
		for j := 0; j+1 < len(cs); j++ {
			if !cs[j].limited {
				continue
			}
			throttled++
			gap := cs[j+1].start.Sub(cs[j].end)
			minGap = min(minGap, gap)
			if gap < retryAfter-slack {
				t.Errorf("job %s: call %d came %v after a 429 with Retry-After %v", id, j+2, gap, retryAfter)
			}
		}
	}
	t.Logf("%d calls for %d jobs, %d 429s, longest run of 429s %d (%d jobs had more than %d in a row), shortest wait after a 429 %v",
		total, n, throttled, longest, streak, cfg.MaxRetryCount, minGap)
	if throttled == 0 {
		t.Error("no call was rate limited")
	}
}

// TestStatusAddsUpWhileRunning reads `status` of a group of 1,000 jobs
// over and over while it runs (submitted in parts while the first run,
// with some retryable errors so that jobs back off): at every reading
// Jobs = Pending + InFlight + NonReady + Done + Cancelled, Done never goes
// down, and there is no ETA without a rate.
func TestStatusAddsUpWhileRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := e.config(func(c *config.Config) { c.BaseBackoffMs = 30 })
	mux := processor.NewMux()
	mux.HandleFunc("st", func(ctx context.Context, job *processor.Job) error {
		time.Sleep(15 * time.Millisecond)
		if job.Attempt == 1 && hashOf(job.JobID)%10 == 0 {
			return errors.New("transient")
		}
		return nil
	})
	r := e.start(cfg, stack.PipelineTargets, mux)
	q := r.st.Conns.Queue
	const n = 1000
	g := ref("s")

	type sample struct {
		s   *status.Group
		err error
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	samples := make(chan []sample, 1)
	go func() {
		var out []sample
		defer func() { samples <- out }()
		for ctx.Err() == nil {
			st, err := status.Read(ctx, q, g, status.Options{})
			if errors.Is(err, status.ErrNotFound) {
				time.Sleep(time.Millisecond)
				continue
			}
			out = append(out, sample{st, err})
			if err != nil || st.Ended() {
				return
			}
		}
	}()

	e.submitWith("s", "st", n, 100, contracts.GroupSettings{})
	ev := e.wait("s", time.Minute)
	if ev.State != contracts.StateCompleted || ev.Succeeded != n {
		t.Errorf("final event %+v", ev)
	}
	var got []sample
	select {
	case got = <-samples:
	case <-time.After(30 * time.Second):
		t.Fatal("the status reader did not see the group end")
	}

	var prevDone int64
	bad, withNonReady, withPending, withInFlight, started, beforeSeal := 0, 0, 0, 0, 0, 0
	for i, sm := range got {
		if sm.err != nil {
			t.Fatalf("reading %d: %v", i, sm.err)
		}
		s := sm.s
		sum := s.Queued + s.InFlight + s.BackingOff + s.Done + s.Cancelled
		if s.Jobs != sum {
			bad++
			if bad <= 5 {
				t.Errorf("reading %d (%s): jobs %d != pending %d + inFlight %d + nonReady %d + done %d + cancelled %d = %d",
					i, s.State, s.Jobs, s.Queued, s.InFlight, s.BackingOff, s.Done, s.Cancelled, sum)
			}
		}
		if s.Done < prevDone {
			t.Errorf("reading %d: done went down from %d to %d", i, prevDone, s.Done)
		}
		prevDone = s.Done
		if s.Rate == 0 && !s.Ended() && s.ETASeconds != -1 {
			t.Errorf("reading %d (%s, %d/%d done, declared %d): ETA %v s without a rate", i, s.State, s.Done, s.Jobs, s.Total, s.ETASeconds)
		}
		if s.BackingOff > 0 {
			withNonReady++
		}
		if s.Queued > 0 {
			withPending++
		}
		if s.InFlight > 0 {
			withInFlight++
		}
		if !s.StartedAt.IsZero() {
			started++
		}
		if s.Total < 0 {
			beforeSeal++
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d readings do not add up", bad, len(got))
	}
	t.Logf("%d readings: %d with jobs queued, %d in flight, %d backing off, %d before the seal, %d after the start",
		len(got), withPending, withInFlight, withNonReady, beforeSeal, started)
	if len(got) < 50 || withInFlight == 0 || withPending == 0 {
		t.Errorf("the readings did not cover a running group: %d readings, %d with jobs queued, %d in flight", len(got), withPending, withInFlight)
	}
	if last := got[len(got)-1].s; last.State != contracts.StateCompleted || last.Done != n || last.ETASeconds != 0 {
		t.Errorf("last reading: %s, %d done, ETA %v", last.State, last.Done, last.ETASeconds)
	}
}

// TestLoneLimitedGroupKeepsPace: a group with maxInFlight 5, alone in the
// queue, of 100 jobs of 2 ms runs at the pace of its slots (ideally 40 ms of
// work; the same group without a limit takes well under a second). A slot
// freed by a result puts the group back into the fair queue, but when no
// other work is queued the fetchers are idle and nothing wakes them: they
// admit again only after their MaxIdle (1 s), so such a group runs at
// about maxInFlight jobs per second per fetcher.
func TestLoneLimitedGroupKeepsPace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mux := processor.NewMux()
	mux.HandleFunc("quick", func(ctx context.Context, job *processor.Job) error {
		time.Sleep(2 * time.Millisecond)
		return nil
	})
	r := e.start(e.config(nil), stack.PipelineTargets, mux)
	q := r.st.Conns.Queue
	const n, limit, within = 100, 5, 5 * time.Second
	start := time.Now()
	e.submitWith("lone", "quick", n, n, contracts.GroupSettings{MaxInFlight: limit})
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	ev, err := e.client.Wait(ctx, "lone")
	if err != nil {
		info := group(t, q, "lone")
		t.Fatalf("a lone group with maxInFlight %d had %d of %d jobs done after %v (%.1f jobs/s): freed slots wait for the fetchers' idle timeout",
			limit, info.Done, n, within, float64(info.Done)/time.Since(start).Seconds())
	}
	if ev.State != contracts.StateCompleted || ev.Succeeded != n {
		t.Fatalf("final event %+v", ev)
	}
	t.Logf("%d jobs with maxInFlight %d in %v", n, limit, time.Since(start).Round(time.Millisecond))
}
