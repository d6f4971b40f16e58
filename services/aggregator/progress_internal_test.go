package aggregator

import (
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// TestProgressTakeHoldsOffDue: once publishProgress has taken a group (it
// then reads and publishes its counts), a batch recorded meanwhile must not
// publish another progress event of the group within the second, and its
// change must stay pending for the next flush. Before, take left the
// group's time unchanged until the flush's event was out, so such a batch
// published a second event at once (two events a millisecond apart, the
// later possibly the older counts), and the flush's final published()
// then forgot what was pending.
func TestProgressTakeHoldsOffDue(t *testing.T) {
	g := contracts.Group("t", "g")
	p := progress{every: time.Second, last: map[contracts.GroupRef]*progressState{}}
	t0 := time.Now()
	if !p.due(g, t0) {
		t.Fatal("a group's first progress is not due")
	}
	p.published(g, t0)
	if p.due(g, t0.Add(100*time.Millisecond)) {
		t.Fatal("progress due 100 ms after the last event")
	}
	if got := p.take(t0.Add(500 * time.Millisecond)); len(got) != 0 {
		t.Fatalf("take after 500 ms = %v, want nothing yet", got)
	}
	flush := t0.Add(time.Second)
	if got := p.take(flush); len(got) != 1 || got[0] != g {
		t.Fatalf("take after 1 s = %v, want the pending group", got)
	}
	// The flush is publishing; a batch records a result of the group.
	if p.due(g, flush.Add(time.Millisecond)) {
		t.Fatal("progress due 1 ms after the flush took the group: two events within a second")
	}
	if got := p.take(flush.Add(999 * time.Millisecond)); len(got) != 0 {
		t.Fatalf("take 999 ms after the flush = %v, want nothing yet", got)
	}
	if got := p.take(flush.Add(time.Second)); len(got) != 1 || got[0] != g {
		t.Fatalf("take 1 s after the flush = %v: the change made during the flush was lost", got)
	}
	// A flush whose publish failed leaves the counts pending.
	p.retry(g)
	if got := p.take(flush.Add(2 * time.Second)); len(got) != 1 || got[0] != g {
		t.Fatalf("take after a failed publish = %v, want the group again", got)
	}
}
