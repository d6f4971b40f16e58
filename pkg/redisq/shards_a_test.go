package redisq_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// The calls about tenants, groups, callbacks, schedules and the gateway's
// state, through a Queue of 4 shards: each goes to its tenant's shard (its
// keys carry that shard's tag, none the cross-shard one), and the calls
// that span tenants merge every shard's answers.

const shardsN = 4

// shardTenants returns n tenants on n different shards of shardsN.
func shardTenants(t *testing.T, n int) []string {
	t.Helper()
	seen := map[int]bool{}
	var out []string
	for i := 0; len(out) < n; i++ {
		if i > 1000 {
			t.Fatalf("no %d tenants on distinct shards", n)
		}
		tn := fmt.Sprintf("tenant%d", i)
		if s := redisq.ShardOf(tn, shardsN); !seen[s] {
			seen[s] = true
			out = append(out, tn)
		}
	}
	return out
}

// shardKeys are the keys of tenant's shard.
func shardKeys(b *testBundle, tenant string) redisq.Keys {
	return redisq.NewKeys(redisq.ShardPrefix(b.prefix, redisq.ShardOf(tenant, shardsN)))
}

// globalKeys are the cross-shard keys.
func globalKeys(b *testBundle) redisq.Keys { return redisq.NewKeys(redisq.GlobalPrefix(b.prefix)) }

func setupShards(t *testing.T, cfg redisq.Config) (*redisq.Queue, *testBundle) {
	t.Helper()
	cfg.Shards = shardsN
	q, b := setup(t, cfg, true)
	if n := q.ShardCount(); n != shardsN {
		t.Fatalf("%d shards, want %d", n, shardsN)
	}
	return q, b
}

// wantKeys fails unless every key exists.
func wantKeys(t *testing.T, q *redisq.Queue, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if n, err := q.Client().Exists(context.Background(), k).Result(); err != nil || n != 1 {
			t.Errorf("key %s: exists %d, %v; want it", k, n, err)
		}
	}
}

// noKeys fails if any key exists.
func noKeys(t *testing.T, q *redisq.Queue, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if n, err := q.Client().Exists(context.Background(), k).Result(); err != nil || n != 0 {
			t.Errorf("key %s: exists %d, %v; want none", k, n, err)
		}
	}
}

