package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/worker"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	b := setup(t, redisq.Config{})
	mux := processor.NewMux()
	mux.HandleFunc("a", func(context.Context, *processor.Job) error { return nil })
	for _, tt := range []struct {
		name string
		cfg  worker.Config
		mux  *processor.Mux
		want string
	}{
		{"nil mux", worker.Config{}, nil, "nil Mux"},
		{"empty mux", worker.Config{}, processor.NewMux(), "no job types"},
		{"type without processor", worker.Config{Types: []string{"a", "b"}}, mux, `type "b": no processor`},
		{"invalid type", worker.Config{Types: []string{"a.b"}}, mux, `type "a.b"`},
		{"negative concurrency", worker.Config{Concurrency: -1}, mux, "Concurrency"},
		{"negative timeout", worker.Config{JobTimeout: -time.Second}, mux, "JobTimeout"},
		{"negative deliveries", worker.Config{MaxDeliveries: -1}, mux, "MaxDeliveries"},
		{"short ack wait", worker.Config{AckWait: time.Millisecond}, mux, "AckWait"},
		{"bad durable", worker.Config{Durable: "a.b"}, mux, "Durable"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := worker.New(tt.cfg, tt.mux, b.d)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	w, err := worker.New(worker.Config{JobTimeout: 2 * time.Second, MaxRetryCount: -1, ShutdownGrace: -1}, mux, b.d)
	if err != nil {
		t.Fatal(err)
	}
	got := w.Config()
	if got.Concurrency != 10 || len(got.Types) != 1 || got.Types[0] != "a" || got.MaxRetryCount != 0 ||
		got.MaxDeliveries != 5 || got.ShutdownGrace != 0 || got.AckWait != 17*time.Second || got.Durable != "worker" {
		t.Fatalf("defaults = %+v", got)
	}
	if w.ConsumerName("a") != "worker-a" {
		t.Fatalf("ConsumerName = %q", w.ConsumerName("a"))
	}
}

func TestSuccess(t *testing.T) {
	testkit.CheckLeaks(t)
	b := setup(t, redisq.Config{})
	ctx := context.Background()

	// The job carries the trace of its submission; the worker continues it.
	root := trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5, 6}, TraceFlags: trace.FlagsSampled}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(ctx, trace.NewSpanContext(root)), carrier)
	if _, err := b.q.EnqueueJobs(ctx, []redisq.Job{{Group: grp("g"), ID: "j", Type: "t", Payload: []byte(`{"to":"x"}`), Trace: carrier["traceparent"]}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.q.Seal(ctx, grp("g"), 1); err != nil {
		t.Fatal(err)
	}

	var got processor.Job
	var jobSpan trace.SpanContext
	mux := processor.NewMux()
	mux.HandleFunc("t", func(ctx context.Context, job *processor.Job) error {
		got = *job
		jobSpan = trace.SpanContextFromContext(ctx)
		return nil
	})
	runWorker(t, b, worker.Config{}, mux)

	res := b.results.wait(t, "g", "j")
	if res.Status != contracts.ResultSuccess || res.Attempt != 1 || res.Error != "" {
		t.Fatalf("result = %+v", res.JobResult)
	}
	if id := res.Header.Get(jetstream.MsgIDHeader); id != contracts.ResultMsgID(grp("g"), "j", 1) {
		t.Fatalf("result Nats-Msg-Id = %q", id)
	}
	if got.Tenant != tenant || got.GroupID != "g" || got.JobID != "j" || got.Type != "t" || got.Attempt != 1 || string(got.Payload) != `{"to":"x"}` {
		t.Fatalf("processor got %+v", got)
	}
	info := b.waitCompleted(t, "g")
	if info.Succeeded != 1 || info.Failed != 0 {
		t.Fatalf("group = %+v", info.GroupCounts)
	}
	testkit.WaitFor(t, "READY acknowledged", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamReady()) == 0 })
	if n := b.jobResults("t", telemetry.StatusSuccess); n != 1 {
		t.Fatalf("job_results{t,SUCCESS} = %d, want 1", n)
	}

	// Tracing: the process span is a consumer span in the job's trace, the
	// processor runs under it, and the result carries it.
	var process sdktrace.ReadOnlySpan
	testkit.WaitFor(t, "process span", waitTimeout, func() bool {
		for _, s := range b.spans.Ended() {
			if s.Name() == worker.SpanProcess {
				process = s
				return true
			}
		}
		return false
	})
	if process.SpanKind() != trace.SpanKindConsumer || process.Parent().SpanID() != root.SpanID ||
		process.SpanContext().TraceID() != root.TraceID {
		t.Fatalf("process span kind %v parent %v trace %v", process.SpanKind(), process.Parent(), process.SpanContext().TraceID())
	}
	if jobSpan.SpanID() != process.SpanContext().SpanID() {
		t.Fatalf("processor ran under span %v, want the process span %v", jobSpan.SpanID(), process.SpanContext().SpanID())
	}
	want := map[attribute.Key]attribute.Value{
		worker.AttrTenant: attribute.StringValue(tenant), worker.AttrGroupID: attribute.StringValue("g"), worker.AttrJobID: attribute.StringValue("j"),
		worker.AttrJobType: attribute.StringValue("t"), worker.AttrAttempt: attribute.IntValue(1),
		worker.AttrOutcome: attribute.StringValue("SUCCESS"),
	}
	for _, kv := range process.Attributes() {
		if v, ok := want[kv.Key]; ok && v == kv.Value {
			delete(want, kv.Key)
		}
	}
	if len(want) > 0 {
		t.Fatalf("process span lacks %v (has %v)", want, process.Attributes())
	}
	resCtx := telemetry.ExtractHeader(ctx, res.Header)
	if sc := trace.SpanContextFromContext(resCtx); sc.SpanID() != process.SpanContext().SpanID() {
		t.Fatalf("result carries span %v, want the process span", sc)
	}
}

