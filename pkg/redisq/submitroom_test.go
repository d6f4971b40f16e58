package redisq_test

import (
	"context"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// A tenant's room on SUBMIT: what it published and the fetchers have not
// applied (above their ack floor) plus what it is publishing stays within
// its limit; other tenants have their own; a tenant's own limit replaces
// the default; a reservation never settled lapses.
func TestSubmitRoom(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{}, true)
	ctx := context.Background()
	reserve := func(tenant string, bytes int64, floor uint64) *redisq.SubmitRoom {
		t.Helper()
		r, err := q.ReserveSubmitRoom(ctx, tenant, bytes, 1000, floor)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	a := reserve("acme", 600, 0)
	if !a.OK || a.Held != 0 || a.Limit != 1000 {
		t.Fatalf("first request: %+v", a)
	}
	if err := a.Settle(ctx, 10); err != nil { // published through sequence 10
		t.Fatal(err)
	}
	if r := reserve("acme", 500, 9); r.OK || r.Held != 600 {
		t.Fatalf("600 + 500 bytes with 1000 of room: %+v, want refused holding 600", r)
	}
	if r := reserve("globex", 900, 0); !r.OK {
		t.Fatalf("another tenant's room: %+v", r)
	}
	// The fetchers applied through 10: the room is free again.
	c := reserve("acme", 500, 10)
	if !c.OK || c.Held != 0 {
		t.Fatalf("after the fetchers applied the first request: %+v", c)
	}
	// Released (nothing published): its bytes come back at once.
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	d := reserve("acme", 1000, 10)
	if !d.OK || d.Held != 0 {
		t.Fatalf("after a release: %+v", d)
	}
	// Neither settled nor released (its gateway died): it lapses.
	if r := reserve("acme", 1, 10); r.OK {
		t.Fatalf("a full room took one more byte: %+v", r)
	}
	b.clock.advance(redisq.SubmitRoomLease + time.Second)
	if r := reserve("acme", 1000, 10); !r.OK {
		t.Fatalf("after the lease of a reservation never settled: %+v", r)
	}
	// A tenant's own room replaces the default; 0 is none.
	if err := b.rdb.HSet(ctx, q.Keys().DoorLimits(), "hooli:"+redisq.SubmitRoomField, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	if r := reserve("hooli", 4000, 0); !r.OK || r.Limit != 5000 {
		t.Fatalf("own room of 5000: %+v", r)
	}
	if err := b.rdb.HSet(ctx, q.Keys().DoorLimits(), "initech:"+redisq.SubmitRoomField, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if r := reserve("initech", 1<<40, 0); !r.OK || r.Limit != 0 {
		t.Fatalf("no room limit: %+v", r)
	}
}

// ReadSubmitCheck reads in one round trip what GroupState, TenantQuota and
// RefusedMsgIDs read one by one, for a group that does not exist and for
// one with queued jobs, a quota of its tenant's own and refused messages.
func TestReadSubmitCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{TenantMaxQueuedJobs: 50, TenantMaxActiveGroups: 4}, false)
	if err := q.SetTenantQuota(ctx, "acme", redisq.QuotaActiveGroups, 2); err != nil {
		t.Fatal(err)
	}
	enqueueUnits(t, q, unit("acme/live", 0, 0, 7))
	if _, err := q.RecordRefusal(ctx, G("acme/live"), redisq.Refusal{MsgID: "m1", Seq: 3, Reason: "over_quota", Jobs: 1}); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"acme/none", "acme/live", "other/none"} {
		ref := G(g)
		c, err := q.ReadSubmitCheck(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		state, err := q.GroupState(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		quota, err := q.TenantQuota(ctx, ref.Tenant)
		if err != nil {
			t.Fatal(err)
		}
		refused, err := q.RefusedMsgIDs(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		if c.State != state || c.Quota != *quota || len(c.Refused) != len(refused) {
			t.Errorf("%s: %+v, want state %q, quota %+v, refused %v", g, c, state, *quota, refused)
		}
		for id := range refused {
			if _, ok := c.Refused[id]; !ok {
				t.Errorf("%s: refused ids %v lack %s", g, c.Refused, id)
			}
		}
	}
	if c, _ := q.ReadSubmitCheck(ctx, G("acme/live")); c.State == "" || c.Quota.QueuedJobs != 7 || c.Quota.MaxActiveGroups != 2 || len(c.Refused) != 1 {
		t.Errorf("acme/live: %+v, want a state, 7 queued jobs, its own quota of 2 groups and 1 refused id", c)
	}
}
