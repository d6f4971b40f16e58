// Package conns opens what every process of bulkaction shares: the Redis
// client with the queue built on it, and the NATS connection with its
// JetStream handle and streams. It maps the settings to the queue's and the
// streams' configuration, and reads the queue gauges. It links no service,
// so the CLI can use it.
package conns

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Conns are the shared connections of a process.
type Conns struct {
	Redis redis.UniversalClient
	NC    *nats.Conn
	JS    jetstream.JetStream
	Queue *redisq.Queue
	Names contracts.Names
}

// Close closes the connections (draining NATS).
func (c *Conns) Close() {
	if c.NC != nil {
		_ = c.NC.Drain()
		deadline := time.Now().Add(5 * time.Second)
		for !c.NC.IsClosed() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		c.NC.Close()
	}
	if c.Redis != nil {
		_ = c.Redis.Close()
	}
}

// QueueConfig maps the settings to the queue's configuration. The settings
// are valid (config.Load checks them): an invalid TYPE_RATE_LIMITS would be
// dropped here.
func QueueConfig(cfg *config.Config) redisq.Config {
	typeLimits, _ := cfg.TypeLimitsPerWindow()
	return redisq.Config{
		Prefix:            cfg.RedisPrefix,
		Shards:            cfg.RedisShards,
		Alpha:             cfg.Alpha,
		Mode:              cfg.AdmissionMode,
		GlobalLimit:       cfg.GlobalRps,
		Window:            config.Ms(cfg.RateLimitWindowMs),
		Burst:             config.Ms(cfg.PacingBurstMs),
		TypeLimits:        typeLimits,
		ActiveStaleAfter:  config.Ms(cfg.ActiveGroupStaleMs),
		Lease:             config.Ms(cfg.LeaseMs),
		ClaimTTL:          cfg.ClaimTTL,
		BaseBackoff:       config.Ms(cfg.BaseBackoffMs),
		MaxBackoff:        config.Ms(cfg.MaxBackoffMs),
		DisableCongestion: !cfg.CongestionEnabled,
		JobTTL:            cfg.JobTTL,
		DropSucceededJobs: !cfg.KeepSucceededJobs,
		GroupTTL:          cfg.GroupTTL,

		Adaptive: redisq.AdaptiveConfig{
			Enabled: cfg.AdaptiveRateEnabled, TimeoutThrottles: cfg.AdaptiveRateTimeoutThrottles,
			Increase: cfg.AdaptiveRateIncrease, IncreaseRatio: cfg.AdaptiveRateIncreaseRatio, Decrease: cfg.AdaptiveRateDecrease, Floor: cfg.AdaptiveRateFloor,
			Ceiling: cfg.AdaptiveRateCeiling, DecreaseHold: cfg.AdaptiveRateDecreaseHold,
			MaxDestinations: cfg.AdaptiveRateMaxDestinations, MaxDestinationsPerTenant: cfg.AdaptiveRateMaxDestinationsPerTenant,
		},

		TenantMaxQueuedJobs:   int64(cfg.TenantMaxQueuedJobs),
		TenantMaxActiveGroups: int64(cfg.TenantMaxActiveGroups),
	}
}

// StreamSettings maps the settings to the streams' configuration.
func StreamSettings(cfg *config.Config) natsutil.StreamSettings {
	storage := jetstream.FileStorage
	if cfg.StreamStorage == "memory" {
		storage = jetstream.MemoryStorage
	}
	return natsutil.StreamSettings{
		Storage: storage, Replicas: cfg.StreamReplicas, MaxAge: cfg.StreamMaxAge,
		DuplicateWindow: cfg.DuplicateWindow, MaxMsgSize: maxMsgSize(cfg.MaxMsgSize),
		SubmitMaxBytes: int64(cfg.StreamSubmitMaxBytes), ReadyMaxBytes: int64(cfg.StreamReadyMaxBytes),
		ResultMaxBytes: int64(cfg.StreamResultMaxBytes),
		EventsMaxBytes: int64(cfg.StreamEventsMaxBytes), DLQMaxBytes: int64(cfg.StreamDLQMaxBytes),
		DLQMaxMsgsPerSubject: int64(cfg.StreamDLQPerSubject), EventsMaxMsgsPerSubject: int64(cfg.StreamEventsPerGroup),
	}
}

