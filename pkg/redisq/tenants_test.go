package redisq_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// enqueueJobs enqueues n jobs of type typ into group name (see G), ids
// j00000.., in one call, and fails t unless each was added.
func enqueueJobs(t testing.TB, q *redisq.Queue, name, typ string, n int, maxInFlight int64) {
	t.Helper()
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: G(name), ID: fmt.Sprintf("j%05d", i), Type: typ, MaxInFlight: maxInFlight}
	}
	out, err := q.EnqueueBatch(context.Background(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range out {
		if o != redisq.Added {
			t.Fatalf("%s job %d: %v", name, i, o)
		}
	}
}

// jain is Jain's fairness index of xs: (Σx)² / (n·Σx²), 1 when all are equal.
func jain(xs ...float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// admitTenants admits jobs in calls of 50 until total jobs were admitted
// (or nothing more comes) and returns each admitted job's tenant in order,
// and the groups of tenant "b" in order.
func admitTenants(t *testing.T, q *redisq.Queue, total int) (tenants []string, bGroups []string) {
	t.Helper()
	for len(tenants) < total {
		r := admit(t, q, 50)
		if len(r.Jobs) == 0 {
			break
		}
		for _, j := range r.Jobs {
			tenants = append(tenants, j.Group.Tenant)
			if j.Group.Tenant == "b" {
				bGroups = append(bGroups, j.Group.ID)
			}
		}
	}
	return tenants, bGroups
}

// TestTenantWeightedRoundRobin: tenant a has one group of 10,000 jobs,
// tenant b 20 groups of 500; both stay backlogged. Admitted in calls of 50,
// every chunk of 1000 admissions splits equally between the tenants (a's one
// group does not get 1/21 of the capacity, b's many groups do not get
// 20/21), and b's groups still alternate. With weights 2:1 the split is 2:1.
func TestTenantWeightedRoundRobin(t *testing.T) {
	for _, mode := range []string{redisq.ModeSeed, redisq.ModePaced} {
		for _, weightA := range []int{1, 2} {
			t.Run(fmt.Sprintf("%s/weight=%d", mode, weightA), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				q, _ := setup(t, redisq.Config{Mode: mode, GlobalLimit: 1_000_000, Window: time.Hour, Burst: time.Hour}, false)
				if err := q.SetTenantWeight(ctx, "a", weightA); err != nil {
					t.Fatal(err)
				}
				enqueueJobs(t, q, "a/big", "t", 10_000, 0)
				for g := 0; g < 20; g++ {
					enqueueJobs(t, q, fmt.Sprintf("b/g%02d", g), "t", 500, 0)
				}
				// Both stay backlogged while a has admitted fewer than 10,000
				// jobs and b fewer than 10,000.
				backlogged := 10_000 + 10_000/weightA
				tenants, bGroups := admitTenants(t, q, backlogged)
				if len(tenants) < backlogged {
					t.Fatalf("admitted %d, want %d", len(tenants), backlogged)
				}
				want := float64(weightA)
				for c := 0; c+1000 <= backlogged; c += 1000 {
					var na, nb float64
					for _, tn := range tenants[c : c+1000] {
						if tn == "a" {
							na++
						} else {
							nb++
						}
					}
					if ratio := na / nb; math.Abs(ratio-want)/want > 0.05 {
						t.Fatalf("chunk at %d: a %v, b %v: ratio %.3f, want %v ±5%%", c, na, nb, ratio, want)
					}
					if weightA == 1 {
						if j := jain(na, nb); j < 0.99 {
							t.Fatalf("chunk at %d: Jain index %.4f < 0.99 (a %v, b %v)", c, j, na, nb)
						}
					} else if j := jain(na/want, nb); j < 0.99 {
						t.Fatalf("chunk at %d: weighted Jain index %.4f < 0.99 (a %v, b %v)", c, j, na, nb)
					}
				}
				// Within b, its 20 groups alternate: no group twice more than
				// another's in any window of 20 of b's admissions.
				for i := 0; i+20 <= len(bGroups); i++ {
					n := map[string]int{}
					for _, g := range bGroups[i : i+20] {
						if n[g]++; n[g] > 2 {
							t.Fatalf("b's group %s served %d times in window at %d", g, n[g], i)
						}
					}
				}
			})
		}
	}
}

func TestTenantWeights(t *testing.T) {
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{}, false)
	for _, bad := range []struct {
		tenant string
		weight int
	}{{"a", 0}, {"a", 1001}, {"a:b", 2}, {"", 2}} {
		if err := q.SetTenantWeight(ctx, bad.tenant, bad.weight); err == nil {
			t.Errorf("SetTenantWeight(%q, %d) accepted", bad.tenant, bad.weight)
		}
	}
	if err := q.SetTenantWeight(ctx, "a", 3); err != nil {
		t.Fatal(err)
	}
	if err := q.SetTenantWeight(ctx, "b", 1000); err != nil {
		t.Fatal(err)
	}
	if w, err := q.TenantWeights(ctx); err != nil || fmt.Sprint(w) != "map[a:3 b:1000]" {
		t.Fatalf("weights %v %v", w, err)
	}
	if err := q.SetTenantWeight(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	if w, _ := q.TenantWeights(ctx); fmt.Sprint(w) != "map[b:1000]" {
		t.Fatalf("weight 1 kept: %v", w)
	}
	// The share of a weighted tenant, in the limiter's status.
	enqueueN(t, q, "b/g", 1, "", 0)
	admit(t, q, 1)
	st, err := q.LimiterStatus(ctx, "b")
	if err != nil || st.Weight != 1000 || st.TenantLimit != 10_000*1000 {
		t.Fatalf("status %+v %v", st, err)
	}
}

// TestLateTenantGetsNoCatchUp: a tenant that arrives after another was
// served alone for a while, or that was held back (its job type had no
// READY room), gets its share from then on, not a burst of the time it was
// away.
func TestLateTenantGetsNoCatchUp(t *testing.T) {
	t.Run("arrives late", func(t *testing.T) {
		q, _ := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit}, false)
		enqueueJobs(t, q, "a/g", "t", 3000, 0)
		if tn, _ := admitTenants(t, q, 1000); len(tn) != 1000 {
			t.Fatalf("admitted %d", len(tn))
		}
		enqueueJobs(t, q, "b/g", "t", 1000, 0)
		tenants, _ := admitTenants(t, q, 200)
		nb := 0
		for _, tn := range tenants[:200] {
			if tn == "b" {
				nb++
			}
		}
		if nb < 99 || nb > 101 {
			t.Fatalf("the late tenant got %d of the next 200", nb)
		}
	})
	t.Run("held back", func(t *testing.T) {
		ctx := context.Background()
		q, _ := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit}, false)
		enqueueJobs(t, q, "a/g", "ta", 3000, 0)
		enqueueJobs(t, q, "x/g", "tx", 3000, 0)
		// x's type has no room for 1000 admissions
		n := 0
		for n < 1000 {
			r, err := q.Admit(ctx, 50, redisq.WithTypeRooms(map[string]int{"ta": 50, "tx": 0}, 0))
			if err != nil || len(r.Jobs) == 0 {
				t.Fatalf("admit: %+v %v", r, err)
			}
			for _, j := range r.Jobs {
				if j.Group.Tenant != "a" {
					t.Fatalf("admitted %s, whose type has no room", j.Group)
				}
			}
			n += len(r.Jobs)
		}
		tenants, _ := admitTenants(t, q, 200)
		nx := 0
		for _, tn := range tenants[:200] {
			if tn == "x" {
				nx++
			}
		}
		if nx < 99 || nx > 102 {
			t.Fatalf("the held tenant got %d of the next 200", nx)
		}
	})
}

