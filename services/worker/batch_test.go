package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/worker"
)

// The tests of READY messages carrying several jobs. The feeder publishes
// one job per message, so these tests run without it: they lease the jobs
// themselves and publish the batches with publishReady.

// lease enqueues jobs and admits them all (leased at attempt 1, confirmed as
// the fetcher does once they are on READY).
func (b *testBundle) lease(t *testing.T, jobs []redisq.Job) []redisq.LeasedJob {
	t.Helper()
	leased := b.env.Lease(t, jobs)
	if err := b.q.Confirm(context.Background(), leased...); err != nil {
		t.Fatal(err)
	}
	return leased
}

// publishReady publishes one READY message carrying jobs, all of jobType,
// with the batch's Nats-Msg-Id.
func (b *testBundle) publishReady(t *testing.T, jobType string, jobs []redisq.LeasedJob) {
	t.Helper()
	b.publishReadyTraced(t, jobType, jobs, nil)
}

// publishReadyTraced is publishReady with the jobs' W3C traceparents in
// the pack's headers (the handoff's HeaderJobTraceparent, one per job).
func (b *testBundle) publishReadyTraced(t *testing.T, jobType string, jobs []redisq.LeasedJob, traceparents []string) {
	t.Helper()
	rb := contracts.ReadyBatch{V: contracts.Version}
	for _, j := range jobs {
		rj := contracts.ReadyJob{Tenant: j.Group.Tenant, GroupID: j.Group.ID, JobID: j.ID, Type: j.Type, Attempt: j.Attempt}
		if len(j.Payload) > 0 {
			rj.Payload = json.RawMessage(j.Payload)
		}
		rb.Jobs = append(rb.Jobs, rj)
	}
	data, err := json.Marshal(&rb)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(b.names.ReadyPack(jobType, len(jobs)))
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, rb.MsgID())
	for _, tp := range traceparents {
		m.Header.Add(handoff.HeaderJobTraceparent, tp)
	}
	if _, err := b.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// consumerInfo returns the info of the worker's READY consumer of jobType.
