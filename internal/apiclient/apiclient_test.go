package apiclient_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/apiclient"
	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// bundle is a whole stack with the gateway, and clients of its keys.
type bundle struct {
	base  string
	keys  map[string]string // "acme", "hooli", "*" (admin)
	acme  *apiclient.Client
	admin *apiclient.Client
}

// setup starts every target on real Redis and NATS, the gateway on a free
// port with a key for acme, one for hooli and an admin key.
func setup(t *testing.T) *bundle {
	t.Helper()
	g := pipelinetest.StartGateway(t, []string{"acme", "hooli"}, func(c *config.Config) { c.MaxRetryCount = 0 })
	b := &bundle{base: g.URL, keys: g.Keys}
	b.acme = b.client(t, b.base, b.keys["acme"])
	b.admin = b.client(t, b.base, b.keys[pipelinetest.Admin])
	return b
}

func (b *bundle) client(t *testing.T, base, key string) *apiclient.Client {
	t.Helper()
	c, err := apiclient.New(apiclient.Config{BaseURL: base, Key: key, RetryWait: 50 * time.Millisecond, IdleTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sleepJobs returns n sleep jobs <prefix><i>; those listed in fail fail
// for good.
func sleepJobs(prefix string, n int, fail ...int) []apiclient.Job {
	jobs := make([]apiclient.Job, n)
	for i := range jobs {
		jobs[i] = apiclient.Job{ID: fmt.Sprintf("%s%d", prefix, i), Type: "sleep", Payload: []byte(`{"ms":1}`)}
	}
	for _, i := range fail {
		jobs[i].Payload = []byte(`{"permanentFailRate":1}`)
	}
	return jobs
}

func ptr[T any](v T) *T { return &v }

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []apiclient.Config{
		{Key: "k"},
		{BaseURL: "127.0.0.1:8090", Key: "k"},
		{BaseURL: "http://127.0.0.1:8090"},
		{BaseURL: "http://127.0.0.1:8090", Key: "a b"},
	} {
		if _, err := apiclient.New(cfg); !errors.Is(err, apiclient.ErrConfig) {
			t.Errorf("New(%+v): %v, want ErrConfig", cfg, err)
		}
	}
	_, err := apiclient.New(apiclient.Config{BaseURL: "http://127.0.0.1:8090", Key: "bak_secret value"})
	if err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("error %v shows the key", err)
	}
}

// TestSubmitFollowListFailures: a sealed submission runs to COMPLETED, its
// events are followed to the final one, the group reads with its counts,
// lists (filtered and paged), and its failed jobs can be listed and
// retried as a new group; the admin key reaches it with WithTenant.
func TestSubmitFollowListFailures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	res, err := b.acme.Submit(ctx, "g1", sleepJobs("j", 40, 3, 7), apiclient.SubmitOptions{
		Priority: contracts.PriorityHigh, MaxInFlight: ptr[int64](5), Total: ptr[int64](40)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Tenant != "acme" || res.GroupID != "g1" || res.Accepted != 40 || res.Total == nil || *res.Total != 40 {
		t.Fatalf("submit: %+v", res)
	}
	var events []apiclient.Event
	final, err := b.acme.Follow(ctx, "g1", func(e apiclient.Event) error {
		events = append(events, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if final.Group.State != contracts.StateCompleted || final.Group.Succeeded != 38 || final.Group.Failed != 2 || !final.Final() {
		t.Fatalf("final event %+v", final)
	}
	if len(events) == 0 || events[0].Name != "state" || events[len(events)-1] != final {
		t.Fatalf("events %+v", events)
	}

	g, err := b.acme.Group(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if g.State != contracts.StateCompleted || g.Priority != contracts.PriorityHigh || g.MaxInFlight != 5 ||
		g.Total == nil || *g.Total != 40 || g.Succeeded != 38 || g.Failed != 2 || g.Status == nil || g.FinishedAt == nil {
		t.Fatalf("group %+v", g)
	}
	if _, err := b.admin.Group(ctx, "g1", apiclient.WithTenant("acme")); err != nil {
		t.Fatalf("admin read: %v", err)
	}

	if _, err := b.acme.Submit(ctx, "g2", sleepJobs("k", 3), apiclient.SubmitOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.acme.Seal(ctx, "g2", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := b.acme.Follow(ctx, "g2", nil); err != nil {
		t.Fatal(err)
	}
	l, err := b.acme.ListGroups(ctx, apiclient.ListOptions{States: []contracts.GroupState{contracts.StateCompleted}, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Groups) != 1 || l.Next == nil {
		t.Fatalf("first page %+v", l)
	}
	seen := []string{l.Groups[0].GroupID}
	l, err = b.acme.ListGroups(ctx, apiclient.ListOptions{States: []contracts.GroupState{contracts.StateCompleted}, Limit: 1, Cursor: *l.Next, Full: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range l.Groups {
		seen = append(seen, g.GroupID)
		if g.Status == nil {
			t.Errorf("full view without status: %+v", g)
		}
	}
	if strings.Join(seen, ",") != "g2,g1" {
		t.Errorf("pages list %v, want g2,g1 (newest first)", seen)
	}

	fl, err := b.acme.Failures(ctx, "g1", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(fl.Failures) != 2 || fl.Kept != 2 || fl.Failures[0].Error == "" {
		t.Fatalf("failures %+v", fl)
	}
	rr, err := b.acme.RetryFailed(ctx, "g1", "g1-again")
	if err != nil {
		t.Fatal(err)
	}
	if rr.GroupID != "g1-again" || rr.Jobs != 2 || rr.RetryOf != "g1" {
		t.Fatalf("retry %+v", rr)
	}
}

// TestProblems: error answers come back as *Problem with the gateway's
// title, detail and field errors, and are not retried.
func TestProblems(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	jobs := sleepJobs("j", 3)
	jobs[1].Type = "no such type!"
	_, err := b.acme.Submit(ctx, "bad", jobs, apiclient.SubmitOptions{})
	var p *apiclient.Problem
	if !errors.As(err, &p) || p.Status != 400 || p.Slug() != apiclient.SlugInvalidJob || p.Title == "" ||
		len(p.Errors) != 1 || p.Errors[0].Line != 2 || p.Errors[0].Field != "type" {
		t.Fatalf("bad job: %#v", err)
	}
	if !strings.Contains(err.Error(), "line 2: field type") {
		t.Errorf("error text %q", err)
	}
	if _, err := b.acme.Group(ctx, "bad"); !apiclient.IsNotFound(err) {
		t.Errorf("nothing of a bad submission is stored: %v", err)
	}
	if _, err := b.acme.Submit(ctx, "g", sleepJobs("j", 1), apiclient.SubmitOptions{Priority: "urgent"}); !apiclient.IsProblem(err, apiclient.SlugInvalidParameter) {
		t.Errorf("bad priority: %v", err)
	}

	wrong := b.client(t, b.base, "bak_not-a-key")
	if _, err := wrong.ListGroups(ctx, apiclient.ListOptions{}); !apiclient.IsProblem(err, apiclient.SlugUnauthorized) {
		t.Errorf("unknown key: %v", err)
	} else if strings.Contains(err.Error(), "bak_not-a-key") {
		t.Errorf("error %q shows the key", err)
	}
	if _, err := b.admin.Group(ctx, "g"); !errors.As(err, &p) || len(p.Errors) == 0 || p.Errors[0].Field != "tenant" {
		t.Errorf("admin without a tenant: %v", err)
	}

	// A group of another tenant is not there; nor are its events.
	if _, err := b.acme.Submit(ctx, "mine", sleepJobs("j", 2), apiclient.SubmitOptions{Total: ptr[int64](2)}); err != nil {
		t.Fatal(err)
	}
	hooli := b.client(t, b.base, b.keys["hooli"])
	if _, err := hooli.Group(ctx, "mine"); !apiclient.IsNotFound(err) {
		t.Errorf("hooli reads acme's group: %v", err)
	}
	if _, err := b.acme.Follow(ctx, "mine", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.acme.Submit(ctx, "mine", sleepJobs("x", 1), apiclient.SubmitOptions{}); !apiclient.IsProblem(err, apiclient.SlugGroupEnded) {
		t.Errorf("submit to an ended group: %v", err)
	}
}

// TestControls: pause holds a group (created paused), resume runs it,
// cancel ends another one CANCELLED; Follow reports each final state.
func TestControls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	if r, err := b.acme.Pause(ctx, "p", apiclient.WithCreate()); err != nil || r.Kind != contracts.KindPause {
		t.Fatalf("pause: %+v %v", r, err)
	}
	if _, err := b.acme.Submit(ctx, "p", sleepJobs("j", 10), apiclient.SubmitOptions{Total: ptr[int64](10)}); err != nil {
		t.Fatal(err)
	}
	waitState(t, b.acme, "p", contracts.StatePaused)
	if _, err := b.acme.Resume(ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if e, err := b.acme.Follow(ctx, "p", nil); err != nil || e.Group.State != contracts.StateCompleted {
		t.Fatalf("resumed group: %+v %v", e, err)
	}

	if _, err := b.acme.Pause(ctx, "c", apiclient.WithCreate()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.acme.Submit(ctx, "c", sleepJobs("j", 10), apiclient.SubmitOptions{Total: ptr[int64](10)}); err != nil {
		t.Fatal(err)
	}
	waitState(t, b.acme, "c", contracts.StatePaused)
	if r, err := b.acme.Cancel(ctx, "c"); err != nil || r.Kind != contracts.KindCancel {
		t.Fatalf("cancel: %+v %v", r, err)
	}
	e, err := b.acme.Follow(ctx, "c", nil)
	if err != nil || e.Group.State != contracts.StateCancelled || e.Group.Cancelled != 10 {
		t.Fatalf("cancelled group: %+v %v", e, err)
	}
}

func waitState(t *testing.T, c *apiclient.Client, gid string, want contracts.GroupState) {
	t.Helper()
	testkit.WaitFor(t, gid+" "+string(want), 30*time.Second, func() bool {
		g, err := c.Group(context.Background(), gid)
		return err == nil && g.State == want
	})
}

// TestFollowReconnects: a stream that breaks after its first event is
// reopened with Last-Event-ID and Follow still sees every event once, to
// the final one. A proxy in front of the gateway breaks the first stream;
// requests that fail with 503 are retried with the same Idempotency-Key.
func TestFollowReconnects(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	target, _ := url.Parse(b.base)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	var streams, submits int
	var lastIDs, idemKeys []string
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		switch {
		case strings.HasSuffix(r.URL.Path, "/events"):
			streams++
			lastIDs = append(lastIDs, r.Header.Get("Last-Event-ID"))
			if streams == 1 {
				mu.Unlock()
				proxy.ServeHTTP(&breakAfter{ResponseWriter: w}, r)
				return
			}
		case strings.HasSuffix(r.URL.Path, "/jobs"):
			submits++
			idemKeys = append(idemKeys, r.Header.Get("Idempotency-Key"))
			if submits == 1 {
				mu.Unlock()
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "application/problem+json")
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = io.WriteString(w, `{"type":"urn:bulkaction:problem:unavailable","title":"Service unavailable","status":503}`)
				return
			}
		}
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	c := b.client(t, front.URL, b.keys["acme"])

	if _, err := c.Pause(ctx, "r", apiclient.WithCreate()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(ctx, "r", sleepJobs("j", 20), apiclient.SubmitOptions{Total: ptr[int64](20)}); err != nil {
		t.Fatal(err)
	}
	waitState(t, c, "r", contracts.StatePaused)
	var ids []string
	resumed := false
	final, err := c.Follow(ctx, "r", func(e apiclient.Event) error {
		if e.ID != "" {
			ids = append(ids, e.ID)
		}
		if !resumed {
			resumed = true
			_, err := c.Resume(ctx, "r")
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if final.Group.State != contracts.StateCompleted || final.Group.Succeeded != 20 {
		t.Fatalf("final %+v", final.Group)
	}
	mu.Lock()
	defer mu.Unlock()
	if streams < 2 || lastIDs[0] != "" || lastIDs[1] == "" || lastIDs[1] != ids[0] {
		t.Errorf("streams %d with Last-Event-IDs %q; event ids %v", streams, lastIDs, ids)
	}
	for i := 1; i < len(ids); i++ {
		a, _ := strconv.Atoi(ids[i-1])
		z, _ := strconv.Atoi(ids[i])
		if z <= a {
			t.Errorf("event ids %v repeat or go back", ids)
			break
		}
	}
	if submits != 2 || idemKeys[0] == "" || idemKeys[0] != idemKeys[1] {
		t.Errorf("submit sent %d times with Idempotency-Keys %q", submits, idemKeys)
	}
}

// breakAfter aborts a response once it has passed an event.
type breakAfter struct{ http.ResponseWriter }

func (b *breakAfter) Write(p []byte) (int, error) {
	n, err := b.ResponseWriter.Write(p)
	if strings.Contains(string(p[:n]), "data: ") {
		b.Flush()
		panic(http.ErrAbortHandler)
	}
	return n, err
}

func (b *breakAfter) Flush() {
	if f, ok := b.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