// TestSameGroupIDInTwoTenants: two tenants using the same groupId (and job
// ids) never touch each other's group.
func TestSameGroupIDInTwoTenants(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{}, false)
	acme, globex := G("acme/g1"), G("globex/g1")
	enqueueJobs(t, q, "acme/g1", "t", 3, 0)
	enqueueJobs(t, q, "globex/g1", "t", 5, 0)
	if r, err := q.Seal(ctx, acme, 3); err != nil || r.Outcome != redisq.Sealed {
		t.Fatalf("seal: %+v %v", r, err)
	}
	jobs, err := q.DequeueBatch(ctx, 2) // one of each tenant
	if err != nil || len(jobs) != 2 || jobs[0].Group == jobs[1].Group {
		t.Fatalf("dequeue: %+v %v", jobs, err)
	}
	// acme's j00000 finishes; globex's j00000 (also dequeued) does not.
	rec, err := q.Record(ctx, contracts.JobResult{Tenant: "acme", GroupID: "g1", JobID: "j00000", Attempt: 1, Status: contracts.ResultSuccess})
	if err != nil || rec.Outcome != redisq.Recorded || rec.Group.Declared != 3 || rec.Group.Jobs != 3 {
		t.Fatalf("record: %+v %v", rec, err)
	}
	if st, _ := b.rdb.HGet(ctx, q.Keys().Job(globex, "j00000"), "status").Result(); st != "LEASED" {
		t.Fatalf("globex's job is %s", st)
	}
	if r, err := q.Cancel(ctx, acme); err != nil || r.Dropped != 2 {
		t.Fatalf("cancel: %+v %v", r, err)
	}
	info, ok, err := q.Group(ctx, globex)
	if err != nil || !ok || info.State != contracts.StateRunning || info.Declared != -1 || info.Jobs != 5 ||
		info.Pending != 4 || info.Done != 0 || info.Cancelled != 0 {
		t.Fatalf("globex's group after acme's seal, record and cancel: %+v", info)
	}
	// globex's jobs are still served and recorded.
	if got := drain(t, q, 4); len(got) != 4 {
		t.Fatalf("drained %v", got)
	}
	if o, _ := q.Enqueue(ctx, redisq.Job{Group: globex, ID: "new", Type: "t"}); o != redisq.Added {
		t.Fatalf("enqueue into globex: %v", o)
	}
	if o, _ := q.Enqueue(ctx, redisq.Job{Group: acme, ID: "new", Type: "t"}); o != redisq.RejectedEnded {
		t.Fatalf("enqueue into the cancelled acme: %v", o)
	}
}

