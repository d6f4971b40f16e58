package pipelinetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Main is a TestMain for the packages that use this one: it makes the W3C
// trace context the global propagator (so that trace context travels in
// NATS headers as in production) and runs the tests with testenv.Main.
func Main(m *testing.M) {
	testkit.UseTraceContext()
	testenv.Main(m)
}

// Env is one test's Redis queue and NATS server, with the five streams
// created. Every field is ready to use.
type Env struct {
	// URL is the NATS server's client URL.
	URL string
	// Redis is the client of the queue's server.
	Redis *redis.Client
	// Queue is the queue under the test's key prefix.
	Queue *redisq.Queue
	// Keys are the queue's key names, for a test that reads or corrupts raw
	// state with Redis where no method of Queue reads it; the services
	// themselves never see the key layout.
	Keys redisq.Keys
	// NC is a connection to the NATS server, and JS a JetStream handle on it.
	NC *nats.Conn
	JS jetstream.JetStream
	// Names are the default names (prefix "bulkaction").
	Names contracts.Names
	// Metrics are the collectors every Deps of the Env shares.
	Metrics *telemetry.Metrics
	// Registry holds Metrics.
	Registry *prometheus.Registry
	// Log writes warnings and errors to the test log while the test runs.
	Log *slog.Logger
}

// NewEnv starts the servers for t: a queue configured by cfg on the shared
// test Redis (cfg.Prefix is replaced by a prefix of the test's own) and an
// embedded JetStream server with the streams of the default names (plus a
// stream of its own, PIPELINETEST_WARMUP, used once so that the JetStream
// handle's background goroutines exist before the test starts counting).
func NewEnv(t testing.TB, cfg redisq.Config) *Env {
	t.Helper()
	renv := testenv.Redis(t)
	cfg.Prefix = renv.Prefix
	return NewEnvWithRedis(t, renv.Client, cfg)
}

// NewEnvWithRedis is [NewEnv] on the Redis server of rdb, with cfg.Prefix as
// given; tests that stop and restart a server of their own use it.
func NewEnvWithRedis(t testing.TB, rdb *redis.Client, cfg redisq.Config) *Env {
	t.Helper()
	e := &Env{Log: testkit.Logger(t)}
	q, err := redisq.New(context.Background(), rdb, cfg)
	if err != nil {
		t.Fatalf("pipelinetest: queue: %v", err)
	}
	e.Redis, e.Queue, e.Keys = rdb, q, redisq.NewKeys(q.Config().Prefix)
	e.URL, e.NC, e.JS = testenv.NATS(t)
	if err := natsutil.EnsureStreams(context.Background(), e.JS, e.Names, natsutil.StreamSettings{}); err != nil {
		t.Fatalf("pipelinetest: streams: %v", err)
	}
	warmUp(t, e.JS)
	e.Registry = prometheus.NewRegistry()
	e.Metrics = telemetry.NewMetrics(e.Registry)
	return e
}

// warmUp makes one asynchronous publish on js so that the handle's
// long-lived reply subscription exists before a test takes a goroutine
// snapshot (goleak.IgnoreCurrent).
func warmUp(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "PIPELINETEST_WARMUP", Subjects: []string{"pipelinetest.warmup"}, Storage: jetstream.MemoryStorage,
	}); err != nil {
		t.Fatalf("pipelinetest: warm-up stream: %v", err)
	}
	if err := natsutil.PublishAll(ctx, js, []*nats.Msg{nats.NewMsg("pipelinetest.warmup")})[0]; err != nil {
		t.Fatalf("pipelinetest: warm-up publish: %v", err)
	}
}

// Deps returns service dependencies on the environment, filled with defaults.
func (e *Env) Deps() deps.Deps {
	return deps.Deps{NC: e.NC, JS: e.JS, Queue: e.Queue, Names: e.Names, Metrics: e.Metrics, Log: e.Log}.Fill()
}

