package fetcher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/fetcher"
)

// With shards, two fetchers split them under leases and admit each from
// its own at the shard's grant of the global limit: tenants that all
// live in one of eight shards get the whole limit (an even split of the
// limit between shards would give them an eighth), and no faster than
// the limit.
func TestFetchersShareShardsAndTheGlobalLimit(t *testing.T) {
	const shards, limit = 8, 300
	e := pipelinetest.NewEnv(t, redisq.Config{Shards: shards, GlobalLimit: limit})
	ctx := context.Background()
	testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))
	testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))
	leases, err := e.Queue.NewShardLeases(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the shards split between the two fetchers", 30*time.Second, func() bool {
		ls, err := leases.Leases(ctx)
		if err != nil || len(ls) != shards {
			return false
		}
		per := map[string]int{}
		for _, l := range ls {
			per[l.Holder]++
		}
		return len(per) == 2 && per[ls[0].Holder] == shards/2
	})

	// four tenants, every one in shard 3
	var tenants []string
	for i := 0; len(tenants) < 4; i++ {
		if tn := fmt.Sprintf("tenant%d", i); redisq.ShardOf(tn, shards) == 3 {
			tenants = append(tenants, tn)
		}
	}
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	c := client.New(e.JS, client.Options{})
	const perTenant = 300
	for _, tn := range tenants {
		if err := c.ForTenant(tn).Submit(ctx, "g", clientJobs("g", 0, perTenant)...); err != nil {
			t.Fatal(err)
		}
	}
	msgs := r.WaitJobs(t, len(tenants)*perTenant, time.Minute)
	seen := map[string]bool{}
	first, last := msgs[0].Stored, msgs[0].Stored
	for _, m := range msgs {
		if seen[m.Key()] {
			t.Fatalf("job %s on READY twice", m.Key())
		}
		seen[m.Key()] = true
		if m.Stored.Before(first) {
			first = m.Stored
		}
		if m.Stored.After(last) {
			last = m.Stored
		}
	}
	// 1,200 jobs at 300 a second take at least 3 s after the first
	// second's; READY's store times trail admission by a moment, so allow
	// one more second. A limit split evenly between the eight shards would
	// give these tenants 37 a second: over 30 s.
	span := last.Sub(first)
	t.Logf("the jobs reached READY over %s", span.Round(time.Millisecond))
	if span < 2*time.Second {
		t.Errorf("the jobs reached READY within %s: faster than the limit of %d a second", span, limit)
	}
	if span > 20*time.Second {
		t.Errorf("the jobs reached READY over %s: the tenants of one shard did not get the whole limit %d", span, limit)
	}
}
