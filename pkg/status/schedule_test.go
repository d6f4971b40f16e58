package status_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/status"
)

// A group its window closed on mid-run keeps its place and counts its ETA
// from the window's next opening (real Redis, a fixed clock): the ETA is
// the wait plus what is left at the rate it ran, and its position is the
// one it takes back then.
func TestETAAndPositionCountFromTheNextOpening(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := testenv.Redis(t)
	// Tuesday 2024-01-23 08:50 UTC, 09:50 in Berlin: the window closes at
	// 09:00 UTC and opens again a week later
	now := time.Date(2024, 1, 23, 8, 50, 0, 0, time.UTC)
	q, err := redisq.New(ctx, env.Client, redisq.Config{Prefix: env.Prefix, GlobalLimit: 1 << 30, Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ws := []contracts.Window{{Zone: "Europe/Berlin", Days: []string{"tue"}, From: "09:00", To: "10:00"}}
	g := contracts.Group("acme", "w")
	jobs := make([]redisq.Job, 10)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: g, ID: fmt.Sprintf("j%d", i), Type: "t", Windows: ws}
	}
	if _, err := q.EnqueueJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	r, err := q.Admit(ctx, 4)
	if err != nil || len(r.Jobs) != 4 {
		t.Fatalf("admitted %v, %v; want 4 inside the window", r, err)
	}
	now = now.Add(5 * time.Minute)
	for _, j := range r.Jobs {
		if _, err := q.Record(ctx, contracts.JobResult{Tenant: g.Tenant, GroupID: g.ID, JobID: j.ID, Attempt: 1, Status: contracts.ResultSuccess}); err != nil {
			t.Fatal(err)
		}
	}
	now = time.Date(2024, 1, 23, 9, 0, 0, 0, time.UTC)
	if r, err := q.Admit(ctx, 10); err != nil || len(r.Jobs) != 0 {
		t.Fatalf("admitted %v, %v after the window closed", r, err)
	}
	s, err := status.Read(ctx, q, g, status.Options{})
	if err != nil {
		t.Fatal(err)
	}
	next := time.Date(2024, 1, 30, 8, 0, 0, 0, time.UTC)
	if !s.Schedule.HeldUntil.Equal(next) || s.Schedule.Reason != redisq.HoldOutsideWindow {
		t.Fatalf("schedule %+v, want outside_window until %v", s.Schedule, next)
	}
	wait := next.Sub(now).Seconds()
	left := float64(6)
	if s.Rate <= 0 {
		t.Fatalf("rate %v: the group ran 4 jobs in 10 minutes", s.Rate)
	}
	want := wait + left/s.Rate
	if s.ETASeconds < want-1 || s.ETASeconds > want+1 {
		t.Errorf("ETA %.0fs, want the wait to the next opening (%.0fs) plus 6 jobs at %.4f/s: %.0fs", s.ETASeconds, wait, s.Rate, want)
	}
	if s.Position != 1 {
		t.Errorf("position %d, want 1: the place it keeps", s.Position)
	}
}
