package redisq_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TestPositionFollowsTheServerProcess checks that a position moves only
// forward, and only while the server that stored it still runs: after a
// restart it is no longer current, advance refuses it until a reset from
// the position read, and a second reset from the same stale read is refused.
func TestPositionFollowsTheServerProcess(t *testing.T) {
	q, b := setup(t, redisq.Config{}, false)
	ctx := context.Background()

	p, err := q.Position(ctx, "submit")
	if err != nil {
		t.Fatal(err)
	}
	if p.Seq != 0 || p.Current || p.RunID == "" {
		t.Fatalf("fresh position = %+v, want seq 0, not current, a run id", p)
	}
	if a, _ := q.AdvancePosition(ctx, "submit", 10); a.Current || a.Seq != 0 {
		t.Fatalf("advance before any reset = %+v, want refused", a)
	}
	r, err := q.ResetPosition(ctx, "submit", p, 7)
	if err != nil || !r.Current || r.Seq != 7 {
		t.Fatalf("reset = %+v, %v; want 7, current", r, err)
	}
	if again, _ := q.ResetPosition(ctx, "submit", p, 3); again.Seq != 7 {
		t.Fatalf("second reset from the same read moved the position to %d", again.Seq)
	}
	if a, _ := q.AdvancePosition(ctx, "submit", 12); !a.Current || a.Seq != 12 {
		t.Fatalf("advance = %+v, want 12", a)
	}
	if a, _ := q.AdvancePosition(ctx, "submit", 9); a.Seq != 12 {
		t.Fatalf("advance backward moved the position to %d", a.Seq)
	}
	if o, _ := q.Position(ctx, "other"); o.Seq != 0 || o.Current {
		t.Fatalf("another log's position = %+v", o)
	}

	// Another server process: the stored run id is no longer the server's.
	if err := b.rdb.HSet(ctx, q.Keys().Positions(), "submit:rid", "an-older-process").Err(); err != nil {
		t.Fatal(err)
	}
	stale, _ := q.Position(ctx, "submit")
	if stale.Current || stale.Seq != 12 || stale.StoredRunID != "an-older-process" {
		t.Fatalf("position after a restart = %+v, want 12 not current", stale)
	}
	if a, _ := q.AdvancePosition(ctx, "submit", 20); a.Current || a.Seq != 12 {
		t.Fatalf("advance after a restart = %+v, want refused", a)
	}
	if r, _ := q.ResetPosition(ctx, "submit", stale, 25); !r.Current || r.Seq != 25 {
		t.Fatalf("reset after the replay = %+v", r)
	}
}

// TestEnqueueJobsIfCurrentAppliesOnlyToTheCheckedServer checks that a
// guarded enqueue applies its jobs, of one group or of several, while the
// position is current, and changes nothing once the stored run id is no
// longer the server's (a restarted or older Redis), whatever the calls;
// the guard keys never outlive the call.
func TestEnqueueJobsIfCurrentAppliesOnlyToTheCheckedServer(t *testing.T) {
	q, b := setup(t, redisq.Config{}, false)
	ctx := context.Background()
	jobsOf := func(groups int, prefix string) []redisq.Job {
		var js []redisq.Job
		for g := 0; g < groups; g++ {
			for i := 0; i < 3; i++ {
				js = append(js, redisq.Job{Group: contracts.GroupRef{Tenant: "t", ID: fmt.Sprintf("g%d", g)},
					ID: fmt.Sprintf("%s-%d", prefix, i), Type: "noop", Payload: []byte("{}"), Message: g})
			}
		}
		return js
	}
	pending := func() int64 {
		var n int64
		for g := 0; g < 3; g++ {
			l, err := q.PendingJobs(ctx, contracts.GroupRef{Tenant: "t", ID: fmt.Sprintf("g%d", g)})
			if err != nil {
				t.Fatal(err)
			}
			n += l
		}
		return n
	}
	noGuards := func() {
		t.Helper()
		if keys := b.rdb.Keys(ctx, q.Keys().Guard("*")).Val(); len(keys) > 0 {
			t.Fatalf("guard keys left: %v", keys)
		}
	}

	// A fresh installation: no position stored, so none is current.
	if _, err := q.EnqueueJobsIfCurrent(ctx, "submit", jobsOf(1, "a")); !errors.Is(err, redisq.ErrNotCurrent) {
		t.Fatalf("enqueue before any position: %v, want ErrNotCurrent", err)
	}
	if n := pending(); n != 0 {
		t.Fatalf("%d jobs queued by a refused enqueue", n)
	}
	noGuards()

	p, _ := q.Position(ctx, "submit")
	if _, err := q.ResetPosition(ctx, "submit", p, 0); err != nil {
		t.Fatal(err)
	}
	for _, groups := range []int{1, 3} { // one script call, and a pipeline of three
		res, err := q.EnqueueJobsIfCurrent(ctx, "submit", jobsOf(groups, fmt.Sprint("b", groups)))
		if err != nil {
			t.Fatalf("%d groups: %v", groups, err)
		}
		for i, o := range res.Outcomes {
			if o != redisq.Added {
				t.Fatalf("%d groups, job %d: %v", groups, i, o)
			}
		}
		noGuards()
	}
	if n := pending(); n != 12 {
		t.Fatalf("%d jobs queued, want 12", n)
	}

	// Another server process: nothing is applied, not even duplicates'
	// group changes, until a replay resets the position.
	if err := b.rdb.HSet(ctx, q.Keys().Positions(), "submit:rid", "an-older-process").Err(); err != nil {
		t.Fatal(err)
	}
	for _, groups := range []int{1, 3} {
		if _, err := q.EnqueueJobsIfCurrent(ctx, "submit", jobsOf(groups, "c")); !errors.Is(err, redisq.ErrNotCurrent) {
			t.Fatalf("%d groups after a restart: %v, want ErrNotCurrent", groups, err)
		}
		noGuards()
	}
	if n := pending(); n != 12 {
		t.Fatalf("%d jobs queued after refused enqueues, want 12", n)
	}
	// The unguarded enqueue (the replay's) still applies.
	if _, err := q.EnqueueJobs(ctx, jobsOf(1, "c")); err != nil {
		t.Fatal(err)
	}
	if n := pending(); n != 15 {
		t.Fatalf("%d jobs queued, want 15", n)
	}
}