func (b *testBundle) consumerInfo(t *testing.T, w *worker.Worker, jobType string) *jetstream.ConsumerInfo {
	t.Helper()
	ctx := context.Background()
	cons, err := b.js.Consumer(ctx, b.names.StreamReady(), w.ConsumerName(jobType))
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// startWorker is runWorker returning the worker too.
func startWorker(t *testing.T, b *testBundle, cfg worker.Config, mux *processor.Mux) *worker.Worker {
	t.Helper()
	w, err := worker.New(cfg, mux, b.d)
	if err != nil {
		t.Fatal(err)
	}
	testkit.StartWithin(t, w, 15*time.Second)
	return w
}

// twoTenantJobs are three jobs of two groups of two tenants that share the
// groupId "g" and a job id: t1/g j0 and j1, t2/g j0.
func twoTenantJobs() (g1, g2 contracts.GroupRef, jobs []redisq.Job) {
	g1, g2 = contracts.Group("t1", "g"), contracts.Group("t2", "g")
	return g1, g2, []redisq.Job{
		{Group: g1, ID: "j0", Type: "t", Payload: []byte(`{"n":10}`)},
		{Group: g1, ID: "j1", Type: "t", Payload: []byte(`{"n":11}`)},
		{Group: g2, ID: "j0", Type: "t", Payload: []byte(`{"n":20}`)},
	}
}

// TestReadyBatchRunsEveryJobOnce: a READY message carrying three jobs of
// two groups of two tenants runs each job once (with its own tenant and
// payload), publishes three results on the subjects of their groups, and is
// acknowledged once, after one delivery.
func TestReadyBatchRunsEveryJobOnce(t *testing.T) {
	t.Parallel()
	b := setupWithoutFeeder(t, redisq.Config{})
	g1, g2, jobs := twoTenantJobs()
	leased := b.lease(t, jobs)

	c := newCalls()
	payloads := map[string]string{}
	mux := processor.NewMux()
	mux.HandleFunc("t", func(_ context.Context, job *processor.Job) error {
		c.add(job)
		c.mu.Lock()
		payloads[job.IdempotencyKey()] = string(job.Payload)
		c.mu.Unlock()
		return nil
	})
	w := startWorker(t, b, worker.Config{Concurrency: 4}, mux)
	b.publishReady(t, "t", leased)

	want := map[contracts.GroupRef][]string{g1: {"j0", "j1"}, g2: {"j0"}}
	for g, ids := range want {
		for _, jid := range ids {
			res := b.results.waitGroup(t, g, jid)
			if res.Status != contracts.ResultSuccess || res.Attempt != 1 || res.Outcome != redisq.Recorded {
				t.Fatalf("%s/%s: result %+v (%s)", g, jid, res.JobResult, res.Outcome)
			}
			// one result alone, or a batch of the group's results
			if id := res.Header.Get(jetstream.MsgIDHeader); id != res.BatchID || (res.Size == 1 && id != contracts.ResultMsgID(g, jid, 1)) {
				t.Fatalf("%s/%s: result Nats-Msg-Id %q, want %q", g, jid, id, res.BatchID)
			}
		}
	}
	testkit.WaitFor(t, "READY acknowledged", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamReady()) == 0 })
	for _, j := range jobs {
		k := j.Group.Tenant + ":" + j.Group.ID + ":" + j.ID
		if n := c.count(k); n != 1 {
			t.Errorf("%s ran %d times, want 1", k, n)
		}
		c.mu.Lock()
		p := payloads[k]
		c.mu.Unlock()
		if p != string(j.Payload) {
			t.Errorf("%s ran with payload %s, want %s", k, p, j.Payload)
		}
	}
	if n := len(b.results.all()); n != 3 {
		t.Fatalf("%d results, want 3", n)
	}
	if g := b.env.Group(t, g1); g.Done != 2 || g.Succeeded != 2 {
		t.Fatalf("%s = %+v, want its 2 jobs counted", g1, g.GroupCounts)
	}
	if g := b.env.Group(t, g2); g.Done != 1 || g.Succeeded != 1 {
		t.Fatalf("%s = %+v, want its job counted", g2, g.GroupCounts)
	}
	info := b.consumerInfo(t, w, "t")
	if info.Delivered.Consumer != 1 || info.AckFloor.Consumer != 1 || info.NumAckPending != 0 || info.NumRedelivered != 0 {
		t.Fatalf("consumer delivered %d, ack floor %d, pending %d, redelivered %d: want one delivery, acknowledged",
			info.Delivered.Consumer, info.AckFloor.Consumer, info.NumAckPending, info.NumRedelivered)
	}
	if n := b.jobResults("t", telemetry.StatusSuccess); n != 3 {
		t.Fatalf("job_results{t,SUCCESS} = %d, want 3", n)
	}
	// Each job has a process span of its own, naming its tenant.
	testkit.WaitFor(t, "a process span per job", waitTimeout, func() bool {
		spans := map[string]bool{}
		for _, s := range b.spans.Ended() {
			if s.Name() != worker.SpanProcess {
				continue
			}
			if key, outcome := jobOfSpan(s); outcome == string(contracts.ResultSuccess) {
				spans[key] = true
			}
		}
		return len(spans) == 3 && spans["t1:g:j0"] && spans["t1:g:j1"] && spans["t2:g:j0"]
	})
}

// failingJS fails the first fail publishes to subject.
type failingJS struct {
	jetstream.JetStream
	subject string
	fail    atomic.Int32
}

var errInjected = errors.New("injected publish failure")

func (f *failingJS) PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	if m.Subject == f.subject && f.fail.Add(-1) >= 0 {
		return nil, errInjected
	}
	return f.JetStream.PublishMsgAsync(m, opts...)
}

