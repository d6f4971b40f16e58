package redisq_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// enqueueDest adds n jobs of type typ naming destination dest to group name.
func enqueueDest(t testing.TB, q *redisq.Queue, name, typ, dest string, n int) *redisq.EnqueueResult {
	t.Helper()
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: G(name), ID: fmt.Sprintf("j%05d", i), Type: typ, Destination: dest, Payload: []byte(`{"n":1}`)}
	}
	res, err := q.EnqueueJobs(context.Background(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range res.Outcomes {
		if o != redisq.Added {
			t.Fatalf("%s job %d: %v", name, i, o)
		}
	}
	return res
}

// byDest counts jobs per destination ("" = their type).
func byDest(jobs []redisq.LeasedJob) map[string]int {
	out := map[string]int{}
	for _, j := range jobs {
		out[j.Destination]++
	}
	return out
}

// TestDestinationCarried: a job's explicit destination is stored in its
// queued record, then in its hash when it leaves the list, and carried by
// admission, reclaims and releases; one equal to the type is not stored,
// and its record is the one of a job without a destination.
func TestDestinationCarried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Mode: redisq.ModeSeed, GlobalLimit: 1, Window: 10 * time.Second,
		BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond, Lease: time.Second}, true)
	enqueueDest(t, q, "a", "http", "api.example.com", 2)
	enqueueDest(t, q, "b", "http", "http", 1)

	f, err := redisq.ReadJob(ctx, b.rdb, q.Keys(), G("a"), "j00000")
	if err != nil {
		t.Fatal(err)
	}
	if f["dest"] != "api.example.com" || f["type"] != "http" || f["payload"] != `{"n":1}` || f["status"] != "QUEUED" {
		t.Fatalf("queued record read as %v", f)
	}
	rec, err := b.rdb.HGet(ctx, q.Keys().GroupQueued(G("b")), "j00000").Result()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(rec, "/") || !strings.HasSuffix(rec, `:4:0:http{"n":1}`) {
		t.Fatalf("record of a job whose destination is its type: %q", rec)
	}

	// one job admitted (the global limit), the others parked
	r := admit(t, q, 3)
	if len(r.Jobs) != 1 || r.Parked != 2 {
		t.Fatalf("admitted %d, parked %d", len(r.Jobs), r.Parked)
	}
	got := map[string]string{}
	for _, j := range r.Jobs {
		got[j.Group.ID+"/"+j.ID] = j.Destination
	}
	if d, ok := got["a/j00000"]; !ok || d != "api.example.com" {
		t.Fatalf("admitted %+v, want a/j00000 with its destination", r.Jobs)
	}
	if d, _ := b.rdb.HGet(ctx, q.Keys().Job(G("a"), "j00000"), "dest").Result(); d != "api.example.com" {
		t.Fatalf("job hash dest = %q", d)
	}
	if n, _ := b.rdb.HExists(ctx, q.Keys().Job(G("b"), "j00000"), "dest").Result(); n {
		t.Fatal("a job whose destination is its type has a dest field")
	}

	// a reclaim of the expired lease carries it
	b.clock.advance(2 * time.Second)
	rc, err := q.Reclaim(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(rc.Jobs) != 1 || rc.Jobs[0].Destination != "api.example.com" {
		t.Fatalf("reclaimed %+v", rc.Jobs)
	}

	// releases of the parked jobs carry theirs
	q2, err := redisq.New(ctx, b.rdb, redisq.Config{Prefix: b.prefix, Clock: b.clock.now, Mode: redisq.ModeSeed})
	if err != nil {
		t.Fatal(err)
	}
	b.clock.advance(10 * time.Second)
	rel, err := q2.Release(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if d := byDest(rel.Jobs); len(rel.Jobs) != 2 || d["api.example.com"] != 1 || d[""] != 1 {
		t.Fatalf("released %+v, want a/j00001 with its destination and b/j00000 without", rel.Jobs)
	}
}

// TestDestinationTenantBound: a tenant has at most MaxDestinationsPerTenant
// explicit destinations; a job naming a new one past it is added without
// it (its type is its destination) and counted; a destination it uses
// already goes on, other tenants are not affected, and one not used for
// ForgetAfter frees its place.
func TestDestinationTenantBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Adaptive: redisq.AdaptiveConfig{MaxDestinationsPerTenant: 2, ForgetAfter: time.Minute}}, true)
	for _, d := range []string{"a", "b"} {
		if res := enqueueDest(t, q, "t1/"+d, "http", d+".example", 2); res.Groups[0].DestinationsRefused != 0 {
			t.Fatalf("%s refused within the bound", d)
		}
	}
	res := enqueueDest(t, q, "t1/c", "http", "c.example", 3)
	if got := res.Groups[0].DestinationsRefused; got != 3 {
		t.Fatalf("past the bound: %d refused, want 3", got)
	}
	if f, _ := redisq.ReadJob(ctx, b.rdb, q.Keys(), G("t1/c"), "j00001"); f["dest"] != "" || f["type"] != "http" {
		t.Fatalf("refused job stored as %v, want its type alone", f)
	}
	if res := enqueueDest(t, q, "t1/a2", "http", "a.example", 1); res.Groups[0].DestinationsRefused != 0 {
		t.Fatal("a destination in use refused")
	}
	if res := enqueueDest(t, q, "t2/c", "http", "c.example", 1); res.Groups[0].DestinationsRefused != 0 {
		t.Fatal("another tenant's destination refused")
	}
	if n, _ := b.rdb.ZCard(ctx, q.Keys().TenantDestinations("t1")).Result(); n != 2 {
		t.Fatalf("tenant t1 tracks %d destinations, want 2", n)
	}
	if ttl, _ := b.rdb.PTTL(ctx, q.Keys().TenantDestinations("t1")).Result(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("the tenant's destinations expire in %s, want ForgetAfter (1m)", ttl)
	}
	b.clock.advance(2 * time.Minute)
	if res := enqueueDest(t, q, "t1/c2", "http", "c.example", 1); res.Groups[0].DestinationsRefused != 0 {
		t.Fatal("after ForgetAfter, a new destination still refused")
	}
}

