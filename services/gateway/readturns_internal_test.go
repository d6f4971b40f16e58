package gateway

import (
	"context"
	"testing"
)

// TestReadTurnsPerTenant: a tenant's jobs requests read at most
// readersPerTenant() at once on a replica; one more waits until a turn is
// given back (here: its request ends first, and it gets none), while
// another tenant's request takes a turn of its own at once.
func TestReadTurnsPerTenant(t *testing.T) {
	t.Parallel()
	var turns readTurns
	ended, cancel := context.WithCancel(context.Background())
	cancel() // take returns at once: true with a free turn, false without
	n := readersPerTenant()
	for i := range n {
		if !turns.take(ended, "flood") {
			t.Fatalf("turn %d of %d not free", i+1, n)
		}
	}
	if turns.take(ended, "flood") {
		t.Fatalf("turn %d taken: a tenant reads at most %d requests at once", n+1, n)
	}
	if !turns.take(ended, "good") {
		t.Fatal("another tenant waits for the flooding tenant's turns")
	}
	turns.give("good")
	turns.give("flood")
	if !turns.take(ended, "flood") {
		t.Fatal("a turn given back is not free again")
	}
	for range n {
		turns.give("flood")
	}
	if len(turns.m) != 0 {
		t.Errorf("turns of %d tenants left after every turn was given back", len(turns.m))
	}
}