// TestReadyBatchHandedBackRerunsOnlyUnfinishedJobs: when the result of one
// job of a message cannot be published, the message is handed back once
// all of its jobs settled. On its redelivery the jobs that finished are
// dropped as stale and only the unfinished one runs again: each job is
// counted once, and the message is then acknowledged.
func TestReadyBatchHandedBackRerunsOnlyUnfinishedJobs(t *testing.T) {
	t.Parallel()
	b := setupWithoutFeeder(t, redisq.Config{})
	g1, g2, jobs := twoTenantJobs()
	leased := b.lease(t, jobs)

	fjs := &failingJS{JetStream: b.js, subject: b.names.Result(g2)}
	fjs.fail.Store(1)
	d := b.d
	d.JS = fjs
	c := newCalls()
	mux := processor.NewMux()
	mux.HandleFunc("t", func(_ context.Context, job *processor.Job) error { c.add(job); return nil })
	w, err := worker.New(worker.Config{Concurrency: 4}, mux, d)
	if err != nil {
		t.Fatal(err)
	}
	testkit.StartWithin(t, w, 15*time.Second)
	b.publishReady(t, "t", leased)

	res := b.results.waitGroup(t, g2, "j0")
	if res.Status != contracts.ResultSuccess || res.Attempt != 1 || res.Outcome != redisq.Recorded {
		t.Fatalf("%s/j0: result %+v (%s)", g2, res.JobResult, res.Outcome)
	}
	testkit.WaitFor(t, "READY acknowledged", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamReady()) == 0 })
	if n := fjs.fail.Load(); n >= 0 {
		t.Fatalf("the injected failure was not hit (%d left)", n+1)
	}
	for k, want := range map[string]int{"t1:g:j0": 1, "t1:g:j1": 1, "t2:g:j0": 2} {
		if n := c.count(k); n != want {
			t.Errorf("%s ran %d times, want %d", k, n, want)
		}
	}
	// Every job's result was stored and recorded once: no double count.
	for _, r := range b.results.all() {
		if r.Outcome != redisq.Recorded {
			t.Errorf("result %+v recorded as %s", r.JobResult, r.Outcome)
		}
	}
	if n := len(b.results.all()); n != 3 {
		t.Fatalf("%d results, want 3", n)
	}
	if g := b.env.Group(t, g1); g.Done != 2 || g.Succeeded != 2 {
		t.Fatalf("%s = %+v, want its 2 jobs counted once", g1, g.GroupCounts)
	}
	if g := b.env.Group(t, g2); g.Done != 1 || g.Succeeded != 1 {
		t.Fatalf("%s = %+v, want its job counted once", g2, g.GroupCounts)
	}
	info := b.consumerInfo(t, w, "t")
	if info.Delivered.Consumer != 2 || info.NumAckPending != 0 {
		t.Fatalf("consumer delivered %d, pending %d: want the message delivered twice, then acknowledged",
			info.Delivered.Consumer, info.NumAckPending)
	}
	if n := b.jobResults("t", telemetry.StatusDropped); n != 2 {
		t.Fatalf("job_results{t,DROPPED} = %d, want the 2 finished jobs dropped on redelivery", n)
	}
	if n := b.jobResults("t", telemetry.StatusSuccess); n != 3 {
		t.Fatalf("job_results{t,SUCCESS} = %d, want 3", n)
	}
}