func pauseOK(t *testing.T, q *redisq.Queue, g contracts.GroupRef, want redisq.ControlOutcome) *redisq.ControlResult {
	t.Helper()
	r, err := q.Pause(context.Background(), g)
	if err != nil || r.Outcome != want {
		t.Fatalf("pause %s: %+v %v, want %s", g, r, err, want)
	}
	return r
}

func resumeOK(t *testing.T, q *redisq.Queue, g contracts.GroupRef, want redisq.ControlOutcome) *redisq.ControlResult {
	t.Helper()
	r, err := q.Resume(context.Background(), g)
	if err != nil || r.Outcome != want {
		t.Fatalf("resume %s: %+v %v, want %s", g, r, err, want)
	}
	return r
}

// TestPauseKeepsPlace: a paused group is skipped by admission, takes new
// jobs without being admitted, and when resumed is served from the place it
// had.
func TestPauseKeepsPlace(t *testing.T) {
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit}, true)
	for _, g := range []string{"A", "B", "C"} {
		enqueueN(t, q, g, 10, "", 0)
	}
	if got := groupsOf(admit(t, q, 2).Jobs); got != "A,B" {
		t.Fatalf("first %s", got)
	}
	// B is next after C; pause it.
	r := pauseOK(t, q, G("B"), redisq.Paused)
	if r.Transition != contracts.StatePaused || r.Group.State != contracts.StatePaused || r.Group.Jobs != 10 {
		t.Fatalf("pause: %+v", r)
	}
	pauseOK(t, q, G("B"), redisq.ControlUnchanged)
	if o, _ := q.Enqueue(ctx, redisq.Job{Group: G("B"), ID: "late", Type: "t"}); o != redisq.Added {
		t.Fatalf("enqueue into a paused group: %v", o)
	}
	if per, _ := q.GroupsPerLevel(ctx); per[contracts.PriorityNormal] != 2 {
		t.Fatalf("groups waiting %v, want A and C", per)
	}
	if got := groupsOf(admit(t, q, 6).Jobs); got != "C,A,C,A,C,A" {
		t.Fatalf("while B is paused: %s", got)
	}
	info, _, _ := q.Group(ctx, G("B"))
	if info.State != contracts.StatePaused || info.PausedFrom != contracts.StateRunning || info.Pending != 10 {
		t.Fatalf("paused group %+v", info)
	}
	r = resumeOK(t, q, G("B"), redisq.Resumed)
	if r.Transition != contracts.StateRunning || r.Group.State != contracts.StateRunning {
		t.Fatalf("resume: %+v", r)
	}
	resumeOK(t, q, G("B"), redisq.ControlUnchanged)
	// B was waiting before every re-score of A and C: it is served first,
	// then the three alternate.
	if got := groupsOf(admit(t, q, 4).Jobs); got != "B,C,A,B" {
		t.Fatalf("after resume: %s", got)
	}
	resumeOK(t, q, G("nobody"), redisq.ControlUnknown)
	if _, err := q.Cancel(ctx, G("C")); err != nil {
		t.Fatal(err)
	}
	pauseOK(t, q, G("C"), redisq.ControlEnded)
	resumeOK(t, q, G("C"), redisq.ControlEnded)
}