// TestAdmissionGatesByDestination: a destination's learned rate holds its
// jobs while another destination of the same type and the same tenant
// keeps flowing; a stopped destination admits none, and its group keeps
// its place (the other group does not overtake it once it has rate).
func TestAdmissionGatesByDestination(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Mode: redisq.ModePaced, GlobalLimit: 10_000, Window: time.Second, Burst: time.Second,
		Adaptive: redisq.AdaptiveConfig{Enabled: true}}, true)
	enqueueDest(t, q, "t1/slow", "http", "slow.example", 100)
	enqueueDest(t, q, "t1/fast", "http", "fast.example", 100)
	report(t, q, ok("slow.example", 20), ok("fast.example", 1000))
	b.clock.advance(time.Second)
	report(t, q, throttled("slow.example", 1, 0)) // 16/s
	_, r := learned(t, q, "slow.example")
	res, err := q.Admit(ctx, 150, redisq.WithLearnedRates(r))
	if err != nil {
		t.Fatal(err)
	}
	got := byDest(res.Jobs)
	if got["slow.example"] != 16 || got["fast.example"] != 100 || res.RateHeld["slow.example"] == 0 {
		t.Fatalf("admitted %v, rate held %v; want slow 16, fast 100", got, res.RateHeld)
	}
	if res.RateHeld["http"] != 0 {
		t.Fatalf("the type itself held: %v", res.RateHeld)
	}

	// stopped by a Retry-After: none of its jobs, the other's all
	q2, b2 := setup(t, redisq.Config{Mode: redisq.ModeSeed, Adaptive: redisq.AdaptiveConfig{Enabled: true}}, true)
	enqueueDest(t, q2, "t1/slow", "http", "slow.example", 10)
	enqueueDest(t, q2, "t1/fast", "http", "fast.example", 10)
	report(t, q2, ok("slow.example", 20))
	b2.clock.advance(time.Second)
	report(t, q2, throttled("slow.example", 1, 5*time.Second))
	_, r = learned(t, q2, "slow.example")
	res, err = q2.Admit(ctx, 100, redisq.WithLearnedRates(r))
	if err != nil {
		t.Fatal(err)
	}
	if got := byDest(res.Jobs); got["slow.example"] != 0 || got["fast.example"] != 10 {
		t.Fatalf("stopped: admitted %v", got)
	}
	if ms, ok := r.StopEnd(res.RateHeld, res.NowMs); !ok || ms != 5000 {
		t.Fatalf("stop end %d %v, want 5000 ms", ms, ok)
	}
	hs, err := q2.Holds(ctx, []contracts.GroupRef{G("t1/slow")}, redisq.HoldOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := false
	for _, h := range hs[0] {
		held = held || h.Reason == redisq.HoldDestinationRate && h.Type == "slow.example" && h.Rate == 16
	}
	if !held {
		t.Fatalf("holds of the stopped destination's group: %+v, want destination_rate of slow.example", hs[0])
	}
}

