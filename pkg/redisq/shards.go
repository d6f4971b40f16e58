package redisq

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Logical shards (docs/ARCHITECTURE.md §11.1). With Config.Shards N > 1 a
// Queue owns one sub-queue per shard, each on the keys of its own hash tag
// ([ShardPrefix]), and routes every call about a tenant to its tenant's
// shard ([ShardOf]); calls that span tenants go through every shard and
// merge their answers. The Queue itself keeps the cross-shard keys
// ([GlobalPrefix]): worker type announcements, the destinations' learned
// rates, named leases and the shard count. With one shard (the default) a
// Queue is its own only shard, on today's keys.

// ShardOf is the logical shard of tenant among n shards: crc32(tenant) mod
// n (0 when n <= 1). It never changes for an installation: n is fixed at
// its first start.
func ShardOf(tenant string, n int) int {
	if n <= 1 {
		return 0
	}
	return int(crc32.ChecksumIEEE([]byte(tenant)) % uint32(n))
}

// ErrShardCount is returned by [New] when the installation's Redis was
// first started with another number of shards.
var ErrShardCount = errors.New("redisq: the number of shards differs from the installation's")

// sharded reports whether q routes to sub-queues.
func (q *Queue) sharded() bool { return len(q.shards) > 0 }

// ShardCount is the number of logical shards (1 unless Config.Shards > 1).
func (q *Queue) ShardCount() int {
	if !q.sharded() {
		return 1
	}
	return len(q.shards)
}

// Shard is the queue of shard i, 0 <= i < ShardCount (q itself with one
// shard). A shard's queue is a Queue on its shard's keys alone: its calls
// about tenants of other shards find nothing of theirs.
func (q *Queue) Shard(i int) *Queue {
	if !q.sharded() {
		return q
	}
	return q.shards[i]
}

// Shards are the queues of every shard in order ([q] with one shard).
func (q *Queue) Shards() []*Queue {
	if !q.sharded() {
		return []*Queue{q}
	}
	return q.shards
}

// For is the queue of tenant's shard (q itself with one shard).
func (q *Queue) For(tenant string) *Queue {
	if !q.sharded() {
		return q
	}
	return q.shards[ShardOf(tenant, len(q.shards))]
}

// shardIndexes groups the indexes of n items by the shard of their tenant:
// out[i] lists the items of shard i, in their order.
func (q *Queue) shardIndexes(n int, tenant func(i int) string) [][]int {
	out := make([][]int, len(q.shards))
	for i := 0; i < n; i++ {
		s := ShardOf(tenant(i), len(q.shards))
		out[s] = append(out[s], i)
	}
	return out
}

// pick returns the items of xs at idx.
func pick[T any](xs []T, idx []int) []T {
	out := make([]T, len(idx))
	for j, i := range idx {
		out[j] = xs[i]
	}
	return out
}

