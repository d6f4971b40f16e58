package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// publishEvent stores an event of the default tenant's group gid as the
// aggregator would.
func (b *testBundle) publishEvent(t *testing.T, gid string, state contracts.GroupState, succeeded int64) contracts.GroupEvent {
	t.Helper()
	return b.publishEventOf(t, contracts.Group(client.DefaultTenant, gid), state, succeeded)
}

// publishEventOf stores an event of g as the aggregator would.
func (b *testBundle) publishEventOf(t *testing.T, g contracts.GroupRef, state contracts.GroupState, succeeded int64) contracts.GroupEvent {
	t.Helper()
	ev := contracts.GroupEvent{
		V: contracts.Version, Tenant: g.Tenant, GroupID: g.ID, State: state, Total: 3, Jobs: 3, Succeeded: succeeded,
		At: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	b.publishRawOf(t, g, mustJSON(t, ev))
	return ev
}

// publishRaw stores data on the events subject of the default tenant's
// group gid.
func (b *testBundle) publishRaw(t *testing.T, gid string, data []byte) {
	t.Helper()
	b.publishRawOf(t, contracts.Group(client.DefaultTenant, gid), data)
}

func (b *testBundle) publishRawOf(t *testing.T, g contracts.GroupRef, data []byte) {
	t.Helper()
	if _, err := b.js.Publish(context.Background(), b.names.Events(g), data); err != nil {
		t.Fatal(err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// next receives one event, failing the test if none arrives in 10 seconds
// or the channel is closed.
func next(t *testing.T, ch <-chan contracts.GroupEvent) contracts.GroupEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("event channel closed early")
		}
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	panic("unreachable")
}

// closed waits for ch to be closed, failing on any further event.
func closed(t *testing.T, ch <-chan contracts.GroupEvent) {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if ok {
			t.Fatalf("unexpected event %+v", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("event channel not closed within 10s")
	}
}

func sameEvent(a, b contracts.GroupEvent) bool {
	return a.V == b.V && a.Tenant == b.Tenant && a.GroupID == b.GroupID && a.State == b.State && a.Total == b.Total &&
		a.Jobs == b.Jobs && a.Succeeded == b.Succeeded && a.Failed == b.Failed && a.Cancelled == b.Cancelled && a.At.Equal(b.At)
}

func TestWatchReplaysThenFollowsUntilTerminal(t *testing.T) {
	t.Parallel()
	c, b := setup(t)
	ctx := context.Background()
	created := b.publishEvent(t, "g", contracts.StateCreated, 0)
	b.publishEvent(t, "other", contracts.StateRunning, 0)                        // another group
	b.publishEventOf(t, contracts.Group("acme", "g"), contracts.StateRunning, 0) // another tenant's group g
	b.publishRaw(t, "g", []byte("not json"))                                     // skipped
	b.publishRaw(t, "g", []byte(`{"v":2,"tenant":"default","groupId":"g","state":"RUNNING","at":"x"}`))
	b.publishRaw(t, "g", []byte(`{"v":2,"groupId":"g","state":"RUNNING"}`)) // no tenant: not a v2 event
	b.publishRaw(t, "g", []byte(`{"v":1,"tenant":"default","groupId":"g","state":"RUNNING"}`))
	// A body naming another group than its subject's.
	b.publishRaw(t, "g", mustJSON(t, contracts.GroupEvent{V: contracts.Version, Tenant: "acme", GroupID: "g", State: contracts.StateRunning}))

	ch, err := c.Watch(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ch); !sameEvent(ev, created) {
		t.Fatalf("first event %+v, want %+v", ev, created)
	}
	// Live events, published after the watch started.
	running := b.publishEvent(t, "g", contracts.StateRunning, 1)
	if ev := next(t, ch); !sameEvent(ev, running) {
		t.Fatalf("second event %+v, want %+v", ev, running)
	}
	completed := b.publishEvent(t, "g", contracts.StateCompleted, 3)
	if ev := next(t, ch); !sameEvent(ev, completed) {
		t.Fatalf("third event %+v, want %+v", ev, completed)
	}
	b.publishEvent(t, "g", contracts.StateRunning, 3) // after the terminal event: not delivered
	closed(t, ch)
}

func TestWatchEndsWithContext(t *testing.T) {
	t.Parallel()
	c, b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := c.Watch(ctx, "g")
	if err != nil {
		t.Fatal(err)
	}
	running := b.publishEvent(t, "g", contracts.StateRunning, 0)
	if ev := next(t, ch); !sameEvent(ev, running) {
		t.Fatalf("event %+v", ev)
	}
	cancel()
	closed(t, ch)
}

func TestWatchErrors(t *testing.T) {
	t.Parallel()
	c, _ := setup(t)
	if _, err := c.Watch(context.Background(), "a.b"); err == nil || !errors.Is(err, contracts.ErrInvalid) {
		t.Fatalf("Watch with a bad group id: %v", err)
	}
	if _, err := c.ForTenant("a.b").Watch(context.Background(), "g"); err == nil || !errors.Is(err, contracts.ErrInvalid) ||
		!strings.Contains(err.Error(), "tenant") {
		t.Fatalf("Watch with a bad tenant: %v", err)
	}
	if _, err := c.ForTenant("a.b").Wait(context.Background(), "g"); err == nil || !strings.Contains(err.Error(), "tenant") {
		t.Fatalf("Wait with a bad tenant: %v", err)
	}
	c2 := client.New(mustJS(t), client.Options{})
	if _, err := c2.Watch(context.Background(), "g"); err == nil {
		t.Fatal("Watch succeeded without an EVENTS stream")
	}
}

func TestWaitReturnsTerminalEvent(t *testing.T) {
	t.Parallel()
	c, b := setup(t)
	ctx := context.Background()

	// Already terminal: the stored history answers.
	b.publishEvent(t, "done", contracts.StateRunning, 1)
	want := b.publishEvent(t, "done", contracts.StateCompleted, 3)
	ev, err := c.Wait(ctx, "done")
	if err != nil {
		t.Fatal(err)
	}
	if !sameEvent(ev, want) {
		t.Fatalf("Wait = %+v, want %+v", ev, want)
	}

	// Not yet terminal: Wait returns once the final cancel event arrives.
	// A CANCELLED event whose counts do not add up yet (a job was still
	// running) is not final: its jobs settle and another event follows.
	type result struct {
		ev  contracts.GroupEvent
		err error
	}
	res := make(chan result, 1)
	b.publishEvent(t, "live", contracts.StateRunning, 1)
	go func() {
		ev, err := c.Wait(ctx, "live")
		res <- result{ev, err}
	}()
	cancelled := func(succeeded, cancelled int64) contracts.GroupEvent {
		ev := contracts.GroupEvent{V: contracts.Version, Tenant: client.DefaultTenant, GroupID: "live", State: contracts.StateCancelled, Total: 3,
			Jobs: 3, Succeeded: succeeded, Cancelled: cancelled, At: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
		b.publishRaw(t, "live", mustJSON(t, ev))
		return ev
	}
	cancelled(1, 1)
	select {
	case r := <-res:
		t.Fatalf("Wait returned %+v before every job was accounted for", r.ev)
	case <-time.After(200 * time.Millisecond):
	}
	want = cancelled(2, 1)
	select {
	case r := <-res:
		if r.err != nil || !sameEvent(r.ev, want) {
			t.Fatalf("Wait = %+v, %v; want %+v", r.ev, r.err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the terminal event")
	}
}

func TestWaitEndsWithContext(t *testing.T) {
	t.Parallel()
	c, b := setup(t)
	b.publishEvent(t, "g", contracts.StateRunning, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := c.Wait(ctx, "g"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait = %v, want context.DeadlineExceeded", err)
	}
}

func TestWatchTenantIsolation(t *testing.T) {
	t.Parallel()
	_, b := setup(t)
	ctx := context.Background()
	acme := client.New(b.js, client.Options{Tenant: "acme"})
	globex := acme.ForTenant("globex")
	acmeG, globexG := contracts.Group("acme", "promo"), contracts.Group("globex", "promo")

	// Both tenants have a group "promo"; acme's completes, globex's runs.
	acmeRunning := b.publishEventOf(t, acmeG, contracts.StateRunning, 1)
	globexRunning := b.publishEventOf(t, globexG, contracts.StateRunning, 2)
	acmeDone := b.publishEventOf(t, acmeG, contracts.StateCompleted, 3)

	ch, err := acme.Watch(ctx, "promo")
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ch); !sameEvent(ev, acmeRunning) {
		t.Fatalf("acme's first event %+v, want %+v", ev, acmeRunning)
	}
	if ev := next(t, ch); !sameEvent(ev, acmeDone) {
		t.Fatalf("acme's second event %+v, want %+v", ev, acmeDone)
	}
	closed(t, ch)

	wctx, cancel := context.WithCancel(ctx)
	ch, err = globex.Watch(wctx, "promo")
	if err != nil {
		t.Fatal(err)
	}
	if ev := next(t, ch); !sameEvent(ev, globexRunning) {
		t.Fatalf("globex's first event %+v, want %+v", ev, globexRunning)
	}
	// acme's group completing again is not globex's business.
	b.publishEventOf(t, acmeG, contracts.StateCompleted, 3)
	select {
	case ev := <-ch:
		t.Fatalf("globex saw %+v", ev)
	case <-time.After(200 * time.Millisecond):
	}
	globexDone := b.publishEventOf(t, globexG, contracts.StateCompleted, 3)
	if ev := next(t, ch); !sameEvent(ev, globexDone) {
		t.Fatalf("globex's last event %+v, want %+v", ev, globexDone)
	}
	closed(t, ch)
	cancel()

	// The default tenant has no group "promo": Wait times out.
	tctx, tcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer tcancel()
	if ev, err := acme.ForTenant(client.DefaultTenant).Wait(tctx, "promo"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait of the default tenant = %+v, %v; want context.DeadlineExceeded", ev, err)
	}
}
