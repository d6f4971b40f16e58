package aggregator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/internal/tenantset"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/webhook"
	"github.com/bulkaction/bulkaction/services/aggregator"
)

// delivery is one request a receiver got.
type delivery struct {
	header http.Header
	body   []byte
}

// receiver is a real HTTP server on 127.0.0.1 that answers each callback
// with the status answer returns for the n-th request (1-based) and keeps
// every request.
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []delivery
	answer func(n int) int
}

func newReceiver(t *testing.T, answer func(n int) int) *receiver {
	t.Helper()
	r := &receiver{answer: answer}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, delivery{header: req.Header.Clone(), body: body})
		n := len(r.got)
		r.mu.Unlock()
		w.WriteHeader(r.answer(n))
		fmt.Fprintf(w, "answer %d", n)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) deliveries() []delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]delivery(nil), r.got...)
}

// callbackCfg is an aggregator config whose callbacks may reach 127.0.0.1
// and retry quickly.
func callbackCfg(retryFor time.Duration) aggregator.Config {
	return aggregator.Config{CallbackAllowedHosts: []string{"127.0.0.1"}, CallbackFirstRetry: 100 * time.Millisecond,
		CallbackRetryFor: retryFor, CallbackTimeout: 2 * time.Second}
}

// withCallback creates group g with n admitted jobs (j0, j1, …) and the
// callback URL u, sealed with n.
func (b *testBundle) withCallback(t *testing.T, g contracts.GroupRef, n int, u string) {
	t.Helper()
	ctx := context.Background()
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: g, ID: fmt.Sprintf("j%d", i), Type: "t", CallbackURL: u}
	}
	if err := b.q.Confirm(ctx, b.env.Lease(t, jobs)...); err != nil {
		t.Fatal(err)
	}
	if _, err := b.q.Seal(ctx, g, int64(n)); err != nil {
		t.Fatal(err)
	}
}

// finish publishes a SUCCESS result for every job of g.
func (b *testBundle) finish(t *testing.T, g contracts.GroupRef, n int) {
	t.Helper()
	for i := range n {
		b.publish(t, successOf(g, fmt.Sprintf("j%d", i), 1), "", nil)
	}
}

func (b *testBundle) setSecret(t *testing.T, tenant, secret string, grace time.Duration) {
	t.Helper()
	ts, err := tenantset.Open(context.Background(), b.js, b.names, b.q)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.RotateCallbackSecret(context.Background(), tenant, secret, grace); err != nil {
		t.Fatal(err)
	}
}

func (b *testBundle) waitCallback(t *testing.T, g contracts.GroupRef, state string) *redisq.Callback {
	t.Helper()
	var c *redisq.Callback
	testkit.WaitFor(t, "callback of "+g.String()+" "+state, waitTimeout, func() bool {
		got, ok, err := b.q.CallbackOf(context.Background(), g)
		if err != nil {
			t.Fatal(err)
		}
		c = got
		return ok && got.State == state
	})
	return c
}

// verify checks d with the reference Standard Webhooks library and secret.
func verify(t *testing.T, secret string, d delivery) error {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		t.Fatal(err)
	}
	return wh.Verify(d.body, d.header)
}

