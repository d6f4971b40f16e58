package fetcher_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/fetcher"
)

// TestRefusedJobsAreDeadLettered: a jobs message some of whose jobs the
// group refuses is dead-lettered naming those jobs; the jobs the group
// knows count as duplicates, the ones it accepts are kept, and nothing
// else changes but a notice of the refusal on the group's events.
func TestRefusedJobsAreDeadLettered(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))
	c := client.New(e.JS, client.Options{})
	over, room, ended := grp("over"), grp("room"), grp("ended")
	// over: sealed at 3 with its 3 jobs; room: sealed at 4 with 3 jobs;
	// ended: 3 jobs, then cancelled.
	for _, g := range []contracts.GroupRef{over, room, ended} {
		if err := c.Submit(ctx, g.ID, clientJobs(g.ID, 0, 3)...); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Seal(ctx, over.ID, 3); err != nil {
		t.Fatal(err)
	}
	if err := c.Seal(ctx, room.ID, 4); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, ended.ID); err != nil {
		t.Fatal(err)
	}
	waitSubmitDrained(t, e)
	testkit.WaitFor(t, "groups settled", 0, func() bool {
		evs := groupEvents(t, e)
		return groupInfo(t, e, over).State == contracts.StateAggregating && groupInfo(t, e, room).Pending == 0 &&
			groupInfo(t, e, ended).State == contracts.StateCancelled && e.Inflight(t) == 0 &&
			containsState(evs[over], contracts.StateAggregating) && containsState(evs[ended], contracts.StateCancelled) &&
			containsState(evs[room], contracts.StateRunning)
	})
	before := map[contracts.GroupRef]*redisq.GroupInfo{}
	eventsBefore := groupEvents(t, e)
	for _, g := range []contracts.GroupRef{over, room, ended} {
		before[g] = groupInfo(t, e, g)
	}
	readyBefore := e.StreamMsgs(t, e.Names.StreamReady())
	added := testkit.Value(t, e.Metrics.EnqueueTotal)
	dups := testkit.Value(t, e.Metrics.EnqueueDuplicateTotal)
	if n := len(deadLetters(t, e)); n != 0 {
		t.Fatalf("%d dead letters before the refused jobs", n)
	}

	// Each message: two new jobs and one the group already has.
	body := jobsBody(over, 3, 5)
	body = strings.TrimSuffix(body, "]}") + fmt.Sprintf(`,{"jobId":%q,"type":"t","payload":%s}]}`, jobID(2), payload(over.ID, 2))
	for _, g := range []contracts.GroupRef{over, room, ended} {
		publishRaw(t, e, e.Names.Submit(g), body)
	}
	waitSubmitDrained(t, e)
	var dls []deadLetter
	testkit.WaitFor(t, "three dead letters", 0, func() bool {
		dls = deadLetters(t, e)
		return len(dls) >= 3
	})
	testkit.WaitFor(t, "room's new job handed out", 0, func() bool {
		return groupInfo(t, e, room).State == contracts.StateAggregating && e.Inflight(t) == 0
	})

	want := map[string]struct {
		reason        string
		named, others []string
	}{
		e.Names.Submit(over):  {fetcher.ReasonOverTotal, []string{"jobs[0]", "jobs[1]"}, []string{"jobs[2]"}},
		e.Names.Submit(room):  {fetcher.ReasonOverTotal, []string{"jobs[1]"}, []string{"jobs[0]", "jobs[2]"}},
		e.Names.Submit(ended): {fetcher.ReasonGroupEnded, []string{"jobs[0]", "jobs[1]"}, []string{"jobs[2]"}},
	}
	if len(dls) != len(want) {
		t.Fatalf("%d dead letters, want %d", len(dls), len(want))
	}
	for _, dl := range dls {
		w, ok := want[dl.Subject]
		if !ok {
			t.Fatalf("dead letter of %s: %s", dl.Subject, dl.Error)
		}
		delete(want, dl.Subject)
		if dl.Reason != w.reason || dl.On != e.Names.DLQOf(dl.Subject, w.reason) {
			t.Errorf("%s: reason %q on %s, want %q on %s", dl.Subject, dl.Reason, dl.On, w.reason, e.Names.DLQOf(dl.Subject, w.reason))
		}
		for _, j := range w.named {
			if !strings.Contains(dl.Error, j) {
				t.Errorf("%s: error %q does not name %s", dl.Subject, dl.Error, j)
			}
		}
		for _, j := range w.others {
			if strings.Contains(dl.Error, j) {
				t.Errorf("%s: error %q names %s, which was not refused", dl.Subject, dl.Error, j)
			}
		}
		if string(dl.Message) != body {
			t.Errorf("%s: dead letter carries %s, want the message %s", dl.Subject, dl.Message, body)
		}
	}

	// The known job of each message is a duplicate; only room's first new
	// job was added.
	if v := testkit.Value(t, e.Metrics.EnqueueDuplicateTotal) - dups; v != 3 {
		t.Errorf("%v duplicates counted, want 3", v)
	}
	if v := testkit.Value(t, e.Metrics.EnqueueTotal) - added; v != 1 {
		t.Errorf("%v jobs added, want 1", v)
	}
	for reason, n := range map[string]float64{fetcher.ReasonOverTotal: 2, fetcher.ReasonGroupEnded: 1} {
		if v := testkit.Value(t, e.Metrics.DeadLetters.WithLabelValues(reason)); v != n {
			t.Errorf("dead letters %s = %v, want %v", reason, v, n)
		}
	}
	if got := e.StreamMsgs(t, e.Names.StreamReady()); got != readyBefore+1 {
		t.Errorf("READY holds %d messages, want %d (room's new job only)", got, readyBefore+1)
	}
	for _, g := range []contracts.GroupRef{over, ended} {
		b, a := before[g], groupInfo(t, e, g)
		if a.GroupCounts != b.GroupCounts || a.Pending != b.Pending || a.InFlight != b.InFlight {
			t.Errorf("%s changed: %+v pending %d inflight %d, was %+v pending %d inflight %d",
				g, a.GroupCounts, a.Pending, a.InFlight, b.GroupCounts, b.Pending, b.InFlight)
		}
	}
	if info := groupInfo(t, e, room); info.Jobs != 4 || info.Declared != 4 {
		t.Errorf("room: jobs %d declared %d, want 4 and 4", info.Jobs, info.Declared)
	}
	// The only new event of each group is the notice of its refusal.
	var after map[contracts.GroupRef][]*contracts.GroupEvent
	testkit.WaitFor(t, "the refusal notices", 0, func() bool {
		after = groupEvents(t, e)
		return len(after[over]) > len(eventsBefore[over]) && len(after[ended]) > len(eventsBefore[ended])
	})
	for g, reason := range map[contracts.GroupRef]string{over: fetcher.ReasonOverTotal, ended: fetcher.ReasonGroupEnded} {
		evs := after[g]
		last := evs[len(evs)-1]
		if len(evs) != len(eventsBefore[g])+1 || last.Refused == nil || last.Refused.Reason != reason || last.Notice == "" ||
			last.Refused.Messages != 1 || last.State != eventsBefore[g][len(eventsBefore[g])-1].State {
			t.Errorf("%s: events %s after the refused jobs, were %s; want one notice of the refusal", g, describe(evs), describe(eventsBefore[g]))
		}
	}
	for _, g := range []contracts.GroupRef{over, ended} {
		h, err := redisq.ReadJob(ctx, e.Redis, e.Keys, g, jobID(3))
		if err != nil {
			t.Fatal(err)
		}
		if len(h) != 0 {
			t.Errorf("%s: refused job stored: %v", g, h)
		}
	}
}

