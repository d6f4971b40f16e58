package status_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/status"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A group whose destination used up its learned rate reads as held by
// destination_rate, with the learned rate in the detail that status and
// the HTTP API show (real Redis, the controller's own state): a
// destination that is the jobs' type, and an explicit one of http jobs.
func TestReadShowsLearnedRate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ typ, dest, name string }{
		{"partner", "", "partner"},
		{"http", "api.partner.example", "api.partner.example"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			readShowsLearnedRate(t, tc.typ, tc.dest, tc.name)
		})
	}
}

func readShowsLearnedRate(t *testing.T, typ, dest, name string) {
	ctx := context.Background()
	env := testenv.Redis(t)
	now := time.UnixMilli(1_706_000_000_000)
	q, err := redisq.New(ctx, env.Client, redisq.Config{Prefix: env.Prefix, Mode: redisq.ModeSeed,
		Adaptive: redisq.AdaptiveConfig{Enabled: true}, Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	g := contracts.Group("acme", "g")
	jobs := make([]redisq.Job, 100)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: g, ID: fmt.Sprintf("j%03d", i), Type: typ, Destination: dest}
	}
	if _, err := q.EnqueueBatch(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if _, err := q.ReportDestinations(ctx, []redisq.DestOutcome{{Destination: name, Accepted: 50}}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	// the first throttle: 0.8 × the 50 accepted in the last second
	if _, err := q.ReportDestinations(ctx, []redisq.DestOutcome{{Destination: name, Throttled: 1}}); err != nil {
		t.Fatal(err)
	}
	r, err := q.LearnedRates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Admit(ctx, 100, redisq.WithLearnedRates(r)); err != nil {
		t.Fatal(err)
	}
	s, err := status.Read(ctx, q, g, status.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var details []string
	for _, h := range s.Holds {
		details = append(details, h.Detail)
		if h.Reason == redisq.HoldDestinationRate && strings.HasPrefix(h.Detail, "waiting: destination_rate, learned 40/s ("+name+": 40 of 40 jobs") {
			return
		}
	}
	t.Errorf("holds %q, want destination_rate, learned 40/s of %s", details, name)
}
