package redisq

import (
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"slices"
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
// group has expired are removed from the indexes as they are met. With
// shards a tenant's list is its shard's, and the list of every tenant
// merges the shards' lists in the same order (each shard reading up to
// Limit, or 10 × Limit, entries per call); its cursors are the same as
// with one shard.
func (q *Queue) ListGroups(ctx context.Context, o ListOptions) (groups []*GroupInfo, next string, err error) {
	if o.Limit <= 0 {
		o.Limit = 50
	}
	if o.Limit > MaxListLimit {
		return nil, "", fmt.Errorf("redisq: list limit %d: at most %d", o.Limit, MaxListLimit)
	}
	if q.sharded() {
		if o.Tenant != "" {
			return q.For(o.Tenant).ListGroups(ctx, o)
		}
		return q.mergedList(ctx, o)
	}
	page, err := q.listGroups(ctx, o)
	if err != nil {
		return nil, "", err
	}
	return page.infos(), page.next(), nil
}

// listedGroup is a group a list returns, with its index entry.
type listedGroup struct {
	info *GroupInfo
	at   indexPos
}

// indexPos is an entry of a group index: its score (creation ms) and
// member. Lists go through an index by descending position.
type indexPos struct {
	score  int64
	member string
}

func (a indexPos) compare(b indexPos) int {
	return cmp.Or(cmp.Compare(a.score, b.score), strings.Compare(a.member, b.member))
}

// listPage is one call's page of a list: its groups, and where the list
// stopped (at: the last entry read; end: the index has nothing after it).
type listPage struct {
	groups []listedGroup
	at     indexPos
	end    bool
}

func (p *listPage) infos() []*GroupInfo {
	if len(p.groups) == 0 {
		return nil
	}
	out := make([]*GroupInfo, len(p.groups))
	for i, g := range p.groups {
		out[i] = g.info
	}
	return out
}

func (p *listPage) next() string {
	if p.end {
		return ""
	}
	return makeCursor(p.at.score, p.at.member)
}

// listGroups is ListGroups on q's own indexes (o.Limit set and checked).
func (q *Queue) listGroups(ctx context.Context, o ListOptions) (*listPage, error) {
	index := q.keys.GroupIndex()
	if o.Tenant != "" {
		index = q.keys.TenantGroupIndex(o.Tenant)
	}
	score, member, err := parseCursor(o.Cursor)
	if err != nil {
		return nil, err
	}
	want := map[contracts.GroupState]bool{}
	for _, s := range o.States {
		want[s] = true
	}
	budget := o.Limit
	if len(want) > 0 {
		budget = 10 * o.Limit
	}
	out := &listPage{}
	for budget > 0 && len(out.groups) < o.Limit {
		page, err := q.indexPage(ctx, index, score, member, min(budget, 200))
		if err != nil {
			return nil, err
		}
		if len(page) == 0 {
			out.end = true
			return out, nil
		}
		budget -= len(page)
		refs := make([]contracts.GroupRef, len(page))
		for i, z := range page {
			refs[i] = q.indexRef(o.Tenant, z.Member.(string))
		}
		infos, err := q.groupsInfo(ctx, refs)
		if err != nil {
			return nil, err
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
			out.groups = append(out.groups, listedGroup{info, indexPos{score, member}})
			if len(out.groups) == o.Limit {
				break
			}
		}
		if len(gone) > 0 {
			q.pruneIndex(ctx, o.Tenant, index, gone)
		}
	}
	out.at = indexPos{score, member}
	return out, nil
}

// mergedList is the list of every tenant's groups over every shard: each
// shard lists a page after the same cursor (every shard's index orders its
// entries "<tenant>:<groupId>" by the same creation time and member, so a
// position read in one shard is a position in any other), and the pages
// are merged in that order. A shard that stopped before its end has read
// its index only down to where it stopped; below the highest such
// position (the frontier) another shard may have entries not read yet, so
// the merged page keeps only the groups at or above it, the first Limit of
// them. The next cursor is the last group returned when there are Limit,
// else the frontier ("" when every shard reached its end).
func (q *Queue) mergedList(ctx context.Context, o ListOptions) ([]*GroupInfo, string, error) {
	if _, _, err := parseCursor(o.Cursor); err != nil {
		return nil, "", err
	}
	pages := make([]*listPage, len(q.shards))
	if err := q.eachShard(func(i int, s *Queue) (err error) {
		pages[i], err = s.listGroups(ctx, o)
		return err
	}); err != nil {
		return nil, "", err
	}
	var front *indexPos
	for _, p := range pages {
		if !p.end && (front == nil || p.at.compare(*front) > 0) {
			front = &p.at
		}
	}
	merged := &listPage{end: front == nil}
	for _, p := range pages {
		for _, g := range p.groups {
			if front == nil || g.at.compare(*front) >= 0 {
				merged.groups = append(merged.groups, g)
			}
		}
	}
	slices.SortFunc(merged.groups, func(a, b listedGroup) int { return b.at.compare(a.at) })
	if front != nil {
		merged.at = *front
	}
	if len(merged.groups) >= o.Limit {
		merged.groups = merged.groups[:o.Limit]
		merged.at, merged.end = merged.groups[o.Limit-1].at, false
	}
	return merged.infos(), merged.next(), nil
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
// group from; both links expire after ttl. Each link is kept in its
// group's shard: with shards, a retry group of another tenant than from
// (never made so) would get its link in a write of its own.
func (q *Queue) LinkRetry(ctx context.Context, from, retry contracts.GroupRef, ttl time.Duration) error {
	if q.sharded() {
		fs, rs := q.For(from.Tenant), q.For(retry.Tenant)
		if fs == rs {
			return fs.LinkRetry(ctx, from, retry, ttl)
		}
		if err := rs.rdb.Set(ctx, rs.keys.GroupRetryOf(retry), from.ID, ttl).Err(); err != nil {
			return fmt.Errorf("redisq: link retry %s -> %s: %w", from, retry.ID, err)
		}
		pipe := fs.rdb.TxPipeline()
		pipe.RPush(ctx, fs.keys.GroupRetries(from), retry.ID)
		pipe.Expire(ctx, fs.keys.GroupRetries(from), ttl)
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("redisq: link retry %s -> %s: %w", from, retry.ID, err)
		}
		return nil
	}
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
	if q.sharded() {
		return q.For(g.Tenant).Links(ctx, g)
	}
	pipe := q.rdb.Pipeline()
	of := pipe.Get(ctx, q.keys.GroupRetryOf(g))
	rs := pipe.LRange(ctx, q.keys.GroupRetries(g), 0, -1)
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return "", nil, fmt.Errorf("redisq: links %s: %w", g, err)
	}
	return of.Val(), rs.Val(), nil
}
