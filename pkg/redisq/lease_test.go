package redisq_test

import (
	"context"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TestLease: one owner holds a lease at a time and renews it; a release by
// another owner does nothing; a lease not renewed frees itself.
func TestLease(t *testing.T) {
	t.Parallel()
	q, _ := setup(t, redisq.Config{}, true)
	ctx := context.Background()
	take := func(owner string, ttl time.Duration) bool {
		t.Helper()
		ok, err := q.TakeLease(ctx, "replay", owner, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !take("a", time.Minute) || take("b", time.Minute) || !take("a", 200*time.Millisecond) {
		t.Fatal("a takes and renews the lease, b does not get it")
	}
	if err := q.ReleaseLease(ctx, "replay", "b"); err != nil || take("b", time.Minute) {
		t.Fatalf("b released a's lease: %v", err)
	}
	start := time.Now()
	testkit.WaitFor(t, "a's lease, renewed for 200 ms, to free itself", 5*time.Second, func() bool { return take("b", time.Minute) })
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Fatalf("b took a's lease %s after a renewed it for 200 ms", took)
	}
	if err := q.ReleaseLease(ctx, "replay", "b"); err != nil || !take("a", time.Minute) {
		t.Fatalf("a released lease is not free: %v", err)
	}
}
