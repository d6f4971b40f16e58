package redisq_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/redis/go-redis/v9"
)

func admit(t testing.TB, q *redisq.Queue, n int) *redisq.AdmitResult {
	t.Helper()
	r, err := q.Admit(context.Background(), n)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func groupsOf(jobs []redisq.LeasedJob) string {
	var s []string
	for _, j := range jobs {
		s = append(s, j.Group.ID)
	}
	return strings.Join(s, ",")
}

// The same fairness suite runs against every admission mode.
func TestFairnessSuite(t *testing.T) {
	for _, mode := range []string{redisq.ModeSeed, redisq.ModePaced} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cfg := redisq.Config{Mode: mode, Alpha: 10000, GlobalLimit: 1_000_000, Window: time.Hour, Burst: time.Hour}
			t.Run("alternate", func(t *testing.T) {
				q, _ := setup(t, cfg, true)
				enqueueN(t, q, "gB", 3, "", 0)
				enqueueN(t, q, "gA", 3, "", 0)
				var got []string
				for i := 0; i < 6; i++ {
					got = append(got, groupsOf(admit(t, q, 1).Jobs))
				}
				if s := strings.Join(got, ","); s != "gB,gA,gB,gA,gB,gA" {
					t.Fatalf("order %s", s)
				}
			})
			t.Run("levels", func(t *testing.T) {
				q, _ := setup(t, cfg, false)
				enqueueN(t, q, "low", 2, contracts.PriorityLow, -1_000_000_000)
				enqueueN(t, q, "normal", 2, contracts.PriorityNormal, 0)
				enqueueN(t, q, "high", 2, contracts.PriorityHigh, 0)
				if s := groupsOf(admit(t, q, 10).Jobs); s != "high,high,normal,normal,low,low" {
					t.Fatalf("order %s", s)
				}
			})
			t.Run("windows of 20", func(t *testing.T) {
				q, _ := setup(t, cfg, false)
				for g := 0; g < 20; g++ {
					enqueueN(t, q, fmt.Sprintf("g%02d", g), 60, "", 0)
				}
				var order []string
				for {
					r := admit(t, q, 50)
					if len(r.Jobs) == 0 {
						break
					}
					for _, j := range r.Jobs {
						order = append(order, j.Group.ID)
					}
				}
				if len(order) != 1200 {
					t.Fatalf("admitted %d", len(order))
				}
				for i := 0; i+20 <= len(order)-20; i++ {
					c := map[string]int{}
					for _, g := range order[i : i+20] {
						if c[g]++; c[g] > 2 {
							t.Fatalf("%s served %d times in window at %d", g, c[g], i)
						}
					}
				}
			})
		})
	}
}

func TestAdmitLeasesJobs(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Lease: 5 * time.Second}, true)
	enqueueN(t, q, "g", 3, "", 0)
	if r := admit(t, q, 0); len(r.Jobs) != 0 {
		t.Fatal("admit with no capacity took jobs")
	}
	r := admit(t, q, 2)
	if len(r.Jobs) != 2 || r.Jobs[0].Attempt != 1 || fmt.Sprint(r.Started) != fmt.Sprint([]contracts.GroupRef{G("g")}) {
		t.Fatalf("admit: %+v", r)
	}
	if n, _ := b.rdb.ZCount(ctx, q.Keys().Inflight(), "-inf", "(+inf").Result(); n != 2 {
		t.Fatalf("inflight %d", n)
	}
	// Confirm the first; let the second's lease expire.
	if err := q.Confirm(ctx, r.Jobs[0]); err != nil {
		t.Fatal(err)
	}
	if exp, _ := q.ExpiredLeases(ctx, 10); len(exp) != 0 {
		t.Fatalf("expired too early: %v", exp)
	}
	b.clock.advance(6 * time.Second)
	exp, _ := q.ExpiredLeases(ctx, 10)
	if len(exp) != 1 || exp[0] != "t:g:"+r.Jobs[1].ID {
		t.Fatalf("expired %v", exp)
	}
	rc, err := q.Reclaim(ctx, 10)
	if err != nil || len(rc.Jobs) != 1 || rc.Jobs[0].Attempt != 1 || rc.Jobs[0].ID != r.Jobs[1].ID {
		t.Fatalf("reclaim %+v %v", rc, err)
	}
	// Re-leased: not reclaimable again until the new deadline.
	if rc2, _ := q.Reclaim(ctx, 10); len(rc2.Jobs) != 0 {
		t.Fatalf("reclaimed twice: %+v", rc2)
	}
	// A claimed (running) job is no longer recovered by lease expiry.
	if o, _ := q.Claim(ctx, G("g"), r.Jobs[1].ID, 1); o != redisq.ClaimRun {
		t.Fatalf("claim: %v", o)
	}
	b.clock.advance(6 * time.Second)
	if rc3, _ := q.Reclaim(ctx, 10); len(rc3.Jobs) != 0 {
		t.Fatalf("reclaimed a running job: %+v", rc3)
	}
}

