package redisq_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// idleTTL is the idle TTL of the tests of this file; they move the clock
// past it with idleTTL + time.Hour.
const idleTTL = 24 * time.Hour

// startGroup enqueues n jobs of type "t" into gid, admits them (no other
// group may have queued jobs then) and records the first done of them as
// succeeded: the group is RUNNING and watched, with n - done jobs leased.
func startGroup(t *testing.T, q *redisq.Queue, gid string, n, done int) []redisq.LeasedJob {
	t.Helper()
	enqueueN(t, q, gid, n, "", 0)
	r := admit(t, q, n)
	if len(r.Jobs) != n {
		t.Fatalf("%s: admitted %d of %d jobs", gid, len(r.Jobs), n)
	}
	for _, j := range r.Jobs[:done] {
		record(t, q, j)
	}
	return r.Jobs
}

// record records j as succeeded.
func record(t *testing.T, q *redisq.Queue, j redisq.LeasedJob) {
	t.Helper()
	res, err := q.Record(context.Background(), contracts.JobResult{Tenant: j.Group.Tenant, GroupID: j.Group.ID, JobID: j.ID,
		Attempt: j.Attempt, Status: contracts.ResultSuccess})
	if err != nil || res.Outcome != redisq.Recorded {
		t.Fatalf("record %s/%s: %+v %v", j.Group, j.ID, res, err)
	}
}

// abandonIdle runs AbandonIdle with idleTTL and returns the groupIds it
// abandoned, sorted.
func abandonIdle(t *testing.T, q *redisq.Queue) []string {
	t.Helper()
	got, err := q.AbandonIdle(context.Background(), idleTTL, redisq.SweepChunk(2))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, g := range got {
		ids = append(ids, g.ID)
	}
	slices.Sort(ids)
	return ids
}

// keysWithTTL returns the keys of group gid (its own keys and the hashes
// of its jobs that have not ended) that have a TTL.
func keysWithTTL(t *testing.T, q *redisq.Queue, b *testBundle, gid string) []string {
	t.Helper()
	ctx := context.Background()
	keys, err := b.rdb.Keys(ctx, b.prefix+"*:t:"+gid+":*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys of %s: %v %v", gid, keys, err)
	}
	var out []string
	for _, k := range keys {
		if st := b.rdb.HGet(ctx, k, "status").Val(); strings.Contains(k, ":job:") && (st == "SUCCESS" || st == "FAILED") {
			continue // a finished job's hash has its own TTL
		}
		if b.rdb.TTL(ctx, k).Val() > 0 {
			out = append(out, k)
		}
	}
	return out
}

