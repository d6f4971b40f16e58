package worker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/worker"
)

// RESULT at its byte limit: the worker keeps each finished job (its READY
// message in progress, not handed back, so neither re-run nor counted
// toward the poison limit, even past AckWait) and publishes its result once
// the aggregators make room; the group then completes with each job run
// once.
func TestResultFullHoldsFinishedJobs(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	if err := natsutil.EnsureStreams(ctx, e.JS, e.Names, natsutil.StreamSettings{ResultMaxBytes: 32 << 10, MaxMsgSize: 4 << 10}); err != nil {
		t.Fatal(err)
	}
	// Fill RESULT with results of another group, as a backlog would.
	// Down to the last bytes: no result fits.
	filler := e.Names.Result(contracts.Group(tenant, "filler"))
	for _, size := range []int{1000, 100, 10, 1} {
		for i := 0; ; i++ {
			m := nats.NewMsg(filler)
			m.Data = []byte(strings.Repeat("x", size))
			err := natsutil.PublishAll(ctx, e.JS, []*nats.Msg{m})[0]
			if natsutil.IsStreamFull(err) {
				break
			}
			if err != nil || i > 1000 {
				t.Fatalf("filling RESULT: message %d: %v", i, err)
			}
		}
	}

	const n = 3
	var jobs []redisq.Job
	for i := range n {
		jobs = append(jobs, redisq.Job{Group: grp("g"), ID: fmt.Sprintf("j%d", i), Type: "w", Payload: []byte(`{}`)})
	}
	leased := e.Lease(t, jobs)
	if _, err := e.Queue.Seal(ctx, grp("g"), n); err != nil {
		t.Fatal(err)
	}
	if ok, err := handoff.Publish(ctx, e.Deps(), leased, handoff.Packing{Jobs: n}, handoff.SpanAdmit); err != nil || len(ok) != n { // one pack
		t.Fatalf("publish to READY: %d %v", len(ok), err)
	}

	runs := newCalls()
	mux := processor.NewMux()
	mux.HandleFunc("w", func(ctx context.Context, job *processor.Job) error {
		runs.add(job)
		return nil
	})
	const ackWait = time.Second
	w, err := worker.New(worker.Config{Concurrency: n, AckWait: ackWait, JobTimeout: 500 * time.Millisecond}, mux, e.Deps())
	if err != nil {
		t.Fatal(err)
	}
	testkit.StartWithin(t, w, 15*time.Second)

	testkit.WaitFor(t, "every job run", waitTimeout, func() bool {
		for _, j := range jobs {
			if runs.count(key("g", j.ID)) == 0 {
				return false
			}
		}
		return true
	})
	time.Sleep(3 * ackWait) // well past AckWait: no redelivery, no re-run
	for _, j := range jobs {
		if c := runs.count(key("g", j.ID)); c != 1 {
			t.Fatalf("job %s ran %d times while RESULT was full, want once", j.ID, c)
		}
	}
	if got := e.StreamMsgs(t, e.Names.StreamReady()); got != 1 {
		t.Fatalf("READY holds %d messages while their results wait, want the pack of %d (not acknowledged)", got, n)
	}
	if info := e.Group(t, grp("g")); info.Done != 0 {
		t.Fatalf("results recorded while RESULT was full: %+v", info.GroupCounts)
	}

	// The aggregators catch up: the filler is consumed, then results are recorded.
	st, err := e.JS.Stream(ctx, e.Names.StreamResult())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Purge(ctx, jetstream.WithPurgeSubject(filler)); err != nil {
		t.Fatal(err)
	}
	cons, err := e.JS.CreateOrUpdateConsumer(ctx, e.Names.StreamResult(), jetstream.ConsumerConfig{
		Durable: "test-results", FilterSubject: e.Names.ResultAll(), AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		rb, err := contracts.DecodeResultBatch(m.Subject(), m.Data())
		if err == nil {
			_, err = e.Queue.RecordBatch(context.Background(), rb.Results)
		}
		if err != nil {
			_ = m.NakWithDelay(10 * time.Millisecond)
			return
		}
		_ = m.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Stop()
		<-cc.Closed()
	})
	testkit.WaitFor(t, "group completed", waitTimeout, func() bool {
		info := e.Group(t, grp("g"))
		return info.State == contracts.StateCompleted && info.Succeeded == n
	})
	testkit.WaitFor(t, "READY acknowledged", waitTimeout, func() bool { return e.StreamMsgs(t, e.Names.StreamReady()) == 0 })
	for _, j := range jobs {
		if c := runs.count(key("g", j.ID)); c != 1 {
			t.Errorf("job %s ran %d times, want once", j.ID, c)
		}
	}
}
