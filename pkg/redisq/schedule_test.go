package redisq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// enqueueScheduled enqueues n jobs of type "t" into group gid with the
// given schedule.
func enqueueScheduled(t testing.TB, q *redisq.Queue, gid string, n int, notBefore string, ws []contracts.Window) {
	t.Helper()
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: G(gid), ID: fmt.Sprintf("j%d", i), Type: "t", NotBefore: notBefore, Windows: ws}
	}
	if _, err := q.EnqueueJobs(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
}

// admittedGroups returns the group IDs of admitted jobs, in order.
func admittedGroups(r *redisq.AdmitResult) []string {
	var out []string
	for _, j := range r.Jobs {
		out = append(out, j.Group.ID)
	}
	return out
}

func holdsOf(t testing.TB, q *redisq.Queue, gid string) []redisq.Hold {
	t.Helper()
	hs, err := q.Holds(context.Background(), []contracts.GroupRef{G(gid)}, redisq.HoldOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return hs[0]
}

// TestNotBeforeHoldsAGroupUntilThenKeepingItsPlace: a group with a
// notBefore is accepted and counted at once, passed by until then (other
// groups go on), reported as scheduled, and admitted from then on.
func TestNotBeforeHoldsAGroupUntilThenKeepingItsPlace(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit}, true)
	ctx := context.Background()
	at := b.clock.t.Add(3 * time.Second)
	enqueueScheduled(t, q, "later", 2, at.Format(time.RFC3339Nano), nil)
	enqueueScheduled(t, q, "now", 2, "", nil)

	info, _, err := q.Group(ctx, G("later"))
	if err != nil || info.Jobs != 2 || info.State != contracts.StateCreated {
		t.Fatalf("the scheduled group is not accepted at once: %+v %v", info, err)
	}
	r := admit(t, q, 10)
	if got := admittedGroups(r); len(got) != 2 || got[0] != "now" || got[1] != "now" {
		t.Fatalf("admitted before its notBefore: %v", got)
	}
	if r.ScheduledMs != 3000 {
		t.Fatalf("ScheduledMs %d, want 3000", r.ScheduledMs)
	}
	hs := holdsOf(t, q, "later")
	if len(hs) != 1 || hs[0].Reason != redisq.HoldScheduled || hs[0].UntilMs != at.UnixMilli() {
		t.Fatalf("holds %+v, want scheduled until %d", hs, at.UnixMilli())
	}
	sc, err := q.GroupSchedule(ctx, G("later"))
	if err != nil || !sc.NotBefore.Equal(at) || sc.Reason != redisq.HoldScheduled || !sc.HeldUntil.Equal(at) {
		t.Fatalf("schedule %+v %v", sc, err)
	}

	b.clock.advance(2999 * time.Millisecond)
	if r := admit(t, q, 10); len(r.Jobs) != 0 || r.ScheduledMs != 1 {
		t.Fatalf("a millisecond early: %v, scheduled %d", admittedGroups(r), r.ScheduledMs)
	}
	b.clock.advance(time.Millisecond)
	if r := admit(t, q, 10); len(r.Jobs) != 2 || r.ScheduledMs != -1 {
		t.Fatalf("at its notBefore: %v, scheduled %d", admittedGroups(r), r.ScheduledMs)
	}
	if hs := holdsOf(t, q, "later"); len(hs) != 0 {
		t.Fatalf("holds after the start: %+v", hs)
	}
}

// TestNotBeforePauseAndCancelBeforeTheStart: a paused scheduled group stays
// held after its notBefore until resumed; a cancelled one never starts.
func TestNotBeforePauseAndCancelBeforeTheStart(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit}, true)
	ctx := context.Background()
	at := b.clock.t.Add(time.Second).Format(time.RFC3339Nano)
	enqueueScheduled(t, q, "p", 1, at, nil)
	enqueueScheduled(t, q, "c", 1, at, nil)
	admit(t, q, 10)
	if _, err := q.Pause(ctx, G("p")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Cancel(ctx, G("c")); err != nil {
		t.Fatal(err)
	}
	b.clock.advance(2 * time.Second)
	if r := admit(t, q, 10); len(r.Jobs) != 0 {
		t.Fatalf("a paused or cancelled group started: %v", admittedGroups(r))
	}
	if _, err := q.Resume(ctx, G("p")); err != nil {
		t.Fatal(err)
	}
	if got := admittedGroups(admit(t, q, 10)); len(got) != 1 || got[0] != "p" {
		t.Fatalf("after resume: %v", got)
	}
}