// TestAbandonSparesGroupsWithWork: an unsealed group idle past the idle TTL
// is abandoned only when it has no work: not when it is paused (with or
// without jobs queued), has jobs queued (held: nothing admits them, as for a
// type no worker serves), backing off, leased or running. Their keys keep no
// TTL; a group whose jobs all ended is abandoned as before.
func TestAbandonSparesGroupsWithWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, GroupTTL: time.Hour}, true)

	startGroup(t, q, "done", 2, 2) // nothing left: abandoned
	startGroup(t, q, "leased", 2, 1)
	running := startGroup(t, q, "running", 2, 1)
	if o, err := q.Claim(ctx, G("running"), running[1].ID, running[1].Attempt); err != nil || o != redisq.ClaimRun {
		t.Fatalf("claim: %v %v", o, err)
	}
	backoff := startGroup(t, q, "backoff", 2, 1)
	if o, err := q.Claim(ctx, G("backoff"), backoff[1].ID, backoff[1].Attempt); err != nil || o != redisq.ClaimRun {
		t.Fatalf("claim: %v %v", o, err)
	}
	if rr, err := q.Retry(ctx, G("backoff"), backoff[1].ID, backoff[1].Attempt, time.Minute, "429"); err != nil || rr.Outcome != "parked" {
		t.Fatalf("retry: %+v %v", rr, err)
	}
	startGroup(t, q, "paused", 2, 2) // no jobs left, but paused
	startGroup(t, q, "pausedq", 2, 2)
	startGroup(t, q, "held", 1, 1)
	// pausedq and held get jobs nothing admits: pausedq is paused, held's
	// wait for a worker of their type (no admission runs in this test).
	for _, gid := range []string{"pausedq", "held"} {
		if _, err := q.EnqueueBatch(ctx, []redisq.Job{{Group: G(gid), ID: "later1", Type: "unserved"},
			{Group: G(gid), ID: "later2", Type: "unserved"}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, gid := range []string{"paused", "pausedq"} {
		if res, err := q.Pause(ctx, G(gid)); err != nil || res.Outcome != redisq.Paused {
			t.Fatalf("pause %s: %+v %v", gid, res, err)
		}
	}
	all := []string{"backoff", "done", "held", "leased", "paused", "pausedq", "running"}
	if err := q.WatchGroups(ctx, G("held"), G("pausedq"), G("paused")); err != nil {
		t.Fatal(err)
	}
	if watched := b.rdb.ZCard(ctx, q.Keys().StuckWatch()).Val(); watched != int64(len(all)) {
		t.Fatalf("%d groups watched, want %d", watched, len(all))
	}

	b.clock.advance(idleTTL + time.Hour)
	if got := abandonIdle(t, q); !slices.Equal(got, []string{"done"}) {
		t.Fatalf("abandoned %v, want only the group without work", got)
	}
	for _, gid := range all {
		if keys := keysWithTTL(t, q, b, gid); gid != "done" && len(keys) > 0 {
			t.Errorf("%s: keys with a TTL: %v", gid, keys)
		}
	}
	if watched := b.rdb.ZRange(ctx, q.Keys().StuckWatch(), 0, -1).Val(); len(watched) != len(all)-1 || slices.Contains(watched, "t:done") {
		t.Errorf("watched after abandoning: %v", watched)
	}

	// Long after, the paused group with queued jobs is resumed: it is
	// neither abandoned nor expiring, and its queued jobs are admitted.
	b.clock.advance(3 * idleTTL)
	if got := abandonIdle(t, q); len(got) != 0 {
		t.Fatalf("abandoned %v", got)
	}
	if res, err := q.Resume(ctx, G("pausedq")); err != nil || res.Outcome != redisq.Resumed {
		t.Fatalf("resume: %+v %v", res, err)
	}
	if got := abandonIdle(t, q); len(got) != 0 {
		t.Fatalf("abandoned %v after the resume", got)
	}
	n := 0
	for _, j := range admit(t, q, 10).Jobs {
		if j.Group == G("pausedq") {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("admitted %d of pausedq's queued jobs after the resume, want 2", n)
	}
	if k := keysWithTTL(t, q, b, "pausedq"); len(k) > 0 {
		t.Errorf("pausedq after the resume: keys with a TTL: %v", k)
	}
}

// TestActivityKeepsAGroupFromBeingAbandoned: a resume, a seal, a pause and a
// recorded result are activity: an unsealed group without work is
// abandoned only once the idle TTL has passed since the last of them.
func TestActivityKeepsAGroupFromBeingAbandoned(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, GroupTTL: time.Hour}, true)
	startGroup(t, q, "resumed", 1, 1)
	startGroup(t, q, "quiet", 1, 1)
	late := startGroup(t, q, "result", 2, 1)
	if _, err := q.Pause(ctx, G("resumed")); err != nil {
		t.Fatal(err)
	}
	b.clock.advance(idleTTL + time.Hour)
	// resumed is paused, result has a job leased: neither is abandoned;
	// quiet is.
	if got := abandonIdle(t, q); !slices.Equal(got, []string{"quiet"}) {
		t.Fatalf("abandoned %v, want quiet", got)
	}
	// Now the resume and the late result: activity, so not abandoned
	// before another idle TTL.
	if res, err := q.Resume(ctx, G("resumed")); err != nil || res.Outcome != redisq.Resumed {
		t.Fatalf("resume: %+v %v", res, err)
	}
	record(t, q, late[1])
	b.clock.advance(idleTTL - time.Hour)
	if got := abandonIdle(t, q); len(got) != 0 {
		t.Fatalf("abandoned %v within the idle TTL of the resume and the result", got)
	}
	// A resume that finds the group not paused (unchanged) is activity too.
	startGroup(t, q, "nudged", 1, 1)
	b.clock.advance(idleTTL - time.Hour)
	if res, err := q.Resume(ctx, G("nudged")); err != nil || res.Outcome != redisq.ControlUnchanged {
		t.Fatalf("resume: %+v %v", res, err)
	}
	b.clock.advance(2 * time.Hour)
	if got := abandonIdle(t, q); !slices.Equal(got, []string{"result", "resumed"}) {
		t.Fatalf("abandoned %v, want result and resumed (idle again), not nudged", got)
	}
}

// TestControlRevivesAnAbandonedGroup: a pause, a resume or a seal of an
// abandoned group brings it back to life as a new job does: its keys lose
// their TTLs, abandonedAt is cleared and it is watched again. So a group
// paused after it was abandoned does not expire while paused.
func TestControlRevivesAnAbandonedGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit, GroupTTL: time.Hour}, true)
	gids := []string{"paused", "resumed", "sealed"}
	for _, gid := range gids {
		startGroup(t, q, gid, 1, 1)
	}
	b.clock.advance(idleTTL + time.Hour)
	if got := abandonIdle(t, q); !slices.Equal(got, gids) {
		t.Fatalf("abandoned %v, want %v", got, gids)
	}
	if res, err := q.Pause(ctx, G("paused")); err != nil || res.Outcome != redisq.Paused {
		t.Fatalf("pause: %+v %v", res, err)
	}
	if res, err := q.Resume(ctx, G("resumed")); err != nil || res.Outcome != redisq.ControlUnchanged {
		t.Fatalf("resume: %+v %v", res, err)
	}
	if res, err := q.Seal(ctx, G("sealed"), 5); err != nil || res.Outcome != redisq.Sealed {
		t.Fatalf("seal: %+v %v", res, err)
	}
	k := q.Keys()
	watched := b.rdb.ZRange(ctx, k.StuckWatch(), 0, -1).Val()
	for _, gid := range gids {
		g := G(gid)
		for _, key := range []string{k.GroupMeta(g), k.GroupIDs(g)} {
			if ttl := b.rdb.TTL(ctx, key).Val(); ttl != -1 {
				t.Errorf("%s: %s has TTL %v, want none", gid, key, ttl)
			}
		}
		if _, ok := b.rdb.HGetAll(ctx, k.GroupMeta(g)).Val()["abandonedAt"]; ok {
			t.Errorf("%s: still marked abandoned", gid)
		}
		if !slices.Contains(watched, "t:"+gid) {
			t.Errorf("%s: not watched again: %v", gid, watched)
		}
	}
	// Paused and sealed, they are never abandoned again; the resumed one is
	// after another idle TTL.
	b.clock.advance(3 * idleTTL)
	if got := abandonIdle(t, q); !slices.Equal(got, []string{"resumed"}) {
		t.Fatalf("abandoned %v, want resumed", got)
	}
}

