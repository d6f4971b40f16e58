package dispatcher_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/dispatcher"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func newDispatcher(t *testing.T, e *pipelinetest.Env, cfg dispatcher.Config) *dispatcher.Dispatcher {
	t.Helper()
	p, err := dispatcher.New(cfg, e.Deps())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// tenant is the tenant of the tests' groups unless a test names another.
const tenant = "acme"

// grp returns the group gid of the tests' tenant.
func grp(gid string) contracts.GroupRef { return contracts.Group(tenant, gid) }

// leaseJobs enqueues n jobs in each group and admits them all (leased, not
// published).
func leaseJobs(t *testing.T, e *pipelinetest.Env, groups []contracts.GroupRef, n int) []redisq.LeasedJob {
	t.Helper()
	var jobs []redisq.Job
	for _, g := range groups {
		for i := range n {
			jobs = append(jobs, redisq.Job{Group: g, ID: fmt.Sprintf("j%04d", i), Type: "t", Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))})
		}
	}
	return e.Lease(t, jobs)
}

// park runs every job (claim of attempt 1) and sends it back to the
// non-ready queue with the delay of its index; it returns each job's due
// time (the non-ready ZSET score, ms) by "<tenant>:<gid>:<jid>".
func park(t *testing.T, e *pipelinetest.Env, jobs []redisq.LeasedJob, delay func(i int) time.Duration) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	if err := e.Queue.Confirm(ctx, jobs...); err != nil {
		t.Fatal(err)
	}
	due := map[string]int64{}
	for i, j := range jobs {
		if out, err := e.Queue.Claim(ctx, j.Group, j.ID, j.Attempt); err != nil || out != redisq.ClaimRun {
			t.Fatalf("claim %s/%s: %v %v", j.Group, j.ID, out, err)
		}
		if r, err := e.Queue.Retry(ctx, j.Group, j.ID, j.Attempt, delay(i), "busy"); err != nil || r.Outcome != "parked" {
			t.Fatalf("retry %s/%s: %+v %v", j.Group, j.ID, r, err)
		}
		key := member(j)
		score, err := e.Redis.ZScore(ctx, e.Keys.NonReadyQueue(), key).Result()
		if err != nil {
			t.Fatalf("due time of %s: %v", key, err)
		}
		due[key] = int64(score)
	}
	return due
}

func TestBackedOffJobsReachReadyWhenDue(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	// Two tenants with a group named alike: READY names each job's tenant.
	jobs := leaseJobs(t, e, []contracts.GroupRef{grp("g"), contracts.Group("beta", "g")}, 20)
	due := park(t, e, jobs, func(i int) time.Duration { return time.Duration(150+(i%8)*100) * time.Millisecond })
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	testkit.Start(t, newDispatcher(t, e, dispatcher.Config{Ready: handoff.ReadyConfig{Capacity: 1000}}))

	got := r.WaitJobs(t, len(jobs), 10*time.Second)
	counts := pipelinetest.Counts(got)
	var lates []int64
	defer func() {
		slices.Sort(lates)
		if len(lates) > 0 {
			t.Logf("lateness ms: median %d, max %d", lates[len(lates)/2], lates[len(lates)-1])
		}
	}()
	for _, m := range got {
		key := m.Key()
		d, ok := due[key]
		if !ok {
			t.Fatalf("unexpected job %s on READY", key)
		}
		if counts[key] != 1 {
			t.Errorf("%s on READY %d times", key, counts[key])
		}
		if m.Job.Tenant != tenant && m.Job.Tenant != "beta" {
			t.Errorf("%s: tenant %q", key, m.Job.Tenant)
		}
		if m.Job.Attempt != 2 {
			t.Errorf("%s: attempt %d, want 2 (the retry)", key, m.Job.Attempt)
		}
		at := m.Stored.UnixMilli()
		if at < d {
			t.Errorf("%s reached READY %d ms before it was due", key, d-at)
		}
		lates = append(lates, at-d)
		if late := at - d; late > 200 {
			t.Errorf("%s reached READY %d ms after it was due, want at most 200", key, late)
		}
	}
	if n := e.BackingOff(t); n != 0 {
		t.Fatalf("non-ready queue still holds %d jobs", n)
	}
	// The metric counts a job once its publish is acknowledged, which may
	// be just after the reader saw it.
	testkit.WaitFor(t, "dispatch moved metric", 5*time.Second, func() bool {
		return testkit.Value(t, e.Metrics.DispatchMoved) == float64(len(jobs))
	})
}

