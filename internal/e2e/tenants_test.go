package e2e_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// watchAll collects every event of a group of the tenant "default" until
// its final one (or ctx ends); done is closed then.
type watched struct {
	mu   sync.Mutex
	evs  []contracts.GroupEvent
	at   []time.Time // when each event arrived
	done chan struct{}
}

func (e *env) watchAll(ctx context.Context, gid string) *watched {
	e.t.Helper()
	ch, err := e.client.Watch(ctx, gid)
	if err != nil {
		e.t.Fatal(err)
	}
	w := &watched{done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ev := range ch {
			w.mu.Lock()
			w.evs = append(w.evs, ev)
			w.at = append(w.at, time.Now())
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *watched) events() ([]contracts.GroupEvent, []time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]contracts.GroupEvent(nil), w.evs...), append([]time.Time(nil), w.at...)
}

// A group paused mid-run is no longer admitted: once the jobs that were in
// flight have finished, its done count stays put while another tenant's
// group runs to completion. Resumed, it completes with exact counts, and
// the client's Wait, started before the pause, returns only then.
func TestPauseResumeEndToEnd(t *testing.T) {
	e := newEnv(t)
	r := e.start(e.config(func(c *config.Config) { c.GlobalRps = 300 }), stack.PipelineTargets, nil)
	q := r.st.Conns.Queue
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const n = 1500 // 5 s of admissions at 300/s

	type waitResult struct {
		ev  contracts.GroupEvent
		err error
	}
	waited := make(chan waitResult, 1)
	go func() {
		ev, err := e.client.Wait(ctx, "p")
		waited <- waitResult{ev, err}
	}()
	feed := e.watchAll(ctx, "p")

	e.submit("p", "sleep", n, `{"ms":5}`, "")
	testkit.WaitFor(t, "p progressing", 30*time.Second, func() bool {
		info, ok, _ := q.Group(ctx, ref("p"))
		return ok && info.Done >= 100
	})
	if err := e.client.Pause(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	var paused = group(t, q, "p")
	testkit.WaitFor(t, "p PAUSED", 30*time.Second, func() bool {
		paused = group(t, q, "p")
		return paused.State == contracts.StatePaused
	})
	// What was admitted before the pause may still finish; nothing more.
	bound := paused.Done + inFlight(paused)
	var held = paused
	testkit.WaitFor(t, "p's in-flight jobs to finish", 30*time.Second, func() bool {
		held = group(t, q, "p")
		return inFlight(held) == 0
	})
	if held.Done > bound {
		t.Fatalf("p was admitted while paused: %d done, at most %d were done or in flight when it was paused", held.Done, bound)
	}
	if held.Done >= n || held.Pending == 0 {
		t.Fatalf("p ran out of work before the pause (%d done, %d pending): the test needs more work", held.Done, held.Pending)
	}

	// Another tenant's group runs to completion meanwhile.
	other := e.client.ForTenant("other")
	e.submitAs(other, "o", "sleep", 300, `{"ms":1}`, "")
	if ev := e.waitAs(other, "o", time.Minute); ev.State != contracts.StateCompleted || ev.Succeeded != 300 || ev.Tenant != "other" {
		t.Fatalf("the other tenant's group: %+v", ev)
	}
	// p stays put for a second more.
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		info := group(t, q, "p")
		if info.State != contracts.StatePaused || info.Done != held.Done || inFlight(info) != 0 || info.Pending != held.Pending {
			t.Fatalf("p moved while paused: %s, %d done, %d in flight, %d pending; was %d done, %d pending",
				info.State, info.Done, inFlight(info), info.Pending, held.Done, held.Pending)
		}
	}
	select {
	case w := <-waited:
		t.Fatalf("Wait returned while the group was paused: %+v, %v", w.ev, w.err)
	default:
	}

	if err := e.client.Resume(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	var w waitResult
	select {
	case w = <-waited:
	case <-time.After(time.Minute):
		t.Fatal("p did not complete after the resume")
	}
	if w.err != nil || w.ev.State != contracts.StateCompleted || w.ev.Total != n || w.ev.Jobs != n || w.ev.Succeeded != n ||
		w.ev.Failed != 0 || w.ev.Cancelled != 0 {
		t.Fatalf("Wait after the resume: %+v, %v; want COMPLETED with %d succeeded", w.ev, w.err, n)
	}
	if info := group(t, q, "p"); info.State != contracts.StateCompleted || info.Done != n || info.Succeeded != n || info.Pending != 0 {
		t.Fatalf("p in Redis: %+v, %d pending", info.GroupCounts, info.Pending)
	}

	// The feed showed the pause and the resume.
	select {
	case <-feed.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not end with the final event")
	}
	evs, _ := feed.events()
	sawPaused, resumedAfter := false, false
	for _, ev := range evs {
		switch {
		case ev.State == contracts.StatePaused:
			sawPaused = true
			if ev.Succeeded+ev.Failed > bound {
				t.Errorf("a PAUSED event counts %d done, more than the %d done or in flight at the pause", ev.Succeeded+ev.Failed, bound)
			}
		case sawPaused && (ev.State == contracts.StateRunning || ev.State == contracts.StateAggregating):
			resumedAfter = true
		}
	}
	if !sawPaused || !resumedAfter || evs[len(evs)-1].State != contracts.StateCompleted {
		t.Errorf("events: paused %v, running again after %v, last %+v", sawPaused, resumedAfter, evs[len(evs)-1])
	}
}

// Two tenants use the same group id (and the same job ids): two groups,
// each run to completion with its own counts and settings.
func TestSameGroupIDInTwoTenants(t *testing.T) {
	e := newEnv(t)
	r := e.start(e.config(nil), stack.PipelineTargets, nil)
	q := r.st.Conns.Queue
	ctx := context.Background()
	acme, globex := e.client.ForTenant("acme"), e.client.ForTenant("globex")
	e.submitAs(acme, "shared", "sleep", 300, `{"ms":1}`, "")
	e.submitAs(globex, "shared", "sleep", 120, `{"permanentFailRate":1}`, contracts.PriorityHigh)

	for _, c := range []struct {
		tenant            string
		total, succ, fail int64
		prio              contracts.Priority
	}{
		{"acme", 300, 300, 0, contracts.PriorityNormal},
		{"globex", 120, 0, 120, contracts.PriorityHigh},
	} {
		ev := e.waitAs(e.client.ForTenant(c.tenant), "shared", time.Minute)
		if ev.Tenant != c.tenant || ev.GroupID != "shared" || ev.State != contracts.StateCompleted || ev.Total != c.total ||
			ev.Jobs != c.total || ev.Succeeded != c.succ || ev.Failed != c.fail || ev.Cancelled != 0 {
			t.Errorf("%s/shared: final event %+v, want %d jobs: %d succeeded, %d failed", c.tenant, ev, c.total, c.succ, c.fail)
		}
		info, ok, err := q.Group(ctx, contracts.Group(c.tenant, "shared"))
		if err != nil || !ok {
			t.Fatalf("%s/shared: %v %v", c.tenant, ok, err)
		}
		if info.Declared != c.total || info.Jobs != c.total || info.Succeeded != c.succ || info.Failed != c.fail || info.Priority != c.prio {
			t.Errorf("%s/shared in Redis: %+v priority %s", c.tenant, info.GroupCounts, info.Priority)
		}
	}
	if _, ok, err := q.Group(ctx, ref("shared")); err != nil || ok {
		t.Errorf("default/shared exists (%v, %v): nothing was submitted to it", ok, err)
	}
}

// EVENTS is the public status feed: while a group runs, an event with its
// counts comes at least about every second, and the last event carries the
// final counts.
func TestEventsFeedCarriesProgress(t *testing.T) {
	e := newEnv(t)
	r := e.start(e.config(func(c *config.Config) { c.GlobalRps = 400 }), stack.PipelineTargets, nil)
	q := r.st.Conns.Queue
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 2000 // 5 s of admissions at 400/s
	feed := e.watchAll(ctx, "feed")
	e.submit("feed", "sleep", n, `{"ms":20}`, "")
	select {
	case <-feed.done:
	case <-ctx.Done():
		t.Fatal("no final event")
	}
	evs, at := feed.events()
	if len(evs) == 0 {
		t.Fatal("no events")
	}
	last := evs[len(evs)-1]
	info := group(t, q, "feed")
	if last.State != contracts.StateCompleted || last.Total != n || last.Jobs != n || last.Succeeded+last.Failed != n ||
		last.Succeeded != info.Succeeded || last.Failed != info.Failed || last.Cancelled != info.Cancelled || last.Jobs != info.Jobs {
		t.Fatalf("last event %+v, final counts in Redis %+v", last, info.GroupCounts)
	}

	// From the first event that counts a finished job to the last, events
	// arrive at least every ~1.5 s, with counts that never go back.
	first := -1
	for i, ev := range evs {
		if ev.Succeeded+ev.Failed > 0 {
			first = i
			break
		}
	}
	if first < 0 {
		t.Fatal("no event counts a finished job")
	}
	progress := 0
	for i := first + 1; i < len(evs); i++ {
		prev, ev := evs[i-1], evs[i]
		if gap := at[i].Sub(at[i-1]); gap > 1500*time.Millisecond {
			t.Errorf("%s between event %d (%s, %d done) and event %d (%s, %d done)",
				gap.Round(time.Millisecond), i-1, prev.State, prev.Succeeded+prev.Failed, i, ev.State, ev.Succeeded+ev.Failed)
		}
		if ev.Succeeded < prev.Succeeded || ev.Failed < prev.Failed || ev.Jobs < prev.Jobs {
			t.Errorf("event %d counts less than event %d: %+v after %+v", i, i-1, ev, prev)
		}
		if ev.State == prev.State && ev.Succeeded+ev.Failed != prev.Succeeded+prev.Failed {
			progress++
		}
	}
	run := at[len(at)-1].Sub(at[first])
	if run < 2*time.Second {
		t.Fatalf("the group ran for %s only: the test needs more work", run)
	}
	// At most about one progress event a second.
	if max := int(run.Seconds()) + 3; progress > max {
		t.Errorf("%d progress events in %s, want at most about one a second", progress, run)
	}
	t.Logf("%d events, %d progress events in %s", len(evs), progress, run.Round(time.Millisecond))
}

// inFlight is what a group's counts leave for its jobs admitted and not
// finished (meta inFlight is kept only for a group with maxInFlight).
func inFlight(i *redisq.GroupInfo) int64 {
	return i.Jobs - i.Pending - i.NonReady - i.Done - i.Cancelled
}