// TestGroupSettingsNotice: settings that differ from an existing group's
// are not applied, and the group's event stream says so.
func TestGroupSettingsNotice(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	c := client.New(e.JS, client.Options{Tenant: "acme"})
	high := contracts.GroupSettings{Priority: contracts.PriorityHigh}
	low := contracts.GroupSettings{Priority: contracts.PriorityLow}
	g, h := contracts.Group("acme", "g"), contracts.Group("acme", "h")

	// h: both submissions arrive before the fetcher runs, so that they are
	// likely handled in one batch, the first one creating the group.
	if err := c.SubmitGroup(ctx, h.ID, high, clientJobs(h.ID, 0, 3)...); err != nil {
		t.Fatal(err)
	}
	if err := c.SubmitGroup(ctx, h.ID, low, clientJobs(h.ID, 3, 5)...); err != nil {
		t.Fatal(err)
	}
	testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))

	// g: created high; a later submission asks for low.
	if err := c.SubmitGroup(ctx, g.ID, high, clientJobs(g.ID, 0, 3)...); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "g created", 0, func() bool { return groupInfo(t, e, g).Jobs == 3 })
	if n := len(notices(eventsOf(t, e, g))); n != 0 {
		t.Fatalf("%d notices after the submission that created the group", n)
	}
	if err := c.SubmitGroup(ctx, g.ID, low, clientJobs(g.ID, 3, 5)...); err != nil {
		t.Fatal(err)
	}
	// The same settings again, and none at all: nothing to report.
	if err := c.SubmitGroup(ctx, g.ID, high, clientJobs(g.ID, 5, 6)...); err != nil {
		t.Fatal(err)
	}
	if err := c.Submit(ctx, g.ID, clientJobs(g.ID, 6, 7)...); err != nil {
		t.Fatal(err)
	}
	waitSubmitDrained(t, e)

	for _, tc := range []struct {
		g    contracts.GroupRef
		jobs int64
	}{{g, 7}, {h, 5}} {
		info := groupInfo(t, e, tc.g)
		if info.Priority != contracts.PriorityHigh || info.Jobs != tc.jobs {
			t.Errorf("%s: priority %q jobs %d, want high and %d", tc.g, info.Priority, info.Jobs, tc.jobs)
		}
		evs := eventsOf(t, e, tc.g)
		ns := notices(evs)
		if len(ns) != 1 {
			t.Errorf("%s: %d notices, want 1: %s", tc.g, len(ns), describe(evs))
			continue
		}
		if n := ns[0].Notice; !strings.Contains(n, "priority low") || !strings.Contains(n, "keeps high") {
			t.Errorf("%s: notice %q does not name the priority asked for and kept", tc.g, n)
		}
		if ns[0].Tenant != "acme" || ns[0].GroupID != tc.g.ID || !ns[0].State.Valid() {
			t.Errorf("%s: notice %+v", tc.g, ns[0])
		}
	}
}

