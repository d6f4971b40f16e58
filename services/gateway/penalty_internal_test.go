package gateway

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/testkit"
)

// TestHoldCapAnswersAtOnce: once holdPerTenant refusals of a tenant wait on
// a replica, its next refusal is not held (the door answers it at once and
// closes its connection), while another tenant's refusal still is; every
// held refusal is let go when its request ends.
func TestHoldCapAnswersAtOnce(t *testing.T) {
	t.Parallel()
	var b penaltyBox
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	held := make(chan bool, holdPerTenant)
	for range holdPerTenant {
		wg.Go(func() { held <- b.hold(ctx, "flood") })
	}
	waiting := func(tenant string) int {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.holding[tenant]
	}
	testkit.WaitFor(t, "the tenant's refusals to wait", 10*time.Second, func() bool { return waiting("flood") == holdPerTenant })
	if b.hold(context.Background(), "flood") {
		t.Fatalf("refusal %d of a tenant was held (cap %d)", holdPerTenant+1, holdPerTenant)
	}
	gone, stop := context.WithCancel(context.Background())
	stop() // the other tenant's request ends at once: its hold returns without waiting
	if !b.hold(gone, "good") {
		t.Error("another tenant's refusal was not held: the cap is per tenant")
	}
	cancel()
	wg.Wait()
	close(held)
	n := 0
	for h := range held {
		if !h {
			t.Error("a refusal within the cap was not held")
		}
		n++
	}
	if n != holdPerTenant || waiting("flood") != 0 || b.held != 0 {
		t.Errorf("%d holds returned, %d of the tenant and %d in all still counted", n, waiting("flood"), b.held)
	}
}