// TestPauseResumeInPublishOrder: given the SUBMIT sequence of their
// messages, pauses and resumes apply in publish order whatever the order
// they arrive in: one older than the last pause or resume the group took
// changes nothing and is reported superseded (a redelivery of the same
// message too). Calls without a sequence apply as before and leave the
// order alone. Seals and cancels are not ordered: a cancel older than a
// resume still cancels, a seal older than a pause still seals.
func TestPauseResumeInPublishOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit}, true)
	g := G("g")
	enqueueN(t, q, "g", 3, "", 0)
	type step struct {
		pause   bool
		seq     uint64
		outcome redisq.ControlOutcome
		state   contracts.GroupState
	}
	for i, s := range []step{
		{false, 11, redisq.ControlUnchanged, contracts.StateCreated}, // the resume published after the pause arrives first
		{true, 10, redisq.ControlSuperseded, contracts.StateCreated}, // the pause arrives late: superseded
		{true, 12, redisq.Paused, contracts.StatePaused},
		{false, 11, redisq.ControlSuperseded, contracts.StatePaused}, // a redelivery of the older resume
		{true, 12, redisq.ControlSuperseded, contracts.StatePaused},  // a redelivery of the same pause
		{false, 14, redisq.Resumed, contracts.StateCreated},
		{true, 13, redisq.ControlSuperseded, contracts.StateCreated},
		{true, 0, redisq.Paused, contracts.StatePaused}, // unordered: applied
		{false, 15, redisq.Resumed, contracts.StateCreated},
	} {
		op := q.Resume
		if s.pause {
			op = q.Pause
		}
		res, err := op(ctx, g, redisq.SubmitSeq(s.seq))
		if err != nil {
			t.Fatal(err)
		}
		if res.Outcome != s.outcome || res.Group.State != s.state {
			t.Fatalf("step %d (pause %v, seq %d): %s in state %s, want %s in state %s", i, s.pause, s.seq,
				res.Outcome, res.Group.State, s.outcome, s.state)
		}
	}
	if seq := b.rdb.HGet(ctx, q.Keys().GroupMeta(g), "ctlSeq").Val(); seq != "15" {
		t.Fatalf("ctlSeq %q, want 15", seq)
	}
	// Without a sequence nothing is ordered: the calls apply as they come.
	if res, _ := q.Pause(ctx, g); res.Outcome != redisq.Paused {
		t.Fatalf("unordered pause: %s", res.Outcome)
	}
	if res, _ := q.Resume(ctx, g); res.Outcome != redisq.Resumed {
		t.Fatalf("unordered resume: %s", res.Outcome)
	}

	// A seal older than the last pause still seals (and leaves the group
	// paused); a cancel older than the last resume still cancels, and a
	// later-arriving older pause finds the group ended.
	if res, _ := q.Pause(ctx, g, redisq.SubmitSeq(20)); res.Outcome != redisq.Paused {
		t.Fatalf("pause: %s", res.Outcome)
	}
	if res, err := q.Seal(ctx, g, 3); err != nil || res.Outcome != redisq.Sealed || res.Group.State != contracts.StatePaused {
		t.Fatalf("seal: %+v %v", res, err)
	}
	if res, _ := q.Resume(ctx, g, redisq.SubmitSeq(22)); res.Outcome != redisq.Resumed {
		t.Fatalf("resume: %s", res.Outcome)
	}
	if res, err := q.Cancel(ctx, g); err != nil || res.Outcome != redisq.Cancelled {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	if res, _ := q.Pause(ctx, g, redisq.SubmitSeq(21)); res.Outcome != redisq.ControlEnded || res.Group.State != contracts.StateCancelled {
		t.Fatalf("pause after the cancel: %s in %s", res.Outcome, res.Group.State)
	}
}

