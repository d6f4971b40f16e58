package redisq

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/redis/go-redis/v9"
)

// Quota names a tenant quota (docs/ARCHITECTURE.md §5).
type Quota string

// Tenant quotas.
const (
	// QuotaQueuedJobs bounds a tenant's queued jobs: its jobs accepted and
	// not terminal yet (queued, backing off, admitted or running) in its
	// groups that have not ended. A cancelled group's jobs stop counting when
	// it is cancelled, including those still running.
	QuotaQueuedJobs Quota = "tenant.maxQueuedJobs"
	// QuotaActiveGroups bounds a tenant's active groups: its groups that
	// exist and have not ended (CREATED, RUNNING, AGGREGATING, PAUSED). A
	// seal or pause before a group's first job creates it, and it counts; a
	// cancel before it creates it ended, and it does not.
	QuotaActiveGroups Quota = "tenant.maxActiveGroups"
)

// Quotas lists the tenant quotas.
var Quotas = []Quota{QuotaQueuedJobs, QuotaActiveGroups}

// field is the quota's field suffix in [Keys.TenantQuotas].
func (qt Quota) field() string {
	if qt == QuotaActiveGroups {
		return "groups"
	}
	return "queued"
}

// QuotaDefault, as the limit of [Queue.SetTenantQuota], removes a tenant's
// own limit: the default applies again.
const QuotaDefault int64 = -1

// QuotaRefusal says why a tenant quota refused a unit of jobs ([Job.Message]).
type QuotaRefusal struct {
	Tenant string
	Quota  Quota
	// Limit is the quota's limit for the tenant.
	Limit int64
	// Count is the tenant's count when the unit was judged: its queued jobs
	// (QuotaQueuedJobs) or its active groups (QuotaActiveGroups).
	Count int64
	// Jobs is the number of new jobs the unit would have added.
	Jobs int64
}

// Problem says what the refused unit would have done, e.g. "tenant acme has
// 98 queued jobs and these 5 new jobs would make 103".
func (r *QuotaRefusal) Problem() string {
	if r.Quota == QuotaActiveGroups {
		return fmt.Sprintf("tenant %s has %d active groups and these %s would create one more", r.Tenant, r.Count, plural(r.Jobs, "new job"))
	}
	return fmt.Sprintf("tenant %s has %d queued jobs and these %s would make %d", r.Tenant, r.Count, plural(r.Jobs, "new job"), r.Count+r.Jobs)
}

// LimitText states the quota and its limit, e.g. "tenant.maxQueuedJobs is
// 100: the most jobs a tenant may have accepted and not finished, in groups
// that have not ended".
func (r *QuotaRefusal) LimitText() string {
	return fmt.Sprintf("%s is %d: %s", r.Quota, r.Limit, r.Quota.Meaning())
}

// Meaning says what the quota bounds.
func (qt Quota) Meaning() string {
	if qt == QuotaActiveGroups {
		return "the most groups a tenant may have that exist and have not ended"
	}
	return "the most jobs a tenant may have accepted and not finished, in groups that have not ended"
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.FormatInt(n, 10) + " " + what + "s"
}

// TenantQuota is a tenant's quotas and its counts.
type TenantQuota struct {
	Tenant string
	// MaxQueuedJobs and MaxActiveGroups are the limits in force (0 =
	// unlimited): the tenant's own when OwnQueuedJobs / OwnActiveGroups,
	// else the queue's defaults ([Config.TenantMaxQueuedJobs],
	// [Config.TenantMaxActiveGroups]).
	MaxQueuedJobs, MaxActiveGroups int64
	OwnQueuedJobs, OwnActiveGroups bool
	// QueuedJobs and ActiveGroups are the tenant's counts now.
	QueuedJobs, ActiveGroups int64
}

// Limit returns the limit of quota qt in force (0 = unlimited) and whether
// it is the tenant's own.
func (t *TenantQuota) Limit(qt Quota) (limit int64, own bool) {
	if qt == QuotaActiveGroups {
		return t.MaxActiveGroups, t.OwnActiveGroups
	}
	return t.MaxQueuedJobs, t.OwnQueuedJobs
}