func TestRetryThenSuccess(t *testing.T) {
	t.Parallel()
	b := setup(t, redisq.Config{})
	c := newCalls()
	mux := processor.NewMux()
	mux.HandleFunc("t", func(_ context.Context, job *processor.Job) error {
		if n := c.add(job); n != job.Attempt {
			return processor.Permanent(fmt.Errorf("run %d has attempt %d", n, job.Attempt))
		}
		if job.Attempt < 3 {
			return fmt.Errorf("flaky downstream (attempt %d)", job.Attempt)
		}
		return nil
	})
	runWorker(t, b, worker.Config{}, mux)
	b.submit(t, "g", "t", 1)

	res := b.results.wait(t, "g", "j0")
	if res.Status != contracts.ResultSuccess || res.Attempt != 3 {
		t.Fatalf("result = %+v, want SUCCESS on attempt 3", res.JobResult)
	}
	if n := c.count(key("g", "j0")); n != 3 {
		t.Fatalf("processor ran %d times, want 3", n)
	}
	if n := b.jobResults("t", telemetry.StatusRetry); n != 2 {
		t.Fatalf("job_results{t,RETRY} = %d, want 2", n)
	}
	// The retries went through the congestion-aware backoff, with a span each.
	var backoffs int
	for _, s := range b.spans.Ended() {
		if s.Name() == worker.SpanBackoff {
			backoffs++
			var delay int64 = -1
			for _, kv := range s.Attributes() {
				if kv.Key == worker.AttrBackoffMs {
					delay = kv.Value.AsInt64()
				}
			}
			if delay < 20 {
				t.Errorf("backoff span delay %d ms, want the queue's backoff (>= 20)", delay)
			}
		}
	}
	if backoffs != 2 {
		t.Fatalf("%d backoff spans, want 2", backoffs)
	}
	if info := b.waitCompleted(t, "g"); info.Succeeded != 1 {
		t.Fatalf("group = %+v", info.GroupCounts)
	}
}

func TestRateLimitedHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	b := setup(t, redisq.Config{MaxBackoff: 2 * time.Second}) // a Retry-After is capped by MaxBackoff
	const retryAfter = 700 * time.Millisecond
	c := newCalls()
	var limitedAt time.Time
	mux := processor.NewMux()
	mux.HandleFunc("t", func(_ context.Context, job *processor.Job) error {
		c.add(job)
		if job.Attempt == 1 {
			limitedAt = time.Now()
			return processor.RateLimited(retryAfter, errors.New("429 Too Many Requests"))
		}
		return nil
	})
	runWorker(t, b, worker.Config{}, mux)
	b.submit(t, "g", "t", 1)

	res := b.results.wait(t, "g", "j0")
	if res.Status != contracts.ResultSuccess || res.Attempt != 2 {
		t.Fatalf("result = %+v, want SUCCESS on attempt 2", res.JobResult)
	}
	runs := c.of(key("g", "j0"))
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2", len(runs))
	}
	// The queue's own backoff is 20 ms: only the Retry-After explains the wait.
	// (TestRetryAfterIsCappedByMaxBackoff covers the cap.)
	if gap := runs[1].Sub(limitedAt); gap < retryAfter {
		t.Fatalf("second attempt %s after the 429, want at least the Retry-After %s", gap, retryAfter)
	}
	if n := b.jobResults("t", telemetry.StatusRateLimited); n != 1 {
		t.Fatalf("job_results{t,RATE_LIMITED} = %d, want 1", n)
	}
}

// TestThrottlesDoNotSpendTheRetryBudget: with half of the calls answered
// 429, jobs once ended FAILED after MaxRetryCount 429s, which used up the
// retry budget. Rate-limited attempts now count against their own cap:
// every job succeeds, no retry comes before its Retry-After, and a job that
// keeps being rate limited fails only after MaxThrottles.
func TestThrottlesDoNotSpendTheRetryBudget(t *testing.T) {
	t.Parallel()
	b := setup(t, redisq.Config{})
	const n, retryAfter = 20, 30 * time.Millisecond
	c := newCalls()
	mux := processor.NewMux()
	mux.HandleFunc("t", func(_ context.Context, job *processor.Job) error {
		if k := c.add(job); k <= 5 && job.JobID != "j0" || job.JobID == "j0" {
			// five 429s before success (j0: always)
			return processor.RateLimited(retryAfter, errors.New("429 Too Many Requests"))
		}
		return nil
	})
	runWorker(t, b, worker.Config{MaxRetryCount: 3, MaxThrottles: 8}, mux)
	b.submit(t, "g", "t", n)

	info := b.waitCompleted(t, "g")
	if info.Succeeded != n-1 || info.Failed != 1 {
		t.Fatalf("group = %+v, want %d succeeded and j0 failed", info.GroupCounts, n-1)
	}
	for i := 1; i < n; i++ {
		runs := c.of(key("g", fmt.Sprintf("j%d", i)))
		if len(runs) != 6 {
			t.Fatalf("j%d ran %d times, want 6 (five 429s, then success)", i, len(runs))
		}
		for k := 1; k < len(runs); k++ {
			if gap := runs[k].Sub(runs[k-1]); gap < retryAfter {
				t.Fatalf("j%d: attempt %d came %s after a 429, before its Retry-After %s", i, k+1, gap, retryAfter)
			}
		}
	}
	res := b.results.wait(t, "g", "j0")
	if runs := c.count(key("g", "j0")); res.Status != contracts.ResultFailed || runs != 9 ||
		!strings.HasPrefix(res.Error, "rate limited 9 times") {
		t.Fatalf("j0: %d runs, result %+v; want FAILED after 9 runs (MaxThrottles 8)", runs, res.JobResult)
	}
}

func TestPermanentFailure(t *testing.T) {
	t.Parallel()
	b := setup(t, redisq.Config{})
	c := newCalls()
	mux := processor.NewMux()
	mux.HandleFunc("t", func(_ context.Context, job *processor.Job) error {
		c.add(job)
		return processor.Permanent(errors.New("invalid recipient"))
	})
	runWorker(t, b, worker.Config{}, mux)
	b.submit(t, "g", "t", 1)

	res := b.results.wait(t, "g", "j0")
	if res.Status != contracts.ResultFailed || res.Attempt != 1 || res.Error != "invalid recipient" {
		t.Fatalf("result = %+v", res.JobResult)
	}
	if info := b.waitCompleted(t, "g"); info.Failed != 1 || info.Succeeded != 0 {
		t.Fatalf("group = %+v", info.GroupCounts)
	}
	if n := c.count(key("g", "j0")); n != 1 {
		t.Fatalf("processor ran %d times, want 1", n)
	}
	if n := b.jobResults("t", telemetry.StatusFailed); n != 1 {
		t.Fatalf("job_results{t,FAILED} = %d, want 1", n)
	}
}