// TestReleasesPassTheDestinationGate: a due job with an explicit
// destination is released only within its destination's learned rate; the
// rest go back into their group.
func TestReleasesPassTheDestinationGate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q0, b := setup(t, redisq.Config{Mode: redisq.ModeSeed, GlobalLimit: 1, Window: 10 * time.Second,
		BaseBackoff: time.Millisecond, MaxBackoff: time.Millisecond}, true)
	enqueueDest(t, q0, "slow", "http", "slow.example", 10)
	enqueueDest(t, q0, "fast", "http", "fast.example", 10)
	r0 := admit(t, q0, 20)
	if len(r0.Jobs) != 1 || r0.Parked != 19 {
		t.Fatalf("parking: %d admitted, %d parked", len(r0.Jobs), r0.Parked)
	}
	fastParked := 10 - byDest(r0.Jobs)["fast.example"]
	q, err := redisq.New(ctx, b.rdb, redisq.Config{Prefix: b.prefix, Clock: b.clock.now, Mode: redisq.ModeSeed,
		GlobalLimit: 1000, Window: time.Second, Adaptive: redisq.AdaptiveConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	b.clock.advance(9 * time.Second)
	report(t, q, ok("slow.example", 4))
	b.clock.advance(time.Second)                  // a new window; every parked job is due
	report(t, q, throttled("slow.example", 1, 0)) // 3.2/s: 3 per window
	_, r := learned(t, q, "slow.example")
	rel, err := q.Release(ctx, 100, redisq.WithLearnedRates(r))
	if err != nil {
		t.Fatal(err)
	}
	got := byDest(rel.Jobs)
	if got["slow.example"] != 3 || got["fast.example"] != fastParked || rel.RateHeld["slow.example"] != 19-fastParked-3 {
		t.Fatalf("released %v, rate held %v; want slow 3, fast %d", got, rel.RateHeld, fastParked)
	}
}

// TestDestinationRateSharedByTenants: two tenants whose jobs (of
// different types) name one throttled destination share its learned rate
// equally, whatever their number of groups: a held destination keeps each
// group's place in the fair order.
func TestDestinationRateSharedByTenants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{Mode: redisq.ModeSeed, GlobalLimit: 10_000, Window: time.Second,
		Adaptive: redisq.AdaptiveConfig{Enabled: true}}, true)
	enqueueDest(t, q, "t1/a", "sms", "gw.example", 100)
	enqueueDest(t, q, "t2/a", "push", "gw.example", 100)
	enqueueDest(t, q, "t2/b", "push", "gw.example", 100)
	report(t, q, ok("gw.example", 25))
	b.clock.advance(time.Second)
	report(t, q, throttled("gw.example", 1, 0)) // 20/s: 20 per window
	for w := range 3 {
		_, r := learned(t, q, "gw.example")
		res, err := q.Admit(ctx, 300, redisq.WithLearnedRates(r))
		if err != nil {
			t.Fatal(err)
		}
		per := map[string]int{}
		for _, j := range res.Jobs {
			per[j.Group.Tenant]++
		}
		if per["t1"] != 10 || per["t2"] != 10 {
			t.Fatalf("window %d: admitted per tenant %v, want 10 each of the destination's 20", w, per)
		}
		b.clock.advance(time.Second)
	}
}
