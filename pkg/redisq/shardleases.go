package redisq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultShardLeaseTTL is how long a shard lease and its holder's heartbeat
// last without a [ShardLeases.Hold]; holders call Hold every third of it, at
// most every second (a fetcher), so four calls may fail in a row before a
// holder loses its shards. It bounds how long the shards of a holder that
// died wait for another to take them.
const DefaultShardLeaseTTL = 5 * time.Second

// MaxShards is the most logical shards: one per Redis Cluster hash slot.
const MaxShards = 16384

// ErrStaleEpoch is returned by [ShardLeases.Fence] when the shard's fence
// is above the epoch: the lease of that epoch was taken over since.
var ErrStaleEpoch = errors.New("redisq: shard lease epoch below the shard's fence")

var (
	shardLeaseScript = loadScript("shard_lease")
	shardFenceScript = loadScript("shard_fence")
)

// ShardLeasesConfig configures [ShardLeases]. Zero values mean the defaults
// stated per field.
type ShardLeasesConfig struct {
	// Prefix is the base prefix P; default DefaultPrefix. The leases live in
	// the cross-shard keys under [GlobalPrefix](P), shard i's fence under
	// [ShardPrefix](P, i). With more than one shard P must not carry a hash
	// tag of its own (it would put every shard in one slot).
	Prefix string
	// Shards is the number of logical shards N, 1..[MaxShards]; 0 means 1.
	// Every holder of an installation must count the same N: the first
	// [ShardLeases.Hold] stores it, and a Hold with another N is refused.
	Shards int
	// TTL is how long a lease and its holder's heartbeat last without a
	// Hold; default [DefaultShardLeaseTTL], at least 3ms. A holder that
	// stops calling loses its shards TTL after its last call.
	TTL time.Duration
	// Observer, when set, receives every script's duration.
	Observer Observer
	// Clock, when set, replaces Redis TIME inside the scripts (tests only).
	Clock func() time.Time
}

func (c *ShardLeasesConfig) setDefaults() {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Shards == 0 {
		c.Shards = 1
	}
	if c.TTL == 0 {
		c.TTL = DefaultShardLeaseTTL
	}
}

func (c *ShardLeasesConfig) validate() error {
	if c.Shards < 1 || c.Shards > MaxShards {
		return fmt.Errorf("redisq: %d shards: must be between 1 and %d", c.Shards, MaxShards)
	}
	if c.TTL < 3*time.Millisecond {
		return fmt.Errorf("redisq: shard lease TTL %s: must be at least 3ms", c.TTL)
	}
	if c.Shards > 1 && hasHashTag(c.Prefix) {
		return fmt.Errorf("redisq: prefix %q carries a hash tag: with %d shards each shard's keys carry their own", c.Prefix, c.Shards)
	}
	return nil
}

// hasHashTag reports whether keys that start with prefix all have the same
// Redis Cluster hash tag: a '{' followed by a '}' with a byte between.
func hasHashTag(prefix string) bool {
	open := strings.IndexByte(prefix, '{')
	return open >= 0 && strings.IndexByte(prefix[open+1:], '}') > 0
}

// ShardLeases spreads N logical shards (docs/ARCHITECTURE.md §11.1) evenly
// over the holders (fetchers) that ask for them, under leases with epochs,
// and fences each shard with the epoch of its newest lease. The leases are
// kept in the cross-shard keys ([GlobalPrefix]), one slot, so each Hold is
// one script; each shard's fence is a key of the shard's own slot
// ([Keys.Fence]). It is safe for concurrent use.
//
// Each holder calls [ShardLeases.Hold] every third of the TTL or so, and
// passes the epoch Hold gave for a shard to the shard's scripts, which
// refuse a call whose epoch is below the shard's fence (lib.lua fence_ok):
// a holder that lost a shard (it stopped calling for longer than the TTL,
// and another holder took the shard) changes nothing there, whatever it
// still believes. [ShardLeases.Release] on a clean stop gives the shards
// back at once.
type ShardLeases struct {
	rdb    redis.UniversalClient
	cfg    ShardLeasesConfig
	global Keys
	shards []Keys
}