// Connect opens another connection to the NATS server, as a separate
// process would have, and returns it with a JetStream handle on it. It is
// closed when the test ends.
func (e *Env) Connect(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(e.URL, nats.Name(t.Name()))
	if err != nil {
		t.Fatalf("pipelinetest: connect %s: %v", e.URL, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("pipelinetest: jetstream: %v", err)
	}
	return nc, js
}

// DepsWith returns service dependencies like [Env.Deps] on the connection
// nc and its JetStream handle js.
func (e *Env) DepsWith(nc *nats.Conn, js jetstream.JetStream) deps.Deps {
	return deps.Deps{NC: nc, JS: js, Queue: e.Queue, Names: e.Names, Metrics: e.Metrics, Log: e.Log}.Fill()
}

// StreamMsgs returns the number of messages stream holds, failing t on error.
func (e *Env) StreamMsgs(t testing.TB, stream string) uint64 {
	t.Helper()
	n, err := natsutil.StreamMsgs(context.Background(), e.JS, stream)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// SubmitLeft returns the number of SUBMIT messages the fetchers have not
// settled yet ([natsutil.Unsettled]): SUBMIT keeps applied messages for
// the replay window, so its message count is not what is left. It lags the
// publishes: right after one it can read 0 before any fetcher has seen the
// message. To wait until the fetchers have handled what was submitted, use
// [Env.WaitSubmitSettled].
func (e *Env) SubmitLeft(t testing.TB) uint64 {
	t.Helper()
	n, err := natsutil.Unsettled(context.Background(), e.JS, e.Names.StreamSubmit())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// WaitSubmitSettled waits until SUBMIT's durable consumer (the fetchers')
// has settled every message SUBMIT held when it was called, failing t
// after testkit.DefaultTimeout. A fetcher settles a message only after it
// applied it to Redis or dead-lettered it, so what every submission made
// so far did is visible when it returns.
func (e *Env) WaitSubmitSettled(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	st, err := e.JS.Stream(ctx, e.Names.StreamSubmit())
	if err != nil {
		t.Fatal(err)
	}
	last := st.CachedInfo().State.LastSeq
	testkit.WaitFor(t, fmt.Sprintf("SUBMIT settled through sequence %d", last), 0, func() bool {
		ok, err := natsutil.SettledThrough(ctx, e.JS, e.Names.StreamSubmit(), last)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	})
}

// ReadyJobs returns the number of jobs the READY stream holds (a message
// may carry several), failing t on error.
func (e *Env) ReadyJobs(t testing.TB) int {
	t.Helper()
	ctx := context.Background()
	st, err := e.JS.Stream(ctx, e.Names.StreamReady())
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // consumed meanwhile, or a gap
		}
		if err != nil {
			t.Fatal(err)
		}
		rb, err := contracts.DecodeReadyBatch(m.Data, contracts.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		n += len(rb.Jobs)
	}
	return n
}

// WaitReadyDrained waits until the READY stream is empty (a [Reader] has
// acknowledged every message), failing t after [testkit.DefaultTimeout]. Once no
// job is leased or queued, this means every message published is in the
// reader's record.
func (e *Env) WaitReadyDrained(t testing.TB) {
	t.Helper()
	testkit.WaitFor(t, "READY drained", 0, func() bool { return e.StreamMsgs(t, e.Names.StreamReady()) == 0 })
}

// BackingOff returns the number of jobs in the non-ready (backoff) queue.
func (e *Env) BackingOff(t testing.TB) int64 { return e.sizes(t).BackingOff }

// Inflight returns the number of leased jobs not yet confirmed.
func (e *Env) Inflight(t testing.TB) int64 { return e.sizes(t).Inflight }

// sizes reads the system-wide queues' sizes, failing t when it cannot.
func (e *Env) sizes(t testing.TB) *redisq.QueueSizes {
	t.Helper()
	s, err := e.Queue.Sizes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Group returns the counters of group g, failing t if the group does not
// exist or cannot be read.
func (e *Env) Group(t testing.TB, g contracts.GroupRef) *redisq.GroupInfo {
	t.Helper()
	info, ok, err := e.Queue.Group(context.Background(), g)
	if err != nil || !ok {
		t.Fatalf("group %s: ok=%v err=%v", g, ok, err)
	}
	return info
}

// Lease enqueues jobs and admits them all, as the fetcher would before
// publishing them: every job comes back leased (in inflight, not yet
// confirmed), in the order of admission. It fails t if an admission round
// admits nothing before every job is leased.
func (e *Env) Lease(t testing.TB, jobs []redisq.Job) []redisq.LeasedJob {
	t.Helper()
	ctx := context.Background()
	if _, err := e.Queue.EnqueueJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	var leased []redisq.LeasedJob
	for len(leased) < len(jobs) {
		res, err := e.Queue.Admit(ctx, len(jobs)-len(leased))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Jobs) == 0 {
			t.Fatalf("admitted %d of %d jobs", len(leased), len(jobs))
		}
		leased = append(leased, res.Jobs...)
	}
	return leased
}

// StoredMsgs returns every message stream holds, in stream order, failing t
// on error.
func (e *Env) StoredMsgs(t testing.TB, stream string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	st, err := e.JS.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			t.Fatalf("%s message %d: %v", stream, seq, err)
		}
		out = append(out, m)
	}
	return out
}

