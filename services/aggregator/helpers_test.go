package aggregator_test

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
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/aggregator"
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

type testBundle struct {
	q     *redisq.Queue
	rdb   *redis.Client
	js    jetstream.JetStream
	names contracts.Names
	spans *tracetest.SpanRecorder
	logs  *logRecorder
	d     deps.Deps
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	ctx := context.Background()
	env := testenv.Redis(t)
	q, err := redisq.New(ctx, env.Client, redisq.Config{Prefix: env.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	_, nc, js := testenv.NATS(t)
	b := &testBundle{q: q, rdb: env.Client, js: js, spans: tracetest.NewSpanRecorder(), logs: &logRecorder{}}
	if err := natsutil.EnsureStreams(ctx, js, b.names, natsutil.StreamSettings{}); err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b.spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	b.d = deps.Deps{NC: nc, JS: js, Queue: q, Names: b.names, Log: slog.New(b.logs), TracerProvider: tp}
	return b
}

// newDeps returns the bundle's deps with metrics of their own.
func (b *testBundle) newDeps() (deps.Deps, *telemetry.Metrics) {
	d := b.d
	d.Metrics = telemetry.NewMetrics(prometheus.NewRegistry())
	return d, d.Metrics
}

// admitted creates group gid with n jobs (j0, j1, …), admits them all and
// confirms them as the fetcher does once they are on READY. seal < 0 leaves
// the group unsealed.
func (b *testBundle) admitted(t *testing.T, gid string, n int, seal int64) {
	t.Helper()
	ctx := context.Background()
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = redisq.Job{GroupID: gid, ID: fmt.Sprintf("j%d", i), Type: "t"}
	}
	if _, err := b.q.EnqueueJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	var leased []redisq.LeasedJob
	for len(leased) < n {
		r, err := b.q.Admit(ctx, n-len(leased))
		if err != nil {
			t.Fatal(err)
		}
		leased = append(leased, r.Jobs...)
	}
	if err := b.q.Confirm(ctx, leased...); err != nil {
		t.Fatal(err)
	}
	if seal >= 0 {
		if _, err := b.q.Seal(ctx, gid, seal); err != nil {
			t.Fatal(err)
		}
	}
}

// publish publishes a result as a worker does; msgID "" means
// contracts.ResultMsgID. A non-nil header is sent along.
func (b *testBundle) publish(t *testing.T, r contracts.JobResult, msgID string, header nats.Header) {
	t.Helper()
	r.V = contracts.Version
	data, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(b.names.Result(r.GroupID))
	m.Data = data
	for k, v := range header {
		m.Header[k] = v
	}
	if msgID == "" {
		msgID = r.MsgID()
	}
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	if _, err := b.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

func success(gid, jid string, attempt int) contracts.JobResult {
	return contracts.JobResult{GroupID: gid, JobID: jid, Attempt: attempt, Status: contracts.ResultSuccess, DurationMs: 3}
}

func failure(gid, jid string, attempt int, msg string) contracts.JobResult {
	return contracts.JobResult{GroupID: gid, JobID: jid, Attempt: attempt, Status: contracts.ResultFailed, Error: msg}
}

// events returns every event of a group stored in EVENTS, in order.
func (b *testBundle) events(t *testing.T, gid string) []contracts.GroupEvent {
	t.Helper()
	ctx := context.Background()
	st, err := b.js.Stream(ctx, b.names.StreamEvents())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []contracts.GroupEvent
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != b.names.Events(gid) {
			continue
		}
		ev, err := contracts.DecodeGroupEvent(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, *ev)
	}
	return out
}

// waitEvent waits for the group's first event in state and returns it.
func (b *testBundle) waitEvent(t *testing.T, gid string, state contracts.GroupState) contracts.GroupEvent {
	t.Helper()
	var got contracts.GroupEvent
	waitFor(t, fmt.Sprintf("%s event of %s", state, gid), func() bool {
		for _, ev := range b.events(t, gid) {
			if ev.State == state {
				got = ev
				return true
			}
		}
		return false
	})
	return got
}

// waitSettled waits until every result was acknowledged: RESULT is empty
// and the aggregators' consumer holds nothing unacknowledged.
func (b *testBundle) waitSettled(t *testing.T) {
	t.Helper()
	waitFor(t, "RESULT acknowledged", func() bool {
		n, err := natsutil.StreamMsgs(context.Background(), b.js, b.names.StreamResult())
		if err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
}

func (b *testBundle) streamMsgs(t *testing.T, stream string) uint64 {
	t.Helper()
	n, err := natsutil.StreamMsgs(context.Background(), b.js, stream)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (b *testBundle) group(t *testing.T, gid string) *redisq.GroupInfo {
	t.Helper()
	info, ok, err := b.q.Group(context.Background(), gid)
	if err != nil || !ok {
		t.Fatalf("group %s: ok=%v err=%v", gid, ok, err)
	}
	return info
}

// run runs an aggregator in the background and returns it with a function
// that cancels its Run and waits until it returns (failing the test if Run
// returns an error or takes longer than 15 s). The function also runs when
// the test ends. prepare, when not nil, is called before Run.
func run(t *testing.T, cfg aggregator.Config, d deps.Deps, prepare func(*aggregator.Aggregator)) (*aggregator.Aggregator, func()) {
	t.Helper()
	a, err := aggregator.New(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(a)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop := func() {
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
	return a, stop
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

// counterValue reads a counter.
func counterValue(c prometheus.Counter) int {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return int(m.GetCounter().GetValue())
}

// histogramCount reads a histogram's number of observations.
func histogramCount(h prometheus.Histogram) int {
	var m dto.Metric
	if err := h.Write(&m); err != nil {
		panic(err)
	}
	return int(m.GetHistogram().GetSampleCount())
}

// logRecorder is a slog.Handler keeping every record, with the attributes
// of the logger it came through.
type logRecorder struct {
	mu    sync.Mutex
	recs  []logRecord
	attrs []slog.Attr
	root  *logRecorder
}

type logRecord struct {
	At    time.Time
	Level slog.Level
	Msg   string
	Attrs map[string]string
}

func (l *logRecorder) store() *logRecorder {
	if l.root != nil {
		return l.root
	}
	return l
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{At: r.Time, Level: r.Level, Msg: r.Message, Attrs: map[string]string{}}
	for _, a := range l.attrs {
		rec.Attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.String()
		return true
	})
	s := l.store()
	s.mu.Lock()
	s.recs = append(s.recs, rec)
	s.mu.Unlock()
	return nil
}

func (l *logRecorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &logRecorder{attrs: append(append([]slog.Attr(nil), l.attrs...), attrs...), root: l.store()}
}

func (l *logRecorder) WithGroup(string) slog.Handler { return l }

// find returns the records at level with message msg whose attribute key
// has value val ("" key: any).
func (l *logRecorder) find(level slog.Level, msg, key, val string) []logRecord {
	s := l.store()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []logRecord
	for _, r := range s.recs {
		if r.Level == level && r.Msg == msg && (key == "" || r.Attrs[key] == val) {
			out = append(out, r)
		}
	}
	return out
}