// NewShardLeases returns the shard leases on rdb. It checks cfg and loads
// the scripts.
func NewShardLeases(ctx context.Context, rdb redis.UniversalClient, cfg ShardLeasesConfig) (*ShardLeases, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l := &ShardLeases{rdb: rdb, cfg: cfg, global: NewKeys(GlobalPrefix(cfg.Prefix)), shards: make([]Keys, cfg.Shards)}
	for i := range l.shards {
		l.shards[i] = NewKeys(ShardPrefix(cfg.Prefix, i))
	}
	for name, s := range map[string]*redis.Script{"shard_lease": shardLeaseScript, "shard_fence": shardFenceScript} {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			return nil, fmt.Errorf("redisq: load %s script: %w", name, err)
		}
	}
	return l, nil
}

// Shards is the number of logical shards.
func (l *ShardLeases) Shards() int { return l.cfg.Shards }

// TTL is how long a lease lasts without a Hold.
func (l *ShardLeases) TTL() time.Duration { return l.cfg.TTL }

// ShardKeys is the key builder of shard i ([ShardPrefix]), 0 <= i < N.
func (l *ShardLeases) ShardKeys(i int) Keys { return l.shards[i] }

func (l *ShardLeases) now() string {
	if l.cfg.Clock == nil {
		return ""
	}
	return strconv.FormatInt(l.cfg.Clock().UnixMilli(), 10)
}

func (l *ShardLeases) leaseKeys() []string {
	return []string{l.global.ShardHolders(), l.global.ShardLeases(), l.global.ShardEpochs(), l.global.ShardCount()}
}

// Hold records holder alive for the TTL and brings its leases to its even
// share of the shards over the live holders (N / H, floor or ceil: the
// first N mod H holders in the order of their ids, as Lua sorts strings,
// get one more), in one
// script: it renews the leases it keeps, frees those beyond its share at
// once (so a joining holder gets shards without waiting for them to
// expire), and takes free or expired shards up to its share, each take
// with an epoch above every earlier epoch of the shard. Then it raises the
// fence of each shard it holds to the lease's epoch ([ShardLeases.Fence]).
//
// It returns shard → epoch for the shards the holder may work on until
// the TTL has passed since the call began: those held and fenced. A holder
// whose Hold fails keeps the shards of its last successful Hold until then. A shard whose
// fence is above its epoch (its lease was taken over in a Redis that lost
// the writes since, §6.7) is given back and left out; a shard whose fence
// could not be raised (its primary unreachable) is left out, kept, and
// named in the error, which Hold returns beside the shards it did fence.
func (l *ShardLeases) Hold(ctx context.Context, holder string) (map[int]uint64, error) {
	if holder == "" {
		return nil, errors.New("redisq: shard leases: no holder")
	}
	v, err := runScript(ctx, l.rdb, l.cfg.Observer, "shard_lease", shardLeaseScript, l.leaseKeys(),
		"hold", holder, l.now(), l.cfg.Shards, ms(l.cfg.TTL))
	if err != nil {
		return nil, err
	}
	reply := toList(v)
	if len(reply) < 2 || len(reply)%2 != 0 {
		return nil, fmt.Errorf("redisq: shard_lease script: reply of %d values", len(reply))
	}
	held := make(map[int]uint64, (len(reply)-2)/2)
	for i := 2; i+1 < len(reply); i += 2 {
		held[int(toInt(reply[i]))] = uint64(toInt(reply[i+1]))
	}
	var errs []error
	var stale []int
	for _, s := range slices.Sorted(maps.Keys(held)) {
		err := l.Fence(ctx, s, held[s])
		switch {
		case err == nil:
		case errors.Is(err, ErrStaleEpoch):
			stale = append(stale, s)
			delete(held, s)
		default:
			errs = append(errs, fmt.Errorf("redisq: fence of shard %d: %w", s, err))
			delete(held, s)
		}
	}
	if len(stale) > 0 {
		if err := l.Release(ctx, holder, stale...); err != nil {
			errs = append(errs, err)
		}
	}
	return held, errors.Join(errs...)
}

