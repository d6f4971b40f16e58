package fetcher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/handoff"
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
	startSplitFetchers(t, e, shards, fetcher.Config{})

	const perTenant = 300
	msgs := submitToShard3(t, e, shards, 4, perTenant)
	span := readySpan(t, msgs)
	// 1,200 jobs at 300 a second take at least 3 s after the first
	// second's; READY's store times trail admission by a moment, so allow
	// one more second. A limit split evenly between the eight shards would
	// give these tenants 37 a second: over 30 s.
	if span < 2*time.Second {
		t.Errorf("the jobs reached READY within %s: faster than the limit of %d a second", span, limit)
	}
	if span > 20*time.Second {
		t.Errorf("the jobs reached READY over %s: the tenants of one shard did not get the whole limit %d", span, limit)
	}
}

// With shards, a destination's learned rate is granted as a static type
// limit is, by the shards' demand: tenants that all live in one of eight
// shards get the whole learned rate (split evenly, they would get an
// eighth of it), and no more.
func TestShardsGrantALearnedDestinationRate(t *testing.T) {
	const shards, rate = 8, 50
	e := pipelinetest.NewEnv(t, redisq.Config{Shards: shards, GlobalLimit: 1000,
		Adaptive: redisq.AdaptiveConfig{Enabled: true, Floor: rate, Ceiling: rate}})
	ctx := context.Background()
	// the jobs' destination (their type "t") throttled: its rate is
	// learned at the floor, 50 a second
	if _, err := e.Queue.ReportDestinations(ctx, []redisq.DestOutcome{{Destination: "t", Throttled: 1}}); err != nil {
		t.Fatal(err)
	}
	if r, err := e.Queue.DestinationRates(ctx); err != nil || len(r.Rates) != 1 || r.Rates[0].Rate != rate {
		t.Fatalf("learned rates %+v, %v: want t at %d", r, err, rate)
	}
	startSplitFetchers(t, e, shards, fetcher.Config{})

	msgs := submitToShard3(t, e, shards, 2, 150)
	span := readySpan(t, msgs)
	// 300 jobs at 50 a second: at least 5 s after the first second's (one
	// more for READY's store times); an even split would take 48 s
	if span < 4*time.Second {
		t.Errorf("the jobs reached READY within %s: faster than the learned rate of %d a second", span, rate)
	}
	if span > 15*time.Second {
		t.Errorf("the jobs reached READY over %s: the tenants of one shard did not get the whole learned rate %d", span, rate)
	}
}

// startSplitFetchers starts two fetchers of cfg and waits until they hold
// half the shards each.
func startSplitFetchers(t *testing.T, e *pipelinetest.Env, shards int, cfg fetcher.Config) {
	t.Helper()
	for range 2 {
		testkit.Start(t, newFetcher(t, cfg, e.Deps()))
	}
	leases, err := e.Queue.NewShardLeases(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the shards split between the two fetchers", 30*time.Second, func() bool {
		ls, err := leases.Leases(context.Background())
		if err != nil || len(ls) != shards {
			return false
		}
		per := map[string]int{}
		for _, l := range ls {
			per[l.Holder]++
		}
		return len(per) == 2 && per[ls[0].Holder] == shards/2
	})
}

// submitToShard3 submits perTenant jobs for each of n tenants of shard 3
// and returns the READY messages of them all.
func submitToShard3(t *testing.T, e *pipelinetest.Env, shards, n, perTenant int) []pipelinetest.Msg {
	t.Helper()
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	submitToShard(t, e, shards, 3, n, clientJobs("g", 0, perTenant))
	return r.WaitJobs(t, n*perTenant, time.Minute)
}

// submitToShard submits jobs for each of n tenants of shard s.
func submitToShard(t *testing.T, e *pipelinetest.Env, shards, s, n int, jobs []client.Job) {
	t.Helper()
	c := client.New(e.JS, client.Options{})
	found := 0
	for i := 0; found < n; i++ {
		if tn := fmt.Sprintf("tenant%d", i); redisq.ShardOf(tn, shards) == s {
			found++
			if err := c.ForTenant(tn).Submit(context.Background(), "g", jobs...); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// With shards, a type's limit goes to the shards that have jobs of the
// type: tenants of one shard with sms jobs and of another with email jobs
// each get their type's whole limit (split by the shards' overall demand,
// each would get half of it in the periods the other did not give back).
func TestShardsGrantATypeToTheShardsWithItsJobs(t *testing.T) {
	const shards, rate, perTenant = 8, 100, 250
	e := pipelinetest.NewEnv(t, redisq.Config{Shards: shards, GlobalLimit: 1000,
		TypeLimits: map[string]int{"sms": rate, "email": rate}})
	testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{})
	typed := func(ty string) []client.Job {
		jobs := clientJobs("g", 0, perTenant)
		for i := range jobs {
			jobs[i].Type = ty
		}
		return jobs
	}
	// sms jobs in shard 3, email jobs in shard 5
	submitToShard(t, e, shards, 3, 2, typed("sms"))
	submitToShard(t, e, shards, 5, 2, typed("email"))
	msgs := r.WaitJobs(t, 4*perTenant, time.Minute)
	span := readySpan(t, msgs)
	// 500 jobs of each type at 100 a second: at least 4 s after the first
	// second's, one more for READY's store times (measured: 5.7 s); with
	// half of each limit, as before the shards' demand was by type, 10 s
	if span < 3*time.Second {
		t.Errorf("the jobs reached READY within %s: faster than the types' limits of %d a second", span, rate)
	}
	if span > 6500*time.Millisecond {
		t.Errorf("the jobs reached READY over %s: each shard did not get its type's whole limit %d", span, rate)
	}
}

// readySpan checks that no job reached READY twice and returns the time
// between the first and the last one's store times.
func readySpan(t *testing.T, msgs []pipelinetest.Msg) time.Duration {
	t.Helper()
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
	span := last.Sub(first)
	t.Logf("the jobs reached READY over %s", span.Round(time.Millisecond))
	return span
}

// With shards, fetchers that measure READY whole each take their shards'
// part of the demand of its room: two fetchers holding half the shards
// each, with tenants on every shard, together keep READY within its
// capacity (and a job each for rounding), where each taking the whole
// room would fill it twice over.
func TestShardedFetchersShareReadysRoom(t *testing.T) {
	const shards, capacity, nTenants, perTenant = 8, 20, 16, 25
	e := pipelinetest.NewEnv(t, redisq.Config{Shards: shards, GlobalLimit: 10_000})
	ctx := context.Background()
	startSplitFetchers(t, e, shards, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: capacity, PackJobs: 1}})
	c := client.New(e.JS, client.Options{})
	for i := range nTenants {
		if err := c.ForTenant(fmt.Sprintf("tenant%d", i)).Submit(ctx, "g", clientJobs("g", 0, perTenant)...); err != nil {
			t.Fatal(err)
		}
	}
	r := pipelinetest.NewReader(t, e, pipelinetest.ReaderOptions{Delay: 5 * time.Millisecond})
	var most int
	testkit.WaitFor(t, "every job read", 2*time.Minute, func() bool {
		most = max(most, e.ReadyJobs(t))
		return len(r.Jobs()) >= nTenants*perTenant
	})
	t.Logf("READY held at most %d jobs (capacity %d)", most, capacity)
	if most > capacity+2 {
		t.Fatalf("READY held %d jobs: more than the capacity %d and a job per fetcher", most, capacity)
	}
	if most < capacity/2 {
		t.Fatalf("READY never held more than %d jobs: the slow reader was not the bottleneck", most)
	}
}