// TestPauseResume: a paused group's jobs wait while other tenants' jobs are
// admitted, and are admitted once it is resumed; every change is an event,
// a pause or resume that changes nothing a notice.
func TestPauseResume(t *testing.T) {
	t.Parallel()
	// p gets nP jobs before its pause and pausedP more while paused.
	const capacity, nP, pausedP, nQ, nLater = 50, 100, 10, 200, 60
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	holdReady(t, e, capacity)
	testkit.Start(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: capacity}}, e.Deps()))
	c := client.New(e.JS, client.Options{})
	ca, cb := c.ForTenant("A"), c.ForTenant("B")
	p, later, q := contracts.Group("A", "p"), contracts.Group("A", "later"), contracts.Group("B", "q")

	// later: paused before it exists.
	if err := ca.Pause(ctx, later.ID); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "later created PAUSED", 0, func() bool { return groupInfo(t, e, later).State == contracts.StatePaused })
	// While READY is held full: every group's jobs are queued, then p is
	// paused (twice).
	if err := ca.Submit(ctx, p.ID, clientJobs(p.ID, 0, nP)...); err != nil {
		t.Fatal(err)
	}
	if err := cb.Submit(ctx, q.ID, clientJobs(q.ID, 0, nQ)...); err != nil {
		t.Fatal(err)
	}
	if err := ca.Submit(ctx, later.ID, clientJobs(later.ID, 0, nLater)...); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "jobs queued", 0, func() bool {
		return groupInfo(t, e, p).Pending == nP && groupInfo(t, e, q).Pending == nQ && groupInfo(t, e, later).Pending == nLater
	})
	if err := ca.Pause(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "p PAUSED", 0, func() bool { return groupInfo(t, e, p).State == contracts.StatePaused })
	if err := ca.Pause(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if err := cb.Resume(ctx, q.ID); err != nil { // not paused: a notice
		t.Fatal(err)
	}
	// Jobs submitted while paused are stored and wait.
	if err := ca.Submit(ctx, p.ID, clientJobs(p.ID, nP, nP+pausedP)...); err != nil {
		t.Fatal(err)
	}
	waitSubmitDrained(t, e)
	if got := e.StreamMsgs(t, e.Names.StreamReady()); got != capacity {
		t.Fatalf("READY holds %d messages while held full, want %d", got, capacity)
	}

	// READY drains: q's jobs are admitted, none of p's or later's.
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	r.WaitJobs(t, nQ, 0)
	time.Sleep(300 * time.Millisecond) // room for the fetcher to admit what it may
	if by := readyByGroup(r.Jobs()); by[q] != nQ || by[p] != 0 || by[later] != 0 || len(by) != 1 {
		t.Fatalf("READY got %v while p and later are paused, want only q's %d", by, nQ)
	}
	for _, g := range []contracts.GroupRef{p, later} {
		info := groupInfo(t, e, g)
		if info.State != contracts.StatePaused || info.Pending != info.Jobs || info.PausedFrom != contracts.StateCreated {
			t.Fatalf("%s: state %s pending %d of %d jobs, paused from %q; want PAUSED with every job queued, from CREATED",
				g, info.State, info.Pending, info.Jobs, info.PausedFrom)
		}
	}
	if info := groupInfo(t, e, later); info.Jobs != nLater || info.Priority != contracts.PriorityNormal {
		t.Fatalf("later: jobs %d priority %q, want %d and normal", info.Jobs, info.Priority, nLater)
	}

	// Events so far: p paused (the second pause a notice), later created
	// PAUSED, q's resume a notice.
	evP := eventsOf(t, e, p)
	if st := states(evP); len(st) != 2 || st[0] != contracts.StateCreated || st[1] != contracts.StatePaused {
		t.Errorf("p: events %s, want CREATED, PAUSED and a notice", describe(evP))
	}
	if ns := notices(evP); len(ns) != 1 || ns[0].State != contracts.StatePaused || !strings.Contains(ns[0].Notice, "pause") {
		t.Errorf("p: notices %s, want one of the second pause, in state PAUSED", describe(ns))
	}
	evL := eventsOf(t, e, later)
	if len(evL) != 1 || evL[0].State != contracts.StatePaused || evL[0].Notice != "" || evL[0].Jobs != 0 {
		t.Errorf("later: events %s, want one PAUSED event with no jobs", describe(evL))
	}
	evQ := eventsOf(t, e, q)
	if ns := notices(evQ); len(ns) != 1 || !strings.Contains(ns[0].Notice, "resume") {
		t.Errorf("q: notices %s, want one of the resume", describe(ns))
	}

	// Resume: the paused groups' jobs are admitted.
	if err := ca.Resume(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	r.WaitJobs(t, nQ+nP+pausedP, 0)
	if by := readyByGroup(r.Jobs()); by[p] != nP+pausedP || by[later] != 0 {
		t.Fatalf("READY got %v after p's resume, want p's %d and none of later's", by, nP+pausedP)
	}
	if err := ca.Resume(ctx, later.ID); err != nil {
		t.Fatal(err)
	}
	r.WaitJobs(t, nQ+nP+pausedP+nLater, 0)
	e.WaitReadyDrained(t)
	got := r.Jobs()
	counts := pipelinetest.Counts(got)
	for _, g := range []struct {
		g contracts.GroupRef
		n int
	}{{p, nP + pausedP}, {q, nQ}, {later, nLater}} {
		for i := range g.n {
			if k := g.g.Tenant + ":" + g.g.ID + ":" + jobID(i); counts[k] != 1 {
				t.Errorf("%s on READY %d times, want once", k, counts[k])
			}
		}
	}
	if len(got) != nP+pausedP+nQ+nLater {
		t.Errorf("READY got %d jobs, want %d", len(got), nP+pausedP+nQ+nLater)
	}
	for _, g := range []contracts.GroupRef{p, later} {
		testkit.WaitFor(t, g.String()+" running", 0, func() bool { return groupInfo(t, e, g).State == contracts.StateRunning })
	}
	// The resumes are events: back to CREATED, then RUNNING when admitted.
	want := map[contracts.GroupRef][]contracts.GroupState{
		p:     {contracts.StateCreated, contracts.StatePaused, contracts.StateCreated, contracts.StateRunning},
		later: {contracts.StatePaused, contracts.StateCreated, contracts.StateRunning},
	}
	waitEvents(t, e, want)
	if evL := eventsOf(t, e, later); len(evL) > 1 && evL[1].Jobs != nLater {
		t.Errorf("later: resume event %s, want %d jobs", describe(evL[1:2]), nLater)
	}
}

// TestResumeWithUnchangedCountsIsAnEvent: a group paused and resumed with
// no job submitted meanwhile goes back to the state it had with the same
// counts; that is still a change of state, and its event must be published.
func TestResumeWithUnchangedCountsIsAnEvent(t *testing.T) {
	t.Parallel()
	const capacity, n = 10, 20
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	holdReady(t, e, capacity)
	testkit.Start(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: capacity}}, e.Deps()))
	c := client.New(e.JS, client.Options{})
	if err := c.Submit(ctx, "g", clientJobs("g", 0, n)...); err != nil {
		t.Fatal(err)
	}
	for _, op := range []func(context.Context, string) error{c.Pause, c.Resume, c.Pause, c.Resume} {
		if err := op(ctx, "g"); err != nil {
			t.Fatal(err)
		}
	}
	waitSubmitDrained(t, e)
	waitEvents(t, e, map[contracts.GroupRef][]contracts.GroupState{grp("g"): {
		contracts.StateCreated, contracts.StatePaused, contracts.StateCreated, contracts.StatePaused, contracts.StateCreated,
	}})
}