// Count returns the tenant's count of quota qt.
func (t *TenantQuota) Count(qt Quota) int64 {
	if qt == QuotaActiveGroups {
		return t.ActiveGroups
	}
	return t.QueuedJobs
}

// SetTenantQuota sets a tenant's own limit of one quota (docs/ARCHITECTURE.md
// §5): limit >= 0, 0 meaning unlimited whatever the default, or
// [QuotaDefault] to remove the tenant's own limit. It applies to the jobs
// messages that follow; nothing already accepted is affected.
func (q *Queue) SetTenantQuota(ctx context.Context, tenant string, quota Quota, limit int64) error {
	if q.sharded() {
		return q.For(tenant).SetTenantQuota(ctx, tenant, quota, limit)
	}
	if err := contracts.ValidateTenant(tenant); err != nil {
		return fmt.Errorf("redisq: tenant quota: %w", err)
	}
	if !slices.Contains(Quotas, quota) {
		return fmt.Errorf("redisq: tenant quota of %s: unknown quota %q", tenant, quota)
	}
	if limit < QuotaDefault {
		return fmt.Errorf("redisq: tenant quota %s of %s: %d: must be >= 0 (0 = unlimited)", quota, tenant, limit)
	}
	field := tenant + ":" + quota.field()
	var err error
	if limit == QuotaDefault {
		err = q.rdb.HDel(ctx, q.keys.TenantQuotas(), field).Err()
	} else {
		err = q.rdb.HSet(ctx, q.keys.TenantQuotas(), field, limit).Err()
	}
	if err != nil {
		return fmt.Errorf("redisq: tenant quota %s of %s: %w", quota, tenant, err)
	}
	return nil
}

// TenantQuota returns a tenant's quotas in force and its counts.
func (q *Queue) TenantQuota(ctx context.Context, tenant string) (*TenantQuota, error) {
	if q.sharded() {
		return q.For(tenant).TenantQuota(ctx, tenant)
	}
	if err := contracts.ValidateTenant(tenant); err != nil {
		return nil, fmt.Errorf("redisq: tenant quota: %w", err)
	}
	out, err := q.tenantQuotas(ctx, []string{tenant})
	if err != nil {
		return nil, err
	}
	return &out[0], nil
}

// TenantQuotas returns, sorted by tenant, the quotas and counts of the
// tenants that have a quota of their own.
func (q *Queue) TenantQuotas(ctx context.Context) ([]TenantQuota, error) {
	if q.sharded() {
		per := make([][]TenantQuota, len(q.shards))
		if err := q.eachShard(func(i int, s *Queue) (err error) {
			per[i], err = s.TenantQuotas(ctx)
			return err
		}); err != nil {
			return nil, err
		}
		out := slices.Concat(per...)
		if len(out) == 0 {
			return nil, nil
		}
		slices.SortFunc(out, func(a, b TenantQuota) int { return strings.Compare(a.Tenant, b.Tenant) })
		return out, nil
	}
	fields, err := q.rdb.HKeys(ctx, q.keys.TenantQuotas()).Result()
	if err != nil {
		return nil, fmt.Errorf("redisq: tenant quotas: %w", err)
	}
	var tenants []string
	for _, f := range fields {
		if t, _, ok := strings.Cut(f, ":"); ok {
			tenants = append(tenants, t)
		}
	}
	slices.Sort(tenants)
	tenants = slices.Compact(tenants)
	if len(tenants) == 0 {
		return nil, nil
	}
	return q.tenantQuotas(ctx, tenants)
}

// tenantQuotas reads the quotas and counts of tenants in one round trip.
func (q *Queue) tenantQuotas(ctx context.Context, tenants []string) ([]TenantQuota, error) {
	pipe := q.rdb.Pipeline()
	read := q.queueQuotas(ctx, pipe, tenants)
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return nil, fmt.Errorf("redisq: tenant quotas: %w", err)
	}
	return read(), nil
}

