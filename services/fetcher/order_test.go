package fetcher_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/fetcher"
)

// TestControlMessagesApplyInPublishOrder: a pause and then a resume are
// published; the pause's first delivery goes to another consumer of the
// fetchers' durable (a second fetcher, or a delivery that failed) and comes
// back only after the fetcher applied the resume. The late pause is
// superseded: acknowledged, counted, reported as a notice, and the group
// ends in the state of the last message published, not PAUSED.
func TestControlMessagesApplyInPublishOrder(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	c := client.New(e.JS, client.Options{})
	g := grp("ordered")
	stop := testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))
	if err := c.Submit(ctx, g.ID, clientJobs(g.ID, 0, 3)...); err != nil {
		t.Fatal(err)
	}
	waitSubmitDrained(t, e)
	stop()

	if err := c.Pause(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.Resume(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	// The pause's first delivery, held elsewhere.
	cons, err := e.JS.Consumer(ctx, e.Names.StreamSubmit(), fetcher.DefaultDurable)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var held jetstream.Msg
	for m := range batch.Messages() {
		held = m
	}
	if held == nil || !strings.Contains(string(held.Data()), `"pause"`) {
		t.Fatalf("first delivery: %v", held)
	}

	testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))
	resumed := e.Metrics.ControlMessages.WithLabelValues("resume", string(redisq.ControlUnchanged))
	testkit.WaitFor(t, "the resume applied", 0, func() bool { return testkit.Value(t, resumed) == 1 })
	if err := held.Nak(); err != nil { // delivered again, now after the resume
		t.Fatal(err)
	}
	superseded := e.Metrics.ControlMessages.WithLabelValues("pause", string(redisq.ControlSuperseded))
	testkit.WaitFor(t, "the late pause superseded", 0, func() bool { return testkit.Value(t, superseded) == 1 })
	waitSubmitDrained(t, e)

	if info := groupInfo(t, e, g); info.State == contracts.StatePaused {
		t.Fatalf("group %s PAUSED: the pause published before the resume was applied after it", g)
	}
	if n := testkit.Value(t, e.Metrics.ControlMessages.WithLabelValues("pause", string(redisq.Paused))); n != 0 {
		t.Fatalf("%v pauses applied, want none", n)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ci.NumAckPending != 0 || ci.NumPending != 0 {
		t.Fatalf("SUBMIT consumer: %d pending acknowledgement, %d pending: the superseded pause must be acknowledged",
			ci.NumAckPending, ci.NumPending)
	}
	ns := notices(eventsOf(t, e, g))
	if len(ns) == 0 || !strings.Contains(ns[len(ns)-1].Notice, "superseded") {
		t.Fatalf("notices %s, want the superseded pause last", describe(ns))
	}
}