func TestNoWindowExceedsGlobalLimit(t *testing.T) {
	for _, mode := range []string{redisq.ModePaced, redisq.ModeSeed} {
		t.Run(mode, func(t *testing.T) {
			const limit = 40
			window := 100 * time.Millisecond
			q, _ := setup(t, redisq.Config{Mode: mode, GlobalLimit: limit, Window: window, MaxBackoff: time.Hour}, false)
			for g := 0; g < 10; g++ {
				enqueueN(t, q, fmt.Sprintf("g%d", g), 300, "", 0)
			}
			cfg := q.Config()
			var mu sync.Mutex
			perWindow := map[int64]int{}
			var wg sync.WaitGroup
			deadline := time.Now().Add(1500 * time.Millisecond)
			for a := 0; a < 8; a++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// each admitter on its own connection
					env := testenv.Redis(t)
					c := redis.NewClient(&redis.Options{Addr: env.Client.Options().Addr, PoolSize: 1})
					defer c.Close()
					aq, err := redisq.New(context.Background(), c, cfg)
					if err != nil {
						t.Error(err)
						return
					}
					for time.Now().Before(deadline) {
						r, err := aq.Admit(context.Background(), 7)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						perWindow[r.NowMs/window.Milliseconds()] += len(r.Jobs)
						mu.Unlock()
						if len(r.Jobs) == 0 {
							time.Sleep(2 * time.Millisecond)
						}
					}
				}()
			}
			wg.Wait()
			total := 0
			for w, n := range perWindow {
				total += n
				if n > limit {
					t.Errorf("window %d admitted %d > limit %d", w, n, limit)
				}
			}
			// Seed mode parks what it denies, so only paced keeps admitting.
			if total < limit || (mode == redisq.ModePaced && total < limit*5) {
				t.Fatalf("only %d admitted in 1.5s at %d per 100ms", total, limit)
			}
		})
	}
}