// TestReadyBatchConcurrencyBound: with messages of several jobs, the extra
// jobs of a message take slots of their own, so a worker with N slots
// never runs more than N processors at once.
func TestReadyBatchConcurrencyBound(t *testing.T) {
	t.Parallel()
	const slots, msgs, perMsg = 3, 6, 4
	b := setupWithoutFeeder(t, redisq.Config{})
	var jobs []redisq.Job
	for m := range msgs {
		g := contracts.Group(fmt.Sprintf("t%d", m%2), fmt.Sprintf("g%d", m))
		for i := range perMsg {
			jobs = append(jobs, redisq.Job{Group: g, ID: fmt.Sprintf("j%d", i), Type: "t"})
		}
	}
	leased := b.lease(t, jobs)

	c := newCalls()
	var running, peak atomic.Int64
	mux := processor.NewMux()
	mux.HandleFunc("t", func(ctx context.Context, job *processor.Job) error {
		c.add(job)
		n := running.Add(1)
		defer running.Add(-1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		select {
		case <-time.After(40 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	// The messages wait on READY before the worker starts, so that its
	// first pulls take several at once.
	for m := range msgs {
		b.publishReady(t, "t", leased[m*perMsg:(m+1)*perMsg])
	}
	runWorker(t, b, worker.Config{Concurrency: slots}, mux)

	testkit.WaitFor(t, "every result", waitTimeout, func() bool { return len(b.results.all()) == len(jobs) })
	for _, j := range jobs {
		k := j.Group.Tenant + ":" + j.Group.ID + ":" + j.ID
		if n := c.count(k); n != 1 {
			t.Errorf("%s ran %d times, want 1", k, n)
		}
	}
	if p := peak.Load(); p != slots {
		t.Fatalf("peak concurrency %d with %d slots, want %d", p, slots, slots)
	}
	testkit.WaitFor(t, "READY acknowledged", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamReady()) == 0 })
}

// TestPackedJobsContinueTheirTraces: each job of a READY pack that names
// the jobs' trace contexts gets a process span in its own job's trace, a
// child of the job's span there and linked to the delivery's span.
func TestPackedJobsContinueTheirTraces(t *testing.T) {
	t.Parallel()
	b := setupWithoutFeeder(t, redisq.Config{})
	_, _, jobs := twoTenantJobs()
	leased := b.lease(t, jobs)
	mux := processor.NewMux()
	mux.HandleFunc("t", func(context.Context, *processor.Job) error { return nil })
	startWorker(t, b, worker.Config{Concurrency: 4}, mux)

	parents := map[string]trace.SpanContext{}
	var tps []string
	for i, j := range leased {
		tp := fmt.Sprintf("00-%032x-%016x-01", 0xabc0+i, 0xdef0+i)
		sc := trace.SpanContextFromContext((propagation.TraceContext{}).Extract(context.Background(), propagation.MapCarrier{"traceparent": tp}))
		if !sc.IsValid() {
			t.Fatalf("traceparent %s is not valid", tp)
		}
		parents[j.Group.Tenant+":"+j.Group.ID+":"+j.ID] = sc
		tps = append(tps, tp)
	}
	b.publishReadyTraced(t, "t", leased, tps)

	// the delivery's span has the name too, and no job's attributes
	jobSpans := func() map[string]sdktrace.ReadOnlySpan {
		out := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range b.spans.Ended() {
			if s.Name() != worker.SpanProcess {
				continue
			}
			if key, _ := jobOfSpan(s); key != "" {
				out[key] = s
			}
		}
		return out
	}
	testkit.WaitFor(t, "a process span per job", waitTimeout, func() bool { return len(jobSpans()) == len(leased) })
	for key, s := range jobSpans() {
		want, ok := parents[key]
		if !ok {
			t.Fatalf("a process span of %s, no job of the pack", key)
		}
		if s.SpanContext().TraceID() != want.TraceID() || s.Parent().SpanID() != want.SpanID() || !s.Parent().IsRemote() {
			t.Errorf("%s: span in trace %s under %s, want trace %s under the job's span %s",
				key, s.SpanContext().TraceID(), s.Parent().SpanID(), want.TraceID(), want.SpanID())
		}
		if len(s.Links()) != 1 || s.Links()[0].SpanContext.TraceID() == want.TraceID() {
			t.Errorf("%s: links %v, want one to the delivery's span", key, s.Links())
		}
	}
}

// jobOfSpan is the "<tenant>:<gid>:<jid>" of the job a process span
// names ("" for a delivery's span, which names none) and its outcome.
func jobOfSpan(s sdktrace.ReadOnlySpan) (key, outcome string) {
	var tn, gid, jid string
	for _, kv := range s.Attributes() {
		switch kv.Key {
		case worker.AttrTenant:
			tn = kv.Value.AsString()
		case worker.AttrGroupID:
			gid = kv.Value.AsString()
		case worker.AttrJobID:
			jid = kv.Value.AsString()
		case worker.AttrOutcome:
			outcome = kv.Value.AsString()
		}
	}
	if jid == "" {
		return "", outcome
	}
	return tn + ":" + gid + ":" + jid, outcome
}
