package gateway_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/gateway"
)

// destView returns the overview's view of dest, or nil.
func destView(ov *gateway.Overview, dest string) *gateway.DestinationView {
	for i, d := range ov.Destinations.Destinations {
		if d.Destination == dest {
			return &ov.Destinations.Destinations[i]
		}
	}
	return nil
}

// anyAbove says whether some known value is above 0.
func anyAbove(vs []*float64) bool {
	for _, v := range vs {
		if v != nil && *v > 0 {
			return true
		}
	}
	return false
}

// TestDashboardDestinations: after workers report a destination's 429s,
// the overview shows its learned rate and its 429s per second over the
// rate's windows; an admin sees every destination, a tenant only those of
// its own jobs (its types and the destinations its jobs named).
func TestDashboardDestinations(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.AdaptiveRateEnabled = true })
	ctx := context.Background()
	q := s.st.Deps.Queue
	// acme's jobs name partner.example (enqueued as the fetcher does)
	if _, err := q.EnqueueJobs(ctx, []redisq.Job{{Group: contracts.GroupRef{Tenant: "acme", ID: "dests"}, ID: "p",
		Type: "sleep", Destination: "partner.example", Payload: []byte(`{"ms":1}`)}}); err != nil {
		t.Fatal(err)
	}

	var ov gateway.Overview
	s.do("GET", "/v1/overview", "*", nil).json(t, &ov) // starts the sampling
	report := func(outs ...redisq.DestOutcome) {
		t.Helper()
		if _, err := q.ReportDestinations(ctx, outs); err != nil {
			t.Fatal(err)
		}
	}
	report(redisq.DestOutcome{Destination: "partner.example", Accepted: 100}, redisq.DestOutcome{Destination: "other.example", Accepted: 50})
	testkit.WaitFor(t, "a learned rate and 429s per second of partner.example", 20*time.Second, func() bool {
		report(redisq.DestOutcome{Destination: "partner.example", Accepted: 20, Throttled: 10}, redisq.DestOutcome{Destination: "other.example", Throttled: 5})
		s.do("GET", "/v1/overview", "*", nil).json(t, &ov)
		d := destView(&ov, "partner.example")
		return d != nil && d.LearnedPerSecond != nil && anyAbove(d.Learned) && anyAbove(d.Throttled) && d.ThrottledPerSecond > 0
	})
	d := destView(&ov, "partner.example")
	if d.State != gateway.DestinationLearned && d.State != gateway.DestinationStopped {
		t.Errorf("partner.example's state %q", d.State)
	}
	if n := len(ov.Rate.History.Admitted); len(d.Learned) != n || len(d.Throttled) != n || !ov.Destinations.Start.Equal(ov.Rate.History.Start) {
		t.Errorf("history of %d learned and %d throttled from %s, the rate's %d windows from %s",
			len(d.Learned), len(d.Throttled), ov.Destinations.Start, n, ov.Rate.History.Start)
	}
	if destView(&ov, "other.example") == nil {
		t.Errorf("admin's destinations %+v: want other.example too", ov.Destinations.Destinations)
	}

	var acme, hooli gateway.Overview
	s.do("GET", "/v1/overview", "acme", nil).json(t, &acme)
	if destView(&acme, "partner.example") == nil || destView(&acme, "other.example") != nil {
		t.Errorf("acme's destinations %+v: want partner.example, not other.example", acme.Destinations.Destinations)
	}
	s.do("GET", "/v1/overview", "hooli", nil).json(t, &hooli)
	if len(hooli.Destinations.Destinations) != 0 || hooli.Destinations.Tracked != 0 {
		t.Errorf("hooli's destinations %+v: want none", hooli.Destinations)
	}
}

// TestDashboardDestinationsMostUsed: of more destinations than the
// overview shows, it lists the most used over the sampled windows, most
// used first, and counts them all.
func TestDashboardDestinationsMostUsed(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(c *config.Config) { c.AdaptiveRateEnabled = true })
	q := s.st.Deps.Queue
	const n = gateway.OverviewDestinations + 2
	var ov gateway.Overview
	s.do("GET", "/v1/overview", "*", nil).json(t, &ov) // starts the sampling
	testkit.WaitFor(t, "the most used destinations listed", 20*time.Second, func() bool {
		outs := make([]redisq.DestOutcome, n)
		for i := range outs {
			outs[i] = redisq.DestOutcome{Destination: fmt.Sprintf("d%02d.example", i), Accepted: 10 * (i + 1)}
		}
		if _, err := q.ReportDestinations(context.Background(), outs); err != nil {
			t.Fatal(err)
		}
		s.do("GET", "/v1/overview", "*", nil).json(t, &ov)
		ds := ov.Destinations.Destinations
		return len(ds) == gateway.OverviewDestinations && ds[0].Destination == fmt.Sprintf("d%02d.example", n-1)
	})
	if ov.Destinations.Tracked != n {
		t.Errorf("tracked %d, want %d", ov.Destinations.Tracked, n)
	}
	for i, d := range ov.Destinations.Destinations {
		if want := fmt.Sprintf("d%02d.example", n-1-i); d.Destination != want || d.State != gateway.DestinationNotLimited {
			t.Errorf("destination %d: %s (%s), want %s not limited", i, d.Destination, d.State, want)
		}
	}
}
