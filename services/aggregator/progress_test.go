package aggregator_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/services/aggregator"
)

// Timing of the progress tests (docs/ARCHITECTURE.md §3: while a group's
// counts change, EVENTS carries them at most once a second, and the last
// event is at most about a second old).
const (
	// trickleEvery is the gap between two results of a trickling group.
	trickleEvery = 100 * time.Millisecond
	// minProgressGap is the least gap allowed between two progress events
	// of a group: a second, less some slack for the stream's timestamps.
	minProgressGap = 900 * time.Millisecond
	// finalWithin is how soon after the last result the group's last event
	// must carry its final counts.
	finalWithin = 1500 * time.Millisecond
)

// trickle publishes a SUCCESS result of jobs j0..j(n-1) of group gid every
// trickleEvery, each in a message of its own, and returns when the last
// one was published.
func (b *testBundle) trickle(t *testing.T, gid string, n int) time.Time {
	t.Helper()
	tick := time.NewTicker(trickleEvery)
	defer tick.Stop()
	for i := range n {
		if i > 0 {
			<-tick.C
		}
		b.publish(t, success(gid, fmt.Sprintf("j%d", i), 1), "", nil)
	}
	return time.Now()
}

// checkProgressGaps fails t if two progress (non-terminal) events of evs
// are closer than minProgressGap.
func checkProgressGaps(t *testing.T, evs []storedEvent) {
	t.Helper()
	var prev *storedEvent
	for i := range evs {
		ev := &evs[i]
		if ev.State.Terminal() {
			continue
		}
		if prev != nil {
			if gap := ev.Stored.Sub(prev.Stored); gap < minProgressGap {
				t.Errorf("progress events %s apart (%d then %d succeeded), want at least %s",
					gap, prev.Succeeded, ev.Succeeded, minProgressGap)
			}
		}
		prev = ev
	}
}

// TestProgressEventsAtMostOnceASecond: while a group's results trickle in
// over three seconds, its counts reach EVENTS at most once a second, the
// counts never go back, and the last event carries the final counts soon
// after the last result, though it came less than a second after the
// event before it.
func TestProgressEventsAtMostOnceASecond(t *testing.T) {
	t.Parallel()
	const n = 30 // 3 s of results
	b := setup(t)
	d, _ := b.newDeps()
	b.admitted(t, "g", n, -1) // not sealed: every event is a progress event
	run(t, aggregator.Config{}, d, nil)

	start := time.Now()
	last := b.trickle(t, "g", n)
	var evs []storedEvent
	testkit.WaitFor(t, "an event with the final counts", 3*finalWithin, func() bool {
		evs = b.eventsOf(t, grp("g"))
		return len(evs) > 0 && evs[len(evs)-1].Succeeded == n
	})
	final := evs[len(evs)-1]
	if late := final.Stored.Sub(last); late > finalWithin {
		t.Errorf("the final counts reached EVENTS %s after the last result, want at most %s", late, finalWithin)
	}
	// Nothing follows the final counts.
	time.Sleep(1200 * time.Millisecond)
	evs = b.eventsOf(t, grp("g"))
	if got := evs[len(evs)-1]; got.Succeeded != n || got.Stored != final.Stored {
		t.Fatalf("an event %+v followed the final counts", got)
	}
	t.Logf("%d events over %s of results", len(evs), last.Sub(start).Round(time.Millisecond))
	if len(evs) < 3 {
		t.Fatalf("%d events over 3 s of results, want one about every second: %+v", len(evs), evs)
	}
	if len(evs) > 5 {
		t.Fatalf("%d events over 3 s of results, want at most about one a second", len(evs))
	}
	checkProgressGaps(t, evs)
	for i, ev := range evs {
		if ev.State != contracts.StateRunning || ev.Jobs != n || ev.Failed != 0 || ev.Total != 0 {
			t.Fatalf("event %+v", ev.GroupEvent)
		}
		if i > 0 && ev.Succeeded <= evs[i-1].Succeeded {
			t.Fatalf("event %d counts %d succeeded after %d", i, ev.Succeeded, evs[i-1].Succeeded)
		}
	}
	if g := b.group(t, "g"); g.Succeeded != n || g.State != contracts.StateRunning {
		t.Fatalf("g = %+v", g.GroupCounts)
	}
}

// TestStateChangesAreNotLimited: the event of a state change is published
// at once, however recent the group's last progress event: the COMPLETED
// event of a sealed group follows its last result at once and stays its
// last event, and so does each event of results settling after a cancel.
func TestStateChangesAreNotLimited(t *testing.T) {
	t.Parallel()
	const n = 8
	b := setup(t)
	d, _ := b.newDeps()
	b.admitted(t, "done", n, n)
	b.admitted(t, "stopped", 3, -1)
	if _, err := b.q.Cancel(context.Background(), grp("stopped")); err != nil {
		t.Fatal(err)
	}
	run(t, aggregator.Config{}, d, nil)

	last := b.trickle(t, "done", n)
	ev := b.waitEvent(t, "done", contracts.StateCompleted)
	if ev.Succeeded != n {
		t.Fatalf("COMPLETED event %+v", ev)
	}
	evs := b.eventsOf(t, grp("done"))
	completed := evs[len(evs)-1]
	if late := completed.Stored.Sub(last); late > 500*time.Millisecond {
		t.Fatalf("COMPLETED event %s after the last result, want it at once", late)
	}
	if len(evs) < 2 {
		t.Fatalf("%d events, want progress events before the COMPLETED one", len(evs))
	}
	checkProgressGaps(t, evs)

	// Results of the cancelled group's running jobs, 50 ms apart: an event
	// each, with the counts adding up in the last one.
	for i := range 3 {
		if i > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		b.publish(t, success("stopped", fmt.Sprintf("j%d", i), 1), "", nil)
	}
	testkit.WaitFor(t, "the final CANCELLED event", waitTimeout, func() bool {
		evs := b.events(t, "stopped")
		return len(evs) == 3 && evs[2].Final()
	})

	// Nothing stale follows either group's last event.
	time.Sleep(1200 * time.Millisecond)
	var dones []contracts.GroupEvent
	for _, ev := range b.eventsOf(t, grp("done")) {
		dones = append(dones, ev.GroupEvent)
	}
	completedOnceLast(t, dones, n)
	stopped := b.events(t, "stopped")
	if len(stopped) != 3 {
		t.Fatalf("%d events of the cancelled group, want 3: %+v", len(stopped), stopped)
	}
	for i, ev := range stopped {
		if ev.State != contracts.StateCancelled || ev.Succeeded != int64(i+1) {
			t.Fatalf("event %d of the cancelled group: %+v", i, ev)
		}
	}
}
