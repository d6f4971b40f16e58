package redisq_test

import (
	"context"
	"testing"

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
