package redisq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// The callback scripts on real Redis and on miniredis (`bulkaction dev`):
// a group's end writes its pending delivery; a lease keeps it from a second
// deliverer until it runs out; only the lease's holder settles it; the body
// is frozen once; a retry is due at its time; a failed delivery is made
// pending again by hand, and an ended one keeps its state for GroupTTL.
func TestCallbackLifecycle(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		q, b := setup(t, redisq.Config{}, true)
		callbackLifecycle(t, q, b.rdb, b.clock)
	})
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		clock := &fakeClock{t: time.UnixMilli(1_706_000_000_000)}
		q, err := redisq.New(context.Background(), rdb, redisq.Config{Prefix: "mini:", Clock: clock.now})
		if err != nil {
			t.Fatal(err)
		}
		callbackLifecycle(t, q, rdb, clock)
	})
}

func callbackLifecycle(t *testing.T, q *redisq.Queue, rdb *redis.Client, clock *fakeClock) {
	ctx := context.Background()
	g := G("cb")
	const u = "https://hooks.example.com/done"
	if _, err := q.Enqueue(ctx, redisq.Job{Group: g, ID: "1", Type: "t", CallbackURL: u}); err != nil {
		t.Fatal(err)
	}
	if c, err := q.RetryCallback(ctx, g); !errors.Is(err, redisq.ErrNoCallback) {
		t.Fatalf("retry before the end: %q, %v", c, err)
	}
	if url, err := q.CallbackURLOf(ctx, g); err != nil || url != u {
		t.Fatalf("CallbackURLOf = %q, %v", url, err)
	}
	if _, err := q.Cancel(ctx, g); err != nil {
		t.Fatal(err)
	}
	cb, ok, err := q.CallbackOf(ctx, g)
	if err != nil || !ok || cb.State != redisq.CallbackPending || cb.URL != u || !strings.HasPrefix(cb.ID, "msg_") || cb.EndedAt.IsZero() {
		t.Fatalf("after the end: %+v, %v, %v", cb, ok, err)
	}
	claim := func(want int) []redisq.ClaimedCallback {
		t.Helper()
		got, err := q.ClaimCallbacks(ctx, 10, 30*time.Second)
		if err != nil || len(got) != want {
			t.Fatalf("claimed %d (%v), want %d", len(got), err, want)
		}
		return got
	}
	c := claim(1)[0]
	if c.Group != g || c.ID != cb.ID || c.Body != nil || c.Counts.State != contracts.StateCancelled || c.Counts.Cancelled != 1 {
		t.Fatalf("claimed %+v", c)
	}
	claim(0) // leased
	body, err := q.FreezeCallbackBody(ctx, &c, []byte(`{"a":1}`))
	if err != nil || string(body) != `{"a":1}` {
		t.Fatalf("freeze: %s, %v", body, err)
	}
	if body, err = q.FreezeCallbackBody(ctx, &c, []byte(`{"b":2}`)); err != nil || string(body) != `{"a":1}` {
		t.Fatalf("second freeze: %s, %v (the first body stays)", body, err)
	}
	// the lease runs out: another deliverer takes it, the first one's settle is refused
	clock.advance(31 * time.Second)
	c2 := claim(1)[0]
	if string(c2.Body) != `{"a":1}` || c2.Token == c.Token {
		t.Fatalf("reclaimed %+v", c2)
	}
	if err := q.SettleCallback(ctx, &c, redisq.CallbackOK, 200, "", time.Time{}); !errors.Is(err, redisq.ErrCallbackLeaseLost) {
		t.Fatalf("settle by a lease that ran out: %v", err)
	}
	next := clock.now().Add(5 * time.Second)
	if err := q.SettleCallback(ctx, &c2, redisq.CallbackRetry, 503, "HTTP 503", next); err != nil {
		t.Fatal(err)
	}
	claim(0) // not due yet
	clock.advance(5 * time.Second)
	c3 := claim(1)[0]
	if c3.Attempts != 1 {
		t.Fatalf("attempts %d after one failed attempt", c3.Attempts)
	}
	if err := q.SettleCallback(ctx, &c3, redisq.CallbackGiveUp, 0, "connection refused", time.Time{}); err != nil {
		t.Fatal(err)
	}
	claim(0)
	if cb, _, _ = q.CallbackOf(ctx, g); cb.State != redisq.CallbackFailed || cb.Attempts != 2 || cb.LastError != "connection refused" || cb.FailedAt.IsZero() {
		t.Fatalf("failed: %+v", cb)
	}
	if before, err := q.RetryCallback(ctx, g); err != nil || before != redisq.CallbackFailed {
		t.Fatalf("retry of a failed one: %q, %v", before, err)
	}
	c4 := claim(1)[0]
	if err := q.SettleCallback(ctx, &c4, redisq.CallbackOK, 204, "", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if cb, _, _ = q.CallbackOf(ctx, g); cb.State != redisq.CallbackDelivered || cb.StatusCode != 204 || cb.Attempts != 3 || cb.LastError != "" {
		t.Fatalf("delivered: %+v", cb)
	}
	if before, err := q.RetryCallback(ctx, g); err != nil || before != redisq.CallbackDelivered {
		t.Fatalf("retry of a delivered one: %q, %v", before, err)
	}
	claim(0)
	if ttl := rdb.TTL(ctx, q.Keys().GroupCallback(g)).Val(); ttl <= 0 {
		t.Errorf("a delivered callback's TTL %s, want GroupTTL", ttl)
	}
	if n, err := q.PendingCallbacks(ctx); err != nil || n != 0 {
		t.Errorf("pending %d, %v", n, err)
	}
}
