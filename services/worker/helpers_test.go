package worker_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/worker"
)

func TestMain(m *testing.M) {
	if worker.IsExecutor() {
		// Started by a test's worker with IsolationProcess.
		os.Exit(serveTestExecutor())
	}
	pipelinetest.Main(m)
}

// waitTimeout is how long the tests wait for a condition before failing.
const waitTimeout = 20 * time.Second

// testBundle is one test's pipeline around the workers under test: a Redis
// queue, an embedded JetStream server with every stream, a feeder standing
// in for the fetcher and the dispatcher, and a collector standing in for the
// aggregator.
type testBundle struct {
	env     *pipelinetest.Env
	q       *redisq.Queue
	js      jetstream.JetStream
	names   contracts.Names
	metrics *telemetry.Metrics
	spans   *tracetest.SpanRecorder
	d       deps.Deps
	results *collector
}

// tenant is the tenant of the tests' groups unless a test names another.
const tenant = "acme"

// grp returns the group gid of the tests' tenant.
func grp(gid string) contracts.GroupRef { return contracts.Group(tenant, gid) }

// key returns the processor.Job.IdempotencyKey of job jid of group gid of
// the tests' tenant, the key calls counts runs by.
func key(gid, jid string) string { return tenant + ":" + gid + ":" + jid }

// setup starts the servers, the feeder and the collector. The queue backs
// jobs off for 20 ms (100 ms at most) unless qcfg says otherwise.
func setup(t *testing.T, qcfg redisq.Config) *testBundle {
	t.Helper()
	b := setupWithoutFeeder(t, qcfg)
	startFeeder(t, b)
	return b
}

// setupWithoutFeeder is setup with no feeder: nothing is admitted or
// published to READY unless the test does it (see publishReady).
func setupWithoutFeeder(t *testing.T, qcfg redisq.Config) *testBundle {
	t.Helper()
	if qcfg.BaseBackoff == 0 {
		qcfg.BaseBackoff = 20 * time.Millisecond
	}
	if qcfg.MaxBackoff == 0 {
		qcfg.MaxBackoff = 100 * time.Millisecond
	}
	e := pipelinetest.NewEnv(t, qcfg)
	tp, spans := testkit.RecordSpans(t)
	b := &testBundle{env: e, q: e.Queue, js: e.JS, names: e.Names, metrics: e.Metrics, spans: spans, d: e.Deps()}
	b.d.TracerProvider = tp
	b.results = startCollector(t, b)
	return b
}

// submit enqueues n jobs of one type in group gid of the tests' tenant (ids
// j0, j1, …) with payload {"n":i} and seals the group with n.
func (b *testBundle) submit(t *testing.T, gid, jobType string, n int) []string {
	t.Helper()
	return b.submitTo(t, grp(gid), jobType, n)
}

