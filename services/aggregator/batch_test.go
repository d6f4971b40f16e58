package aggregator_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/services/aggregator"
)

// consumerInfo returns the info of the aggregators' RESULT consumer.
func (b *testBundle) consumerInfo(t *testing.T) *jetstream.ConsumerInfo {
	t.Helper()
	ctx := context.Background()
	cons, err := b.js.Consumer(ctx, b.names.StreamResult(), aggregator.DefaultDurable)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestResultBatchRecordsEveryResult: a RESULT message carrying three
// results of one group records all three, completes the group, and is
// acknowledged once after one delivery.
func TestResultBatchRecordsEveryResult(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, m := b.newDeps()
	b.admitted(t, "g", 3, 3)
	run(t, aggregator.Config{}, d, nil)

	b.publishBatch(t, grp("g"), []contracts.JobResult{
		success("g", "j0", 1), failure("g", "j1", 1, "no"), success("g", "j2", 1),
	}, "", nil)

	ev := b.waitEvent(t, "g", contracts.StateCompleted)
	if ev.Total != 3 || ev.Jobs != 3 || ev.Succeeded != 2 || ev.Failed != 1 || ev.Tenant != tenant {
		t.Fatalf("COMPLETED event = %+v, want 2 succeeded and 1 failed of 3", ev)
	}
	b.waitSettled(t)
	if g := b.group(t, "g"); g.Done != 3 || g.Succeeded != 2 || g.Failed != 1 {
		t.Fatalf("g = %+v", g.GroupCounts)
	}
	info := b.consumerInfo(t)
	if info.Delivered.Consumer != 1 || info.AckFloor.Consumer != 1 || info.NumAckPending != 0 || info.NumRedelivered != 0 {
		t.Fatalf("consumer delivered %d, ack floor %d, pending %d, redelivered %d: want one delivery, acknowledged",
			info.Delivered.Consumer, info.AckFloor.Consumer, info.NumAckPending, info.NumRedelivered)
	}
	for status, want := range map[string]int{telemetry.StatusSuccess: 2, telemetry.StatusFailed: 1, telemetry.StatusDuplicate: 0} {
		if n := counterValue(m.RecordedResults.WithLabelValues(status)); n != want {
			t.Errorf("recorded_results{%s} = %d, want %d", status, n, want)
		}
	}
	completedOnceLast(t, b.events(t, "g"), 3)
	// One record span for the message, naming how many results it carried.
	var spans int
	for _, s := range b.spans.Ended() {
		if s.Name() != aggregator.SpanRecord {
			continue
		}
		spans++
		for _, kv := range s.Attributes() {
			if kv.Key == aggregator.AttrResultCount && kv.Value.AsInt64() != 3 {
				t.Errorf("record span result count %d, want 3", kv.Value.AsInt64())
			}
		}
	}
	if spans != 1 {
		t.Fatalf("%d record spans, want 1", spans)
	}
}

// TestTenantsWithTheSameGroupID: two tenants' groups named alike, with the
// same job ids, are recorded, completed and reported separately.
func TestTenantsWithTheSameGroupID(t *testing.T) {
	t.Parallel()
	b := setup(t)
	d, _ := b.newDeps()
	g1, g2 := contracts.Group("t1", "g"), contracts.Group("t2", "g")
	b.admittedTo(t, g1, 3, 3)
	b.admittedTo(t, g2, 2, 2)
	run(t, aggregator.Config{}, d, nil)

	for i := range 3 {
		b.publish(t, successOf(g1, fmt.Sprintf("j%d", i), 1), "", nil)
	}
	testkit.WaitFor(t, "t1/g COMPLETED", waitTimeout, func() bool {
		evs := b.eventsOf(t, g1)
		return len(evs) > 0 && evs[len(evs)-1].State == contracts.StateCompleted
	})
	b.waitSettled(t)
	if g := b.env.Group(t, g2); g.Done != 0 || g.State.Terminal() {
		t.Fatalf("t2/g = %+v after t1/g's results", g.GroupCounts)
	}
	if evs := b.eventsOf(t, g2); len(evs) != 0 {
		t.Fatalf("events of t2/g after t1/g's results: %+v", evs)
	}

	f := successOf(g2, "j0", 1)
	f.Status, f.Error = contracts.ResultFailed, "no"
	b.publishBatch(t, g2, []contracts.JobResult{f, successOf(g2, "j1", 1)}, "", nil)
	testkit.WaitFor(t, "t2/g COMPLETED", waitTimeout, func() bool {
		evs := b.eventsOf(t, g2)
		return len(evs) > 0 && evs[len(evs)-1].State == contracts.StateCompleted
	})
	b.waitSettled(t)
	for _, tc := range []struct {
		g                 contracts.GroupRef
		total, succ, fail int64
	}{{g1, 3, 3, 0}, {g2, 2, 1, 1}} {
		info := b.env.Group(t, tc.g)
		if info.State != contracts.StateCompleted || info.Done != tc.total || info.Succeeded != tc.succ || info.Failed != tc.fail {
			t.Errorf("%s = %+v, want %d succeeded and %d failed", tc.g, info.GroupCounts, tc.succ, tc.fail)
		}
		var evs []contracts.GroupEvent
		for _, ev := range b.eventsOf(t, tc.g) {
			evs = append(evs, ev.GroupEvent)
		}
		completedOnceLast(t, evs, tc.total)
		if last := evs[len(evs)-1]; last.Succeeded != tc.succ || last.Failed != tc.fail {
			t.Errorf("%s: last event %+v", tc.g, last)
		}
	}
}
