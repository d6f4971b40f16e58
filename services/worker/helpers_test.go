package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/worker"
)

func TestMain(m *testing.M) {
	otel.SetTextMapPropagator(propagation.TraceContext{})
	testenv.Main(m)
}

// checkLeaks fails the test if goroutines started during it are still
// running once it and its cleanups are done. Call it first, so its check
// runs after every other cleanup.
func checkLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

// testBundle is one test's pipeline around the workers under test: a Redis
// queue, an embedded JetStream server with every stream, a feeder standing
// in for the fetcher and the dispatcher, and a collector standing in for the
// aggregator.
type testBundle struct {
	q       *redisq.Queue
	rdb     *redis.Client
	js      jetstream.JetStream
	names   contracts.Names
	metrics *telemetry.Metrics
	spans   *tracetest.SpanRecorder
	d       deps.Deps
	results *collector
}

// setup starts the servers, the feeder and the collector. The queue backs
// jobs off for 20 ms (100 ms at most) unless qcfg says otherwise.
func setup(t *testing.T, qcfg redisq.Config) *testBundle {
	t.Helper()
	ctx := context.Background()
	env := testenv.Redis(t)
	qcfg.Prefix = env.Prefix
	if qcfg.BaseBackoff == 0 {
		qcfg.BaseBackoff = 20 * time.Millisecond
	}
	if qcfg.MaxBackoff == 0 {
		qcfg.MaxBackoff = 100 * time.Millisecond
	}
	q, err := redisq.New(ctx, env.Client, qcfg)
	if err != nil {
		t.Fatal(err)
	}
	_, nc, js := testenv.NATS(t)
	b := &testBundle{q: q, rdb: env.Client, js: js, spans: tracetest.NewSpanRecorder()}
	if err := natsutil.EnsureStreams(ctx, js, b.names, natsutil.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b.metrics = telemetry.NewMetrics(prometheus.NewRegistry())
	b.d = deps.Deps{NC: nc, JS: js, Queue: q, Names: b.names, Metrics: b.metrics, Log: testLogger(t), TracerProvider: tp}
	b.results = startCollector(t, b)
	startFeeder(t, b)
	return b
}

// submit enqueues n jobs of one type in group gid (ids j0, j1, …) with
// payload {"n":i} and seals the group with n.
func (b *testBundle) submit(t *testing.T, gid, jobType string, n int) []string {
	t.Helper()
	ctx := context.Background()
	jobs := make([]redisq.Job, n)
	ids := make([]string, n)
	for i := range jobs {
		ids[i] = fmt.Sprintf("j%d", i)
		jobs[i] = redisq.Job{GroupID: gid, ID: ids[i], Type: jobType, Payload: fmt.Appendf(nil, `{"n":%d}`, i)}
	}
	res, err := b.q.EnqueueJobs(ctx, jobs)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range res.Outcomes {
		if o != redisq.Added {
			t.Fatalf("enqueue %s/%s: %v", gid, ids[i], o)
		}
	}
	if _, err := b.q.Seal(ctx, gid, int64(n)); err != nil {
		t.Fatal(err)
	}
	return ids
}

// group returns a group's counters.
func (b *testBundle) group(t *testing.T, gid string) *redisq.GroupInfo {
	t.Helper()
	info, ok, err := b.q.Group(context.Background(), gid)
	if err != nil || !ok {
		t.Fatalf("group %s: ok=%v err=%v", gid, ok, err)
	}
	return info
}

// waitCompleted waits until the group is COMPLETED and returns it.
func (b *testBundle) waitCompleted(t *testing.T, gid string) *redisq.GroupInfo {
	t.Helper()
	var info *redisq.GroupInfo
	waitFor(t, "group "+gid+" COMPLETED", func() bool {
		info = b.group(t, gid)
		return info.State == contracts.StateCompleted
	})
	return info
}

// streamMsgs returns how many messages a stream holds.
func (b *testBundle) streamMsgs(t *testing.T, stream string) uint64 {
	t.Helper()
	n, err := natsutil.StreamMsgs(context.Background(), b.js, stream)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// jobResults reads bulk_action_job_results_total{type,status}.
func (b *testBundle) jobResults(jobType, status string) int {
	return int(counterValue(b.metrics.JobResults.WithLabelValues(jobType, status)))
}

// counterValue reads a counter.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// publishReady publishes READY messages exactly as the fetcher and the
// dispatcher do (a ReadyJob on <prefix>.ready.<type>, Nats-Msg-Id
// <gid>:<jid>:<attempt>, the job's trace context), waits for the PubAcks
// and confirms the published jobs.
func (b *testBundle) publishReady(ctx context.Context, jobs []redisq.LeasedJob) error {
	if len(jobs) == 0 {
		return nil
	}
	msgs := make([]*nats.Msg, len(jobs))
	for i, j := range jobs {
		rj := contracts.ReadyJob{V: contracts.Version, GroupID: j.GroupID, JobID: j.ID, Type: j.Type, Attempt: j.Attempt}
		if len(j.Payload) > 0 {
			rj.Payload = json.RawMessage(j.Payload)
		}
		data, err := json.Marshal(&rj)
		if err != nil {
			return err
		}
		m := nats.NewMsg(b.names.Ready(j.Type))
		m.Data = data
		m.Header.Set(jetstream.MsgIDHeader, rj.MsgID())
		if j.Trace != "" {
			m.Header.Set("traceparent", j.Trace)
		}
		msgs[i] = m
	}
	var ok []redisq.LeasedJob
	for i, err := range natsutil.PublishAll(ctx, b.js, msgs) {
		if err == nil {
			ok = append(ok, jobs[i])
		}
	}
	return b.q.Confirm(ctx, ok...)
}

// startFeeder runs, until the test ends, what the fetcher and the
// dispatcher do for the worker: admit queued jobs, release due backed-off
// jobs and re-publish expired leases, each onto READY.
func startFeeder(t *testing.T, b *testBundle) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			if r, err := b.q.Admit(ctx, 100); err == nil {
				_ = b.publishReady(ctx, r.Jobs)
			}
			if r, err := b.q.Release(ctx, 100); err == nil {
				_ = b.publishReady(ctx, r.Jobs)
			}
			if r, err := b.q.Reclaim(ctx, 100); err == nil {
				_ = b.publishReady(ctx, r.Jobs)
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
}

// collector reads RESULT like the aggregator: it records every result in
// Redis (exactly once per job) and keeps every message it read, duplicates
// included.
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
		r, err := contracts.DecodeJobResult(m.Data())
		if err != nil {
			t.Errorf("invalid result %s: %v", m.Data(), err)
			_ = m.Term()
			return
		}
		rec, err := b.q.Record(context.Background(), *r)
		if err != nil {
			_ = m.NakWithDelay(10 * time.Millisecond)
			return
		}
		c.mu.Lock()
		c.msgs = append(c.msgs, result{JobResult: *r, Header: m.Headers(), Outcome: rec.Outcome})
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

// of returns the results read for one job.
func (c *collector) of(gid, jid string) []result {
	var out []result
	for _, r := range c.all() {
		if r.GroupID == gid && r.JobID == jid {
			out = append(out, r)
		}
	}
	return out
}

// wait waits for the first result of a job and returns it.
func (c *collector) wait(t *testing.T, gid, jid string) result {
	t.Helper()
	var got []result
	waitFor(t, "result of "+gid+"/"+jid, func() bool {
		got = c.of(gid, jid)
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run = %v after cancel, want nil", err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("Run did not return within 15s of cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond every 5 ms until it holds; it fails the test after 20 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// calls counts processor runs per job.
type calls struct {
	mu sync.Mutex
	n  map[string][]time.Time // "<gid>:<jid>" -> start of each run
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

// testLogger logs warnings and errors to the test log until the test ends.
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(p))
	}
	return len(p), nil
}