// Ready maps the settings to READY's room and packing, defaults applied:
// READY_QUEUE_MAX_SIZE (0 = [handoff.ReadyPerWorkerSlot] per worker slot),
// READY_PACK_JOBS, and the worker slots WORKER_COUNT × WORKER_INSTANCES.
// The fetchers, the dispatchers and the readers of READY's room all take
// it from here.
func Ready(cfg *config.Config) handoff.ReadyConfig {
	return handoff.ReadyConfig{
		Capacity: cfg.ReadyQueueMaxSize, PackJobs: cfg.ReadyPackJobs,
		WorkerSlots: cfg.WorkerCount * cfg.WorkerInstances,
	}.WithDefaults()
}

// TenantSubmitBytes is the gateway's room per tenant on SUBMIT
// (GATEWAY_TENANT_SUBMIT_BYTES): the setting, or a quarter of SUBMIT's byte
// limit (none when SUBMIT has none); 0 means no limit.
func TenantSubmitBytes(cfg *config.Config) int64 {
	switch v := int64(cfg.GatewayTenantSubmitBytes); {
	case v > 0:
		return v
	case v < 0:
		return 0
	}
	submit := StreamSettings(cfg).SubmitLimit()
	if submit <= 0 {
		return 0
	}
	return max(submit/4, int64(cfg.MaxMsgSize))
}

// maxMsgSize converts MAX_MSG_SIZE to the streams' int32, saturating
// rather than wrapping (config.Validate keeps it at most 64 MiB).
func maxMsgSize(n int) int32 {
	if n > math.MaxInt32 {
		return math.MaxInt32
	}
	return int32(n)
}

// minPoolSize is the fewest Redis connections (per node) a process keeps
// in its pool.
const minPoolSize = 32

// Connect opens Redis and NATS, provisions the streams and builds the queue.
// obs receives script durations (nil = none). The connections use the
// credentials and TLS settings of cfg ([RedisOptions], [NatsOptions]);
// errors show the URLs redacted and never hold a secret.
func Connect(ctx context.Context, cfg *config.Config, name string, obs redisq.Observer) (*Conns, error) {
	rdb, err := RedisClient(cfg, minPoolSize, 0)
	if err != nil {
		return nil, err
	}
	nopts, err := NatsOptions(cfg, name)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	c := &Conns{Redis: rdb, Names: contracts.Names{Prefix: cfg.SubjectPrefix}}
	if err := c.Redis.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis %s: %w", config.RedactURL(cfg.RedisURL), ScrubError(cfg, err))
	}
	qc := QueueConfig(cfg)
	qc.Observer = obs
	if c.Queue, err = redisq.New(ctx, c.Redis, qc); err != nil {
		c.Close()
		return nil, ScrubError(cfg, err)
	}
	nopts = append(nopts, nats.MaxReconnects(-1), nats.RetryOnFailedConnect(false))
	c.NC, err = nats.Connect(cfg.NatsURL, nopts...)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("nats %s: %w", config.RedactURL(cfg.NatsURL), ScrubError(cfg, err))
	}
	if c.JS, err = jetstream.New(c.NC); err != nil {
		c.Close()
		return nil, err
	}
	if err := natsutil.EnsureStreams(ctx, c.JS, c.Names, StreamSettings(cfg)); err != nil {
		c.Close()
		if errors.Is(err, natsutil.ErrStreamResources) {
			return nil, fmt.Errorf("%w (lower %s_STREAM_SUBMIT_MAX_BYTES, _READY_MAX_BYTES or _RESULT_MAX_BYTES, "+
				"or give the server more JetStream store)", err, config.Prefix)
		}
		return nil, err
	}
	return c, nil
}

// QueueState reads the queue gauges from Redis and JetStream.
func QueueState(ctx context.Context, c *Conns, cfg *config.Config) (telemetry.QueueState, error) {
	var s telemetry.QueueState
	levels, err := c.Queue.GroupsPerLevel(ctx)
	if err != nil {
		return s, err
	}
	s.GroupsPerLevel = map[string]int64{}
	for l, n := range levels {
		s.GroupsPerLevel[string(l)] = n
	}
	sizes, err := c.Queue.Sizes(ctx)
	if err != nil {
		return s, err
	}
	s.NonReadySize, s.InflightSize = sizes.BackingOff, sizes.Inflight
	sum, err := c.Queue.SystemCongestion(ctx)
	if err != nil {
		return s, err
	}
	s.ActiveTenants = sum.ActiveTenants
	s.CongestionLevels = map[string]int64{}
	for l, n := range sum.GroupsPerLevel {
		s.CongestionLevels[string(l)] = n
	}
	ready, err := handoff.ReadyJobs(ctx, c.JS, c.Names)
	if err != nil {
		return s, err
	}
	s.ReadySize = int64(ready)
	s.GlobalRateLimit = float64(cfg.GlobalRps) / (float64(cfg.RateLimitWindowMs) / 1000)
	if s.GroupsWaiting, err = GroupsWaiting(ctx, c, Ready(cfg).Capacity); err != nil {
		return s, err
	}
	if cfg.AdaptiveRateEnabled {
		if err := destinationState(ctx, c, &s); err != nil {
			return s, err
		}
	}
	return s, nil
}