// waitEvents waits up to 5 s until the events of each group of want, notices
// left out, are in the states of want, failing t if they are not.
func waitEvents(t *testing.T, e *pipelinetest.Env, want map[contracts.GroupRef][]contracts.GroupState) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		all := groupEvents(t, e)
		ok := true
		for g, w := range want {
			ok = ok && slices.Equal(states(all[g]), w)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			for g, w := range want {
				if !slices.Equal(states(all[g]), w) {
					t.Errorf("%s: events %s, want states %v", g, describe(all[g]), w)
				}
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestControlOfUnknownOrEndedGroup: a resume of a group that does not exist
// creates nothing and publishes no event (a group event needs a state); a
// pause or resume of an ended group is a notice.
func TestControlOfUnknownOrEndedGroup(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))
	c := client.New(e.JS, client.Options{})
	if err := c.Resume(ctx, "nope"); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, "done"); err != nil {
		t.Fatal(err)
	}
	if err := c.Pause(ctx, "done"); err != nil {
		t.Fatal(err)
	}
	if err := c.Resume(ctx, "done"); err != nil {
		t.Fatal(err)
	}
	waitSubmitDrained(t, e)
	if _, ok, err := e.Queue.Group(ctx, grp("nope")); err != nil || ok {
		t.Fatalf("resume of an unknown group: group exists %v (err %v)", ok, err)
	}
	evs := groupEvents(t, e) // fails on an invalid event
	if n := len(evs[grp("nope")]); n != 0 {
		t.Errorf("%d events of the unknown group", n)
	}
	done := evs[grp("done")]
	if len(done) != 3 || done[0].State != contracts.StateCancelled || done[0].Notice != "" {
		t.Fatalf("done: events %s, want CANCELLED and two notices", describe(done))
	}
	for i, kind := range []string{"pause", "resume"} {
		if ev := done[i+1]; ev.State != contracts.StateCancelled || !strings.Contains(ev.Notice, kind) {
			t.Errorf("done: event %d %s, want a CANCELLED notice of the %s", i+1, describe(done[i+1:i+2]), kind)
		}
	}
}