// TestPauseBeforeTheFirstJob: a pause that arrives first creates the group
// PAUSED; its jobs are queued, not admitted, until it is resumed.
func TestPauseBeforeTheFirstJob(t *testing.T) {
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit}, false)
	r := pauseOK(t, q, G("early"), redisq.Paused)
	if r.Transition != contracts.StatePaused || r.Group.State != contracts.StatePaused || r.Group.Jobs != 0 {
		t.Fatalf("pause of a group with no job yet: %+v", r)
	}
	jobs := make([]redisq.Job, 5)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: G("early"), ID: fmt.Sprintf("j%d", i), Type: "t", Priority: contracts.PriorityHigh, MaxInFlight: 7}
	}
	res, err := q.EnqueueJobs(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	eg := res.Groups[0]
	if eg.Created || eg.Counts.State != contracts.StatePaused || eg.Counts.Jobs != 5 ||
		!reflect.DeepEqual(eg.Settings, contracts.GroupSettings{Priority: contracts.PriorityHigh, MaxInFlight: 7}) {
		t.Fatalf("enqueue into the paused group: %+v", eg)
	}
	if r := admit(t, q, 10); len(r.Jobs) != 0 {
		t.Fatalf("admitted %d jobs of a paused group", len(r.Jobs))
	}
	r = resumeOK(t, q, G("early"), redisq.Resumed)
	if r.Transition != contracts.StateCreated {
		t.Fatalf("resume: %+v", r)
	}
	a := admit(t, q, 10)
	if len(a.Jobs) != 5 || fmt.Sprint(a.Started) != fmt.Sprint([]contracts.GroupRef{G("early")}) {
		t.Fatalf("after resume: %+v", a)
	}
}

