package redisq

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// LimiterStatus is the rate limiter's view of the current window.
type LimiterStatus struct {
	Window      int64 // window number (ms since epoch / window length)
	GlobalCount int64 // jobs admitted in this window
	GlobalLimit int64
	GroupCount  int64 // the group's jobs admitted in this window ("" group: 0)
	GroupLimit  int64 // the group's share: max(1, floor(global / active))
	Active      int64 // groups sharing the global limit
}

// LimiterStatus reports the current window's counts and limits, for groupID
// when it is not empty.
func (q *Queue) LimiterStatus(ctx context.Context, groupID string) (*LimiterStatus, error) {
	now, err := q.clockMs(ctx)
	if err != nil {
		return nil, err
	}
	w := now / ms(q.cfg.Window)
	pipe := q.rdb.Pipeline()
	g := pipe.Get(ctx, q.keys.RateLimitGlobal(w))
	var gr *redis.StringCmd
	if groupID != "" {
		gr = pipe.Get(ctx, q.keys.RateLimitGroup(groupID, w))
	}
	a := pipe.SCard(ctx, q.keys.ActiveGroups())
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return nil, fmt.Errorf("redisq: limiter status: %w", err)
	}
	st := &LimiterStatus{Window: w, GlobalLimit: int64(q.cfg.GlobalLimit), Active: a.Val()}
	st.GlobalCount, _ = g.Int64()
	if gr != nil {
		st.GroupCount, _ = gr.Int64()
	}
	st.GroupLimit = groupRate(st.GlobalLimit, st.Active)
	return st, nil
}

// ActiveGroups lists the groups sharing the global limit.
func (q *Queue) ActiveGroups(ctx context.Context) ([]string, error) {
	return q.rdb.SMembers(ctx, q.keys.ActiveGroups()).Result()
}

func isNil(err error) bool { return errors.Is(err, redis.Nil) }