// TestRetriesExhausted: errors alternate with 429s; only the errors spend
// the retry budget, so the job fails on its (MaxRetryCount+1)-th error.
func TestRetriesExhausted(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		maxRetry int
		runs     int
	}{
		{maxRetry: 2, runs: 5},
		{maxRetry: 0, runs: 7}, // the default, 3
		{maxRetry: -1, runs: 1},
	} {
		t.Run(fmt.Sprintf("MaxRetryCount=%d", tt.maxRetry), func(t *testing.T) {
			t.Parallel()
			b := setup(t, redisq.Config{})
			c := newCalls()
			mux := processor.NewMux()
			mux.HandleFunc("t", func(_ context.Context, job *processor.Job) error {
				c.add(job)
				if job.Attempt%2 == 0 {
					return processor.RateLimited(0, errors.New("busy"))
				}
				return errors.New("down")
			})
			runWorker(t, b, worker.Config{MaxRetryCount: tt.maxRetry}, mux)
			b.submit(t, "g", "t", 1)

			res := b.results.wait(t, "g", "j0")
			if res.Status != contracts.ResultFailed || res.Attempt != tt.runs {
				t.Fatalf("result = %+v, want FAILED on attempt %d", res.JobResult, tt.runs)
			}
			if n := c.count(key("g", "j0")); n != tt.runs {
				t.Fatalf("processor ran %d times, want %d", n, tt.runs)
			}
			if info := b.waitCompleted(t, "g"); info.Failed != 1 {
				t.Fatalf("group = %+v", info.GroupCounts)
			}
			if n := len(b.results.of("g", "j0")); n != 1 {
				t.Fatalf("%d results, want 1", n)
			}
		})
	}
}

func TestPanicFailsJobAndWorkerKeepsServing(t *testing.T) {
	t.Parallel()
	b := setup(t, redisq.Config{})
	mux := processor.NewMux()
	mux.HandleFunc("boom", func(context.Context, *processor.Job) error { panic("kaboom") })
	mux.HandleFunc("ok", func(context.Context, *processor.Job) error { return nil })
	runWorker(t, b, worker.Config{Concurrency: 2}, mux)
	b.submit(t, "bad", "boom", 3)
	b.submit(t, "good", "ok", 5)

	for _, id := range []string{"j0", "j1", "j2"} {
		res := b.results.wait(t, "bad", id)
		if res.Status != contracts.ResultFailed || !strings.Contains(res.Error, "kaboom") {
			t.Fatalf("panicking job %s: %+v", id, res.JobResult)
		}
	}
	if info := b.waitCompleted(t, "good"); info.Succeeded != 5 {
		t.Fatalf("group good = %+v", info.GroupCounts)
	}
	if info := b.waitCompleted(t, "bad"); info.Failed != 3 {
		t.Fatalf("group bad = %+v", info.GroupCounts)
	}
}

func TestStaleDeliveryIsDropped(t *testing.T) {
	t.Parallel()
	b := setup(t, redisq.Config{})
	ctx := context.Background()
	// Enqueue without the feeder seeing it: the test hands the job out itself.
	if _, err := b.q.EnqueueJobs(ctx, []redisq.Job{{Group: grp("g"), ID: "j", Type: "t"}}); err != nil {
		t.Fatal(err)
	}
	c := newCalls()
	var attempts []int
	var mu sync.Mutex
	mux := processor.NewMux()
	mux.HandleFunc("t", func(_ context.Context, job *processor.Job) error {
		c.add(job)
		mu.Lock()
		attempts = append(attempts, job.Attempt)
		mu.Unlock()
		return nil
	})
	// The feeder admits attempt 1 and publishes it; wait until it is on READY
	// before the worker runs, then move the job on to attempt 2 behind it.
	testkit.WaitFor(t, "attempt 1 on READY", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamReady()) == 1 })
	if r, err := b.q.Retry(ctx, grp("g"), "j", 1, 0, "moved on"); err != nil || r.Outcome != "parked" {
		t.Fatalf("retry: %+v %v", r, err)
	}
	testkit.WaitFor(t, "attempt 2 on READY", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamReady()) == 2 })
	runWorker(t, b, worker.Config{Concurrency: 1}, mux)

	res := b.results.wait(t, "g", "j")
	if res.Attempt != 2 || res.Status != contracts.ResultSuccess {
		t.Fatalf("result = %+v, want SUCCESS of attempt 2", res.JobResult)
	}
	testkit.WaitFor(t, "both deliveries acknowledged", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamReady()) == 0 })
	mu.Lock()
	defer mu.Unlock()
	if len(attempts) != 1 || attempts[0] != 2 {
		t.Fatalf("processor ran attempts %v, want only 2", attempts)
	}
	if n := b.jobResults("t", telemetry.StatusDropped); n != 1 {
		t.Fatalf("job_results{t,DROPPED} = %d, want 1", n)
	}
}

