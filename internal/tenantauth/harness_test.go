package tenantauth_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/tenantauth"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

const (
	svcUser     = "bulkaction"
	svcPassword = "pw-bulkaction"
	// refusedWait bounds a request the server refuses: a refused publish gets no reply, so the
	// client only learns of it from the asynchronous permissions violation.
	refusedWait = time.Second
	// violationWait bounds the wait for the server's report of a permissions violation.
	violationWait = 5 * time.Second
)

func tenantUser(tenant string) string     { return "tenant-" + tenant }
func tenantPassword(tenant string) string { return "pw-" + tenant }

// users returns bulkaction's own service user (no permissions: everything) and one user per
// tenant with the permissions of tenantauth.Permissions.
func users(t *testing.T, n contracts.Names, tenants ...string) []*server.User {
	t.Helper()
	us := []*server.User{{Username: svcUser, Password: svcPassword}}
	for _, tenant := range tenants {
		p, err := tenantauth.Permissions(n, tenant)
		if err != nil {
			t.Fatalf("Permissions(%q): %v", tenant, err)
		}
		us = append(us, &server.User{Username: tenantUser(tenant), Password: tenantPassword(tenant), Permissions: p})
	}
	return us
}

// serverOptions returns the options of an in-process server with JetStream on a free port.
func serverOptions(t *testing.T, us []*server.User) *server.Options {
	return &server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
		Users:     us,
	}
}

// bus is a running server with bulkaction's SUBMIT and EVENTS streams, created by the service
// user.
type bus struct {
	names contracts.Names
	srv   *server.Server
	svc   *nats.Conn
	js    jetstream.JetStream
}

func startBus(t *testing.T, n contracts.Names, opts *server.Options) *bus {
	t.Helper()
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("new server: %v", err)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Shutdown()
		srv.WaitForShutdown()
	})
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready for connections")
	}
	svc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(svcUser, svcPassword))
	if err != nil {
		t.Fatalf("service user: connect: %v", err)
	}
	t.Cleanup(svc.Close)
	js, err := jetstream.New(svc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t, 10*time.Second)
	for _, sc := range []jetstream.StreamConfig{
		{Name: n.StreamSubmit(), Subjects: []string{n.SubmitAll()}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.MemoryStorage},
		{Name: n.StreamEvents(), Subjects: []string{n.EventsAll()}, Retention: jetstream.LimitsPolicy, Storage: jetstream.MemoryStorage},
	} {
		if _, err := js.CreateStream(ctx, sc); err != nil {
			t.Fatalf("service user: create stream %s: %v", sc.Name, err)
		}
	}
	return &bus{names: n, srv: srv, svc: svc, js: js}
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// publishEvent publishes an event body on the events subject of g, as the aggregator does.
func (b *bus) publishEvent(t *testing.T, g contracts.GroupRef, body string) {
	t.Helper()
	if _, err := b.js.Publish(testContext(t, 5*time.Second), b.names.Events(g), []byte(body)); err != nil {
		t.Fatalf("service user: publish event %s: %v", b.names.Events(g), err)
	}
}

// subjectCounts returns the number of messages per subject that stream holds.
func (b *bus) subjectCounts(t *testing.T, stream string) map[string]uint64 {
	t.Helper()
	ctx := testContext(t, 5*time.Second)
	st, err := b.js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatalf("stream %s: info: %v", stream, err)
	}
	if info.State.Subjects == nil {
		return map[string]uint64{}
	}
	return info.State.Subjects
}

// consumerCount returns the number of consumers of stream.
func (b *bus) consumerCount(t *testing.T, stream string) int {
	t.Helper()
	ctx := testContext(t, 5*time.Second)
	st, err := b.js.Stream(ctx, stream)
	if err != nil {
		t.Fatalf("stream %s: %v", stream, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatalf("stream %s: info: %v", stream, err)
	}
	return info.State.Consumers
}

// client is a tenant's connection, set up as the template requires (the tenant's inbox prefix),
// recording the permissions violations the server reports to it.
type client struct {
	nc         *nats.Conn
	js         jetstream.JetStream
	violations chan violation
	others     chan error
}

// violation is a permissions violation reported by the server.
type violation struct {
	op      string // "Publish" or "Subscription"
	subject string
}

var violationRe = regexp.MustCompile(`Permissions Violation for (Publish|Subscription) to "([^"]+)"`)

// connect connects as user with the inbox prefix of tenant.
func (b *bus) connect(t *testing.T, user, password, tenant string) *client {
	t.Helper()
	c := &client{violations: make(chan violation, 64), others: make(chan error, 64)}
	nc, err := nats.Connect(b.srv.ClientURL(),
		nats.UserInfo(user, password),
		nats.CustomInboxPrefix(tenantauth.InboxPrefix(tenant)),
		nats.PermissionErrOnSubscribe(true),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if m := violationRe.FindStringSubmatch(err.Error()); m != nil && errors.Is(err, nats.ErrPermissionViolation) {
				c.violations <- violation{op: m[1], subject: m[2]}
				return
			}
			c.others <- err
		}))
	if err != nil {
		t.Fatalf("%s: connect: %v", user, err)
	}
	t.Cleanup(nc.Close)
	c.nc = nc
	if c.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return c
}

// tenant connects as tenant's user.
func (b *bus) tenant(t *testing.T, tenant string) *client {
	return b.connect(t, tenantUser(tenant), tenantPassword(tenant), tenant)
}

// expectViolation waits for the server to report a violation of op on a subject that match
// accepts; other violations reported meanwhile are logged and skipped.
func (c *client) expectViolation(t *testing.T, op string, match func(subject string) bool, what string) violation {
	t.Helper()
	deadline := time.After(violationWait)
	for {
		select {
		case v := <-c.violations:
			if v.op == op && match(v.subject) {
				return v
			}
			t.Logf("other violation while waiting for %s: %s to %q", what, v.op, v.subject)
		case <-deadline:
			t.Fatalf("the server reported no %s violation for %s", op, what)
			return violation{}
		}
	}
}

// expectViolationOn waits for a violation of op on exactly subject.
func (c *client) expectViolationOn(t *testing.T, op, subject string) {
	t.Helper()
	c.expectViolation(t, op, func(s string) bool { return s == subject }, quote(subject))
}

// noViolations fails if the server reported any violation (or other asynchronous error) so far.
func (c *client) noViolations(t *testing.T) {
	t.Helper()
	if err := c.nc.Flush(); err != nil {
		t.Fatalf("flush: %v", err)
	}
	for {
		select {
		case v := <-c.violations:
			t.Errorf("unexpected permissions violation: %s to %q", v.op, v.subject)
		case err := <-c.others:
			t.Errorf("unexpected asynchronous error: %v", err)
		default:
			return
		}
	}
}

func quote(s string) string { return `"` + s + `"` }

// consumerCreate matches the consumer-create API subject of stream whose filter subject token(s)
// are filter ("" for a request without a filter in its subject).
func consumerCreate(stream, filter string) func(string) bool {
	return func(s string) bool {
		rest, ok := strings.CutPrefix(s, "$JS.API.CONSUMER.CREATE."+stream+".")
		if !ok {
			return false
		}
		name, f, _ := strings.Cut(rest, ".")
		return name != "" && f == filter
	}
}