// TestPauseResumeReplayedInOrder: after Redis came back older (its ctlSeq
// and state from before the last messages), the same messages applied
// again in SUBMIT order, as the replay does, end in the state of the last
// one published; those the snapshot already held are superseded.
func TestPauseResumeReplayedInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, b := setup(t, redisq.Config{GlobalLimit: redisq.UngatedLimit}, true)
	g := G("g")
	enqueueN(t, q, "g", 2, "", 0)
	apply := func(pause bool, seq uint64) redisq.ControlOutcome {
		t.Helper()
		op := q.Resume
		if pause {
			op = q.Pause
		}
		res, err := op(ctx, g, redisq.SubmitSeq(seq))
		if err != nil {
			t.Fatal(err)
		}
		return res.Outcome
	}
	apply(true, 5)
	snapshot := dumpGroup(t, b, q, g)
	apply(false, 6)
	apply(true, 7)
	apply(false, 8)
	restoreGroup(t, b, snapshot) // Redis comes back with the pause of 5 applied
	// The replay applies everything from the stored position on, say 4.
	got := []redisq.ControlOutcome{apply(false, 4), apply(true, 5), apply(false, 6), apply(true, 7), apply(false, 8)}
	want := []redisq.ControlOutcome{redisq.ControlSuperseded, redisq.ControlSuperseded, redisq.Resumed, redisq.Paused, redisq.Resumed}
	if !slices.Equal(got, want) {
		t.Fatalf("replayed: %v, want %v", got, want)
	}
	if st, _ := q.GroupState(ctx, g); st != contracts.StateCreated {
		t.Fatalf("state after the replay %s, want CREATED (the last message was a resume)", st)
	}
}

// dumpGroup copies group g's meta (DUMP), what a snapshot holds of it.
func dumpGroup(t *testing.T, b *testBundle, q *redisq.Queue, g contracts.GroupRef) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, k := range []string{q.Keys().GroupMeta(g)} {
		d, err := b.rdb.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		out[k] = d
	}
	return out
}

// restoreGroup puts the keys of dumpGroup back as they were.
func restoreGroup(t *testing.T, b *testBundle, keys map[string]string) {
	t.Helper()
	for k, d := range keys {
		if err := b.rdb.RestoreReplace(context.Background(), k, 0, d).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