// onShards runs f for every shard with items (idx non-empty), the shards
// concurrently when more than one has items, and returns the first error.
// f may write only to what belongs to its own items.
func (q *Queue) onShards(idx [][]int, f func(s *Queue, idx []int) error) error {
	var busy []int
	for i, ix := range idx {
		if len(ix) > 0 {
			busy = append(busy, i)
		}
	}
	switch len(busy) {
	case 0:
		return nil
	case 1:
		return f(q.shards[busy[0]], idx[busy[0]])
	}
	errs := make([]error, len(busy))
	var wg sync.WaitGroup
	for j, i := range busy {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[j] = f(q.shards[i], idx[i])
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// eachShard runs f on every shard concurrently and returns the first
// error; f(i, s) may write only to what belongs to shard i.
func (q *Queue) eachShard(f func(i int, s *Queue) error) error {
	if !q.sharded() {
		return f(0, q)
	}
	errs := make([]error, len(q.shards))
	var wg sync.WaitGroup
	for i, s := range q.shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i, s)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// shardConfig is the configuration of shard i's sub-queue among n: its
// prefix, and until admission runs at its grant of the global limits
// (docs/ARCHITECTURE.md §11.1), an even part of each limit, so that the
// shards together never admit more than the limit.
func shardConfig(cfg Config, i, n int) Config {
	c := cfg
	c.Prefix = ShardPrefix(cfg.Prefix, i)
	c.Shards = 1
	c.GlobalLimit = max(1, cfg.GlobalLimit/n)
	if len(cfg.TypeLimits) > 0 {
		c.TypeLimits = make(map[string]int, len(cfg.TypeLimits))
		for t, l := range cfg.TypeLimits {
			c.TypeLimits[t] = max(1, l/n)
		}
	}
	return c
}

// newShards builds q's sub-queues (cfg.Shards > 1) and checks the number
// of shards against the one stored at the installation's first start.
func (q *Queue) newShards(ctx context.Context, rdb redis.UniversalClient, cfg Config) error {
	if err := checkShardCount(ctx, rdb, cfg.Prefix, cfg.Shards); err != nil {
		return err
	}
	if cfg.Shards <= 1 {
		return nil
	}
	q.keys = NewKeys(GlobalPrefix(cfg.Prefix))
	q.shards = make([]*Queue, cfg.Shards)
	for i := range q.shards {
		c := shardConfig(cfg, i, cfg.Shards)
		q.shards[i] = &Queue{rdb: rdb, keys: NewKeys(c.Prefix), cfg: c, obs: cfg.Observer,
			typeLimits: typeLimitsArg(c.TypeLimits), learned: q.learned, global: q}
	}
	return nil
}

// checkShardCount stores n as the installation's number of shards, or
// checks it against the one stored (P{g}:shard-count, which the shard
// leases share). With one shard and nothing stored it stores nothing: an
// installation on today's keys stays as it is.
func checkShardCount(ctx context.Context, rdb redis.UniversalClient, prefix string, n int) error {
	key := NewKeys(GlobalPrefix(prefix)).ShardCount()
	if n > 1 {
		if err := rdb.SetNX(ctx, key, n, 0).Err(); err != nil {
			return fmt.Errorf("redisq: store the number of shards: %w", err)
		}
	}
	v, err := rdb.Get(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("redisq: read the number of shards: %w", err)
	}
	if stored, _ := strconv.Atoi(v); stored != max(n, 1) {
		return fmt.Errorf("%w: configured %d, stored %s (the number of shards is fixed for an installation's life)", ErrShardCount, max(n, 1), v)
	}
	return nil
}

// splitCall runs call with each shard's items of xs (the shards
// concurrently) and returns the answers in xs's order: call answers one
// value per item it is given, in its order.
func splitCall[T, R any](q *Queue, xs []T, tenant func(T) string, call func(s *Queue, part []T) ([]R, error)) ([]R, error) {
	idx := q.shardIndexes(len(xs), func(i int) string { return tenant(xs[i]) })
	out := make([]R, len(xs))
	err := q.onShards(idx, func(s *Queue, ix []int) error {
		rs, err := call(s, pick(xs, ix))
		if err != nil {
			return err
		}
		if len(rs) != len(ix) {
			return fmt.Errorf("redisq: %d answers for %d items", len(rs), len(ix))
		}
		for k, i := range ix {
			out[i] = rs[k]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ShardDemand is shard i's demand for the global limits ([Grants.Report]):
// per level, the sum of the weights of its tenants with jobs waiting
// there; per limited type of types, the sum over its waiting tenants (a
// tenant's waiting jobs are not indexed by type, so every waiting tenant
// counts toward every limited type; the caller narrows Types to the names
// it saw the shard admit or hold, as the fetcher does).
func (q *Queue) ShardDemand(ctx context.Context, i int, types []string) (Demand, error) {
	s := q.Shard(i)
	pipe := s.rdb.Pipeline()
	levels := make([]*redis.StringSliceCmd, 3)
	for k, key := range s.keys.FairQueues() {
		levels[k] = pipe.ZRange(ctx, key, 0, -1)
	}
	weights := pipe.HGetAll(ctx, s.keys.TenantWeights())
	if _, err := pipe.Exec(ctx); err != nil {
		return Demand{}, fmt.Errorf("redisq: shard %d demand: %w", i, err)
	}
	w := weights.Val()
	var sums [3]int64
	for k, l := range levels {
		for _, t := range l.Val() {
			sums[k] += int64(tenantWeight(w[t]))
		}
	}
	d := Demand{High: sums[0], Normal: sums[1], Low: sums[2]}
	if all := sums[0] + sums[1] + sums[2]; all > 0 && len(types) > 0 {
		d.Types = make(map[string]int64, len(types))
		for _, t := range types {
			d.Types[t] = all
		}
	}
	return d, nil
}

// tenantWeight reads a stored tenant weight: 1 when absent or unreadable,
// within 1..MaxTenantWeight.
func tenantWeight(v string) int {
	n, err := strconv.Atoi(v)
	if err != nil {
		return 1
	}
	return min(max(n, 1), MaxTenantWeight)
}

// NewShardLeases returns the leases of q's shards on q's client: the
// base prefix and number of shards are q's, ttl the lease time (0 =
// [DefaultShardLeaseTTL]).
func (q *Queue) NewShardLeases(ctx context.Context, ttl time.Duration) (*ShardLeases, error) {
	return NewShardLeases(ctx, q.rdb, ShardLeasesConfig{Prefix: q.cfg.Prefix, Shards: q.ShardCount(), TTL: ttl,
		Observer: q.obs, Clock: q.cfg.Clock})
}

// NewGrants returns the grants of q's global limits ([Config.GlobalLimit],
// [Config.TypeLimits], [Config.Window]) between its shards, in the
// cross-shard keys, with grant periods of period (0 = [DefaultGrantPeriod]).
func (q *Queue) NewGrants(ctx context.Context, period time.Duration) (*Grants, error) {
	return NewGrants(ctx, q.rdb, GlobalPrefix(q.cfg.Prefix), GrantsConfig{Limit: q.cfg.GlobalLimit, TypeLimits: q.cfg.TypeLimits,
		Window: q.cfg.Window, Period: period, Observer: q.obs, Clock: q.cfg.Clock})
}

// gather runs read on every shard concurrently and returns the answers in
// shard order, or the first error.
func gather[T any](q *Queue, read func(s *Queue) (T, error)) ([]T, error) {
	parts := make([]T, q.ShardCount())
	err := q.eachShard(func(i int, s *Queue) (err error) {
		parts[i], err = read(s)
		return err
	})
	if err != nil {
		return nil, err
	}
	return parts, nil
}

// sumShards runs count on every shard concurrently and returns the sum of
// the answers, with the first error (the sum then holds the shards that
// answered).
func sumShards[T int | int64](q *Queue, count func(s *Queue) (T, error)) (T, error) {
	ns := make([]T, q.ShardCount())
	err := q.eachShard(func(i int, s *Queue) (err error) {
		ns[i], err = count(s)
		return err
	})
	var sum T
	for _, n := range ns {
		sum += n
	}
	return sum, err
}
