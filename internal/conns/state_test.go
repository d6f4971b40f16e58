package conns_test

import (
	"context"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/conns"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// QueueState reports the tenants sharing the global rate
// (bulk_action_active_tenants), not the groups: acme's two groups and
// globex's one are two active tenants.
func TestQueueStateCountsActiveTenants(t *testing.T) {
	r := testenv.Redis(t)
	url, _, _ := testenv.NATS(t)
	cfg, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	cfg.RedisURL, cfg.RedisPrefix, cfg.NatsURL, cfg.StreamStorage = r.URL, r.Prefix, url, "memory"
	ctx := context.Background()
	c, err := conns.Connect(ctx, cfg, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var jobs []redisq.Job
	for _, g := range []contracts.GroupRef{contracts.Group("acme", "a"), contracts.Group("acme", "b"), contracts.Group("globex", "a")} {
		for i := range 3 {
			jobs = append(jobs, redisq.Job{Group: g, ID: strconv.Itoa(i), Type: "noop"})
		}
	}
	if _, err := c.Queue.EnqueueJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Queue.Admit(ctx, 4); err != nil {
		t.Fatal(err)
	}
	s, err := conns.QueueState(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.ActiveTenants != 2 {
		t.Errorf("ActiveTenants = %d, want 2 (tenants, not groups)", s.ActiveTenants)
	}
	if s.InflightSize != 4 || s.GroupsPerLevel["normal"] != 3 || s.GlobalRateLimit != float64(cfg.GlobalRps) {
		t.Errorf("state = %+v", s)
	}
}

// bulk_action_groups_waiting counts the groups held back by each reason,
// every reason reported (0 when no group has it).
func TestQueueStateGroupsWaiting(t *testing.T) {
	r := testenv.Redis(t)
	url, _, js := testenv.NATS(t)
	cfg, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	cfg.RedisURL, cfg.RedisPrefix, cfg.NatsURL, cfg.StreamStorage, cfg.ReadyQueueMaxSize = r.URL, r.Prefix, url, "memory", 2
	ctx := context.Background()
	c, err := conns.Connect(ctx, cfg, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q := c.Queue
	if err := q.AnnounceTypes(ctx, []string{"noop"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	add := func(gid, typ string, n int, maxInFlight int64) contracts.GroupRef {
		t.Helper()
		g := contracts.Group("acme", gid)
		var jobs []redisq.Job
		for i := range n {
			jobs = append(jobs, redisq.Job{Group: g, ID: strconv.Itoa(i), Type: typ, MaxInFlight: maxInFlight})
		}
		if _, err := q.EnqueueJobs(ctx, jobs); err != nil {
			t.Fatal(err)
		}
		return g
	}
	admit := func(n int) []redisq.LeasedJob {
		t.Helper()
		r, err := q.Admit(ctx, n)
		if err != nil || len(r.Jobs) != n {
			t.Fatalf("admit %d: %v, %+v", n, err, r)
		}
		return r.Jobs
	}
	add("lim", "noop", 3, 1)
	admit(1) // lim at its limit of 1
	b := add("b", "noop", 1, 0)
	j := admit(1)[0] // b's only job, then backing off
	if rr, err := q.Retry(ctx, b, j.ID, 1, time.Minute, "429"); err != nil || rr.Outcome != "parked" {
		t.Fatalf("retry: %v %+v", err, rr)
	}
	// A paused group counts once it has started: the groups examined are
	// the queued ones and those the stuck watch list follows.
	p := add("p", "noop", 2, 0)
	admit(1)
	if _, err := q.Pause(ctx, p); err != nil {
		t.Fatal(err)
	}
	// Groups admission passed by for their notBefore or sending windows
	// are out of the queue until then, and count all the same.
	sched := func(gid string, set func(*redisq.Job)) {
		t.Helper()
		j := redisq.Job{Group: contracts.Group("acme", gid), ID: "0", Type: "noop"}
		set(&j)
		if _, err := q.EnqueueJobs(ctx, []redisq.Job{j}); err != nil {
			t.Fatal(err)
		}
	}
	sched("later", func(j *redisq.Job) { j.NotBefore = time.Now().Add(time.Hour).Format(time.RFC3339) })
	soon := time.Now().UTC().Add(2 * time.Hour)
	sched("closed", func(j *redisq.Job) {
		j.Windows = []contracts.Window{{Zone: "UTC", Days: contracts.Weekdays[:], From: soon.Format("15:04"), To: soon.Add(time.Hour).Format("15:04")}}
	})
	if r, err := q.Admit(ctx, 5); err != nil || len(r.Jobs) != 0 || r.ScheduledMs <= 0 {
		t.Fatalf("admit: %v %+v, want the scheduled groups passed by", err, r)
	}
	add("sms", "sms", 1, 0) // no live worker
	add("full", "noop", 1, 0)
	for range 2 { // READY's room for noop: 2 of 2 used
		if _, err := js.Publish(ctx, c.Names.Ready("noop"), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	s, err := conns.QueueState(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"paused": 1, "in_flight_limit": 1, "backing_off": 1, "no_worker": 1, "ready_full": 1,
		"rate_share_used": 0, "global_rate": 0, "type_rate": 0, "scheduled": 1, "outside_window": 1, "destination_rate": 0}
	if !maps.Equal(s.GroupsWaiting, want) {
		t.Errorf("GroupsWaiting = %v, want %v", s.GroupsWaiting, want)
	}
}

// With the adaptive rate on, the queue state carries each destination's
// learned rate as the controller left it in Redis: learned after a
// throttle, stopped while a Retry-After runs, not learned (rate 0) while
// it only accepts; with it off, none is read.
func TestQueueStateDestinations(t *testing.T) {
	r := testenv.Redis(t)
	url, _, _ := testenv.NATS(t)
	cfg, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	cfg.RedisURL, cfg.RedisPrefix, cfg.NatsURL, cfg.StreamStorage = r.URL, r.Prefix, url, "memory"
	cfg.AdaptiveRateEnabled = true
	ctx := context.Background()
	c, err := conns.Connect(ctx, cfg, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Queue.ReportDestinations(ctx, []redisq.DestOutcome{
		{Destination: "email", Accepted: 100, Throttled: 1},
		{Destination: "partner", Accepted: 10, Throttled: 3, RetryAfter: time.Minute},
		{Destination: "sms", Accepted: 5},
	}); err != nil {
		t.Fatal(err)
	}
	s, err := conns.QueueState(ctx, c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.DestinationsTracked != 3 || len(s.Destinations) != 3 {
		t.Fatalf("destinations = %d tracked, %+v", s.DestinationsTracked, s.Destinations)
	}
	email, partner, sms := s.Destinations[0], s.Destinations[1], s.Destinations[2]
	if email.Destination != "email" || email.Rate <= 0 || email.Stopped {
		t.Errorf("email = %+v, want a learned rate, not stopped", email)
	}
	if partner.Destination != "partner" || partner.Rate <= 0 || !partner.Stopped {
		t.Errorf("partner = %+v, want a learned rate, stopped by its Retry-After", partner)
	}
	if sms.Destination != "sms" || sms.Rate != 0 || sms.Stopped {
		t.Errorf("sms = %+v, want not learned yet", sms)
	}

	cfg.AdaptiveRateEnabled = false
	if s, err = conns.QueueState(ctx, c, cfg); err != nil {
		t.Fatal(err)
	}
	if s.DestinationsTracked != 0 || s.Destinations != nil {
		t.Errorf("adaptive rate off: destinations = %d tracked, %+v, want none read", s.DestinationsTracked, s.Destinations)
	}
}
