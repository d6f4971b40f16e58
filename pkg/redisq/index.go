package redisq

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// ListOptions select and page the groups of [Queue.ListGroups].
type ListOptions struct {
	// Tenant limits the list to one tenant's groups ("" = every tenant).
	Tenant string
	// States keeps only groups in one of these states (none = all).
	States []contracts.GroupState
	// Limit is the most groups returned, 1 to [MaxListLimit]; 0 = 50.
	Limit int
	// Cursor continues a list where an earlier call's next cursor left it
	// ("" = from the newest group).
	Cursor string
}

// MaxListLimit is the largest ListOptions.Limit.
const MaxListLimit = 1000

// ListGroups lists groups newest first (by creation time) from the group
// indexes that enqueue.lua keeps. With States it reads up to 10 × Limit
// index entries per call and may return fewer than Limit groups with a
// non-empty next cursor; next is "" at the end of the list. Entries whose
// group has expired are removed from the indexes as they are met.
func (q *Queue) ListGroups(ctx context.Context, o ListOptions) (groups []*GroupInfo, next string, err error) {
	if o.Limit <= 0 {
		o.Limit = 50
	}
	if o.Limit > MaxListLimit {
		return nil, "", fmt.Errorf("redisq: list limit %d: at most %d", o.Limit, MaxListLimit)
	}
	index := q.keys.GroupIndex()
	if o.Tenant != "" {
		index = q.keys.TenantGroupIndex(o.Tenant)
	}
	score, member, err := parseCursor(o.Cursor)
	if err != nil {
		return nil, "", err
	}
	want := map[contracts.GroupState]bool{}
	for _, s := range o.States {
		want[s] = true
	}
	budget := o.Limit
	if len(want) > 0 {
		budget = 10 * o.Limit
	}
	for budget > 0 && len(groups) < o.Limit {
		page, err := q.indexPage(ctx, index, score, member, min(budget, 200))
		if err != nil {
			return nil, "", err
		}
		if len(page) == 0 {
			return groups, "", nil
		}
		budget -= len(page)
		refs := make([]contracts.GroupRef, len(page))
		for i, z := range page {
			refs[i] = q.indexRef(o.Tenant, z.Member.(string))
		}
		infos, err := q.groupsInfo(ctx, refs)
		if err != nil {
			return nil, "", err
		}
		var gone []any
		for i, z := range page {
			score, member = int64(z.Score), z.Member.(string)
			info := infos[i]
			if info == nil {
				gone = append(gone, member)
				continue
			}
			if len(want) > 0 && !want[info.State] {
				continue
			}
			groups = append(groups, info)
			if len(groups) == o.Limit {
				break
			}
		}
		if len(gone) > 0 {
			q.pruneIndex(ctx, o.Tenant, index, gone)
		}
	}
	return groups, makeCursor(score, member), nil
}

// indexRef is the group of an index member.
func (q *Queue) indexRef(tenant, member string) contracts.GroupRef {
	if tenant != "" {
		return contracts.Group(tenant, member)
	}
	t, id, _ := strings.Cut(member, ":")
	return contracts.Group(t, id)
}

// pruneIndex removes the members of expired groups from index and from
// the other index.
func (q *Queue) pruneIndex(ctx context.Context, tenant, index string, gone []any) {
	pipe := q.rdb.Pipeline()
	pipe.ZRem(ctx, index, gone...)
	for _, m := range gone {
		g := q.indexRef(tenant, m.(string))
		if tenant != "" {
			pipe.ZRem(ctx, q.keys.GroupIndex(), g.Tenant+":"+g.ID)
		} else {
			pipe.ZRem(ctx, q.keys.TenantGroupIndex(g.Tenant), g.ID)
		}
	}
	_, _ = pipe.Exec(ctx)
}

// indexPage returns up to n entries of index older than the cursor
// (score, member), newest first; score < 0 starts at the newest.
func (q *Queue) indexPage(ctx context.Context, index string, score int64, member string, n int) ([]redis.Z, error) {
	if score < 0 {
		return q.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: index, Start: "+inf", Stop: "-inf",
			ByScore: true, Rev: true, Count: int64(n)}).Result()
	}
	// Same score, lower member (REV orders equal scores by member,
	// descending), then lower scores.
	same, err := q.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: index, Start: score, Stop: score,
		ByScore: true, Rev: true}).Result()
	if err != nil {
		return nil, err
	}
	var out []redis.Z
	for _, z := range same {
		if z.Member.(string) < member && len(out) < n {
			out = append(out, z)
		}
	}
	if len(out) == n {
		return out, nil
	}
	rest, err := q.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: index, Start: "(" + strconv.FormatInt(score, 10),
		Stop: "-inf", ByScore: true, Rev: true, Count: int64(n - len(out))}).Result()
	if err != nil {
		return nil, err
	}
	return append(out, rest...), nil
}

// groupsInfo reads several groups in one pipeline; a group that does not
// exist is nil.
func (q *Queue) groupsInfo(ctx context.Context, refs []contracts.GroupRef) ([]*GroupInfo, error) {
	pipe := q.rdb.Pipeline()
	metas := make([]*redis.MapStringStringCmd, len(refs))
	lens := make([]*redis.IntCmd, len(refs))
	nrs := make([]*redis.StringCmd, len(refs))
	for i, g := range refs {
		metas[i] = pipe.HGetAll(ctx, q.keys.GroupMeta(g))
		lens[i] = pipe.LLen(ctx, q.keys.GroupJobs(g))
		nrs[i] = pipe.Get(ctx, q.keys.CongestionCount(g))
	}
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return nil, fmt.Errorf("redisq: list groups: %w", err)
	}
	out := make([]*GroupInfo, len(refs))
	for i, g := range refs {
		h := metas[i].Val()
		if len(h) == 0 {
			continue
		}
		nr, _ := nrs[i].Int64()
		out[i] = groupInfo(g, h, lens[i].Val(), nr)
	}
	return out, nil
}

func makeCursor(score int64, member string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(score, 10) + ":" + member))
}

func parseCursor(c string) (int64, string, error) {
	if c == "" {
		return -1, "", nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", ErrBadCursor
	}
	s, m, ok := strings.Cut(string(raw), ":")
	score, err := strconv.ParseInt(s, 10, 64)
	if !ok || err != nil || score < 0 {
		return 0, "", ErrBadCursor
	}
	return score, m, nil
}

// LinkRetry records that group retry was made from the failed jobs of
// group from; both links expire after ttl.
func (q *Queue) LinkRetry(ctx context.Context, from, retry contracts.GroupRef, ttl time.Duration) error {
	pipe := q.rdb.TxPipeline()
	pipe.Set(ctx, q.keys.GroupRetryOf(retry), from.ID, ttl)
	pipe.RPush(ctx, q.keys.GroupRetries(from), retry.ID)
	pipe.Expire(ctx, q.keys.GroupRetries(from), ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("redisq: link retry %s -> %s: %w", from, retry.ID, err)
	}
	return nil
}

// Links returns the group a group was retried from ("" = none) and the
// retry groups made from it.
func (q *Queue) Links(ctx context.Context, g contracts.GroupRef) (retryOf string, retries []string, err error) {
	pipe := q.rdb.Pipeline()
	of := pipe.Get(ctx, q.keys.GroupRetryOf(g))
	rs := pipe.LRange(ctx, q.keys.GroupRetries(g), 0, -1)
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return "", nil, fmt.Errorf("redisq: links %s: %w", g, err)
	}
	return of.Val(), rs.Val(), nil
}