// The fixed-window rate limiter's reference cases, through seed-mode admission.
func TestSeedModeShares(t *testing.T) {
	ctx := context.Background()
	cfg := redisq.Config{Mode: redisq.ModeSeed, GlobalLimit: 10, Window: 10 * time.Second}
	t.Run("within and above the limit", func(t *testing.T) {
		q, b := setup(t, cfg, true)
		enqueueN(t, q, "A", 11, "", 0)
		if r := admit(t, q, 10); len(r.Jobs) != 10 || r.Parked != 0 {
			t.Fatalf("first 10: %d admitted %d parked", len(r.Jobs), r.Parked)
		}
		r := admit(t, q, 1)
		if len(r.Jobs) != 0 || r.Parked != 1 || r.DeniedGlobal != 1 {
			t.Fatalf("11th: %+v", r)
		}
		st, _ := q.LimiterStatus(ctx, testTenant)
		if st.GlobalCount != 10 || st.GlobalLimit != 10 {
			t.Fatalf("denial did not roll back: %+v", st)
		}
		// A new window resets the count.
		b.clock.advance(10 * time.Second)
		enqueueN(t, q, "B", 1, "", 0)
		if r := admit(t, q, 1); len(r.Jobs) != 1 {
			t.Fatalf("new window: %+v", r)
		}
		if st, _ := q.LimiterStatus(ctx, ""); st.GlobalCount != 1 {
			t.Fatalf("new window count %d", st.GlobalCount)
		}
	})
	t.Run("share follows active count", func(t *testing.T) {
		// Shares are per tenant: tenants a and b get 5 each of the 10.
		q, _ := setup(t, cfg, true)
		enqueueN(t, q, "a/A", 6, "", 0)
		if r := admit(t, q, 5); len(r.Jobs) != 5 {
			t.Fatalf("A: %+v", r)
		}
		enqueueN(t, q, "b/B", 1, contracts.PriorityHigh, 0)
		if r := admit(t, q, 1); groupsOf(r.Jobs) != "B" {
			t.Fatalf("B: %+v", r)
		}
		r := admit(t, q, 1)
		if r.Parked != 1 || r.DeniedGroup != 1 {
			t.Fatalf("A's 6th with two active tenants: %+v", r)
		}
		st, _ := q.LimiterStatus(ctx, "a")
		if st.TenantLimit != 5 || st.Active != 2 || st.TenantCount != 5 || st.Weight != 1 {
			t.Fatalf("status %+v", st)
		}
	})
	t.Run("a tenant's groups share one share", func(t *testing.T) {
		// Tenant a splits its work into three groups, b has one: a does
		// not get three shares.
		q, _ := setup(t, cfg, true)
		for _, g := range []string{"a/A1", "a/A2", "a/A3", "b/B"} {
			enqueueN(t, q, g, 10, "", 0)
		}
		r := admit(t, q, 40)
		per := map[string]int{}
		for _, j := range r.Jobs {
			per[j.Group.Tenant]++
		}
		if per["a"] != 5 || per["b"] != 5 || r.Parked != 30 {
			t.Fatalf("admitted per tenant %v, parked %d; want 5 each", per, r.Parked)
		}
	})
	t.Run("global limit first", func(t *testing.T) {
		q, _ := setup(t, cfg, true)
		enqueueN(t, q, "A", 5, "", 0)
		enqueueN(t, q, "B", 5, "", 0)
		if r := admit(t, q, 10); len(r.Jobs) != 10 {
			t.Fatalf("A+B: %+v", r)
		}
		enqueueN(t, q, "C", 1, "", 0)
		if r := admit(t, q, 1); r.Parked != 1 || r.DeniedGlobal != 1 {
			t.Fatalf("C: %+v", r)
		}
	})
}

func TestActiveSetMembership(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: 10, Window: 10 * time.Second, Burst: 10 * time.Second, ActiveStaleAfter: time.Minute}, true)
	enqueueN(t, q, "a/A", 20, "", 0)
	enqueueN(t, q, "b/B", 1, "", 0)
	if _, err := q.Seal(ctx, G("b/B"), 1); err != nil {
		t.Fatal(err)
	}
	admit(t, q, 4)
	st, _ := q.LimiterStatus(ctx, "a")
	if st.Active != 2 || st.TenantLimit != 5 {
		t.Fatalf("two tenants: %+v", st)
	}
	// B completes; its tenant stays active until it stops asking for
	// capacity (an ended group no longer leaves the set by itself).
	if _, err := q.Record(ctx, contracts.JobResult{Tenant: "b", GroupID: "B", JobID: "j00000", Attempt: 1, Status: contracts.ResultSuccess}); err != nil {
		t.Fatal(err)
	}
	if st, _ := q.LimiterStatus(ctx, "a"); st.Active != 2 {
		t.Fatalf("after B completed: %+v", st)
	}
	// A tenant that stops asking expires from the set.
	if err := b.rdb.SAdd(ctx, q.Keys().ActiveTenants(), "ghost").Err(); err != nil {
		t.Fatal(err)
	}
	b.rdb.ZAdd(ctx, q.Keys().ActiveSeen(), redis.Z{Score: float64(b.clock.t.UnixMilli()), Member: "ghost"})
	b.clock.advance(2 * time.Minute)
	admit(t, q, 1) // a asks again; b and ghost have not for 2 minutes
	if g, _ := q.ActiveTenants(ctx); strings.Join(g, ",") != "a" {
		t.Fatalf("active after staleness: %v", g)
	}
	if st, _ := q.LimiterStatus(ctx, "a"); st.Active != 1 || st.TenantLimit != 10 {
		t.Fatalf("alone: %+v", st)
	}
}