// TestPausedGroupsJobsStayQueued: jobs of a paused group that come due in
// the non-ready queue, or whose lease expires, go back into the group's
// queue, not to a worker, and run once the group is resumed. A paused
// group is cancelled like any other, and one whose running jobs all end
// completes.
func TestPausedGroupsJobsStayQueued(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Lease: 5 * time.Second, GlobalLimit: 100, Window: time.Second}, true)
	enqueueN(t, q, "g", 4, "", 0)
	b.rdb.Del(ctx, q.Keys().RatePacer())
	r := admit(t, q, 2)
	if len(r.Jobs) != 2 {
		t.Fatalf("admitted %d", len(r.Jobs))
	}
	j0, j1 := r.Jobs[0], r.Jobs[1]
	if o, _ := q.Claim(ctx, j0.Group, j0.ID, 1); o != redisq.ClaimRun {
		t.Fatalf("claim %v", o)
	}
	if rr, err := q.Retry(ctx, j0.Group, j0.ID, 1, -1, "boom"); err != nil || rr.Outcome != "parked" {
		t.Fatalf("retry %+v %v", rr, err)
	}
	pauseOK(t, q, G("g"), redisq.Paused)
	b.clock.advance(6 * time.Second) // j0 is due, j1's lease expired
	rel, err := q.Release(ctx, 10)
	if err != nil || len(rel.Jobs) != 0 || rel.Requeued != 1 {
		t.Fatalf("release: %+v %v", rel, err)
	}
	rc, err := q.Reclaim(ctx, 10)
	if err != nil || len(rc.Jobs) != 0 || rc.Requeued != 1 {
		t.Fatalf("reclaim: %+v %v", rc, err)
	}
	if a := admit(t, q, 10); len(a.Jobs) != 0 {
		t.Fatalf("admitted %d jobs of a paused group", len(a.Jobs))
	}
	info, _, _ := q.Group(ctx, G("g"))
	if info.Pending != 4 || info.InFlight != 0 {
		t.Fatalf("paused group: pending %d in flight %d, want 4 and 0", info.Pending, info.InFlight)
	}
	// The expired lease's delivery no longer runs.
	if o, _ := q.Claim(ctx, j1.Group, j1.ID, 1); o != redisq.ClaimStale {
		t.Fatalf("claim of the reclaimed attempt: %v", o)
	}
	resumeOK(t, q, G("g"), redisq.Resumed)
	a := admit(t, q, 10)
	attempts := map[string]int{}
	for _, j := range a.Jobs {
		attempts[j.ID] = j.Attempt
	}
	if len(a.Jobs) != 4 || attempts[j0.ID] != 2 || attempts[j1.ID] != 2 {
		t.Fatalf("after resume: %+v", a.Jobs)
	}

	// A paused group is cancelled like any other.
	enqueueN(t, q, "p", 3, "", 0)
	pauseOK(t, q, G("p"), redisq.Paused)
	if c, err := q.Cancel(ctx, G("p")); err != nil || c.Outcome != redisq.Cancelled || c.Dropped != 3 {
		t.Fatalf("cancel of a paused group: %+v %v", c, err)
	}
	// A sealed paused group whose admitted jobs all end completes.
	enqueueN(t, q, "s", 2, "", 0)
	seal(t, q, "s", 2)
	b.rdb.Del(ctx, q.Keys().RatePacer())
	if a := admit(t, q, 2); len(a.Jobs) != 2 {
		t.Fatalf("admitted %d of s", len(a.Jobs))
	}
	pauseOK(t, q, G("s"), redisq.Paused)
	recs, err := q.RecordBatch(ctx, []contracts.JobResult{success("s", 0), success("s", 1)})
	if err != nil || !recs[1].Completed || recs[1].Group.State != contracts.StateCompleted {
		t.Fatalf("record while paused: %+v %v", recs, err)
	}
}

// TestResumeOfASealedDrainedGroupAggregates: a RUNNING group sealed while
// paused, with no job queued, resumes to AGGREGATING.
func TestResumeOfASealedDrainedGroupAggregates(t *testing.T) {
	q, _ := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit}, false)
	enqueueN(t, q, "g", 2, "", 0)
	drain(t, q, 2)
	pauseOK(t, q, G("g"), redisq.Paused)
	seal(t, q, "g", 2)
	if r := resumeOK(t, q, G("g"), redisq.Resumed); r.Transition != contracts.StateAggregating {
		t.Fatalf("resume: %+v", r)
	}
}