// submitTo is submit to group g of any tenant.
func (b *testBundle) submitTo(t *testing.T, g contracts.GroupRef, jobType string, n int) []string {
	t.Helper()
	ctx := context.Background()
	jobs := make([]redisq.Job, n)
	ids := make([]string, n)
	for i := range jobs {
		ids[i] = fmt.Sprintf("j%d", i)
		jobs[i] = redisq.Job{Group: g, ID: ids[i], Type: jobType, Payload: fmt.Appendf(nil, `{"n":%d}`, i)}
	}
	res, err := b.q.EnqueueJobs(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range res.Outcomes {
		if o != redisq.Added {
			t.Fatalf("enqueue %s/%s: %v", g, ids[i], o)
		}
	}
	if _, err := b.q.Seal(ctx, g, int64(n)); err != nil {
		t.Fatal(err)
	}
	return ids
}

// group returns the counters of group gid of the tests' tenant.
func (b *testBundle) group(t *testing.T, gid string) *redisq.GroupInfo {
	t.Helper()
	return b.env.Group(t, grp(gid))
}

// waitCompleted waits until the group is COMPLETED and returns it.
func (b *testBundle) waitCompleted(t *testing.T, gid string) *redisq.GroupInfo {
	t.Helper()
	var info *redisq.GroupInfo
	testkit.WaitFor(t, "group "+gid+" COMPLETED", waitTimeout, func() bool {
		info = b.group(t, gid)
		return info.State == contracts.StateCompleted
	})
	return info
}

// streamMsgs returns how many messages a stream holds.
func (b *testBundle) streamMsgs(t *testing.T, stream string) uint64 {
	t.Helper()
	return b.env.StreamMsgs(t, stream)
}

// jobResults reads bulk_action_job_results_total{type,status}.
func (b *testBundle) jobResults(jobType, status string) int {
	return int(testkit.MustValue(b.metrics.JobResults.WithLabelValues(jobType, status)))
}

// startFeeder runs, until the test ends, what the fetcher and the
// dispatcher do for the worker: admit queued jobs, release due backed-off
// jobs and re-publish expired leases, each onto READY with handoff.Publish.
// The feeder starts no spans of its own, so a READY message carries the
// trace context stored with its job.
func startFeeder(t *testing.T, b *testBundle) {
	d := b.d
	d.TracerProvider = noop.NewTracerProvider()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if r, err := b.q.Admit(ctx, 100); err == nil {
				_, _ = handoff.Publish(ctx, d, r.Jobs, handoff.Packing{Jobs: 1}, handoff.SpanAdmit)
			}
			if r, err := b.q.Release(ctx, 100); err == nil {
				_, _ = handoff.Publish(ctx, d, r.Jobs, handoff.Packing{Jobs: 1}, handoff.SpanRelease)
			}
			if r, err := b.q.Reclaim(ctx, 100); err == nil {
				_, _ = handoff.Publish(ctx, d, r.Jobs, handoff.Packing{Jobs: 1}, handoff.SpanReclaim)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// result is one RESULT message as the collector received it.
type result struct {
	contracts.JobResult
	Header  nats.Header
	Outcome redisq.RecordOutcome
	// BatchID is the message id of the RESULT message's batch
	// ([contracts.ResultBatch.MsgID]); Size its number of results.
	BatchID string
	Size    int
}

// collector reads RESULT like the aggregator: it records every result in
// Redis (exactly once per job) and keeps every result it read, duplicates
// included (a message of N results gives N).
type collector struct {
	mu   sync.Mutex
	msgs []result
}

func startCollector(t *testing.T, b *testBundle) *collector {
	t.Helper()
	c := &collector{}
	cons, err := b.js.CreateOrUpdateConsumer(context.Background(), b.names.StreamResult(), jetstream.ConsumerConfig{
		Durable: "test-results", FilterSubject: b.names.ResultAll(), AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		rb, err := contracts.DecodeResultBatch(m.Subject(), m.Data())
		if err != nil {
			t.Errorf("invalid result %s on %s: %v", m.Data(), m.Subject(), err)
			_ = m.Term()
			return
		}
		recs, err := b.q.RecordBatch(context.Background(), rb.Results)
		if err != nil {
			_ = m.NakWithDelay(10 * time.Millisecond)
			return
		}
		c.mu.Lock()
		for i, r := range rb.Results {
			c.msgs = append(c.msgs, result{JobResult: r, Header: m.Headers(), Outcome: recs[i].Outcome, BatchID: rb.MsgID(),
				Size: len(rb.Results)})
		}
		c.mu.Unlock()
		_ = m.Ack()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cc.Stop()
		<-cc.Closed()
	})
	return c
}

// all returns every result read so far.
func (c *collector) all() []result {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]result(nil), c.msgs...)
}

// of returns the results read for one job of the tests' tenant.
func (c *collector) of(gid, jid string) []result { return c.ofGroup(grp(gid), jid) }

// ofGroup returns the results read for job jid of group g.
func (c *collector) ofGroup(g contracts.GroupRef, jid string) []result {
	var out []result
	for _, r := range c.all() {
		if r.Ref() == g && r.JobID == jid {
			out = append(out, r)
		}
	}
	return out
}

// wait waits for the first result of a job of the tests' tenant and
// returns it.
func (c *collector) wait(t *testing.T, gid, jid string) result {
	t.Helper()
	return c.waitGroup(t, grp(gid), jid)
}

// waitGroup waits for the first result of job jid of group g.
func (c *collector) waitGroup(t *testing.T, g contracts.GroupRef, jid string) result {
	t.Helper()
	var got []result
	testkit.WaitFor(t, "result of "+g.String()+"/"+jid, waitTimeout, func() bool {
		got = c.ofGroup(g, jid)
		return len(got) > 0
	})
	return got[0]
}

// runWorker runs a worker in the background and returns a function that
// cancels its Run and waits until it returns (failing the test if Run
// returns an error or takes longer than 15 s). The function also runs when
// the test ends.
func runWorker(t *testing.T, b *testBundle, cfg worker.Config, mux *processor.Mux) (stop func()) {
	t.Helper()
	w, err := worker.New(cfg, mux, b.d)
	if err != nil {
		t.Fatal(err)
	}
	return testkit.StartWithin(t, w, 15*time.Second)
}

// calls counts processor runs per job.
type calls struct {
	mu sync.Mutex
	n  map[string][]time.Time // "<tenant>:<gid>:<jid>" -> start of each run
}

func newCalls() *calls { return &calls{n: map[string][]time.Time{}} }

func (c *calls) add(job *processor.Job) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := job.IdempotencyKey()
	c.n[k] = append(c.n[k], time.Now())
	return len(c.n[k])
}

func (c *calls) of(key string) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.n[key]...)
}

func (c *calls) count(key string) int { return len(c.of(key)) }
