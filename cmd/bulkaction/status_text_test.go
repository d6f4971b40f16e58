package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/status"
)

// status's text names what holds the group on one row ("—" when nothing
// does), shows the counting identity and what the rate was measured over.
func TestWriteStatusWaitingRow(t *testing.T) {
	at := time.Date(2025, 1, 2, 12, 0, 0, 0, time.Local)
	s := &status.Group{
		Tenant: "acme", GroupID: "g", State: contracts.StateRunning, Total: 300, Jobs: 300,
		Queued: 200, InFlight: 40, BackingOff: 12, Done: 45, Cancelled: 3,
		Rate: 12.5, RateWindow: 30 * time.Second, ETASeconds: 17, At: at, StartedAt: at.Add(-time.Minute),
		Congestion: redisq.CongestionNone,
		Holds: []status.Hold{
			{Hold: redisq.Hold{Reason: redisq.HoldRateShare}, Detail: "rate share used until 12:00:01.500 (tenant acme: 50 of 50 jobs this window)"},
			{Hold: redisq.Hold{Reason: redisq.HoldBackingOff}, Detail: "12 jobs backing off, next due in 3.2s"},
		},
	}
	var b strings.Builder
	if err := writeStatus(&b, s); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"waiting     rate share used until 12:00:01.500 (tenant acme: 50 of 50 jobs this window); 12 jobs backing off, next due in 3.2s\n",
		"by state    200 queued + 40 in READY or running + 12 backing off + 45 done + 3 cancelled = 300 jobs\n",
		"rate        12.5 jobs/s (over the last 30s)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if line := progressLine(s); !strings.HasSuffix(line, " waiting rate_share_used,backing_off") {
		t.Errorf("watch line %q does not name the reasons", line)
	}

	s.Holds = nil
	b.Reset()
	if err := writeStatus(&b, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "waiting     —\n") || strings.Contains(progressLine(s), "waiting") {
		t.Errorf("a group running freely:\n%s\n%s", b.String(), progressLine(s))
	}
}

// A group waiting for its notBefore, with sending windows, says so in
// status: scheduled until then, its schedule on a row, and its position
// kept among its tenant's groups.
func TestStatusOfAScheduledGroup(t *testing.T) {
	env := testenv.Redis(t)
	ctx := context.Background()
	q, err := redisq.New(ctx, env.Client, redisq.Config{Prefix: env.Prefix, GlobalLimit: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	nb := time.Now().Add(time.Hour).Truncate(time.Second)
	ws := []contracts.Window{{Zone: "UTC", Days: []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}, From: "00:00", To: "24:00"}}
	g := contracts.Group("acme", "later")
	if _, err := q.EnqueueJobs(ctx, []redisq.Job{
		{Group: g, ID: "a", Type: "t", NotBefore: nb.Format(time.RFC3339), Windows: ws},
		{Group: contracts.Group("acme", "now"), ID: "a", Type: "t"},
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Admit(ctx, 1); err != nil {
		t.Fatal(err)
	}
	s, err := status.Read(ctx, q, g, status.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := writeStatus(&b, s); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"waiting     scheduled until " + status.ScheduleTime(nb) + "\n",
		"schedule    not before " + status.ScheduleTime(nb) + ", windows mon,tue,wed,thu,fri,sat,sun 00:00-24:00 UTC\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if s.Position != 1 {
		t.Errorf("position %d, want 1 (the place it keeps)", s.Position)
	}
}