// TestWindowClosesAndReopens: a group whose window closes is passed by from
// the next admission call (in-flight jobs are not touched), reported as
// outside its window until the next opening, and admitted again then.
func TestWindowClosesAndReopens(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit}, true)
	// the fixed clock is Tuesday 2024-01-23 08:53:20 UTC
	ws := []contracts.Window{{Zone: "Europe/Berlin", Days: []string{"tue"}, From: "09:00", To: "10:00"}}
	enqueueScheduled(t, q, "w", 4, "", ws)
	if got := admittedGroups(admit(t, q, 1)); len(got) != 1 {
		t.Fatalf("inside the window: %v", got)
	}
	closes := time.Date(2024, 1, 23, 9, 0, 0, 0, time.UTC)
	b.clock.t = closes.Add(-time.Millisecond)
	if got := admittedGroups(admit(t, q, 1)); len(got) != 1 {
		t.Fatalf("just before it closes: %v", got)
	}
	b.clock.t = closes
	r := admit(t, q, 10)
	if len(r.Jobs) != 0 {
		t.Fatalf("admitted after the window closed: %v", admittedGroups(r))
	}
	next := time.Date(2024, 1, 30, 8, 0, 0, 0, time.UTC)
	if r.ScheduledMs != next.Sub(closes).Milliseconds() {
		t.Fatalf("ScheduledMs %d, want %d", r.ScheduledMs, next.Sub(closes).Milliseconds())
	}
	hs := holdsOf(t, q, "w")
	if len(hs) != 1 || hs[0].Reason != redisq.HoldOutsideWindow || hs[0].UntilMs != next.UnixMilli() {
		t.Fatalf("holds %+v, want outside_window until %v", hs, next)
	}
	// the fetchers refresh the intervals once the first has closed
	if n, err := q.RefreshWindows(context.Background()); err != nil || n != 1 {
		t.Fatalf("refresh: %d %v", n, err)
	}
	b.clock.t = next
	if got := admittedGroups(admit(t, q, 10)); len(got) != 2 {
		t.Fatalf("when it reopens: %v", got)
	}
}

// TestTenantDefaultWindows: a group created without windows takes its
// tenant's, held until a refresh computes their intervals; a group with
// windows of its own keeps them.
func TestTenantDefaultWindows(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit}, true)
	ctx := context.Background()
	closed := []contracts.Window{{Zone: "UTC", Days: []string{"sun"}, From: "00:00", To: "01:00"}}
	if _, err := q.PutTenantWindows(ctx, testTenant, closed, redisq.SettingVersion{Bucket: "b", Rev: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.PutTenantWindows(ctx, testTenant, []contracts.Window{{Zone: "Mars/Base"}}, redisq.SettingVersion{Bucket: "b", Rev: 2}); err == nil {
		t.Fatal("invalid windows were taken")
	}
	open := []contracts.Window{{Zone: "UTC", Days: []string{"tue"}, From: "08:00", To: "09:00"}}
	enqueueScheduled(t, q, "default", 1, "", nil)
	enqueueScheduled(t, q, "own", 1, "", open)
	if got := admittedGroups(admit(t, q, 10)); len(got) != 1 || got[0] != "own" {
		t.Fatalf("admitted %v, want own only", got)
	}
	if n, err := q.RefreshWindows(ctx); err != nil || n != 1 {
		t.Fatalf("refresh: %d %v", n, err)
	}
	sc, err := q.GroupSchedule(ctx, G("default"))
	sunday := time.Date(2024, 1, 28, 0, 0, 0, 0, time.UTC)
	if err != nil || len(sc.Windows) != 1 || sc.Reason != redisq.HoldOutsideWindow || !sc.HeldUntil.Equal(sunday) {
		t.Fatalf("schedule %+v %v, want outside its tenant's window until %v", sc, err, sunday)
	}
	b.clock.t = sunday
	if got := admittedGroups(admit(t, q, 10)); len(got) != 1 || got[0] != "default" {
		t.Fatalf("on Sunday: %v", got)
	}
}

// TestRescheduleMovesTheStart: a later notBefore holds the group longer, an
// earlier one starts it sooner; an older move is superseded, and one after
// the start changes nothing.
func TestRescheduleMovesTheStart(t *testing.T) {
	t.Parallel()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit}, true)
	ctx := context.Background()
	t0 := b.clock.t
	enqueueScheduled(t, q, "g", 2, t0.Add(time.Second).Format(time.RFC3339Nano), nil)
	admit(t, q, 10)
	res, err := q.Reschedule(ctx, G("g"), t0.Add(time.Minute), redisq.SubmitSeq(10))
	if err != nil || res.Outcome != redisq.Rescheduled {
		t.Fatalf("later: %+v %v", res, err)
	}
	if res, _ := q.Reschedule(ctx, G("g"), t0, redisq.SubmitSeq(9)); res.Outcome != redisq.ControlSuperseded {
		t.Fatalf("an older move: %+v", res)
	}
	b.clock.advance(2 * time.Second)
	if r := admit(t, q, 10); len(r.Jobs) != 0 {
		t.Fatalf("admitted at the old notBefore: %v", admittedGroups(r))
	}
	if hs := holdsOf(t, q, "g"); len(hs) != 1 || hs[0].UntilMs != t0.Add(time.Minute).UnixMilli() {
		t.Fatalf("holds %+v", hs)
	}
	if res, err := q.Reschedule(ctx, G("g"), t0.Add(3*time.Second), redisq.SubmitSeq(11)); err != nil || res.Outcome != redisq.Rescheduled {
		t.Fatalf("earlier: %+v %v", res, err)
	}
	b.clock.advance(time.Second)
	if r := admit(t, q, 1); len(r.Jobs) != 1 {
		t.Fatalf("not admitted at the moved notBefore: %v", admittedGroups(r))
	}
	if res, _ := q.Reschedule(ctx, G("g"), t0.Add(time.Hour), redisq.SubmitSeq(12)); res.Outcome != redisq.ControlStarted {
		t.Fatalf("after the start: %+v", res)
	}
	if r := admit(t, q, 10); len(r.Jobs) != 1 {
		t.Fatalf("a move after the start held the group: %v", admittedGroups(r))
	}
	if res, _ := q.Reschedule(ctx, G("nope"), t0, redisq.SubmitSeq(13)); res.Outcome != redisq.ControlUnknown {
		t.Fatalf("unknown group: %+v", res)
	}
}
