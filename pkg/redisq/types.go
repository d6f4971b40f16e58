package redisq

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Job types announced by workers (docs/ARCHITECTURE.md §5): each worker
// instance announces the types it serves with a heartbeat; a type is live
// while some announcement has not expired. Admission gives READY room only
// to live types, so jobs of a type no worker serves are held and reported
// instead of filling READY for everyone.

// AnnounceTypes records that a worker serves types for the next ttl. Call
// it again before ttl runs out (every ttl/3, say) to stay live.
func (q *Queue) AnnounceTypes(ctx context.Context, types []string, ttl time.Duration) error {
	if q.global != nil {
		return q.global.AnnounceTypes(ctx, types, ttl)
	}
	if len(types) == 0 {
		return nil
	}
	until := float64(q.clockNow().Add(ttl).UnixMilli())
	zs := make([]redis.Z, len(types))
	for i, t := range types {
		zs[i] = redis.Z{Score: until, Member: t}
	}
	// GT: an announcement never shortens another instance's.
	if err := q.rdb.ZAddArgs(ctx, q.keys.WorkerTypes(), redis.ZAddArgs{GT: true, Members: zs}).Err(); err != nil {
		return fmt.Errorf("redisq: announce types: %w", err)
	}
	return nil
}

// LiveTypes returns the job types some worker announced and whose
// announcement has not expired. Types whose last announcement expired over
// an hour ago are forgotten.
func (q *Queue) LiveTypes(ctx context.Context) ([]string, error) {
	if q.global != nil {
		return q.global.LiveTypes(ctx)
	}
	now := q.clockNow().UnixMilli()
	k := q.keys.WorkerTypes()
	pipe := q.rdb.Pipeline()
	pipe.ZRemRangeByScore(ctx, k, "-inf", strconv.FormatInt(now-time.Hour.Milliseconds(), 10))
	live := pipe.ZRangeByScore(ctx, k, &redis.ZRangeBy{Min: "(" + strconv.FormatInt(now, 10), Max: "+inf"})
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redisq: live types: %w", err)
	}
	return live.Val(), nil
}

// clockNow is Config.Clock, or the local clock.
func (q *Queue) clockNow() time.Time {
	if q.cfg.Clock != nil {
		return q.cfg.Clock()
	}
	return time.Now()
}

// Now returns the time of the scripts' clock: Redis TIME, or Config.Clock
// when it is set. Times compared with the ones scripts write (claims, for
// [ResultsSettledThrough]) must be read from it.
func (q *Queue) Now(ctx context.Context) (time.Time, error) {
	if q.cfg.Clock != nil {
		return q.cfg.Clock(), nil
	}
	t, err := q.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("redisq: time: %w", err)
	}
	return t, nil
}