func TestPoisonMessageFailsWithoutRunning(t *testing.T) {
	t.Parallel()
	b := setup(t, redisq.Config{})
	ctx := context.Background()
	b.submit(t, "g", "t", 1)
	testkit.WaitFor(t, "job on READY", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamReady()) == 1 })

	// Deliver the message three times to the workers' consumer and claim it
	// without settling it, as workers that crash on it would.
	cons, err := b.js.CreateOrUpdateConsumer(ctx, b.names.StreamReady(), jetstream.ConsumerConfig{
		Durable: "worker-t", FilterSubject: b.names.Ready("t"), AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: time.Minute, MaxDeliver: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			if md, _ := m.Metadata(); md.NumDelivered != uint64(i) {
				t.Fatalf("delivery %d: NumDelivered %d", i, md.NumDelivered)
			}
			if o, err := b.q.Claim(ctx, grp("g"), "j0", 1); err != nil || o != redisq.ClaimRun {
				t.Fatalf("claim %d: %v %v", i, o, err)
			}
			if i > 1 { // a suspect from the second claim on: it ran alone, and its worker stopped
				if n, ok, err := b.q.SoloRun(ctx, grp("g"), "j0", 1); err != nil || !ok || n != i-1 {
					t.Fatalf("solo run %d: %d %v %v", i-1, n, ok, err)
				}
			}
			if err := m.Nak(); err != nil {
				t.Fatal(err)
			}
		}
	}

	c := newCalls()
	mux := processor.NewMux()
	mux.HandleFunc("t", func(_ context.Context, job *processor.Job) error { c.add(job); return nil })
	runWorker(t, b, worker.Config{MaxDeliveries: 2}, mux)

	res := b.results.wait(t, "g", "j0")
	if res.Status != contracts.ResultFailed || res.Error != "poison: its worker stopped 2 times while it ran alone" || res.Attempt != 1 {
		t.Fatalf("result = %+v", res.JobResult)
	}
	if n := c.count(key("g", "j0")); n != 0 {
		t.Fatalf("processor ran %d times, want 0", n)
	}
	if info := b.waitCompleted(t, "g"); info.Failed != 1 {
		t.Fatalf("group = %+v", info.GroupCounts)
	}
}

func TestWorkerDiesMidJob(t *testing.T) {
	testkit.CheckLeaks(t)
	b := setup(t, redisq.Config{})

	started := make(chan struct{})
	var firstErr atomic.Value
	first := processor.NewMux()
	first.HandleFunc("t", func(ctx context.Context, _ *processor.Job) error {
		close(started)
		<-ctx.Done()
		firstErr.Store(context.Cause(ctx))
		return ctx.Err()
	})
	stopFirst := runWorker(t, b, worker.Config{ShutdownGrace: -1}, first)
	b.submit(t, "g", "t", 1)
	<-started

	c := newCalls()
	second := processor.NewMux()
	second.HandleFunc("t", func(_ context.Context, job *processor.Job) error { c.add(job); return nil })
	runWorker(t, b, worker.Config{}, second)
	stopFirst() // no grace: the running job is cancelled and handed back

	if err, _ := firstErr.Load().(error); err == nil {
		t.Fatal("the first worker's job context was not cancelled")
	}
	res := b.results.wait(t, "g", "j0")
	if res.Status != contracts.ResultSuccess || res.Attempt != 1 {
		t.Fatalf("result = %+v, want SUCCESS of the same attempt", res.JobResult)
	}
	info := b.waitCompleted(t, "g")
	if info.Done != 1 || info.Succeeded != 1 || info.Failed != 0 {
		t.Fatalf("group = %+v, want the job counted once", info.GroupCounts)
	}
	if n := len(b.results.of("g", "j0")); n != 1 {
		t.Fatalf("%d results published, want 1 (the handed-back run publishes none)", n)
	}
	if n := c.count(key("g", "j0")); n != 1 {
		t.Fatalf("second worker ran the job %d times, want 1", n)
	}
}

func TestJobTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t, redisq.Config{})
	var seen atomic.Value
	mux := processor.NewMux()
	mux.HandleFunc("t", func(ctx context.Context, _ *processor.Job) error {
		<-ctx.Done()
		seen.Store(ctx.Err())
		return ctx.Err()
	})
	runWorker(t, b, worker.Config{JobTimeout: 100 * time.Millisecond, MaxRetryCount: -1}, mux)
	b.submit(t, "g", "t", 1)

	res := b.results.wait(t, "g", "j0")
	if res.Status != contracts.ResultFailed || res.Error != context.DeadlineExceeded.Error() {
		t.Fatalf("result = %+v, want FAILED with the deadline", res.JobResult)
	}
	if err, _ := seen.Load().(error); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("processor saw %v, want the job timeout", err)
	}
	if res.DurationMs < 100 {
		t.Fatalf("durationMs = %d, want at least the 100 ms timeout", res.DurationMs)
	}
}

// TestLongJobIsKeptInProgress runs jobs for 2.5 times the READY ack wait:
// the worker marks them in progress, so none is delivered again while it
// runs, and each runs once.
func TestLongJobIsKeptInProgress(t *testing.T) {
	t.Parallel()
	b := setup(t, redisq.Config{})
	var runs atomic.Int64
	mux := processor.NewMux()
	mux.HandleFunc("t", func(ctx context.Context, _ *processor.Job) error {
		runs.Add(1)
		select {
		case <-time.After(2500 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	runWorker(t, b, worker.Config{AckWait: time.Second, Concurrency: 4}, mux)
	b.submit(t, "g", "t", 3)
	for _, id := range []string{"j0", "j1", "j2"} {
		if res := b.results.wait(t, "g", id); res.Status != contracts.ResultSuccess || res.Attempt != 1 {
			t.Fatalf("%s: result = %+v", id, res.JobResult)
		}
	}
	if n := runs.Load(); n != 3 {
		t.Fatalf("processor ran %d times for 3 jobs: a running job was delivered again", n)
	}
	if n := b.jobResults("t", telemetry.StatusDropped); n != 0 {
		t.Fatalf("job_results{t,DROPPED} = %d, want 0 (no redelivery)", n)
	}
}

func TestShutdownLetsRunningJobsFinish(t *testing.T) {
	testkit.CheckLeaks(t)
	b := setup(t, redisq.Config{})
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	var ctxErr atomic.Value
	c := newCalls()
	mux := processor.NewMux()
	mux.HandleFunc("t", func(ctx context.Context, job *processor.Job) error {
		c.add(job)
		started <- struct{}{}
		<-release
		ctxErr.Store(fmt.Sprint(ctx.Err()))
		return nil
	})
	w, err := worker.New(worker.Config{Concurrency: 1, ShutdownGrace: 20 * time.Second}, mux, b.d)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	b.submit(t, "g", "t", 2)
	<-started
	cancel()
	// With its one slot taken the worker pulls nothing more, so Run would
	// return at once if it did not wait for the running job.
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while a job was running within the grace", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after the job finished")
	}
	if got := ctxErr.Load(); got != "<nil>" {
		t.Fatalf("the job's context ended (%v) within the grace", got)
	}
	var first string
	for _, id := range []string{"j0", "j1"} {
		if c.count(key("g", id)) == 1 {
			first = id
		}
	}
	if first == "" || c.count(key("g", "j0"))+c.count(key("g", "j1")) != 1 {
		t.Fatalf("runs j0=%d j1=%d, want exactly one job run", c.count(key("g", "j0")), c.count(key("g", "j1")))
	}
	// The finished job's result was published and its message acknowledged
	// before Run returned; the other job stays on READY for the next worker.
	if res := b.results.wait(t, "g", first); res.Status != contracts.ResultSuccess {
		t.Fatalf("result = %+v", res.JobResult)
	}
	// The server applies an ack to the stream just after receiving it.
	var n uint64
	deadline := time.Now().Add(5 * time.Second)
	for n = b.streamMsgs(t, b.names.StreamReady()); n != 1 && time.Now().Before(deadline); n = b.streamMsgs(t, b.names.StreamReady()) {
		time.Sleep(5 * time.Millisecond)
	}
	if n != 1 {
		t.Fatalf("READY holds %d messages after shutdown, want the 1 not started", n)
	}
}

func TestConcurrencyBound(t *testing.T) {
	t.Parallel()
	b := setup(t, redisq.Config{})
	release := make(chan struct{})
	var running, peak atomic.Int64
	block := func(ctx context.Context, _ *processor.Job) error {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		defer running.Add(-1)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	mux := processor.NewMux()
	mux.HandleFunc("a", block)
	mux.HandleFunc("b", block)
	w, err := worker.New(worker.Config{Concurrency: 3}, mux, b.d)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	b.submit(t, "ga", "a", 6)
	b.submit(t, "gb", "b", 6)

	testkit.WaitFor(t, "3 jobs running", waitTimeout, func() bool { return running.Load() == 3 })
	// Every slot is taken: the consumers hold exactly the running messages.
	pending := func() int {
		var n int
		for _, typ := range []string{"a", "b"} {
			cons, err := b.js.Consumer(context.Background(), b.names.StreamReady(), w.ConsumerName(typ))
			if err != nil {
				t.Fatal(err)
			}
			info, err := cons.Info(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			n += info.NumAckPending
		}
		return n
	}
	testkit.WaitFor(t, "READY fully published", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamReady()) == 12 })
	if n := pending(); n != 3 {
		t.Fatalf("%d READY messages pulled with 3 slots", n)
	}
	close(release)
	b.waitCompleted(t, "ga")
	b.waitCompleted(t, "gb")
	if p := peak.Load(); p != 3 {
		t.Fatalf("peak concurrency %d, want 3", p)
	}
}

// TestInvalidReadyMessageIsDeadLettered: a READY message that is not a
// valid v2 batch of its subject's type is dead-lettered with its reason and
// none of its jobs runs: not JSON (bad_json), a v1 body (bad_version), a
// batch of another type than the subject's (subject_mismatch), a batch of
// another job count than the subject's (subject_mismatch: READY's room
// counts a message as the jobs its subject names), and a batch whose
// jobs[1] has another type than jobs[0] (invalid_field: one type per
// message).
func TestInvalidReadyMessageIsDeadLettered(t *testing.T) {
	t.Parallel()
	b := setup(t, redisq.Config{})
	ctx := context.Background()
	c := newCalls()
	mux := processor.NewMux()
	mux.HandleFunc("t", func(_ context.Context, job *processor.Job) error { c.add(job); return nil })
	mux.HandleFunc("u", func(_ context.Context, job *processor.Job) error { c.add(job); return nil })
	runWorker(t, b, worker.Config{Types: []string{"t"}}, mux)

	batch := func(types ...string) []byte {
		rb := contracts.ReadyBatch{V: contracts.Version}
		for i, typ := range types {
			rb.Jobs = append(rb.Jobs, contracts.ReadyJob{Tenant: tenant, GroupID: "g", JobID: fmt.Sprintf("j%d", i), Type: typ, Attempt: 1})
		}
		data, err := json.Marshal(&rb)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	v1 := []byte(`{"v":1,"groupId":"g","jobId":"j0","type":"t","attempt":1}`)
	one, three := b.names.Ready("t"), b.names.ReadyPack("t", 3)
	cases := []struct {
		subject string
		body    []byte
		reason  string
		field   string // named in the dead letter's error, "" = not checked
	}{
		{one, []byte("not json"), contracts.ReasonBadJSON, ""},
		{one, v1, contracts.ReasonBadVersion, ""},
		{one, batch("u"), contracts.ReasonSubjectMismatch, "jobs[0].type"},
		{one, batch("t", "u", "t"), contracts.ReasonInvalidField, "jobs[1].type"},
		{one, batch("t", "t"), contracts.ReasonSubjectMismatch, "2 jobs on a subject of 1"},
		{three, batch("t"), contracts.ReasonSubjectMismatch, "1 jobs on a subject of 3"},
	}
	subjects := map[string]string{} // by body
	for _, tc := range cases {
		subjects[string(tc.body)] = tc.subject
		if _, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: tc.subject, Data: tc.body}); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, "dead letters", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamDLQ()) == uint64(len(cases)) })
	testkit.WaitFor(t, "READY emptied", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamReady()) == 0 })

	got := map[string]contracts.DeadLetter{} // by body
	for _, m := range b.env.StoredMsgs(t, b.names.StreamDLQ()) {
		var dl contracts.DeadLetter
		if err := json.Unmarshal(m.Data, &dl); err != nil {
			t.Fatal(err)
		}
		body := dl.Raw
		if dl.Message != nil {
			body = string(dl.Message)
		}
		if dl.Subject != subjects[body] || m.Subject != b.names.DLQOf(dl.Subject, dl.Reason) {
			t.Fatalf("dead letter %+v on %s", dl, m.Subject)
		}
		got[body] = dl
	}
	for _, tc := range cases {
		dl, ok := got[string(tc.body)]
		if !ok {
			t.Errorf("no dead letter of %s (have %v)", tc.body, got)
			continue
		}
		if dl.Reason != tc.reason || !strings.Contains(dl.Error, tc.field) {
			t.Errorf("dead letter of %s: reason %q error %q, want %q naming %q", tc.body, dl.Reason, dl.Error, tc.reason, tc.field)
		}
	}
	for _, jid := range []string{"j0", "j1", "j2"} {
		if n := c.count(key("g", jid)); n != 0 {
			t.Fatalf("processor ran %s %d times for invalid messages", jid, n)
		}
	}
}