func TestPacedSkipsUsedShareThenConservesWork(t *testing.T) {
	q, _ := setup(t, redisq.Config{Mode: redisq.ModePaced, GlobalLimit: 10, Window: 10 * time.Second, Burst: 10 * time.Second}, true)
	enqueueN(t, q, "a/A", 20, "", 0)
	enqueueN(t, q, "b/B", 2, "", 0)
	r := admit(t, q, 100)
	// Tenants a and b alternate; b runs out; a reaches its share (5), then
	// the unused capacity goes to a, up to the global limit and no further.
	if got := groupsOf(r.Jobs); got != "A,B,A,B,A,A,A,A,A,A" {
		t.Fatalf("order %s", got)
	}
	if r.WakeMs <= 0 {
		t.Fatalf("global limit reached, wake %d", r.WakeMs)
	}
	if r2 := admit(t, q, 100); len(r2.Jobs) != 0 {
		t.Fatalf("admitted beyond the global limit: %d", len(r2.Jobs))
	}
}

func TestPacedCappedGroupKeepsItsPlace(t *testing.T) {
	q, b := setup(t, redisq.Config{Mode: redisq.ModePaced, GlobalLimit: 4, Window: 10 * time.Second, Burst: 10 * time.Second}, true)
	enqueueN(t, q, "a/A", 10, "", 0)
	enqueueN(t, q, "b/B", 10, "", 0)
	if got := groupsOf(admit(t, q, 100).Jobs); got != "A,B,A,B" {
		t.Fatalf("window 1: %s", got)
	}
	b.clock.advance(10 * time.Second)
	if got := groupsOf(admit(t, q, 100).Jobs); got != "A,B,A,B" {
		t.Fatalf("window 2: %s", got)
	}
}

func TestPacedSpreadsWithinWindow(t *testing.T) {
	q, b := setup(t, redisq.Config{Mode: redisq.ModePaced, GlobalLimit: 100, Window: time.Second, Burst: 50 * time.Millisecond}, true)
	enqueueN(t, q, "A", 500, "", 0)
	r := admit(t, q, 1000)
	// 50ms of burst at 10ms per job: 6 jobs, not the window's 100.
	if len(r.Jobs) != 6 || r.WakeMs <= 0 {
		t.Fatalf("burst: %d jobs, wake %d", len(r.Jobs), r.WakeMs)
	}
	// Coming back when told, the admitter keeps the pace of one job per
	// 10ms, several jobs per call.
	total, calls := 0, 0
	var elapsed time.Duration
	for elapsed < time.Second {
		d := time.Duration(r.WakeMs) * time.Millisecond
		b.clock.advance(d)
		elapsed += d
		r = admit(t, q, 1000)
		total += len(r.Jobs)
		calls++
	}
	if total < 2*calls {
		t.Fatalf("%d jobs in %d calls: the wake-up should let each call admit several", total, calls)
	}
	want := int(elapsed / (10 * time.Millisecond))
	if total < want-1 || total > want+1 {
		t.Fatalf("%d jobs in %v, want %d (one per 10ms)", total, elapsed, want)
	}
}