// TestShardsTenantSettings: quotas, door limits, SUBMIT room, tenant
// settings, known tenants and Idempotency-Keys, set and read through the
// top Queue, land in and are read from each tenant's own shard.
func TestShardsTenantSettings(t *testing.T) {
	t.Parallel()
	q, b := setupShards(t, redisq.Config{})
	ctx := context.Background()
	ts := shardTenants(t, 3)
	a, c, d := ts[0], ts[1], ts[2]
	for _, tn := range ts {
		if got, want := q.For(tn).Keys().Prefix(), redisq.ShardPrefix(b.prefix, redisq.ShardOf(tn, shardsN)); got != want {
			t.Fatalf("shard of %s has prefix %q, want %q", tn, got, want)
		}
	}

	// quotas
	if err := q.SetTenantQuota(ctx, a, redisq.QuotaQueuedJobs, 5); err != nil {
		t.Fatal(err)
	}
	if err := q.SetTenantQuota(ctx, c, redisq.QuotaActiveGroups, 7); err != nil {
		t.Fatal(err)
	}
	tq, err := q.TenantQuota(ctx, a)
	if err != nil || tq.MaxQueuedJobs != 5 || !tq.OwnQueuedJobs || tq.OwnActiveGroups {
		t.Fatalf("quota of %s: %+v %v", a, tq, err)
	}
	list, err := q.TenantQuotas(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want []redisq.TenantQuota
	for _, tn := range []string{a, c} {
		one, err := q.For(tn).TenantQuota(ctx, tn)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, *one)
	}
	slices.SortFunc(want, func(x, y redisq.TenantQuota) int { return cmpString(x.Tenant, y.Tenant) })
	if !reflect.DeepEqual(list, want) {
		t.Fatalf("TenantQuotas = %+v, want %+v", list, want)
	}
	if f := q.Client().HExists(ctx, shardKeys(b, a).TenantQuotas(), a+":queued").Val(); !f {
		t.Errorf("%s's quota is not in its shard", a)
	}
	wantKeys(t, q, shardKeys(b, c).TenantQuotas())
	noKeys(t, q, globalKeys(b).TenantQuotas())

	// door limits
	if err := q.SetTenantDoorLimit(ctx, a, redisq.DoorRequestRate, 1); err != nil {
		t.Fatal(err)
	}
	if l, err := q.TenantDoorLimits(ctx, a); err != nil || !reflect.DeepEqual(l, map[redisq.DoorLimit]int64{redisq.DoorRequestRate: 1}) {
		t.Fatalf("door limits of %s: %v %v", a, l, err)
	}
	if l, err := q.TenantDoorLimits(ctx, c); err != nil || len(l) != 0 {
		t.Fatalf("door limits of %s: %v %v", c, l, err)
	}
	def := redisq.DoorDefaults{ConcurrentRequests: 1, JobRate: 10}
	enter := func(e redisq.DoorEntry) redisq.DoorVerdict {
		t.Helper()
		v, err := q.DoorEnter(ctx, def, e)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// a's own rate, 1/s, is 10 requests in the 10 s window; c has none
	for i := range 10 {
		if v := enter(redisq.DoorEntry{Tenant: a}); !v.Allowed || v.Requests != 10 {
			t.Fatalf("request %d of %s: %+v", i, a, v)
		}
	}
	if v := enter(redisq.DoorEntry{Tenant: a}); v.Allowed || v.Refused != redisq.DoorRequestRate {
		t.Fatalf("11th request of %s: %+v, want refused by its own request rate", a, v)
	}
	if v := enter(redisq.DoorEntry{Tenant: c}); !v.Allowed || v.Requests != 0 {
		t.Fatalf("request of %s: %+v, want allowed without a request limit", c, v)
	}
	slot := redisq.DoorEntry{Tenant: c, Slot: redisq.DoorConcurrentRequests, SlotID: "r1"}
	if v := enter(slot); !v.Allowed || !v.Held {
		t.Fatalf("slot of %s: %+v", c, v)
	}
	if err := q.DoorRenew(ctx, def, c, redisq.DoorConcurrentRequests, []string{"r1"}); err != nil {
		t.Fatal(err)
	}
	slot.SlotID = "r2"
	if v := enter(slot); v.Allowed || v.Refused != redisq.DoorConcurrentRequests {
		t.Fatalf("second slot of %s: %+v, want refused", c, v)
	}
	if err := q.DoorLeave(ctx, def, c, redisq.DoorConcurrentRequests, "r1"); err != nil {
		t.Fatal(err)
	}
	if v := enter(slot); !v.Allowed {
		t.Fatalf("slot of %s after the first left: %+v", c, v)
	}
	if debt, err := q.DoorCharge(ctx, def, d, 1000, 0); err != nil || debt <= 0 {
		t.Fatalf("charge of %s: %v %v, want a debt", d, debt, err)
	}
	if v := enter(redisq.DoorEntry{Tenant: d, Jobs: true}); v.Allowed || v.Refused != redisq.DoorJobRate {
		t.Fatalf("jobs request of %s in debt: %+v, want refused by the job rate", d, v)
	}
	wantKeys(t, q, shardKeys(b, a).DoorLimits(), shardKeys(b, a).DoorState(a, "requests"),
		shardKeys(b, c).DoorState(c, "concurrent"), shardKeys(b, d).DoorState(d, "jobs"))
	noKeys(t, q, globalKeys(b).DoorLimits())

	// SUBMIT room
	if err := q.SetTenantSubmitRoom(ctx, a, 100); err != nil {
		t.Fatal(err)
	}
	if l, ok, err := q.TenantSubmitRoom(ctx, a); err != nil || !ok || l != 100 {
		t.Fatalf("submit room of %s: %d %v %v", a, l, ok, err)
	}
	if _, ok, err := q.TenantSubmitRoom(ctx, c); err != nil || ok {
		t.Fatalf("submit room of %s: %v %v, want none", c, ok, err)
	}
	r1, err := q.ReserveSubmitRoom(ctx, a, 80, 0, 0)
	if err != nil || !r1.OK || r1.Limit != 100 {
		t.Fatalf("reserve: %+v %v", r1, err)
	}
	if r, err := q.ReserveSubmitRoom(ctx, a, 30, 0, 0); err != nil || r.OK || r.Held != 80 {
		t.Fatalf("reserve beyond the room: %+v %v", r, err)
	}
	if err := r1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := q.ReserveSubmitRoom(ctx, a, 30, 0, 0); err != nil || !r.OK || r.Held != 0 {
		t.Fatalf("reserve after the release: %+v %v", r, err)
	}
	sc, err := q.ReadSubmitCheck(ctx, G(a+"/g"))
	if err != nil || sc.Quota.Tenant != a || sc.Quota.MaxQueuedJobs != 5 || sc.State != "" {
		t.Fatalf("submit check: %+v %v", sc, err)
	}
	wantKeys(t, q, shardKeys(b, a).DoorState(a, "submit-reserved"))

	// tenant settings
	ws := []contracts.Window{{Zone: "UTC", Days: []string{"sun"}, From: "00:00", To: "01:00"}}
	v1 := redisq.SettingVersion{Bucket: "b", Rev: 1}
	if ok, err := q.PutTenantWindows(ctx, c, ws, v1); err != nil || !ok {
		t.Fatalf("put windows: %v %v", ok, err)
	}
	if ok, err := q.PutTenantWindows(ctx, c, nil, v1); err != nil || ok {
		t.Fatalf("put windows again at the same version: %v %v, want not written", ok, err)
	}
	if got, err := q.TenantWindows(ctx, c); err != nil || !reflect.DeepEqual(got, ws) {
		t.Fatalf("windows of %s: %+v %v", c, got, err)
	}
	if got, err := q.TenantWindows(ctx, a); err != nil || got != nil {
		t.Fatalf("windows of %s: %+v %v, want none", a, got, err)
	}
	sec := redisq.CallbackSecrets{Current: "s3cret", CreatedAt: time.UnixMilli(1000)}
	if ok, err := q.PutCallbackSecrets(ctx, a, sec, v1); err != nil || !ok {
		t.Fatalf("put secrets: %v %v", ok, err)
	}
	if got, err := q.CallbackSecretsOf(ctx, a); err != nil || got.Current != "s3cret" || !got.CreatedAt.Equal(sec.CreatedAt) {
		t.Fatalf("secrets of %s: %+v %v", a, got, err)
	}
	wantKeys(t, q, shardKeys(b, c).TenantWindows(), shardKeys(b, c).TenantSettingsRev(),
		shardKeys(b, a).TenantCallbackSecret(a), shardKeys(b, a).TenantSettingsRev())
	noKeys(t, q, globalKeys(b).TenantWindows(), globalKeys(b).TenantSettingsRev())

	// known tenants
	if seen, err := q.TenantSeen(ctx, d); err != nil || seen {
		t.Fatalf("%s seen before anything: %v %v", d, seen, err)
	}
	if seen, err := q.TenantSeen(ctx, a); err != nil || !seen {
		t.Fatalf("%s (with a quota) seen: %v %v", a, seen, err)
	}
	if err := q.IndexGroup(ctx, G(d+"/g1"), 1000); err != nil {
		t.Fatal(err)
	}
	if seen, err := q.TenantSeen(ctx, d); err != nil || !seen {
		t.Fatalf("%s seen after its group was indexed: %v %v", d, seen, err)
	}
	wantKeys(t, q, shardKeys(b, d).TenantGroupIndex(d), shardKeys(b, d).GroupIndex())
	noKeys(t, q, globalKeys(b).GroupIndex())

	// Idempotency-Keys: a tenant's in its shard, the admin's in the shard
	// of its scope's name
	idem := q.Idempotency()
	for _, id := range []redisq.IdempotencyKey{{Scope: "t:" + c, Hash: "h1"}, {Scope: "admin", Hash: "h1"}} {
		if ok, err := idem.Lock(ctx, id, "o1", time.Minute); err != nil || !ok {
			t.Fatalf("lock %v: %v %v", id, ok, err)
		}
		if ok, err := idem.Lock(ctx, id, "o2", time.Minute); err != nil || ok {
			t.Fatalf("second lock %v: %v %v", id, ok, err)
		}
		if ok, err := idem.Renew(ctx, id, "o1", time.Minute); err != nil || !ok {
			t.Fatalf("renew %v: %v %v", id, ok, err)
		}
		if ok, err := idem.Complete(ctx, id, "o1", redisq.IdempotencyRecord{State: redisq.IdempotencyDone, Status: 201, Body: []byte("x")}, time.Minute); err != nil || !ok {
			t.Fatalf("complete %v: %v %v", id, ok, err)
		}
		rec, ok, err := idem.Get(ctx, id)
		if err != nil || !ok || rec.State != redisq.IdempotencyDone || rec.Status != 201 {
			t.Fatalf("record %v: %+v %v %v", id, rec, ok, err)
		}
		if ok, err := idem.Release(ctx, id, "o1"); err != nil || ok {
			t.Fatalf("release of a completed record %v: %v %v", id, ok, err)
		}
	}
	wantKeys(t, q, shardKeys(b, c).Idempotency("t:"+c, "h1"), shardKeys(b, "admin").Idempotency("admin", "h1"))
	noKeys(t, q, globalKeys(b).Idempotency("t:"+c, "h1"))
}

func cmpString(x, y string) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

// TestShardsGroupReads: failures, refusals, progress, holds, schedules,
// repairs and next due times of groups of tenants on different shards,
// through the top Queue, are what each group's shard answers.
func TestShardsGroupReads(t *testing.T) {
	t.Parallel()
	q, b := setupShards(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, GroupTTL: time.Hour})
	ctx := context.Background()
	ts := shardTenants(t, 3)
	a, c, d := ts[0], ts[1], ts[2]

	// failures of a group of a
	ga := G(a + "/fa")
	failJobs(t, q.For(a), ga, 3, 3, func(i int) bool { return i != 1 })
	fs, next, err := q.Failures(ctx, ga, "", 10)
	if err != nil || next != "" || len(fs) != 2 || fs[0].JobID != "j00002" || fs[1].JobID != "j00000" || fs[0].Error != "error 2" {
		t.Fatalf("failures of %s: %+v %q %v", ga, fs, next, err)
	}
	wantFs, _, err := q.For(a).FailuresPage(ctx, ga, redisq.FailuresQuery{Limit: 10, Head: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, err := q.FailuresPage(ctx, ga, redisq.FailuresQuery{Limit: 10, Head: 3}); err != nil || !reflect.DeepEqual(got, wantFs) {
		t.Fatalf("failures page: %+v %v, want %+v", got, err, wantFs)
	}
	if n, err := q.FailuresKept(ctx, ga); err != nil || n != 2 {
		t.Fatalf("failures kept: %d %v", n, err)
	}
	if v, ok, err := q.FailuresVersion(ctx, ga); err != nil || !ok || v != 2 {
		t.Fatalf("failures version: %d %v %v", v, ok, err)
	}
	if f, ok, err := q.Failure(ctx, ga, "j00000"); err != nil || !ok || f.Error != "error 0" {
		t.Fatalf("failure: %+v %v %v", f, ok, err)
	}
	wantKeys(t, q, shardKeys(b, a).GroupFailures(ga))

	// a repair reads the group in its shard
	if r, err := q.RepairGroup(ctx, ga); err != nil || r.Counts.Jobs != 3 || r.Counts.Failed != 2 {
		t.Fatalf("repair of %s: %+v %v", ga, r, err)
	}

	// refusals of a group of c (not created)
	gc := G(c + "/rc")
	rr, err := q.RecordRefusal(ctx, gc, redisq.Refusal{MsgID: "m1", Seq: 1, Reason: "over_quota", Jobs: 3})
	if err != nil || !rr.Recorded || rr.Messages != 1 || rr.Jobs != 3 || rr.Exists {
		t.Fatalf("record refusal: %+v %v", rr, err)
	}
	if r, err := q.GroupRefusals(ctx, gc); err != nil || r == nil || r.Messages != 1 || r.Jobs != 3 || r.Last.MsgID != "m1" {
		t.Fatalf("refusals of %s: %+v %v", gc, r, err)
	}
	if ids, err := q.RefusedMsgIDs(ctx, gc); err != nil || len(ids) != 1 {
		t.Fatalf("refused ids of %s: %v %v", gc, ids, err)
	}
	wantKeys(t, q, shardKeys(b, c).GroupRefusals(gc), shardKeys(b, c).GroupRefusedIDs(gc))
	noKeys(t, q, globalKeys(b).GroupRefusals(gc))

	// progress of running groups of a and d, one call
	gd := G(d + "/pd")
	enqueueN(t, q.For(d), d+"/pd", 2, "", 0)
	js, err := q.For(d).DequeueBatch(ctx, 2)
	if err != nil || len(js) != 2 {
		t.Fatalf("dequeue: %d %v", len(js), err)
	}
	record(t, q.For(d), js[0])
	if err := q.RecordProgress(ctx, gd, G(c+"/unknown"), ga); err != nil {
		t.Fatal(err)
	}
	now := b.clock.t.UnixMilli()
	for g, n := range map[contracts.GroupRef]int64{ga: 3, gd: 1} {
		got, err := q.Progress(ctx, g)
		if err != nil || len(got) != 1 || got[0] != (redisq.ProgressSample{AtMs: now, Count: n}) {
			t.Fatalf("progress of %s: %+v %v, want one sample of %d", g, got, err, n)
		}
		wantKeys(t, q, shardKeys(b, g.Tenant).GroupProgress(g))
	}

	// a backed-off job of d
	if o, err := q.For(d).Claim(ctx, gd, js[1].ID, js[1].Attempt); err != nil || o != redisq.ClaimRun {
		t.Fatalf("claim: %v %v", o, err)
	}
	if r, err := q.For(d).Retry(ctx, gd, js[1].ID, js[1].Attempt, time.Minute, "429"); err != nil || r.Outcome != "parked" {
		t.Fatalf("retry: %+v %v", r, err)
	}
	due, atLeast, err := q.NextDue(ctx, gd)
	if err != nil || atLeast || due != now+time.Minute.Milliseconds() {
		t.Fatalf("next due of %s: %d %v %v, want %d", gd, due, atLeast, err, now+time.Minute.Milliseconds())
	}

	// holds: a paused group of a, a scheduled one of c, one of d waiting
	// for a worker of its type, in the caller's order
	gp, gs, gw := G(a+"/paused"), G(c+"/sched"), G(d+"/work")
	enqueueN(t, q.For(a), a+"/paused", 1, "", 0)
	if r, err := q.For(a).Pause(ctx, gp); err != nil || r.Outcome != redisq.Paused {
		t.Fatalf("pause: %+v %v", r, err)
	}
	later := b.clock.t.Add(time.Hour)
	if _, err := q.For(c).EnqueueJobs(ctx, []redisq.Job{{Group: gs, ID: "j", Type: "t", NotBefore: later.UTC().Format(time.RFC3339)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.For(d).EnqueueJobs(ctx, []redisq.Job{{Group: gw, ID: "j", Type: "mail"}}); err != nil {
		t.Fatal(err)
	}
	groups := []contracts.GroupRef{gs, G(d + "/unknown"), gp, gw}
	holds := func() [][]redisq.Hold {
		t.Helper()
		hs, err := q.Holds(ctx, groups, redisq.HoldOptions{NextDue: true})
		if err != nil || len(hs) != len(groups) {
			t.Fatalf("holds: %v %v", hs, err)
		}
		for i, g := range groups {
			one, err := q.For(g.Tenant).Holds(ctx, groups[i:i+1], redisq.HoldOptions{NextDue: true})
			if err != nil || !reflect.DeepEqual(hs[i], one[0]) {
				t.Fatalf("holds of %s: %+v, its shard says %+v (%v)", g, hs[i], one[0], err)
			}
		}
		return hs
	}
	hs := holds()
	if len(hs[0]) != 1 || hs[0][0].Reason != redisq.HoldScheduled || hs[0][0].UntilMs != later.UnixMilli() {
		t.Errorf("holds of %s: %+v, want scheduled", gs, hs[0])
	}
	if hs[1] != nil {
		t.Errorf("holds of an unknown group: %+v", hs[1])
	}
	if len(hs[2]) != 1 || hs[2][0].Reason != redisq.HoldPaused {
		t.Errorf("holds of %s: %+v, want paused", gp, hs[2])
	}
	if len(hs[3]) != 1 || hs[3][0].Reason != redisq.HoldNoWorker || hs[3][0].Type != "mail" {
		t.Errorf("holds of %s: %+v, want no worker", gw, hs[3])
	}
	// a worker of type mail announces itself (cross-shard keys): the
	// group's shard sees it
	if err := q.AnnounceTypes(ctx, []string{"mail"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	wantKeys(t, q, globalKeys(b).WorkerTypes())
	if hs = holds(); len(hs[3]) != 0 {
		t.Errorf("holds of %s with a live worker: %+v", gw, hs[3])
	}

	// schedules: admission passes the scheduled groups of c and d by
	gs2 := G(d + "/sched2")
	if _, err := q.For(d).EnqueueJobs(ctx, []redisq.Job{{Group: gs2, ID: "j", Type: "t", NotBefore: later.UTC().Format(time.RFC3339)}}); err != nil {
		t.Fatal(err)
	}
	if sc, err := q.GroupSchedule(ctx, gs); err != nil || sc.Reason != redisq.HoldScheduled || !sc.NotBefore.Equal(later.Truncate(time.Second)) {
		t.Fatalf("schedule of %s: %+v %v", gs, sc, err)
	}
	for _, tn := range []string{c, d} {
		if _, err := q.For(tn).Admit(ctx, 10); err != nil {
			t.Fatal(err)
		}
	}
	waiting, err := q.ScheduleWaiting(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(waiting, func(x, y contracts.GroupRef) int { return cmpString(x.String(), y.String()) })
	wantWaiting := []contracts.GroupRef{gs, gs2}
	slices.SortFunc(wantWaiting, func(x, y contracts.GroupRef) int { return cmpString(x.String(), y.String()) })
	if !reflect.DeepEqual(waiting, wantWaiting) {
		t.Fatalf("schedule waiting: %v, want %v", waiting, wantWaiting)
	}
	wantPos, err := q.For(c).KeptPosition(ctx, gs, contracts.PriorityNormal)
	if err != nil {
		t.Fatal(err)
	}
	if pos, err := q.KeptPosition(ctx, gs, contracts.PriorityNormal); err != nil || pos != wantPos || pos < 1 {
		t.Fatalf("kept position of %s: %d %v, its shard says %d", gs, pos, err, wantPos)
	}
	if r, err := q.Reschedule(ctx, gs, b.clock.t.Add(-time.Minute)); err != nil || r.Outcome != redisq.Rescheduled {
		t.Fatalf("reschedule: %+v %v", r, err)
	}
	if sc, err := q.GroupSchedule(ctx, gs); err != nil || sc.Reason != "" {
		t.Fatalf("schedule of %s after the move: %+v %v", gs, sc, err)
	}
	wantKeys(t, q, shardKeys(b, d).ScheduleWait())
	noKeys(t, q, globalKeys(b).ScheduleWait())
}

// TestShardsCallbacks: deliveries of groups on three shards, two per shard,
// are counted together, claimed across shards never more than asked, and
// settled, read and retried through the top Queue on the shard that holds
// them.
func TestShardsCallbacks(t *testing.T) {
	t.Parallel()
	q, b := setupShards(t, redisq.Config{})
	ctx := context.Background()
	const u = "https://hooks.example.com/done"
	var groups []contracts.GroupRef
	for i := range 6 {
		tn := shardTenants(t, 3)[i%3]
		g := G(fmt.Sprintf("%s/cb%d", tn, i))
		groups = append(groups, g)
		if _, err := q.For(tn).Enqueue(ctx, redisq.Job{Group: g, ID: "1", Type: "t", CallbackURL: u}); err != nil {
			t.Fatal(err)
		}
		if url, err := q.CallbackURLOf(ctx, g); err != nil || url != u {
			t.Fatalf("callback url of %s: %q %v", g, url, err)
		}
		if _, err := q.For(tn).Cancel(ctx, g); err != nil {
			t.Fatal(err)
		}
		wantKeys(t, q, shardKeys(b, tn).CallbacksDue(), shardKeys(b, tn).GroupCallback(g))
		cb, ok, err := q.CallbackOf(ctx, g)
		if err != nil || !ok || cb.State != redisq.CallbackPending || cb.URL != u {
			t.Fatalf("callback of %s: %+v %v %v", g, cb, ok, err)
		}
	}
	if n, err := q.PendingCallbacks(ctx); err != nil || n != 6 {
		t.Fatalf("pending callbacks: %d %v, want 6", n, err)
	}
	// the first shard it tries gives 2, the next one only 1 more
	claimed, err := q.ClaimCallbacks(ctx, 3, time.Minute)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claimed %d (%v), want 3", len(claimed), err)
	}
	rest, err := q.ClaimCallbacks(ctx, 10, time.Minute)
	if err != nil || len(rest) != 3 {
		t.Fatalf("claimed %d more (%v), want the last 3", len(rest), err)
	}
	if none, err := q.ClaimCallbacks(ctx, 10, time.Minute); err != nil || len(none) != 0 {
		t.Fatalf("claimed %d leased ones (%v)", len(none), err)
	}
	claimed = append(claimed, rest...)
	var got []contracts.GroupRef
	for i := range claimed {
		c := &claimed[i]
		got = append(got, c.Group)
		if c.Counts.State != contracts.StateCancelled {
			t.Errorf("claimed %+v", c)
		}
		if body, err := q.FreezeCallbackBody(ctx, c, []byte(`{"a":1}`)); err != nil || string(body) != `{"a":1}` {
			t.Fatalf("freeze %s: %s %v", c.Group, body, err)
		}
		if err := q.SettleCallback(ctx, c, redisq.CallbackOK, 200, "", time.Time{}); err != nil {
			t.Fatalf("settle %s: %v", c.Group, err)
		}
	}
	sortRefs := func(gs []contracts.GroupRef) {
		slices.SortFunc(gs, func(x, y contracts.GroupRef) int { return cmpString(x.String(), y.String()) })
	}
	sortRefs(got)
	sortRefs(groups)
	if !reflect.DeepEqual(got, groups) {
		t.Fatalf("claimed %v, want %v", got, groups)
	}
	if n, err := q.PendingCallbacks(ctx); err != nil || n != 0 {
		t.Fatalf("pending callbacks after the deliveries: %d %v", n, err)
	}
	for _, g := range groups {
		if cb, ok, err := q.CallbackOf(ctx, g); err != nil || !ok || cb.State != redisq.CallbackDelivered || cb.StatusCode != 200 {
			t.Fatalf("callback of %s: %+v %v %v", g, cb, ok, err)
		}
		if st, err := q.RetryCallback(ctx, g); err != nil || st != redisq.CallbackDelivered {
			t.Fatalf("retry of a delivered callback %s: %q %v", g, st, err)
		}
	}
	noKeys(t, q, globalKeys(b).CallbacksDue())
}

// TestShardsSweeps: abandoning idle groups, refreshing sending windows and
// correcting the quota counts go through every shard.
func TestShardsSweeps(t *testing.T) {
	t.Parallel()
	q, b := setupShards(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, GroupTTL: time.Hour})
	ctx := context.Background()
	ts := shardTenants(t, 3)
	a, c, d := ts[0], ts[1], ts[2]

	// idle groups of two shards (abandoned at the end)
	for _, tn := range []string{a, c} {
		startGroup(t, q.For(tn), tn+"/idle", 1, 1)
		wantKeys(t, q, shardKeys(b, tn).StuckWatch())
	}

	// sending windows from the tenants' defaults
	closed := []contracts.Window{{Zone: "UTC", Days: []string{"sun"}, From: "00:00", To: "01:00"}}
	for _, tn := range []string{a, c} {
		if _, err := q.PutTenantWindows(ctx, tn, closed, redisq.SettingVersion{Bucket: "b", Rev: 1}); err != nil {
			t.Fatal(err)
		}
		if _, err := q.For(tn).EnqueueJobs(ctx, []redisq.Job{{Group: G(tn + "/win"), ID: "j", Type: "t"}}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := q.RefreshWindows(ctx); err != nil || n != 2 {
		t.Fatalf("refresh windows: %d %v, want the groups of both shards", n, err)
	}
	sunday := time.Date(2024, 1, 28, 0, 0, 0, 0, time.UTC)
	for _, tn := range []string{a, c} {
		if sc, err := q.GroupSchedule(ctx, G(tn+"/win")); err != nil || sc.Reason != redisq.HoldOutsideWindow || !sc.HeldUntil.Equal(sunday) {
			t.Fatalf("schedule of %s/win: %+v %v", tn, sc, err)
		}
	}
	if n, err := q.RefreshWindows(ctx); err != nil || n != 0 {
		t.Fatalf("refresh windows again: %d %v", n, err)
	}

	// quota counts corrected in the tenant's shard
	enqueueN(t, q.For(d), d+"/q", 2, "", 0)
	if tq, err := q.TenantQuota(ctx, d); err != nil || tq.QueuedJobs != 2 || tq.ActiveGroups != 1 {
		t.Fatalf("quota of %s: %+v %v", d, tq, err)
	}
	if err := q.Client().Set(ctx, shardKeys(b, d).TenantQueuedJobs(d), 99, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := q.CorrectCounters(ctx); err != nil || n < 1 {
		t.Fatalf("correct counters: %d %v", n, err)
	}
	if tq, err := q.TenantQuota(ctx, d); err != nil || tq.QueuedJobs != 2 {
		t.Fatalf("quota of %s after the correction: %+v %v", d, tq, err)
	}

	if got, err := q.AbandonIdle(ctx, idleTTL); err != nil || len(got) != 0 {
		t.Fatalf("abandoned %v (%v) before the groups were idle", got, err)
	}
	b.clock.advance(idleTTL + time.Hour)
	got, err := q.AbandonIdle(ctx, idleTTL, redisq.SweepChunk(2))
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(x, y contracts.GroupRef) int { return cmpString(x.String(), y.String()) })
	want := []contracts.GroupRef{G(a + "/idle"), G(c + "/idle")}
	slices.SortFunc(want, func(x, y contracts.GroupRef) int { return cmpString(x.String(), y.String()) })
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("abandoned %v, want %v", got, want)
	}
}