// destinationState reads the adaptive rate's learned rates into s: the
// first [telemetry.MaxDestinationSeries] destinations in name order, and
// the number tracked.
func destinationState(ctx context.Context, c *Conns, s *telemetry.QueueState) error {
	r, err := c.Queue.DestinationRates(ctx)
	if err != nil {
		return err
	}
	s.DestinationsTracked = int64(len(r.Rates))
	s.Destinations = make([]telemetry.DestinationState, 0, min(len(r.Rates), telemetry.MaxDestinationSeries))
	for _, d := range r.Rates[:min(len(r.Rates), telemetry.MaxDestinationSeries)] {
		s.Destinations = append(s.Destinations, telemetry.DestinationState{Destination: d.Destination, Rate: d.Rate, Stopped: r.Stopped(d)})
	}
	return nil
}

// MaxWaitingGroups is the most groups [GroupsWaiting] examines per call
// (per scrape): the first of [redisq.Queue.CandidateGroups] in (tenant,
// groupId) order.
const MaxWaitingGroups = 1000

// GroupsWaiting counts, per hold reason ([redisq.HoldReasons]), the groups
// held back by it (bulk_action_groups_waiting{reason}), among the groups
// that may be running or queued ([redisq.Queue.CandidateGroups]: the queued
// ones and those the stuck watch list follows) and those admission passed
// by for their notBefore or sending windows ([redisq.Queue.ScheduleWaiting],
// out of the queue until then), at most MaxWaitingGroups of them (a group
// paused before its first admission is neither queued nor watched, so it
// is not counted). READY's room (readyCapacity per job
// type) is measured once; every reason is present in the map, 0 when no
// group has it.
func GroupsWaiting(ctx context.Context, c *Conns, readyCapacity int) (map[string]int64, error) {
	out := make(map[string]int64, len(redisq.HoldReasons))
	for _, r := range redisq.HoldReasons {
		out[string(r)] = 0
	}
	groups, err := c.Queue.CandidateGroups(ctx)
	if err != nil {
		return out, err
	}
	held, err := c.Queue.ScheduleWaiting(ctx)
	if err != nil {
		return out, err
	}
	if len(held) > 0 {
		groups = append(groups, held...)
		slices.SortFunc(groups, func(a, b contracts.GroupRef) int {
			return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.ID, b.ID))
		})
		groups = slices.Compact(groups)
	}
	if len(groups) == 0 {
		return out, nil
	}
	groups = groups[:min(len(groups), MaxWaitingGroups)]
	rooms, err := handoff.NewRoom(deps.Deps{NC: c.NC, JS: c.JS, Queue: c.Queue, Names: c.Names}, readyCapacity).Measure(ctx)
	if err != nil {
		return out, err
	}
	room := rooms.ByType
	if room == nil {
		room = map[string]int{}
	}
	holds, err := c.Queue.Holds(ctx, groups, redisq.HoldOptions{Room: room, RoomOther: rooms.Capacity})
	if err != nil {
		return out, err
	}
	for _, hs := range holds {
		for _, h := range hs {
			out[string(h.Reason)]++
		}
	}
	return out, nil
}

// CheckRedis returns warnings about Redis settings that put accepted work at
// risk: no AOF (a restart or failover loses recent writes) and a
// maxmemory-policy other than noeviction (Redis may drop queue keys). A
// server that does not answer CONFIG GET (a managed service, an ACL
// without it) gives no warning.
func CheckRedis(ctx context.Context, rdb redis.UniversalClient) []string {
	var warnings []string
	if v, err := rdb.ConfigGet(ctx, "appendonly").Result(); err == nil && v["appendonly"] == "no" {
		warnings = append(warnings, "Redis runs without AOF (appendonly no): a restart or failover loses recent "+
			"writes; use appendonly yes with appendfsync always (docs/operations.md)")
	}
	if v, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result(); err == nil {
		if p, ok := v["maxmemory-policy"]; ok && p != "noeviction" {
			warnings = append(warnings, "Redis maxmemory-policy is "+p+": under memory pressure it may evict "+
				"queue keys; use noeviction (docs/operations.md)")
		}
	}
	return warnings
}