// queueQuotas adds the reads of tenants' quotas and counts to pipe; read
// returns them once pipe ran.
func (q *Queue) queueQuotas(ctx context.Context, pipe redis.Pipeliner, tenants []string) (read func() []TenantQuota) {
	type cmds struct {
		own    *redis.SliceCmd
		queued *redis.StringCmd
		groups *redis.IntCmd
	}
	cs := make([]cmds, len(tenants))
	for i, t := range tenants {
		cs[i] = cmds{
			own:    pipe.HMGet(ctx, q.keys.TenantQuotas(), t+":"+QuotaQueuedJobs.field(), t+":"+QuotaActiveGroups.field()),
			queued: pipe.Get(ctx, q.keys.TenantQueuedJobs(t)),
			groups: pipe.SCard(ctx, q.keys.TenantActiveGroups(t)),
		}
	}
	return func() []TenantQuota {
		out := make([]TenantQuota, len(tenants))
		for i, t := range tenants {
			own := cs[i].own.Val()
			limit := func(v any, def int64) (int64, bool) {
				s, ok := v.(string)
				return ownQuota(s, ok, def)
			}
			tq := TenantQuota{Tenant: t, QueuedJobs: max(metaInt(cs[i].queued.Val()), 0), ActiveGroups: cs[i].groups.Val()}
			tq.MaxQueuedJobs, tq.OwnQueuedJobs = limit(own[0], q.cfg.TenantMaxQueuedJobs)
			tq.MaxActiveGroups, tq.OwnActiveGroups = limit(own[1], q.cfg.TenantMaxActiveGroups)
			out[i] = tq
		}
		return out
	}
}

// correctQuotas re-derives the quota counts of every tenant that has any
// ([Keys.QuotaTenants]) from its groups' metas, adopting the live groups
// the counts lack among the candidates ([Queue.CandidateGroups]: groups
// queued or started, such as groups created before the quotas existed). It
// returns how many entries were wrong. One script call per tenant, all in
// one round trip (per shard, the shards at once).
func (q *Queue) correctQuotas(ctx context.Context) (int, error) {
	if q.sharded() {
		return sumShards(q, func(s *Queue) (int, error) { return s.correctQuotas(ctx) })
	}
	tenants, err := q.rdb.SMembers(ctx, q.keys.QuotaTenants()).Result()
	if err != nil {
		return 0, fmt.Errorf("redisq: correct quotas: %w", err)
	}
	cands, err := q.CandidateGroups(ctx)
	if err != nil {
		return 0, err
	}
	byTenant := map[string][]any{}
	for _, t := range tenants {
		byTenant[t] = nil
	}
	for _, g := range cands {
		byTenant[g.Tenant] = append(byTenant[g.Tenant], g.ID)
	}
	if len(byTenant) == 0 {
		return 0, nil
	}
	order := make([]string, 0, len(byTenant))
	for t := range byTenant {
		order = append(order, t)
	}
	slices.Sort(order)
	replies, err := q.pipelineScripts(ctx, "correct_quotas", quotasScript, len(order), func(i int) ([]string, []any) {
		t := order[i]
		return []string{q.keys.TenantActiveGroups(t), q.keys.TenantQueuedJobs(t), q.keys.QuotaTenants()},
			append([]any{q.keys.Prefix(), t}, byTenant[t]...)
	})
	if err != nil {
		return 0, err
	}
	fixed := 0
	for _, v := range replies {
		fixed += int(toInt(v))
	}
	return fixed, nil
}

// ownQuota is a quota in force: a tenant's own value s (when set, ok) or
// the default def; own reports whether the tenant's value is the one.
// A value that is not a number counts as unset, as the scripts read it.
func ownQuota(s string, set bool, def int64) (limit int64, own bool) {
	if !set {
		return def, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return def, false
	}
	return max(n, 0), true
}
