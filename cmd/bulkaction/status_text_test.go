package main

import (
	"strings"
	"testing"
	"time"

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
