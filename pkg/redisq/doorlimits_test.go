package redisq_test

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TestDoorSlotsOfADeadReplicaComeBack: a slot that is never given back
// (its gateway died) frees itself when its lease runs out; a renewed one
// does not.
func TestDoorSlotsOfADeadReplicaComeBack(t *testing.T) {
	q, b := setup(t, redisq.Config{}, true)
	ctx := context.Background()
	d := redisq.DoorDefaults{SSEStreams: 1, Lease: 30 * time.Second}
	enter := func(id string) redisq.DoorVerdict {
		t.Helper()
		v, err := q.DoorEnter(ctx, d, redisq.DoorEntry{Tenant: "acme", Slot: redisq.DoorSSEStreams, SlotID: id})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := enter("a"); !v.Allowed || !v.Held {
		t.Fatalf("first stream: %+v", v)
	}
	if v := enter("b"); v.Allowed || v.Refused != redisq.DoorSSEStreams || v.Limit != 1 || v.RetryAfter <= 0 {
		t.Fatalf("second stream while the first is held: %+v", v)
	}
	b.clock.advance(20 * time.Second)
	if err := q.DoorRenew(ctx, d, "acme", redisq.DoorSSEStreams, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	b.clock.advance(20 * time.Second) // 40 s after it was taken, 20 s after its renewal
	if v := enter("b"); v.Allowed {
		t.Fatalf("a renewed slot was taken back: %+v", v)
	}
	b.clock.advance(11 * time.Second) // its gateway stopped renewing it
	if v := enter("b"); !v.Allowed {
		t.Fatalf("the lapsed slot did not come back: %+v", v)
	}
	if err := q.DoorLeave(ctx, d, "acme", redisq.DoorSSEStreams, "b"); err != nil {
		t.Fatal(err)
	}
	if v := enter("c"); !v.Allowed {
		t.Fatalf("a slot given back is free: %+v", v)
	}
}

// TestDoorRefusalBySlotSpendsARequest: a request refused for a slot has
// still spent one of the tenant's requests, so a tenant that keeps asking
// for a stream it cannot have runs out of its request rate.
func TestDoorRefusalBySlotSpendsARequest(t *testing.T) {
	q, _ := setup(t, redisq.Config{}, true)
	ctx := context.Background()
	d := redisq.DoorDefaults{RequestRate: 1, SSEStreams: 1, Window: 10 * time.Second}
	enter := func(id string) redisq.DoorVerdict {
		t.Helper()
		v, err := q.DoorEnter(ctx, d, redisq.DoorEntry{Tenant: "acme", Slot: redisq.DoorSSEStreams, SlotID: id})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := enter("a"); !v.Allowed || v.RequestsLeft != 9 {
		t.Fatalf("first stream: %+v", v)
	}
	for i := 8; i >= 0; i-- {
		if v := enter("b"); v.Allowed || v.Refused != redisq.DoorSSEStreams || v.RequestsLeft != int64(i) {
			t.Fatalf("stream refused with %d requests left: %+v", i, v)
		}
	}
	if v := enter("b"); v.Allowed || v.Refused != redisq.DoorRequestRate {
		t.Fatalf("after 10 requests in the window: %+v", v)
	}
}

// TestDoorRatesAndOwnLimits: the request rate allows its window's worth
// at once and then one per period; a tenant's own limit replaces the
// default, 0 lifts it; the job rate lets one request go into debt and
// refuses the next until it is paid off.
func TestDoorRatesAndOwnLimits(t *testing.T) {
	q, b := setup(t, redisq.Config{}, true)
	ctx := context.Background()
	d := redisq.DoorDefaults{RequestRate: 2, JobRate: 100, Window: 10 * time.Second}
	enter := func(tenant string, jobs bool) redisq.DoorVerdict {
		t.Helper()
		v, err := q.DoorEnter(ctx, d, redisq.DoorEntry{Tenant: tenant, SlotID: "x", Jobs: jobs})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for i := 0; i < 20; i++ {
		if v := enter("acme", false); !v.Allowed || v.Requests != 20 || v.RequestsLeft != int64(19-i) {
			t.Fatalf("request %d: %+v", i+1, v)
		}
	}
	v := enter("acme", false)
	if v.Allowed || v.Refused != redisq.DoorRequestRate || v.RetryAfter != 500*time.Millisecond {
		t.Fatalf("request 21: %+v", v)
	}
	b.clock.advance(500 * time.Millisecond)
	if v := enter("acme", false); !v.Allowed {
		t.Fatalf("after one period: %+v", v)
	}
	if v := enter("hooli", false); !v.Allowed {
		t.Fatalf("another tenant: %+v", v)
	}
	if err := q.SetTenantDoorLimit(ctx, "acme", redisq.DoorRequestRate, 0); err != nil {
		t.Fatal(err)
	}
	if v := enter("acme", false); !v.Allowed || v.Requests != 0 {
		t.Fatalf("with no limit of its own: %+v", v)
	}
	own, err := q.TenantDoorLimits(ctx, "acme")
	if err != nil || len(own) != 1 || own[redisq.DoorRequestRate] != 0 {
		t.Fatalf("own limits %v, %v", own, err)
	}
	// 15 s of the job rate: 5 s past the window, which the reader waits.
	if wait, err := q.DoorCharge(ctx, d, "acme", 1500, 0); err != nil || wait < 4900*time.Millisecond || wait > 5100*time.Millisecond {
		t.Fatalf("charge past the window: wait %s, %v", wait, err)
	}
	v = enter("acme", true)
	if v.Allowed || v.Refused != redisq.DoorJobRate || v.RetryAfter < 5*time.Second || v.RetryAfter > 5100*time.Millisecond {
		t.Fatalf("jobs request in debt: %+v", v)
	}
	if v := enter("acme", false); !v.Allowed {
		t.Fatalf("a request without jobs while in debt: %+v", v)
	}
	b.clock.advance(v.RetryAfter)
	if v := enter("acme", true); !v.Allowed {
		t.Fatalf("after Retry-After: %+v", v)
	}
	// The byte rate likewise: 15 s of it in one charge, 5 s past the window.
	d.ByteRate = 1000
	if wait, err := q.DoorCharge(ctx, d, "acme", 0, 15_000); err != nil || wait < 4900*time.Millisecond || wait > 5100*time.Millisecond {
		t.Fatalf("charge of bytes past the window: wait %s, %v", wait, err)
	}
	v = enter("acme", true)
	if v.Allowed || v.Refused != redisq.DoorByteRate || v.Limit != 1000 || v.RetryAfter < 5*time.Second || v.RetryAfter > 5100*time.Millisecond {
		t.Fatalf("jobs request in byte debt: %+v", v)
	}
	if v := enter("acme", false); !v.Allowed {
		t.Fatalf("a request without jobs while in byte debt: %+v", v)
	}
}

// TestDoorScriptRunsOnMiniredis: the gateway of `bulkaction dev` on its
// in-process fallback takes, refuses, renews and gives back as on Redis.
func TestDoorScriptRunsOnMiniredis(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	q, err := redisq.New(ctx, rdb, redisq.Config{Prefix: "mini:"})
	if err != nil {
		t.Fatal(err)
	}
	d := redisq.DoorDefaults{RequestRate: 1, JobRate: 1, ConcurrentRequests: 1}
	e := redisq.DoorEntry{Tenant: "acme", Slot: redisq.DoorConcurrentRequests, SlotID: "a", Jobs: true}
	if v, err := q.DoorEnter(ctx, d, e); err != nil || !v.Allowed || !v.Held || v.Requests != 10 {
		t.Fatalf("%+v %v", v, err)
	}
	e.SlotID = "b"
	if v, err := q.DoorEnter(ctx, d, e); err != nil || v.Allowed || v.Refused != redisq.DoorConcurrentRequests {
		t.Fatalf("%+v %v", v, err)
	}
	if err := q.DoorRenew(ctx, d, "acme", redisq.DoorConcurrentRequests, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if err := q.DoorLeave(ctx, d, "acme", redisq.DoorConcurrentRequests, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.DoorCharge(ctx, d, "acme", 100, 0); err != nil {
		t.Fatal(err)
	}
	if v, err := q.DoorEnter(ctx, d, e); err != nil || v.Allowed || v.Refused != redisq.DoorJobRate {
		t.Fatalf("%+v %v", v, err)
	}
}
