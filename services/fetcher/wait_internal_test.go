package fetcher

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// TestWaitLeftCountsFromTheAdmissionCall: the rate gate's wake-up time is
// counted from the admission call, so what a round spends after it
// (publishing to READY) comes off the wait instead of being added to it.
func TestWaitLeftCountsFromTheAdmissionCall(t *testing.T) {
	t0 := time.Unix(1_000, 0)
	n := next{wait: 20 * time.Millisecond, since: t0}
	if got := n.left(t0.Add(15 * time.Millisecond)); got != 5*time.Millisecond {
		t.Errorf("15 ms after the call, %s of a 20 ms wait left, want 5ms", got)
	}
	if got := n.left(t0.Add(30 * time.Millisecond)); got > 0 {
		t.Errorf("30 ms after the call, %s of a 20 ms wait left, want none", got)
	}
	if got := (next{wait: 7 * time.Millisecond}).left(t0); got != 7*time.Millisecond {
		t.Errorf("a wait with no start: %s left, want all of it (7ms)", got)
	}
}

// TestPacedRoundWaitsFromItsAdmissionCall: a round that the pacer cut
// short returns the pacer's wake-up time counted from the admission call,
// so by the end of the round (jobs published and acknowledged) less of it
// is left.
func TestPacedRoundWaitsFromItsAdmissionCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	renv := testenv.Redis(t)
	q, err := redisq.New(ctx, renv.Client, redisq.Config{Prefix: renv.Prefix, Mode: redisq.ModePaced, GlobalLimit: 100, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var d deps.Deps
	_, d.NC, d.JS = testenv.NATS(t)
	if err := natsutil.EnsureStreams(ctx, d.JS, d.Names, natsutil.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	d.Queue, d.Log = q, testkit.Logger(t)
	g := contracts.Group("acme", "paced")
	jobs := make([]redisq.Job, 50)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: g, ID: fmt.Sprintf("j%02d", i), Type: "t", Payload: []byte(`{}`)}
	}
	if _, err := q.EnqueueJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	// admission needs SUBMIT's position current, as a running fetcher
	// makes it first
	p, err := q.Position(ctx, submitLog)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.ResetPosition(ctx, submitLog, p, 0); err != nil {
		t.Fatal(err)
	}
	f, err := New(Config{UnservedTypes: UnservedAdmit}, d.Fill())
	if err != nil {
		t.Fatal(err)
	}
	n := f.admit(ctx)
	end := time.Now()
	if n.wait <= 0 || n.full || n.idle {
		t.Fatalf("the pacer did not cut the round short: %+v", n)
	}
	if n.since.IsZero() || n.since.After(end) {
		t.Fatalf("the wait starts at %v, not at the admission call (the round ended at %v)", n.since, end)
	}
	if left := n.left(end); left >= n.wait {
		t.Errorf("at the round's end %s of the pacer's %s wait left: the round's publishing was added to it", left, n.wait)
	}
}

// TestStoppedDestinationWaitsForItsStopOnly: jobs of a type whose
// destination a Retry-After stops (adaptive rate on) are held with a
// limit of 0 for the window; the round waits until the stop ends (300
// ms), not until the window's end (10 s), so the destination is used again
// as soon as it may be.
func TestStoppedDestinationWaitsForItsStopOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	renv := testenv.Redis(t)
	t0 := time.UnixMilli(1_706_000_000_000) // a window's start
	q, err := redisq.New(ctx, renv.Client, redisq.Config{Prefix: renv.Prefix, Mode: redisq.ModePaced, GlobalLimit: 1000,
		Window: 10 * time.Second, Clock: func() time.Time { return t0 }, Adaptive: redisq.AdaptiveConfig{Enabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	var d deps.Deps
	_, d.NC, d.JS = testenv.NATS(t)
	if err := natsutil.EnsureStreams(ctx, d.JS, d.Names, natsutil.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	d.Queue, d.Log = q, testkit.Logger(t)
	g := contracts.Group("acme", "partner")
	jobs := make([]redisq.Job, 5)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: g, ID: fmt.Sprintf("j%02d", i), Type: "partner", Payload: []byte(`{}`)}
	}
	if _, err := q.EnqueueJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	if _, err := q.ReportDestinations(ctx, []redisq.DestOutcome{{Destination: "partner", Throttled: 1, RetryAfter: 300 * time.Millisecond}}); err != nil {
		t.Fatal(err)
	}
	p, err := q.Position(ctx, submitLog)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.ResetPosition(ctx, submitLog, p, 0); err != nil {
		t.Fatal(err)
	}
	f, err := New(Config{UnservedTypes: UnservedAdmit}, d.Fill())
	if err != nil {
		t.Fatal(err)
	}
	n := f.admit(ctx)
	if n.wait <= 0 || n.wait > 300*time.Millisecond || !n.notify {
		t.Fatalf("a round holding a stopped destination's jobs: %+v, want a wait of at most the stop's 300ms", n)
	}
}
