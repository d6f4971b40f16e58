package e2e_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/nats-io/nats.go/jetstream"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// env is one test's servers: a Redis prefix and an embedded NATS.
type env struct {
	t        *testing.T
	redisURL string
	prefix   string
	natsURL  string
	js       jetstream.JetStream
	client   *client.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	r := testenv.Redis(t)
	url, _, js := testenv.NATS(t)
	return &env{t: t, redisURL: r.URL, prefix: r.Prefix, natsURL: url, js: js, client: client.New(js, client.Options{})}
}

// config returns the defaults pointed at the test's servers, with short
// backoffs so retries happen within a test.
func (e *env) config(mutate func(*config.Config)) *config.Config {
	cfg, err := config.Load()
	if err != nil {
		e.t.Fatal(err)
	}
	cfg.RedisURL, cfg.RedisPrefix, cfg.NatsURL = e.redisURL, e.prefix, e.natsURL
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.BaseBackoffMs = 50
	cfg.MaxBackoffMs = 2000
	cfg.LeaseMs = 2000
	cfg.LogFormat, cfg.LogLevel = "text", "warn"
	if mutate != nil {
		mutate(cfg)
	}
	return cfg
}

// running is a stack running in the background.
type running struct {
	st      *stack.Stack
	stopped bool
}

// start runs targets on cfg until the test ends (or stop is called).
func (e *env) start(cfg *config.Config, targets []string, mux *processor.Mux) *running {
	e.t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = testkit.Logger(e.t)
	}
	st, err := stack.Start(context.Background(), stack.Options{Config: cfg, Targets: targets, Mux: mux, Log: log})
	if err != nil {
		e.t.Fatalf("stack did not start: %v", err)
	}
	r := &running{st: st}
	e.t.Cleanup(func() { r.stop(e.t) })
	return r
}

// stop stops the stack as SIGTERM does and waits for it.
func (r *running) stop(t *testing.T) {
	if r.stopped {
		return
	}
	r.stopped = true
	if err := r.st.Stop(); err != nil {
		t.Errorf("stack returned %v", err)
	}
}

// submit sends n jobs of one type with the same payload to a group of the
// tenant "default", then seals.
func (e *env) submit(gid, typ string, n int, payload string, prio contracts.Priority) {
	e.t.Helper()
	e.submitAs(e.client, gid, typ, n, payload, prio)
}

// submitAs is submit through cl, to a group of cl's tenant.
func (e *env) submitAs(cl *client.Client, gid, typ string, n int, payload string, prio contracts.Priority) {
	e.t.Helper()
	ctx := context.Background()
	jobs := make([]client.Job, 0, 1000)
	flush := func() {
		if err := cl.SubmitGroup(ctx, gid, contracts.GroupSettings{Priority: prio}, jobs...); err != nil {
			e.t.Fatal(err)
		}
		jobs = jobs[:0]
	}
	for i := 0; i < n; i++ {
		jobs = append(jobs, client.Job{ID: fmt.Sprintf("job-%06d", i), Type: typ, Payload: []byte(payload)})
		if len(jobs) == cap(jobs) {
			flush()
		}
	}
	if len(jobs) > 0 {
		flush()
	}
	if err := cl.Seal(ctx, gid, int64(n)); err != nil {
		e.t.Fatal(err)
	}
}

// wait blocks until the group of the tenant "default" ends and returns its
// final event.
func (e *env) wait(gid string, timeout time.Duration) contracts.GroupEvent {
	e.t.Helper()
	return e.waitAs(e.client, gid, timeout)
}

// waitAs is wait for a group of cl's tenant.
func (e *env) waitAs(cl *client.Client, gid string, timeout time.Duration) contracts.GroupEvent {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ev, err := cl.Wait(ctx, gid)
	if err != nil {
		e.t.Fatalf("group %s/%s did not end: %v", cl.Tenant(), gid, err)
	}
	return ev
}

// ref is the group gid of the tenant the tests' client submits to.
func ref(gid string) contracts.GroupRef { return contracts.Group(client.DefaultTenant, gid) }

// group reads a group's meta from Redis.
func group(t *testing.T, q *redisq.Queue, gid string) *redisq.GroupInfo {
	t.Helper()
	info, ok, err := q.Group(context.Background(), ref(gid))
	if err != nil || !ok {
		t.Fatalf("group %s: ok=%v err=%v", gid, ok, err)
	}
	return info
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