// TestClaimBatch claims, in one call, deliveries of two groups, one of them
// cancelled while its jobs were leased: each delivery gets the outcome a
// single Claim would give, a job delivered twice in the batch runs once,
// and every claimed job leaves the inflight set.
func TestClaimBatch(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Lease: 5 * time.Second}, true)
	enqueueN(t, q, "a", 3, "", 0)
	enqueueN(t, q, "c", 2, "", 0)
	r := admit(t, q, 5)
	if len(r.Jobs) != 5 {
		t.Fatalf("admitted %d", len(r.Jobs))
	}
	if _, err := q.Cancel(ctx, G("c")); err != nil {
		t.Fatal(err)
	}
	a, c := []redisq.LeasedJob{}, []redisq.LeasedJob{}
	for _, j := range r.Jobs {
		if j.Group.ID == "a" {
			a = append(a, j)
		} else {
			c = append(c, j)
		}
	}
	d := func(j redisq.LeasedJob, attempt int) redisq.Delivery {
		return redisq.Delivery{Group: j.Group, JobID: j.ID, Attempt: attempt}
	}
	got, err := q.ClaimBatch(ctx, []redisq.Delivery{
		d(a[0], 1), d(c[0], 1), d(a[1], 2), d(a[0], 1), {Group: G("a"), JobID: "nope", Attempt: 1}, d(c[1], 1), d(a[2], 1),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []redisq.Claimed{{Outcome: redisq.ClaimRun, Claims: 1}, {Outcome: redisq.ClaimCancelled},
		{Outcome: redisq.ClaimStale}, {Outcome: redisq.ClaimStale}, {Outcome: redisq.ClaimStale},
		{Outcome: redisq.ClaimCancelled}, {Outcome: redisq.ClaimRun, Claims: 1}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	// a[1] was delivered with a stale attempt: it stays leased.
	if left, _ := b.rdb.ZRangeByScore(ctx, q.Keys().Inflight(), &redis.ZRangeBy{Min: "-inf", Max: "(+inf"}).Result(); fmt.Sprint(left) != "[t:a:"+a[1].ID+"]" {
		t.Fatalf("inflight after claim: %v", left)
	}
	if info, ok, err := q.Group(ctx, G("c")); err != nil || !ok || info.Cancelled != 2 {
		t.Fatalf("cancelled group: %+v %v %v", info, ok, err)
	}
	// A redelivery of a claimed attempt (its worker died) may run again;
	// it is the attempt's second claim, and a suspect (it runs alone).
	if out, err := q.ClaimBatch(ctx, []redisq.Delivery{d(a[0], 1)}); err != nil ||
		out[0] != (redisq.Claimed{Outcome: redisq.ClaimRun, Claims: 2, Suspect: true}) {
		t.Fatalf("redelivered claim: %v %v", out, err)
	}
	if out, err := q.ClaimBatch(ctx, nil); err != nil || len(out) != 0 {
		t.Fatalf("empty batch: %v %v", out, err)
	}
}

// TestTypeRoomsHoldTypesWithoutRoom: a group whose next job is of a type
// without READY room (no live worker, or its room used up) is held and
// keeps its place; groups of other types are admitted, each type within
// its own room, in both gated modes.
func TestTypeRoomsHoldTypesWithoutRoom(t *testing.T) {
	for _, mode := range []string{redisq.ModePaced, redisq.ModeSeed} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			q, _ := setup(t, redisq.Config{Mode: mode, GlobalLimit: 1000}, false)
			enq := func(gid, typ string, n int) {
				jobs := make([]redisq.Job, n)
				for i := range jobs {
					jobs[i] = redisq.Job{Group: G(gid), ID: fmt.Sprintf("j%03d", i), Type: typ}
				}
				if _, err := q.EnqueueBatch(ctx, jobs); err != nil {
					t.Fatal(err)
				}
			}
			enq("dead", "nobody", 100) // oldest: first in fair order
			enq("sms", "sms", 50)
			enq("mail", "email", 50)

			r, err := q.Admit(ctx, 100, redisq.WithTypeRooms(map[string]int{"sms": 3, "email": 5}, 0))
			if err != nil {
				t.Fatal(err)
			}
			byType := map[string]int{}
			for _, j := range r.Jobs {
				byType[j.Type]++
			}
			if byType["sms"] != 3 || byType["email"] != 5 || byType["nobody"] != 0 {
				t.Fatalf("admitted by type %v, want sms 3, email 5, nobody 0", byType)
			}
			if r.Held["nobody"] != 1 || r.WakeMs != redisq.WakeHeld {
				t.Fatalf("held %v wake %d", r.Held, r.WakeMs)
			}
			// The held group kept its jobs and its place.
			if info, _, _ := q.Group(ctx, G("dead")); info.Pending != 100 {
				t.Fatalf("held group pending %d, want 100", info.Pending)
			}
			// Once its type has room it is served first again.
			r, err = q.Admit(ctx, 1, redisq.WithTypeRooms(map[string]int{"nobody": 10}, 0))
			if err != nil || len(r.Jobs) != 1 || r.Jobs[0].Group.ID != "dead" {
				t.Fatalf("after room: %+v %v", r.Jobs, err)
			}
			// A default room applies to every type not listed.
			r, err = q.Admit(ctx, 100, redisq.WithTypeRooms(map[string]int{"nobody": 0}, 2))
			if err != nil {
				t.Fatal(err)
			}
			byType = map[string]int{}
			for _, j := range r.Jobs {
				byType[j.Type]++
			}
			if byType["sms"] != 2 || byType["email"] != 2 || byType["nobody"] != 0 {
				t.Fatalf("with a default room: %v", byType)
			}
		})
	}
}