// A receiver that fails twice then succeeds gets the group's final event:
// three attempts with the same webhook id, each signed so that an
// independent Standard Webhooks implementation verifies it, the last one
// delivered, and no attempt after it, though two aggregators deliver.
func TestCallbackDeliveredAfterTwoFailures(t *testing.T) {
	b := setup(t)
	secret := webhook.NewSecret()
	b.setSecret(t, tenant, secret, 0)
	rcv := newReceiver(t, func(n int) int {
		if n <= 2 {
			return http.StatusInternalServerError
		}
		return http.StatusNoContent
	})
	d, m := b.newDeps()
	run(t, callbackCfg(time.Minute), d, nil)
	run(t, callbackCfg(time.Minute), d, nil) // a second deliverer: leases keep one attempt at a time

	g := grp("cb-ok")
	b.withCallback(t, g, 3, rcv.srv.URL+"/hooks/done?x=1")
	b.finish(t, g, 3)
	final := b.waitEvent(t, g.ID, contracts.StateCompleted)
	cb := b.waitCallback(t, g, redisq.CallbackDelivered)
	time.Sleep(time.Second) // room for an extra attempt, if one were made

	got := rcv.deliveries()
	if len(got) != 3 {
		t.Fatalf("receiver got %d requests, want 3 (two failures, one delivery)", len(got))
	}
	id := got[0].header.Get("webhook-id")
	if id == "" || id != cb.ID {
		t.Fatalf("webhook-id %q, delivery id %q", id, cb.ID)
	}
	for i, dl := range got {
		if h := dl.header.Get("webhook-id"); h != id {
			t.Errorf("attempt %d: webhook-id %q, want %q on every attempt", i+1, h, id)
		}
		if err := verify(t, secret, dl); err != nil {
			t.Errorf("attempt %d: the reference library does not verify it: %v", i+1, err)
		}
		if string(dl.body) != string(got[0].body) {
			t.Errorf("attempt %d: body %s, first attempt's %s", i+1, dl.body, got[0].body)
		}
	}
	var ev contracts.GroupEvent
	if err := json.Unmarshal(got[2].body, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.State != contracts.StateCompleted || ev.Succeeded != 3 || ev.Jobs != 3 || ev.Total != 3 ||
		ev.Tenant != final.Tenant || ev.GroupID != final.GroupID || ev.Succeeded != final.Succeeded {
		t.Errorf("delivered %+v, final event %+v", ev, final)
	}
	if cb.Attempts != 3 || cb.StatusCode != http.StatusNoContent || cb.DeliveredAt.IsZero() || cb.LastError != "" {
		t.Errorf("callback state %+v, want delivered on attempt 3 with 204", cb)
	}
	if n := counterValue(m.Callbacks.WithLabelValues(telemetry.CallbackRetry)); n != 2 {
		t.Errorf("callbacks_total{outcome=retry} = %d, want 2", n)
	}
	if n := counterValue(m.Callbacks.WithLabelValues(telemetry.CallbackDelivered)); n != 1 {
		t.Errorf("callbacks_total{outcome=delivered} = %d, want 1", n)
	}
}

// A receiver that never succeeds leaves the callback failed once the retry
// budget is spent, with the last error; a retry by hand makes it pending
// again and it is delivered.
func TestCallbackFailsAfterRetryBudgetAndRetriesByHand(t *testing.T) {
	b := setup(t)
	secret := webhook.NewSecret()
	b.setSecret(t, tenant, secret, 0)
	var up sync.Mutex
	ok := false
	rcv := newReceiver(t, func(int) int {
		up.Lock()
		defer up.Unlock()
		if ok {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	d, m := b.newDeps()
	run(t, callbackCfg(time.Second), d, nil)

	g := grp("cb-fail")
	b.withCallback(t, g, 1, rcv.srv.URL)
	b.finish(t, g, 1)
	cb := b.waitCallback(t, g, redisq.CallbackFailed)
	if cb.Attempts < 2 || !strings.Contains(cb.LastError, "503") || cb.StatusCode != 503 || cb.FailedAt.IsZero() {
		t.Errorf("failed callback %+v, want several attempts and the last error naming 503", cb)
	}
	n := len(rcv.deliveries())
	if int64(n) != cb.Attempts {
		t.Errorf("receiver got %d requests, the callback counts %d attempts", n, cb.Attempts)
	}
	time.Sleep(500 * time.Millisecond)
	if got := len(rcv.deliveries()); got != n {
		t.Errorf("a failed callback was attempted again: %d requests after %d", got, n)
	}
	if v := counterValue(m.Callbacks.WithLabelValues(telemetry.CallbackFailed)); v != 1 {
		t.Errorf("callbacks_total{outcome=failed} = %d, want 1", v)
	}

	up.Lock()
	ok = true
	up.Unlock()
	before, err := b.q.RetryCallback(context.Background(), g)
	if err != nil || before != redisq.CallbackFailed {
		t.Fatalf("RetryCallback = %q, %v; want failed", before, err)
	}
	cb = b.waitCallback(t, g, redisq.CallbackDelivered)
	got := rcv.deliveries()
	if last := got[len(got)-1]; last.header.Get("webhook-id") != cb.ID || verify(t, secret, last) != nil {
		t.Errorf("the retried delivery has webhook-id %q (want %q) or does not verify", last.header.Get("webhook-id"), cb.ID)
	}
	if again, err := b.q.RetryCallback(context.Background(), g); err != nil || again != redisq.CallbackDelivered {
		t.Errorf("RetryCallback of a delivered callback = %q, %v; want delivered and nothing changed", again, err)
	}
}

// During a rotation's grace period a delivery carries two signatures, so a
// receiver holding either secret verifies it; after it, only the new one.
func TestCallbackSignedWithBothSecretsDuringRotation(t *testing.T) {
	b := setup(t)
	old, cur := webhook.NewSecret(), webhook.NewSecret()
	b.setSecret(t, tenant, old, 0)
	b.setSecret(t, tenant, cur, time.Hour)
	rcv := newReceiver(t, func(int) int { return http.StatusOK })
	d, _ := b.newDeps()
	run(t, callbackCfg(time.Minute), d, nil)

	g := grp("cb-rotate")
	b.withCallback(t, g, 1, rcv.srv.URL)
	b.finish(t, g, 1)
	b.waitCallback(t, g, redisq.CallbackDelivered)
	dl := rcv.deliveries()[0]
	if n := len(strings.Fields(dl.header.Get("webhook-signature"))); n != 2 {
		t.Errorf("webhook-signature has %d signatures during the grace period, want 2", n)
	}
	for name, s := range map[string]string{"previous": old, "current": cur} {
		if err := verify(t, s, dl); err != nil {
			t.Errorf("the %s secret does not verify during the grace period: %v", name, err)
		}
	}

	// a rotation without grace: the replaced secret stops at once
	next := webhook.NewSecret()
	b.setSecret(t, tenant, next, 0)
	g2 := grp("cb-rotate-2")
	b.withCallback(t, g2, 1, rcv.srv.URL)
	b.finish(t, g2, 1)
	b.waitCallback(t, g2, redisq.CallbackDelivered)
	dl = rcv.deliveries()[1]
	if err := verify(t, next, dl); err != nil {
		t.Errorf("the new secret does not verify: %v", err)
	}
	if err := verify(t, cur, dl); err == nil {
		t.Error("the replaced secret still verifies after a rotation without grace")
	}
}

// A host name that resolves to a loopback address the allow-list does not
// hold (the name is listed, its address is not) is refused: no request is
// sent, and the delivery fails with the loopback address named.
func TestCallbackToLoopbackWithoutAllowEntryFails(t *testing.T) {
	b := setup(t)
	b.setSecret(t, tenant, webhook.NewSecret(), 0)
	rcv := newReceiver(t, func(int) int { return http.StatusOK })
	u, err := url.Parse(rcv.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg := callbackCfg(500 * time.Millisecond)
	cfg.CallbackAllowedHosts = []string{"localhost"} // the name, not its address
	d, _ := b.newDeps()
	run(t, cfg, d, nil)

	g := grp("cb-loopback")
	b.withCallback(t, g, 1, "http://localhost:"+u.Port()+"/hook")
	b.finish(t, g, 1)
	cb := b.waitCallback(t, g, redisq.CallbackFailed)
	if !strings.Contains(cb.LastError, "loopback") || cb.StatusCode != 0 {
		t.Errorf("failed callback %+v, want the loopback address refused", cb)
	}
	if n := len(rcv.deliveries()); n != 0 {
		t.Errorf("receiver got %d requests, want none", n)
	}
}

// An aggregator stopped while a delivery backs off leaves it pending in
// Redis; another one started later delivers it, with the same webhook id.
func TestCallbackDeliveredAfterRestartMidBackoff(t *testing.T) {
	b := setup(t)
	secret := webhook.NewSecret()
	b.setSecret(t, tenant, secret, 0)
	rcv := newReceiver(t, func(n int) int {
		if n == 1 {
			return http.StatusBadGateway
		}
		return http.StatusOK
	})
	cfg := callbackCfg(time.Minute)
	cfg.CallbackFirstRetry = 2 * time.Second
	d, _ := b.newDeps()
	_, stop := run(t, cfg, d, nil)

	g := grp("cb-restart")
	b.withCallback(t, g, 1, rcv.srv.URL)
	b.finish(t, g, 1)
	testkit.WaitFor(t, "first attempt", waitTimeout, func() bool { return len(rcv.deliveries()) == 1 })
	testkit.WaitFor(t, "first attempt settled", waitTimeout, func() bool {
		c, ok, err := b.q.CallbackOf(context.Background(), g)
		return err == nil && ok && c.Attempts == 1
	})
	stop()
	if c, _, _ := b.q.CallbackOf(context.Background(), g); c.State != redisq.CallbackPending {
		t.Fatalf("callback %+v after the first attempt, want pending", c)
	}

	run(t, cfg, d, nil)
	cb := b.waitCallback(t, g, redisq.CallbackDelivered)
	got := rcv.deliveries()
	if len(got) != 2 || got[1].header.Get("webhook-id") != got[0].header.Get("webhook-id") || cb.Attempts != 2 {
		t.Fatalf("%d requests, callback %+v; want 2 with one webhook id", len(got), cb)
	}
	if err := verify(t, secret, got[1]); err != nil {
		t.Error(err)
	}
}

// The final event of a group cancelled while a job runs waits for that
// job's result, so it carries every job counted.
func TestCallbackOfCancelledGroupCarriesSettledCounts(t *testing.T) {
	b := setup(t)
	b.setSecret(t, tenant, webhook.NewSecret(), 0)
	rcv := newReceiver(t, func(int) int { return http.StatusOK })
	d, _ := b.newDeps()
	run(t, callbackCfg(time.Minute), d, nil)

	g := grp("cb-cancel")
	ctx := context.Background()
	jobs := []redisq.Job{{Group: g, ID: "run", Type: "t", CallbackURL: rcv.srv.URL}}
	if err := b.q.Confirm(ctx, b.env.Lease(t, jobs)...); err != nil {
		t.Fatal(err)
	}
	if _, err := b.q.Enqueue(ctx, redisq.Job{Group: g, ID: "queued", Type: "t"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.q.Cancel(ctx, g); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if n := len(rcv.deliveries()); n != 0 {
		t.Fatalf("callback sent while a job of the cancelled group still runs (%d requests)", n)
	}
	b.publish(t, successOf(g, "run", 1), "", nil)
	b.waitCallback(t, g, redisq.CallbackDelivered)
	var ev contracts.GroupEvent
	if err := json.Unmarshal(rcv.deliveries()[0].body, &ev); err != nil {
		t.Fatal(err)
	}
	if ev.State != contracts.StateCancelled || ev.Succeeded != 1 || ev.Cancelled != 1 || ev.Jobs != 2 {
		t.Errorf("delivered %+v, want CANCELLED with 1 succeeded and 1 cancelled of 2", ev)
	}
}
