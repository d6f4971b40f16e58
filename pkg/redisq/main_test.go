package redisq_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { testenv.Main(m) }

type testBundle struct {
	rdb    *redis.Client
	prefix string
	clock  *fakeClock
}

// fakeClock is a settable clock for scripts; every call in a test may fall
// in the same millisecond.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// setup returns a Queue on the shared test Redis under the test's own
// prefix. With fixedClock every script sees the same millisecond until the
// test advances it.
func setup(t testing.TB, cfg redisq.Config, fixedClock bool) (*redisq.Queue, *testBundle) {
	t.Helper()
	env := testenv.Redis(t)
	cfg.Prefix = env.Prefix
	b := &testBundle{rdb: env.Client, prefix: env.Prefix}
	if fixedClock {
		b.clock = &fakeClock{t: time.UnixMilli(1_706_000_000_000)}
		cfg.Clock = b.clock.now
	}
	q, err := redisq.New(context.Background(), env.Client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q, b
}

// testTenant is the tenant of the groups tests name by groupId alone.
const testTenant = "t"

// G names a group: "tenant/gid", or "gid" alone for the group gid of
// testTenant.
func G(name string) contracts.GroupRef {
	if t, id, ok := strings.Cut(name, "/"); ok {
		return contracts.GroupRef{Tenant: t, ID: id}
	}
	return contracts.GroupRef{Tenant: testTenant, ID: name}
}

func enqueueN(t testing.TB, q *redisq.Queue, gid string, n int, prio contracts.Priority, base int64) {
	t.Helper()
	jobs := make([]redisq.Job, n)
	for i := range jobs {
		jobs[i] = redisq.Job{Group: G(gid), ID: fmt.Sprintf("j%05d", i), Type: "t", Payload: []byte(`{}`), Priority: prio, BasePriority: base}
	}
	out, err := q.EnqueueBatch(context.Background(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range out {
		if o != redisq.Added {
			t.Fatalf("job %d: %v", i, o)
		}
	}
}

// drain dequeues n jobs one call at a time and returns their groupIds.
func drain(t testing.TB, q *redisq.Queue, n int) []string {
	t.Helper()
	var got []string
	for i := 0; i < n; i++ {
		j, err := q.Dequeue(context.Background())
		if err != nil {
			t.Fatalf("dequeue %d: %v", i, err)
		}
		got = append(got, j.Group.ID)
	}
	return got
}