// TestRedisOutageSpendsNoPoisonBudget: while the worker cannot reach Redis,
// every delivery it gets is handed back unclaimed. Those deliveries once
// counted toward MaxDeliveries, so jobs waiting on READY through an outage
// of a few seconds ended FAILED as poison without ever running. Only claims
// that reach Redis count now: every job runs once and succeeds.
func TestRedisOutageSpendsNoPoisonBudget(t *testing.T) {
	t.Parallel()
	const n = 20
	b := setup(t, redisq.Config{})
	ctx := context.Background()

	// The worker reaches Redis through a proxy the test can cut.
	proxy := newCuttableProxy(t, b.env.Redis.Options().Addr)
	opt := *b.env.Redis.Options()
	opt.Addr = proxy.addr()
	opt.MaxRetries = -1
	rdb := redis.NewClient(&opt)
	t.Cleanup(func() { _ = rdb.Close() })
	q, err := redisq.New(ctx, rdb, b.q.Config())
	if err != nil {
		t.Fatal(err)
	}
	proxy.cut()
	d := b.d
	d.Queue = q

	b.submit(t, "g", "t", n)
	testkit.WaitFor(t, "jobs on READY", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamReady()) == n })
	c := newCalls()
	mux := processor.NewMux()
	mux.HandleFunc("t", func(_ context.Context, job *processor.Job) error { c.add(job); return nil })
	w, err := worker.New(worker.Config{MaxDeliveries: 2}, mux, d)
	if err != nil {
		t.Fatal(err)
	}
	testkit.StartWithin(t, w, 15*time.Second)
	select {
	case <-w.Ready():
	case <-time.After(waitTimeout):
		t.Fatal("worker not ready")
	}

	// Each failed claim hands the message back with a 1 s delay: wait until
	// every message was delivered more often than MaxDeliveries allows.
	cons, err := b.js.Consumer(ctx, b.names.StreamReady(), w.ConsumerName("t"))
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "deliveries beyond MaxDeliveries", waitTimeout, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.Delivered.Consumer >= 4*n
	})
	proxy.restore()

	info := b.waitCompleted(t, "g")
	if info.Succeeded != n || info.Failed != 0 {
		t.Fatalf("group = %+v, want %d succeeded and none failed", info.GroupCounts, n)
	}
	for i := range n {
		if k := c.count(key("g", fmt.Sprintf("j%d", i))); k != 1 {
			t.Fatalf("job j%d ran %d times, want 1", i, k)
		}
	}
}

// cuttableProxy forwards TCP connections to a server until it is cut: then
// it closes every connection and refuses new ones until restored.
type cuttableProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]struct{}
}

func newCuttableProxy(t *testing.T, target string) *cuttableProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cuttableProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	t.Cleanup(func() { _ = ln.Close(); p.cut() })
	go p.serve()
	return p
}

func (p *cuttableProxy) addr() string { return p.ln.Addr().String() }

func (p *cuttableProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
		go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
	}
}

func (p *cuttableProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
		delete(p.conns, c)
	}
}

func (p *cuttableProxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}