// TestJobIdempotencyOutlivesTheJobHash: a job id is a duplicate for as long
// as its group lives, even once the job's hash has expired; the set of ids
// gets the group TTL when the group ends.
func TestJobIdempotencyOutlivesTheJobHash(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{JobTTL: time.Second, GroupTTL: time.Hour}, false)
	enqueueN(t, q, "g", 2, "", 0)
	drain(t, q, 1)
	if _, err := q.Record(ctx, success("g", 0)); err != nil {
		t.Fatal(err)
	}
	// The job hash expires (JobTTL) while the group is open.
	if err := b.rdb.Del(ctx, q.Keys().Job(G("g"), "j00000")).Err(); err != nil {
		t.Fatal(err)
	}
	out, err := q.EnqueueBatch(ctx, []redisq.Job{{Group: G("g"), ID: "j00000", Type: "t"}, {Group: G("g"), ID: "j00001", Type: "t"}})
	if err != nil || out[0] != redisq.Duplicate || out[1] != redisq.Duplicate {
		t.Fatalf("re-sent jobs: %v %v", out, err)
	}
	info, _, _ := q.Group(ctx, G("g"))
	if info.Jobs != 2 || info.Pending != 1 {
		t.Fatalf("jobs %d pending %d, want 2 and 1", info.Jobs, info.Pending)
	}
	if ttl := b.rdb.TTL(ctx, q.Keys().GroupIDs(G("g"))).Val(); ttl != -1 {
		t.Fatalf("an open group's id set has TTL %v", ttl)
	}
	if _, err := q.Cancel(ctx, G("g")); err != nil {
		t.Fatal(err)
	}
	if ttl := b.rdb.TTL(ctx, q.Keys().GroupIDs(G("g"))).Val(); ttl <= 59*time.Minute {
		t.Fatalf("the ended group's id set has TTL %v, want the group TTL", ttl)
	}
	// Still a duplicate (not "ended") while the ended group's keys live.
	if o, _ := q.Enqueue(ctx, redisq.Job{Group: G("g"), ID: "j00000", Type: "t"}); o != redisq.Duplicate {
		t.Fatalf("re-sent job of the ended group: %v", o)
	}
}

// TestEnqueueReportsEffectiveSettings: a group keeps the settings of the
// job that created it; EnqueueJobs reports them so callers can tell.
func TestEnqueueReportsEffectiveSettings(t *testing.T) {
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{}, false)
	first := redisq.Job{Group: G("g"), ID: "a", Type: "t", Priority: contracts.PriorityLow, BasePriority: 5, MaxInFlight: 2}
	res, err := q.EnqueueJobs(ctx, []redisq.Job{first})
	want := contracts.GroupSettings{Priority: contracts.PriorityLow, BasePriority: 5, MaxInFlight: 2}
	if err != nil || len(res.Groups) != 1 || !res.Groups[0].Created || !reflect.DeepEqual(res.Groups[0].Settings, want) ||
		res.Groups[0].Counts.Jobs != 1 || fmt.Sprint(res.Created) != fmt.Sprint([]contracts.GroupRef{G("g")}) {
		t.Fatalf("first: %+v %v", res, err)
	}
	res, err = q.EnqueueJobs(ctx, []redisq.Job{{Group: G("g"), ID: "b", Type: "t", MaxInFlight: 9},
		{Group: G("other/g"), ID: "a", Type: "t"}})
	if err != nil || len(res.Groups) != 2 || res.Groups[0].Created || !reflect.DeepEqual(res.Groups[0].Settings, want) ||
		res.Groups[0].Counts.Jobs != 2 || !res.Groups[1].Created ||
		!reflect.DeepEqual(res.Groups[1].Settings, contracts.GroupSettings{Priority: contracts.PriorityNormal}) {
		t.Fatalf("second: %+v %v", res, err)
	}
	info, _, _ := q.Group(ctx, G("g"))
	if info.MaxInFlight != 2 || info.Priority != contracts.PriorityLow || info.BasePriority != 5 {
		t.Fatalf("stored settings %+v", info)
	}
	if _, err := q.EnqueueJobs(ctx, []redisq.Job{{Group: G("bad:tenant/g"), ID: "a"}}); err == nil {
		t.Fatal("a tenant with ':' was accepted")
	}
	if _, err := q.EnqueueJobs(ctx, []redisq.Job{{Group: G("g"), ID: "a:b"}}); err == nil {
		t.Fatal("a job id with ':' was accepted")
	}
}