// TestSeedModeIsBounded: with the window's limit used up, one seed-mode
// call once parked the whole fair queue (990 jobs in one script); the
// dispatcher then released them with no rate check. A call now moves at
// most N jobs, parked ones included, and releases pass the fixed window.
func TestSeedModeIsBounded(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Mode: redisq.ModeSeed, GlobalLimit: 10, Window: 10 * time.Second,
		BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, true)
	enqueueN(t, q, "A", 1000, "", 0)
	r := admit(t, q, 100)
	if len(r.Jobs) != 10 || len(r.Jobs)+r.Parked > 100 {
		t.Fatalf("one call: %d admitted, %d parked; want 10 admitted and at most 100 moved", len(r.Jobs), r.Parked)
	}
	// The parked jobs are due, but the window's limit is used up.
	b.clock.advance(time.Second)
	rel, err := q.Release(ctx, 100)
	if err != nil || len(rel.Jobs) != 0 {
		t.Fatalf("release within a used-up window: %d jobs, %v", len(rel.Jobs), err)
	}
	// A new window lets at most its limit through.
	b.clock.advance(10 * time.Second)
	if rel, err = q.Release(ctx, 100); err != nil || len(rel.Jobs) != 10 {
		t.Fatalf("release in a new window: %d jobs, %v", len(rel.Jobs), err)
	}
}

// The sets every job passes through (inflight, claims) are skiplists
// however few jobs they hold, a set an earlier version wrote as a listpack
// becomes one at its next write, and their pin (lib.lua ZPIN) counts as no
// job: not in the sizes, not a lease deadline.
func TestJobSetsStaySkiplists(t *testing.T) {
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Lease: 5 * time.Second}, true)
	k := q.Keys()
	encoding := func(key string) string {
		t.Helper()
		e, err := b.rdb.ObjectEncoding(ctx, key).Result()
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		return e
	}
	// a claims set as an earlier version left it: a listpack
	if err := b.rdb.ZAdd(ctx, k.Claims(), redis.Z{Score: 1, Member: "t:old:j1"}).Err(); err != nil {
		t.Fatal(err)
	}
	if e := encoding(k.Claims()); e != "listpack" {
		t.Fatalf("claims set up as %s", e)
	}
	enqueueN(t, q, "g", 3, "", 0)
	r := admit(t, q, 3)
	if len(r.Jobs) != 3 {
		t.Fatalf("admitted %d", len(r.Jobs))
	}
	if e := encoding(k.Inflight()); e != "skiplist" {
		t.Fatalf("inflight holding 3 leases is a %s", e)
	}
	if sz, err := q.Sizes(ctx); err != nil || sz.Inflight != 3 {
		t.Fatalf("sizes %+v %v", sz, err)
	}
	if err := q.Confirm(ctx, r.Jobs...); err != nil {
		t.Fatal(err)
	}
	// every lease confirmed: the set stays, holding its pin alone
	if e := encoding(k.Inflight()); e != "skiplist" {
		t.Fatalf("emptied inflight is a %s", e)
	}
	if sz, err := q.Sizes(ctx); err != nil || sz.Inflight != 0 {
		t.Fatalf("sizes after confirm %+v %v", sz, err)
	}
	b.clock.advance(time.Hour)
	if rc, err := q.Reclaim(ctx, 10); err != nil || len(rc.Jobs) != 0 || rc.NextDeadlineMs != -1 {
		t.Fatalf("reclaim with no lease: %+v %v", rc, err)
	}
	if o, err := q.Claim(ctx, G("g"), r.Jobs[0].ID, 1); err != nil || o != redisq.ClaimRun {
		t.Fatalf("claim: %v %v", o, err)
	}
	if e := encoding(k.Claims()); e != "skiplist" {
		t.Fatalf("claims after a claim is a %s", e)
	}
}
