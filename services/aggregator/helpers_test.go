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
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/aggregator"
)

func TestMain(m *testing.M) { pipelinetest.Main(m) }

// waitTimeout is how long the tests wait for a condition before failing.
const waitTimeout = 20 * time.Second

// tenant is the tenant of the tests' groups unless a test names another.
const tenant = "acme"

// grp returns the group gid of the tests' tenant.
func grp(gid string) contracts.GroupRef { return contracts.Group(tenant, gid) }

type testBundle struct {
	env   *pipelinetest.Env
	q     *redisq.Queue
	rdb   *redis.Client
	js    jetstream.JetStream
	names contracts.Names
	spans *tracetest.SpanRecorder
	logs  *logRecorder
	d     deps.Deps
}

// setup starts the servers. The bundle's deps log into b.logs, trace into
// b.spans and have no metrics (see newDeps).
func setup(t *testing.T) *testBundle {
	t.Helper()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	tp, spans := testkit.RecordSpans(t)
	b := &testBundle{env: e, q: e.Queue, rdb: e.Redis, js: e.JS, names: e.Names, spans: spans, logs: &logRecorder{}}
	b.d = deps.Deps{NC: e.NC, JS: e.JS, Queue: e.Queue, Names: e.Names, Log: slog.New(b.logs), TracerProvider: tp}
	return b
}

// newDeps returns the bundle's deps with metrics of their own.
func (b *testBundle) newDeps() (deps.Deps, *telemetry.Metrics) {
	d := b.d
	d.Metrics = telemetry.NewMetrics(prometheus.NewRegistry())
	return d, d.Metrics
}

// admitted creates group gid of the tests' tenant with n jobs (j0, j1, …),
// admits them all and confirms them as the fetcher does once they are on
// READY. seal < 0 leaves the group unsealed.
func (b *testBundle) admitted(t *testing.T, gid string, n int, seal int64) {
	t.Helper()
	b.admittedTo(t, grp(gid), n, seal)
}

// admittedTo is admitted for group g of any tenant.
func (b *testBundle) admittedTo(t *testing.T, gid contracts.GroupRef, n int, seal int64) {
	t.Helper()
	ctx := context.Background()
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: gid, ID: fmt.Sprintf("j%d", i), Type: "t"}
	}
	if err := b.q.Confirm(ctx, b.env.Lease(t, jobs)...); err != nil {
		t.Fatal(err)
	}
	if seal >= 0 {
		if _, err := b.q.Seal(ctx, gid, seal); err != nil {
			t.Fatal(err)
		}
	}
}

// publish publishes a result as a worker does: a message of one result on
// the subject of its group (r.Tenant and r.GroupID, left out of the body);
// msgID "" means contracts.ResultMsgID. A non-nil header is sent along.
func (b *testBundle) publish(t *testing.T, r contracts.JobResult, msgID string, header nats.Header) {
	t.Helper()
	if msgID == "" {
		msgID = r.MsgID()
	}
	b.publishBatch(t, r.Ref(), []contracts.JobResult{r}, msgID, header)
}

// publishBatch publishes one RESULT message carrying results on the subject
// of group g. The results' Tenant and GroupID are left out of the body when
// they name g, and kept otherwise. msgID "" means the batch's MsgID.
func (b *testBundle) publishBatch(t *testing.T, g contracts.GroupRef, results []contracts.JobResult, msgID string, header nats.Header) {
	t.Helper()
	rb := contracts.ResultBatch{V: contracts.Version, Results: append([]contracts.JobResult(nil), results...)}
	if msgID == "" {
		msgID = rb.MsgID()
	}
	for i := range rb.Results {
		if rb.Results[i].Ref() == g {
			rb.Results[i].Tenant, rb.Results[i].GroupID = "", ""
		}
	}
	data, err := json.Marshal(&rb)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(b.names.Result(g))
	m.Data = data
	for k, v := range header {
		m.Header[k] = v
	}
	m.Header.Set(jetstream.MsgIDHeader, msgID)
	if _, err := b.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

// success is a SUCCESS result of job jid of group gid of the tests' tenant.
func success(gid, jid string, attempt int) contracts.JobResult {
	return successOf(grp(gid), jid, attempt)
}

// successOf is a SUCCESS result of job jid of group g.
func successOf(g contracts.GroupRef, jid string, attempt int) contracts.JobResult {
	return contracts.JobResult{Tenant: g.Tenant, GroupID: g.ID, JobID: jid, Attempt: attempt, Status: contracts.ResultSuccess, DurationMs: 3}
}

// failure is a FAILED result of job jid of group gid of the tests' tenant.
func failure(gid, jid string, attempt int, msg string) contracts.JobResult {
	return contracts.JobResult{Tenant: tenant, GroupID: gid, JobID: jid, Attempt: attempt, Status: contracts.ResultFailed, Error: msg}
}

// storedEvent is an event as EVENTS stored it.
type storedEvent struct {
	contracts.GroupEvent
	Stored time.Time // the stream's timestamp
}

// events returns every event of group gid of the tests' tenant stored in
// EVENTS, in order.
func (b *testBundle) events(t *testing.T, gid string) []contracts.GroupEvent {
	t.Helper()
	var out []contracts.GroupEvent
	for _, ev := range b.eventsOf(t, grp(gid)) {
		out = append(out, ev.GroupEvent)
	}
	return out
}

// eventsOf returns every event of group g stored in EVENTS, in order.
func (b *testBundle) eventsOf(t *testing.T, g contracts.GroupRef) []storedEvent {
	t.Helper()
	var out []storedEvent
	for _, m := range b.env.StoredMsgs(t, b.names.StreamEvents()) {
		if m.Subject != b.names.Events(g) {
			continue
		}
		ev, err := contracts.DecodeGroupEvent(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Ref() != g {
			t.Fatalf("event %+v on %s", ev, m.Subject)
		}
		out = append(out, storedEvent{GroupEvent: *ev, Stored: m.Time})
	}
	return out
}

// waitEvent waits for the first event in state of group gid of the tests'
// tenant and returns it.
func (b *testBundle) waitEvent(t *testing.T, gid string, state contracts.GroupState) contracts.GroupEvent {
	t.Helper()
	var got contracts.GroupEvent
	testkit.WaitFor(t, fmt.Sprintf("%s event of %s", state, gid), waitTimeout, func() bool {
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
	testkit.WaitFor(t, "RESULT acknowledged", waitTimeout, func() bool { return b.streamMsgs(t, b.names.StreamResult()) == 0 })
}

func (b *testBundle) streamMsgs(t *testing.T, stream string) uint64 {
	t.Helper()
	return b.env.StreamMsgs(t, stream)
}

// group returns the counters of group gid of the tests' tenant.
func (b *testBundle) group(t *testing.T, gid string) *redisq.GroupInfo {
	t.Helper()
	return b.env.Group(t, grp(gid))
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
	return a, testkit.StartWithin(t, a, 15*time.Second)
}

// counterValue reads a counter.
func counterValue(c prometheus.Counter) int { return int(testkit.MustValue(c)) }

// histogramCount reads a histogram's number of observations.
func histogramCount(h prometheus.Histogram) int { return int(testkit.MustValue(h)) }

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