// Msg is one job of a READY message as the reader received it (a message
// of N jobs gives N Msgs sharing the message's fields).
type Msg struct {
	// Job is the decoded job; the zero value when Err is set.
	Job contracts.ReadyJob
	// Err is the decoding error of a body that is not a valid ReadyBatch.
	Err error
	// Data is the raw body.
	Data []byte
	// Subject is the READY subject the message was published on.
	Subject string
	// Header holds the message's headers (Nats-Msg-Id, trace context).
	Header nats.Header
	// Seq is the message's sequence in the READY stream.
	Seq uint64
	// Stored is when the READY stream stored it (the server's timestamp).
	Stored time.Time
	// At is when the reader received it.
	At time.Time
}

// Key returns "<tenant>:<groupId>:<jobId>" of the message's job.
func (m Msg) Key() string { return m.Job.Tenant + ":" + m.Job.GroupID + ":" + m.Job.JobID }

// Reader is a durable consumer over every READY subject that acknowledges
// what it reads and records each stream message once (a redelivery of the
// same stream sequence is acknowledged and not recorded again).
type Reader struct {
	mu   sync.Mutex
	msgs []Msg
	seen map[uint64]bool
	cc   jetstream.ConsumeContext
	once sync.Once
}

// ReaderOptions configure [NewReader]. The zero value reads as fast as it can.
type ReaderOptions struct {
	// Name is the durable consumer's name; "" means "test-reader".
	Name string
	// Delay is how long the reader waits before acknowledging each message
	// (a slow worker); 0 means none.
	Delay time.Duration
}

// NewReader starts reading READY. It is stopped when the test ends, or
// earlier by [Reader.Stop].
func NewReader(t testing.TB, e *Env, opts ReaderOptions) *Reader {
	t.Helper()
	if opts.Name == "" {
		opts.Name = "test-reader"
	}
	ctx := context.Background()
	cons, err := e.JS.CreateOrUpdateConsumer(ctx, e.Names.StreamReady(), jetstream.ConsumerConfig{
		Durable:       opts.Name,
		FilterSubject: e.Names.ReadyAll(),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
	})
	if err != nil {
		t.Fatalf("pipelinetest: reader consumer: %v", err)
	}
	r := &Reader{seen: map[uint64]bool{}}
	r.cc, err = cons.Consume(func(m jetstream.Msg) {
		at := time.Now()
		if opts.Delay > 0 {
			time.Sleep(opts.Delay)
		}
		md, err := m.Metadata()
		if err != nil {
			_ = m.Term()
			return
		}
		rec := Msg{Data: append([]byte(nil), m.Data()...), Subject: m.Subject(), Header: m.Headers(), Seq: md.Sequence.Stream, Stored: md.Timestamp, At: at}
		recs := []Msg{rec}
		if b, err := contracts.DecodeReadyBatch(m.Data(), contracts.Limits{}); err != nil {
			recs[0].Err = err
		} else {
			recs = recs[:0]
			for _, j := range b.Jobs {
				rec.Job = j
				recs = append(recs, rec)
			}
		}
		r.mu.Lock()
		if !r.seen[rec.Seq] {
			r.seen[rec.Seq] = true
			r.msgs = append(r.msgs, recs...)
		}
		r.mu.Unlock()
		_ = m.Ack()
	})
	if err != nil {
		t.Fatalf("pipelinetest: reader: %v", err)
	}
	t.Cleanup(r.Stop)
	return r
}

// Stop stops reading and waits until the consumer has stopped.
func (r *Reader) Stop() {
	r.once.Do(func() {
		r.cc.Stop()
		select {
		case <-r.cc.Closed():
		case <-time.After(10 * time.Second):
		}
	})
}

// Msgs returns a copy of the messages read so far, in the order received.
func (r *Reader) Msgs() []Msg {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Msg(nil), r.msgs...)
}

// Jobs returns the messages read so far that are valid ready jobs.
func (r *Reader) Jobs() []Msg {
	var out []Msg
	for _, m := range r.Msgs() {
		if m.Err == nil {
			out = append(out, m)
		}
	}
	return out
}

// WaitJobs waits until at least n valid ready jobs were read and returns
// them; it fails t after timeout (0 means [testkit.DefaultTimeout]).
func (r *Reader) WaitJobs(t testing.TB, n int, timeout time.Duration) []Msg {
	t.Helper()
	var got []Msg
	testkit.WaitFor(t, fmt.Sprintf("%d ready jobs", n), timeout, func() bool {
		got = r.Jobs()
		return len(got) >= n
	})
	return got
}

// Counts returns how many times each job ("<tenant>:<groupId>:<jobId>") was read.
func Counts(msgs []Msg) map[string]int {
	c := make(map[string]int, len(msgs))
	for _, m := range msgs {
		c[m.Key()]++
	}
	return c
}
