package cli_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/cli"
	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/conns"
	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/status"
)

// "Why is it waiting" (docs/ARCHITECTURE.md §5): each test builds the
// state of one hold reason through the queue and reads it back with
// Status.

// live announces job types as served by a worker for the next minute.
func live(t *testing.T, q *redisq.Queue, types ...string) {
	t.Helper()
	if err := q.AnnounceTypes(context.Background(), types, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// enqueueTyped stores n jobs of one type in a group, with maxInFlight.
func enqueueTyped(t *testing.T, q *redisq.Queue, g contracts.GroupRef, n int, typ string, maxInFlight int64) {
	t.Helper()
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: g, ID: strconv.Itoa(i + 1), Type: typ, MaxInFlight: maxInFlight}
	}
	if _, err := q.EnqueueJobs(context.Background(), jobs); err != nil {
		t.Fatal(err)
	}
}

// reasons lists a status's hold reasons.
func reasons(s *status.Group) []redisq.HoldReason {
	out := []redisq.HoldReason{}
	for _, h := range s.Holds {
		out = append(out, h.Reason)
	}
	return out
}

// waitingJSON is the status's "waiting" array as JSON decodes it.
func waitingJSON(t *testing.T, s *status.Group) []map[string]any {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Status struct {
			Waiting []map[string]any `json:"waiting"`
		} `json:"status"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Status.Waiting == nil {
		t.Fatalf("json has no status.waiting array: %s", b)
	}
	return m.Status.Waiting
}

func readStatus(t *testing.T, q *redisq.Queue, g contracts.GroupRef) *status.Group {
	t.Helper()
	s, err := status.Read(context.Background(), q, g, status.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if sum := s.Queued + s.InFlight + s.BackingOff + s.Done + s.Cancelled; sum != s.Jobs {
		t.Errorf("%s: jobs %d != %d queued + %d in flight + %d backing off + %d done + %d cancelled",
			g, s.Jobs, s.Queued, s.InFlight, s.BackingOff, s.Done, s.Cancelled)
	}
	return s
}

func sameReasons(got []redisq.HoldReason, want ...redisq.HoldReason) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// A paused group says so; resumed, with a live worker for its type and
// nothing else in the way, it waits for nothing.
func TestWaitingPaused(t *testing.T) {
	t.Parallel()
	q, ctx := setupQueue(t)
	live(t, q, "noop")
	g := ref("acme", "p")
	enqueue(t, q, g, 3, contracts.PriorityNormal)
	if s := readStatus(t, q, g); len(s.Holds) != 0 {
		t.Errorf("queued group: waiting %v, want nothing", reasons(s))
	}
	if _, err := q.Pause(ctx, g); err != nil {
		t.Fatal(err)
	}
	s := readStatus(t, q, g)
	if !sameReasons(reasons(s), redisq.HoldPaused) || s.Holds[0].Detail != "paused until resumed" {
		t.Errorf("paused: %+v", s.Holds)
	}
	if w := waitingJSON(t, s); len(w) != 1 || w[0]["reason"] != "paused" || w[0]["detail"] != "paused until resumed" || w[0]["until"] != nil {
		t.Errorf("json waiting = %v", w)
	}
	if _, err := q.Resume(ctx, g); err != nil {
		t.Fatal(err)
	}
	s = readStatus(t, q, g)
	if len(s.Holds) != 0 || s.WaitingText() != "—" {
		t.Errorf("resumed: waiting %v (%q), want nothing", reasons(s), s.WaitingText())
	}
	if w := waitingJSON(t, s); len(w) != 0 {
		t.Errorf("json waiting = %v, want []", w)
	}
}

// A group admitted up to its maxInFlight waits for a slot; the meta
// inFlight it keeps for the limit agrees with the derived InFlight.
func TestWaitingInFlightLimit(t *testing.T) {
	t.Parallel()
	q, ctx := setupQueue(t)
	live(t, q, "noop")
	g := ref("acme", "lim")
	enqueueTyped(t, q, g, 5, "noop", 2)
	if r, err := q.Admit(ctx, 10); err != nil || len(r.Jobs) != 2 {
		t.Fatalf("admit: %v, %+v", err, r)
	}
	s := readStatus(t, q, g)
	if !sameReasons(reasons(s), redisq.HoldInFlightLimit) {
		t.Fatalf("waiting %v, want in_flight_limit", reasons(s))
	}
	h := s.Holds[0]
	if h.Count != 2 || h.Limit != 2 || h.Detail != "in-flight limit reached (2 of 2 in flight)" || s.InFlight != 2 {
		t.Errorf("hold %+v, in flight %d", h, s.InFlight)
	}
	info, _, _ := q.Group(ctx, g)
	if info.InFlight != s.InFlight {
		t.Errorf("meta inFlight %d, derived %d", info.InFlight, s.InFlight)
	}
	// A result frees a slot: the group waits for nothing until the next
	// admission fills it again.
	if _, err := q.Record(ctx, contracts.JobResult{Tenant: g.Tenant, GroupID: g.ID, JobID: "1", Attempt: 1, Status: contracts.ResultSuccess}); err != nil {
		t.Fatal(err)
	}
	if s := readStatus(t, q, g); len(s.Holds) != 0 || s.InFlight != 1 {
		t.Errorf("after a result: waiting %v, in flight %d; want nothing, 1", reasons(s), s.InFlight)
	}
}

// Paced admission with a small limit: once acme has used its share of the
// window it waits until the window ends (rate_share_used); once the rest
// of the window was handed to it and the global limit is used up, it
// waits for that too (global_rate). The figures are LimiterStatus's.
func TestWaitingRate(t *testing.T) {
	t.Parallel()
	env := testenv.Redis(t)
	ctx := context.Background()
	const windowMs = 60_000
	now := time.UnixMilli(1_706_000_000_000/windowMs*windowMs + 1500) // 1.5 s into a window
	q, err := redisq.New(ctx, env.Client, redisq.Config{Prefix: env.Prefix, Mode: redisq.ModePaced, GlobalLimit: 4,
		Window: windowMs * time.Millisecond, Burst: windowMs * time.Millisecond, Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	live(t, q, "noop")
	// globex takes one job, then acme arrives: two active tenants, a share
	// of 2 each.
	enqueue(t, q, ref("globex", "g"), 1, contracts.PriorityNormal)
	if r, err := q.Admit(ctx, 1); err != nil || len(r.Jobs) != 1 {
		t.Fatalf("admit globex: %v %+v", err, r)
	}
	a := ref("acme", "a")
	enqueue(t, q, a, 5, contracts.PriorityNormal)
	if s := readStatus(t, q, a); len(s.Holds) != 0 {
		t.Errorf("before acme's admissions: waiting %v", reasons(s))
	}
	if r, err := q.Admit(ctx, 2); err != nil || len(r.Jobs) != 2 {
		t.Fatalf("admit acme: %v %+v", err, r)
	}
	lim, err := q.LimiterStatus(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	if lim.TenantCount != 2 || lim.TenantLimit != 2 || lim.GlobalCount != 3 {
		t.Fatalf("limiter %+v, want acme 2 of 2, 3 of 4 in all", lim)
	}
	end := time.UnixMilli((lim.Window + 1) * windowMs)
	s := readStatus(t, q, a)
	if !sameReasons(reasons(s), redisq.HoldRateShare) {
		t.Fatalf("share used: waiting %v, want rate_share_used", reasons(s))
	}
	h := s.Holds[0]
	if !h.Until.Equal(end) || h.Count != 2 || h.Limit != 2 || h.Tenant != "acme" ||
		!strings.HasPrefix(h.Detail, "rate share used until "+end.Local().Format("15:04:05.000")) {
		t.Errorf("hold %+v, want until %s", h, end)
	}
	if w := waitingJSON(t, s); w[0]["until"] != end.UTC().Format(time.RFC3339Nano) {
		t.Errorf("json until = %v, want %s", w[0]["until"], end.UTC().Format(time.RFC3339Nano))
	}
	// globex has nothing queued: nothing holds its group.
	if s := readStatus(t, q, ref("globex", "g")); len(s.Holds) != 0 {
		t.Errorf("globex: waiting %v", reasons(s))
	}

	// No other tenant waits: the rest of the window goes to acme, up to the
	// global limit.
	if r, err := q.Admit(ctx, 10); err != nil || len(r.Jobs) != 1 {
		t.Fatalf("admit the rest: %v %+v", err, r)
	}
	s = readStatus(t, q, a)
	if !sameReasons(reasons(s), redisq.HoldRateShare, redisq.HoldGlobalRate) {
		t.Fatalf("limit used: waiting %v, want rate_share_used and global_rate", reasons(s))
	}
	if g := s.Holds[1]; !g.Until.Equal(end) || g.Count != 4 || g.Limit != 4 || !strings.HasPrefix(g.Detail, "global rate limit used until ") {
		t.Errorf("global hold %+v", g)
	}
}

// A retried job waits in the non-ready queue: the hold counts the group's
// backed-off jobs and says when the earliest is due.
func TestWaitingBackingOff(t *testing.T) {
	t.Parallel()
	q, raw, ctx := setupRaw(t)
	live(t, q, "noop")
	g := ref("acme", "b")
	enqueue(t, q, g, 3, contracts.PriorityNormal)
	r, err := q.Admit(ctx, 2)
	if err != nil || len(r.Jobs) != 2 {
		t.Fatalf("admit: %v %+v", err, r)
	}
	for i, d := range []time.Duration{8 * time.Second, 5 * time.Second} {
		if rr, err := q.Retry(ctx, g, r.Jobs[i].ID, 1, d, "429"); err != nil || rr.Outcome != "parked" {
			t.Fatalf("retry: %v %+v", err, rr)
		}
	}
	due, _ := raw.rdb.ZScore(ctx, raw.keys.NonReadyQueue(), g.Tenant+":"+g.ID+":"+r.Jobs[1].ID).Result()
	s := readStatus(t, q, g)
	if !sameReasons(reasons(s), redisq.HoldBackingOff) || s.BackingOff != 2 || s.Queued != 1 || s.InFlight != 0 {
		t.Fatalf("waiting %v, %d backing off, %d queued, %d in flight", reasons(s), s.BackingOff, s.Queued, s.InFlight)
	}
	h := s.Holds[0]
	if h.Count != 2 || !h.Until.Equal(time.UnixMilli(int64(due))) || h.AtLeast {
		t.Errorf("hold %+v, want 2 jobs, the earliest due at %d", h, int64(due))
	}
	if !strings.HasPrefix(h.Detail, "2 jobs backing off, next due in ") {
		t.Errorf("detail %q", h.Detail)
	}
	if in := h.Until.Sub(s.At); in < 4*time.Second || in > 5*time.Second {
		t.Errorf("next due in %s, want about 5s", in)
	}
	if w := waitingJSON(t, s); w[0]["reason"] != "backing_off" || w[0]["until"] == nil {
		t.Errorf("json waiting = %v", w)
	}
}

// A group whose next job's type no live worker serves waits for one.
func TestWaitingNoWorker(t *testing.T) {
	t.Parallel()
	q, _ := setupQueue(t)
	live(t, q, "noop")
	g := ref("acme", "sms")
	enqueueTyped(t, q, g, 2, "sms", 0)
	s := readStatus(t, q, g)
	if !sameReasons(reasons(s), redisq.HoldNoWorker) || s.Holds[0].Type != "sms" || s.Holds[0].Detail != "no live worker for job type sms" {
		t.Fatalf("waiting %+v, want no_worker for sms", s.Holds)
	}
	live(t, q, "sms")
	if s := readStatus(t, q, g); len(s.Holds) != 0 {
		t.Errorf("with a worker for sms: waiting %v", reasons(s))
	}
}

// READY's room is checked when the reading measures it: a type whose room
// is used up holds the group.
func TestWaitingReadyFull(t *testing.T) {
	t.Parallel()
	q, ctx := setupQueue(t)
	live(t, q, "noop")
	g := ref("acme", "r")
	enqueue(t, q, g, 2, contracts.PriorityNormal)
	rooms := handoff.Rooms{ByType: map[string]int{"noop": 0, "sms": 3}, Capacity: 3}
	s, err := status.Read(ctx, q, g, status.Options{Room: func(context.Context) (map[string]int, int, error) { return rooms.ByType, rooms.Capacity, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if !sameReasons(reasons(s), redisq.HoldReadyFull) || s.Holds[0].Type != "noop" || !s.ReadyRoomChecked {
		t.Fatalf("waiting %+v (room checked %v), want ready_full for noop", s.Holds, s.ReadyRoomChecked)
	}
	rooms.ByType["noop"] = 1
	if s, _ := status.Read(ctx, q, g, status.Options{Room: func(context.Context) (map[string]int, int, error) { return rooms.ByType, rooms.Capacity, nil }}); len(s.Holds) != 0 {
		t.Errorf("with room: waiting %v", reasons(s))
	}
	if s := readStatus(t, q, g); s.ReadyRoomChecked {
		t.Error("Status without NATS says READY's room was checked")
	}
}

// The same through a real READY stream, read by the CLI's connection: the
// messages of a type fill its room.
func TestWaitingReadyFullOnNATS(t *testing.T) {
	t.Parallel()
	r := testenv.Redis(t)
	url, _, js := testenv.NATS(t)
	cfg, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	cfg.RedisURL, cfg.RedisPrefix, cfg.NatsURL, cfg.StreamStorage, cfg.ReadyQueueMaxSize = r.URL, r.Prefix, url, "memory", 2
	ctx := context.Background()
	names := contracts.Names{Prefix: cfg.SubjectPrefix}
	if err := natsutil.EnsureStreams(ctx, js, names, conns.StreamSettings(cfg)); err != nil {
		t.Fatal(err)
	}
	c, err := cli.Dial(ctx, cfg, cli.NeedRedis|cli.WantNATS)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.JS == nil {
		t.Fatal("WantNATS did not connect to a NATS that answers")
	}
	live(t, c.Queue, "noop")
	g := ref("acme", "full")
	enqueue(t, c.Queue, g, 3, contracts.PriorityNormal)
	if s, err := c.Status(ctx, g); err != nil || len(s.Holds) != 0 || !s.ReadyRoomChecked {
		t.Fatalf("empty READY: %v, waiting %v, room checked %v", err, s.Holds, s.ReadyRoomChecked)
	}
	for i := range 2 {
		if _, err := js.Publish(ctx, names.Ready("noop"), fmt.Appendf(nil, `{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	s, err := c.Status(ctx, g)
	if err != nil {
		t.Fatal(err)
	}
	if !sameReasons(reasons(s), redisq.HoldReadyFull) || s.Holds[0].Detail != "READY has no room for job type noop" {
		t.Errorf("READY holding 2 noop messages of 2: waiting %+v", s.Holds)
	}

	// A NATS that does not answer: status works from Redis alone.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	noNATS := *cfg
	noNATS.NatsURL = "nats://" + closed
	c2, err := cli.Dial(ctx, &noNATS, cli.NeedRedis|cli.WantNATS)
	if err != nil {
		t.Fatalf("WantNATS with NATS down: %v", err)
	}
	defer c2.Close()
	if s, err := c2.Status(ctx, g); err != nil || c2.JS != nil || s.ReadyRoomChecked || len(s.Holds) != 0 {
		t.Errorf("without NATS: %v, js %v, room checked %v, waiting %v", err, c2.JS, s.ReadyRoomChecked, s.Holds)
	}
}

// An ended group waits for nothing, whatever held it.
func TestWaitingEndedHasNone(t *testing.T) {
	t.Parallel()
	q, ctx := setupQueue(t)
	g := ref("acme", "e")
	enqueueTyped(t, q, g, 2, "nobody-serves-this", 0)
	if _, err := q.Pause(ctx, g); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Cancel(ctx, g); err != nil {
		t.Fatal(err)
	}
	s := readStatus(t, q, g)
	if !s.Ended() || len(s.Holds) != 0 || len(waitingJSON(t, s)) != 0 {
		t.Errorf("cancelled group: %s, waiting %v", s.State, reasons(s))
	}
}

// pushSamples writes progress samples, given oldest first as (age, count)
// relative to Redis's clock, as the aggregators would.
func pushSamples(t *testing.T, raw raw, g contracts.GroupRef, samples ...[2]int64) {
	t.Helper()
	ctx := context.Background()
	now, err := raw.rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	key := raw.keys.GroupProgress(g)
	raw.rdb.Del(ctx, key)
	for _, s := range samples {
		raw.rdb.LPush(ctx, key, fmt.Sprintf("%d:%d", now.UnixMilli()-s[0], s[1]))
	}
}

// The rate is measured over the last 30 s of the group's progress samples
// (from the newest sample at least 30 s old to the reading), and the ETA
// follows from it; with fewer than two samples it is measured since the
// group started, and a group that made no progress in the window has a
// rate of 0 and no ETA.
func TestStatusRateWindow(t *testing.T) {
	t.Parallel()
	q, raw, ctx := setupRaw(t)
	g := ref("acme", "w")
	enqueue(t, q, g, 100, contracts.PriorityNormal)
	if _, err := q.Seal(ctx, g, 100); err != nil {
		t.Fatal(err)
	}
	r, err := q.Admit(ctx, 100)
	if err != nil || len(r.Jobs) != 100 {
		t.Fatalf("admit: %v", err)
	}
	var rs []contracts.JobResult
	for _, j := range r.Jobs[:50] {
		rs = append(rs, contracts.JobResult{Tenant: g.Tenant, GroupID: g.ID, JobID: j.ID, Attempt: 1, Status: contracts.ResultSuccess})
	}
	if _, err := q.RecordBatch(ctx, rs); err != nil {
		t.Fatal(err)
	}

	// Samples (age ms, count): the base is the one 31 s old.
	pushSamples(t, raw, g, [2]int64{50_000, 0}, [2]int64{31_000, 20}, [2]int64{29_000, 30}, [2]int64{10_000, 40}, [2]int64{1_000, 48})
	s := readStatus(t, q, g)
	if s.RateWindow < 31*time.Second || s.RateWindow > 32*time.Second {
		t.Fatalf("rate window %s, want about 31s (from the newest sample at least 30 s old)", s.RateWindow)
	}
	wantRate := 30 / s.RateWindow.Seconds()
	if math.Abs(s.Rate-wantRate) > 1e-9 || s.ETASeconds != math.Ceil(50/wantRate) {
		t.Errorf("rate %v eta %v, want %v and %v", s.Rate, s.ETASeconds, wantRate, math.Ceil(50/wantRate))
	}
	b, _ := json.Marshal(s)
	var m struct{ Status map[string]any }
	_ = json.Unmarshal(b, &m)
	if m.Status["rateWindowSeconds"] != math.Round(s.RateWindow.Seconds()*100)/100 || m.Status["etaSeconds"] != s.ETASeconds {
		t.Errorf("json rate window %v, eta %v", m.Status["rateWindowSeconds"], m.Status["etaSeconds"])
	}

	// A young group: no sample is 30 s old, the base is the oldest.
	pushSamples(t, raw, g, [2]int64{4_000, 10}, [2]int64{2_000, 30})
	if s := readStatus(t, q, g); s.RateWindow < 4*time.Second || s.RateWindow > 5*time.Second || math.Abs(s.Rate-40/s.RateWindow.Seconds()) > 1e-9 {
		t.Errorf("young group: rate %v over %s, want 40 jobs over about 4s", s.Rate, s.RateWindow)
	}

	// No progress in the window: rate 0, no ETA.
	pushSamples(t, raw, g, [2]int64{45_000, 50}, [2]int64{35_000, 50})
	if s := readStatus(t, q, g); s.Rate != 0 || s.ETASeconds != -1 {
		t.Errorf("stalled: rate %v eta %v, want 0 and -1", s.Rate, s.ETASeconds)
	}

	// One sample: since the start.
	pushSamples(t, raw, g, [2]int64{1_000, 49})
	s = readStatus(t, q, g)
	if el := s.Elapsed(); s.RateWindow != el || math.Abs(s.Rate-50/el.Seconds()) > 1e-9 {
		t.Errorf("one sample: rate %v over %s, want 50 jobs since the start (%s)", s.Rate, s.RateWindow, el)
	}

	// Samples written by the queue itself count the same way.
	raw.rdb.Del(ctx, raw.keys.GroupProgress(g))
	if err := q.RecordProgress(ctx, g); err != nil {
		t.Fatal(err)
	}
	if got, _ := q.Progress(ctx, g); len(got) != 1 || got[0].Count != 50 {
		t.Errorf("samples %+v, want one of 50 jobs", got)
	}

	// Ended: ETA 0, the rate of its whole run.
	rs = rs[:0]
	for _, j := range r.Jobs[50:] {
		rs = append(rs, contracts.JobResult{Tenant: g.Tenant, GroupID: g.ID, JobID: j.ID, Attempt: 1, Status: contracts.ResultSuccess})
	}
	if _, err := q.RecordBatch(ctx, rs); err != nil {
		t.Fatal(err)
	}
	pushSamples(t, raw, g, [2]int64{40_000, 0}, [2]int64{1_000, 100})
	s = readStatus(t, q, g)
	if !s.Ended() || s.ETASeconds != 0 || s.RateWindow != s.Elapsed() {
		t.Errorf("ended: %s, eta %v, rate window %s (elapsed %s)", s.State, s.ETASeconds, s.RateWindow, s.Elapsed())
	}
}