func TestExpiredLeasesAreRepublishedOnce(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{Lease: 300 * time.Millisecond})
	jobs := leaseJobs(t, e, []contracts.GroupRef{grp("g"), contracts.Group("beta", "g"), contracts.Group("gamma", "gc")}, 10)
	// A third of them did reach READY before their holder died (published,
	// never confirmed): the re-publish must not duplicate them.
	d := e.Deps()
	first := jobs[:10]
	ok, err := handoff.Publish(context.Background(), d, first, handoff.Packing{Jobs: 1}, handoff.SpanAdmit)
	if err != nil || len(ok) != len(first) {
		t.Fatalf("publish: %d, %v", len(ok), err)
	}
	// Undo the confirmation so these leases expire too.
	for _, j := range first {
		e.Redis.ZAdd(context.Background(), e.Keys.Inflight(), redisZ(j))
	}
	if got := e.Inflight(t); got != int64(len(jobs)) {
		t.Fatalf("inflight %d, want %d", got, len(jobs))
	}

	testkit.Start(t, newDispatcher(t, e, dispatcher.Config{Ready: handoff.ReadyConfig{Capacity: 1000}, ReclaimInterval: 50 * time.Millisecond}))
	testkit.WaitFor(t, "every lease recovered", 10*time.Second, func() bool { return e.Inflight(t) == 0 })
	// Read READY only now: this reader acknowledges without claiming, and a
	// leased job whose message was consumed unclaimed looks like a claim
	// Redis lost, which the hand-off answers with a new attempt.
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	r.WaitJobs(t, len(jobs), 10*time.Second)
	e.WaitReadyDrained(t)
	got := r.Jobs()
	for key, n := range pipelinetest.Counts(got) {
		if n != 1 {
			t.Errorf("%s on READY %d times", key, n)
		}
	}
	if len(got) != len(jobs) {
		t.Fatalf("READY got %d messages, want %d", len(got), len(jobs))
	}
	// Every job leased is on READY once, under its own tenant.
	leased := map[string]bool{}
	for _, j := range jobs {
		leased[member(j)] = true
	}
	for _, m := range got {
		if !leased[m.Key()] {
			t.Errorf("unexpected job %s on READY", m.Key())
		}
		if m.Job.Attempt != 1 {
			t.Errorf("%s: attempt %d, want 1 (a reclaim keeps the attempt)", m.Key(), m.Job.Attempt)
		}
	}
}

func TestReleaseRespectsReadyCapacity(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	jobs := leaseJobs(t, e, []contracts.GroupRef{grp("g")}, 60)
	park(t, e, jobs, func(int) time.Duration { return 0 })
	const capacity = 10
	testkit.Start(t, newDispatcher(t, e, dispatcher.Config{Ready: handoff.ReadyConfig{Capacity: capacity}, Interval: 5 * time.Millisecond}))

	// The capacity counts jobs; a READY message may carry several.
	readyJobs := func() int { return e.ReadyJobs(t) }
	testkit.WaitFor(t, "READY filled", 10*time.Second, func() bool { return readyJobs() >= capacity })
	// Let the dispatcher run many more cycles against a full READY.
	cycles := func() float64 { return testkit.Value(t, e.Metrics.DispatchCycleDuration) }
	base := cycles()
	testkit.WaitFor(t, "20 more dispatch cycles", 10*time.Second, func() bool { return cycles() >= base+20 })
	if got := readyJobs(); got != capacity {
		t.Fatalf("READY holds %d jobs, want %d (the capacity)", got, capacity)
	}
	if n := e.BackingOff(t); n != int64(len(jobs)-capacity) {
		t.Fatalf("non-ready queue holds %d, want %d still waiting", n, len(jobs)-capacity)
	}

	// A slow reader drains it; READY stays within the capacity throughout.
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{Delay: 5 * time.Millisecond})
	var most int
	testkit.WaitFor(t, "every job read", 20*time.Second, func() bool {
		most = max(most, readyJobs())
		return len(r.Jobs()) >= len(jobs)
	})
	if most > capacity {
		t.Fatalf("READY held %d jobs, more than the capacity %d", most, capacity)
	}
}

func TestCorrectsCountersAndSnapshots(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	jobs := leaseJobs(t, e, []contracts.GroupRef{grp("g")}, 5)
	park(t, e, jobs, func(int) time.Duration { return time.Hour })
	ctx := context.Background()
	key := e.Keys.CongestionCount(grp("g"))
	if err := e.Redis.Set(ctx, key, 99, 0).Err(); err != nil {
		t.Fatal(err)
	}
	testkit.Start(t, newDispatcher(t, e, dispatcher.Config{
		CorrectInterval: 20 * time.Millisecond, SnapshotInterval: 20 * time.Millisecond,
	}))
	testkit.WaitFor(t, "counter corrected", 10*time.Second, func() bool {
		v, _ := e.Redis.Get(ctx, key).Int()
		return v == 5
	})
	testkit.WaitFor(t, "congestion snapshots", 10*time.Second, func() bool {
		h, err := e.Queue.History(ctx, 10)
		return err == nil && len(h) >= 2 && h[len(h)-1].TotalNonReady == 5
	})
}

func TestRunReturnsPromptlyOnCancel(t *testing.T) {
	e := pipelinetest.NewEnv(t, redisq.Config{})
	jobs := leaseJobs(t, e, []contracts.GroupRef{grp("g")}, 50)
	park(t, e, jobs, func(i int) time.Duration { return time.Duration(i) * 10 * time.Millisecond })
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	stop := testkit.StartWithin(t, newDispatcher(t, e, dispatcher.Config{Ready: handoff.ReadyConfig{Capacity: 1000}}), 10*time.Second)
	testkit.WaitFor(t, "releases under way", 10*time.Second, func() bool {
		return e.StreamMsgs(t, e.Names.StreamReady()) > 0
	})
	stop()
}

func TestNewValidates(t *testing.T) {
	e := pipelinetest.NewEnv(t, redisq.Config{})
	for _, cfg := range []dispatcher.Config{
		{Ready: handoff.ReadyConfig{Capacity: -1}}, {BatchSize: -1}, {Interval: -time.Second}, {ReclaimInterval: -1},
		{CorrectInterval: -1}, {SnapshotInterval: -1},
	} {
		if _, err := dispatcher.New(cfg, e.Deps()); err == nil || !strings.HasPrefix(err.Error(), "dispatcher: ") {
			t.Errorf("New(%+v) = %v, want an error", cfg, err)
		}
	}
	d := e.Deps()
	d.Queue = nil
	if _, err := dispatcher.New(dispatcher.Config{}, d); err == nil {
		t.Error("New without a queue succeeded")
	}
	if _, err := dispatcher.New(dispatcher.Config{}, e.Deps()); err != nil {
		t.Errorf("New with the zero Config: %v", err)
	}
}