// Release gives holder's leases on shards back at once, or, with no shards,
// all its leases, and removes holder from the live holders (a clean stop:
// the others' next Hold takes its shards and counts it out of their
// shares). A shard whose lease is not holder's is left alone.
func (l *ShardLeases) Release(ctx context.Context, holder string, shards ...int) error {
	if holder == "" {
		return errors.New("redisq: shard leases: no holder")
	}
	args := make([]any, 0, 2+len(shards))
	args = append(args, "release", holder)
	for _, s := range shards {
		if s < 0 || s >= l.cfg.Shards {
			return fmt.Errorf("redisq: shard %d: not in 0..%d", s, l.cfg.Shards-1)
		}
		args = append(args, s)
	}
	_, err := runScript(ctx, l.rdb, l.cfg.Observer, "shard_lease", shardLeaseScript, l.leaseKeys(), args...)
	return err
}

// Fence raises shard's fence ([Keys.Fence], in the shard's own slot) to
// epoch, the epoch of a lease on it, unless the fence is above it already:
// then it returns an error wrapping [ErrStaleEpoch], and the lease's holder
// must not work on the shard. The fence is never lowered; raising it to its
// value again is harmless. [ShardLeases.Hold] fences the shards it holds.
func (l *ShardLeases) Fence(ctx context.Context, shard int, epoch uint64) error {
	ok, fence, err := l.fence(ctx, "raise", shard, epoch)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: shard %d, epoch %d, fence %d", ErrStaleEpoch, shard, epoch, fence)
	}
	return nil
}

// FenceOK reports whether a shard script called with epoch may change
// shard, by the check the shard's scripts make (lib.lua fence_ok): epoch 0
// (a caller without shard leases) always may, any other while it is not
// below the shard's fence. It changes nothing.
func (l *ShardLeases) FenceOK(ctx context.Context, shard int, epoch uint64) (bool, error) {
	ok, _, err := l.fence(ctx, "check", shard, epoch)
	return ok, err
}

func (l *ShardLeases) fence(ctx context.Context, op string, shard int, epoch uint64) (bool, uint64, error) {
	if shard < 0 || shard >= l.cfg.Shards {
		return false, 0, fmt.Errorf("redisq: shard %d: not in 0..%d", shard, l.cfg.Shards-1)
	}
	if op == "raise" && epoch == 0 {
		return false, 0, fmt.Errorf("redisq: shard %d: fence at epoch 0", shard)
	}
	k := l.shards[shard]
	v, err := runScript(ctx, l.rdb, l.cfg.Observer, "shard_fence", shardFenceScript, []string{k.Fence()},
		k.Prefix(), op, strconv.FormatUint(epoch, 10))
	if err != nil {
		return false, 0, err
	}
	reply := toList(v)
	if len(reply) != 2 {
		return false, 0, fmt.Errorf("redisq: shard_fence script: reply of %d values", len(reply))
	}
	return toInt(reply[0]) == 1, uint64(toInt(reply[1])), nil
}

// ShardLease is one shard's lease as stored.
type ShardLease struct {
	Shard  int
	Holder string
	Epoch  uint64
	// Until is when the lease runs out unless renewed; a lease whose Until
	// has passed is free to take.
	Until time.Time
}

// Leases reads the stored leases, in shard order (expired ones included,
// shards never leased or given back left out).
func (l *ShardLeases) Leases(ctx context.Context) ([]ShardLease, error) {
	all, err := l.rdb.HGetAll(ctx, l.global.ShardLeases()).Result()
	if err != nil {
		return nil, fmt.Errorf("redisq: shard leases: %w", err)
	}
	out := make([]ShardLease, 0, len(all))
	for f, v := range all {
		s, err1 := strconv.Atoi(f)
		until, rest, ok1 := strings.Cut(v, ":")
		epoch, who, ok2 := strings.Cut(rest, ":")
		u, err2 := strconv.ParseInt(until, 10, 64)
		e, err3 := strconv.ParseUint(epoch, 10, 64)
		if err1 != nil || err2 != nil || err3 != nil || !ok1 || !ok2 {
			return nil, fmt.Errorf("redisq: shard lease %s: %q", f, v)
		}
		out = append(out, ShardLease{Shard: s, Holder: who, Epoch: e, Until: time.UnixMilli(u)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Shard < out[j].Shard })
	return out, nil
}
