package redisq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// TenantSettingsRev is the HASH of the revision of each tenant setting whose
// durable record is in JetStream (docs/ARCHITECTURE.md §6.7) that Redis
// holds a copy of (field: "<tenant>:windows" or "<tenant>:callback-secret",
// value: the revision of its entry in the bucket). A copy is written only
// over an older revision, so a late restore never undoes a newer write.
func (k Keys) TenantSettingsRev() string { return k.prefix + "tenant-settings-rev" }

// putAttempts bounds the optimistic transactions of a revisioned write that
// other writers keep interrupting.
const putAttempts = 10

// PutTenantWindows makes ws (none: no windows) tenant's default sending
// windows as revision rev of their durable record, unless Redis holds that
// revision or a later one already. It reports whether it wrote.
func (q *Queue) PutTenantWindows(ctx context.Context, tenant string, ws []contracts.Window, rev uint64) (bool, error) {
	if err := contracts.ValidateTenant(tenant); err != nil {
		return false, err
	}
	var val string
	if len(ws) > 0 {
		if err := contracts.ValidateWindows("windows", ws); err != nil {
			return false, err
		}
		b, err := json.Marshal(ws)
		if err != nil {
			return false, err
		}
		val = string(b)
	}
	return q.putRevisioned(ctx, tenant+":windows", rev, func(p redis.Pipeliner) {
		if val == "" {
			p.HDel(ctx, q.keys.TenantWindows(), tenant)
		} else {
			p.HSet(ctx, q.keys.TenantWindows(), tenant, val)
		}
	})
}

// PutCallbackSecrets makes s tenant's callback secrets as revision rev of
// their durable record, unless Redis holds that revision or a later one
// already. It reports whether it wrote.
func (q *Queue) PutCallbackSecrets(ctx context.Context, tenant string, s CallbackSecrets, rev uint64) (bool, error) {
	if err := contracts.ValidateTenant(tenant); err != nil {
		return false, err
	}
	key := q.keys.TenantCallbackSecret(tenant)
	return q.putRevisioned(ctx, tenant+":callback-secret", rev, func(p redis.Pipeliner) {
		p.Del(ctx, key)
		if s.Current != "" {
			p.HSet(ctx, key, "current", s.Current, "createdAt", s.CreatedAt.UnixMilli())
		}
		if s.Previous != "" {
			p.HSet(ctx, key, "previous", s.Previous, "previousUntil", s.PreviousUntil.UnixMilli())
		}
	})
}

// putRevisioned runs write and records rev as field's revision in one
// transaction, unless the recorded revision is rev or later.
func (q *Queue) putRevisioned(ctx context.Context, field string, rev uint64, write func(redis.Pipeliner)) (bool, error) {
	revKey := q.keys.TenantSettingsRev()
	for range putAttempts {
		wrote := false
		err := q.rdb.Watch(ctx, func(tx *redis.Tx) error {
			cur, err := tx.HGet(ctx, revKey, field).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			if n, _ := strconv.ParseUint(cur, 10, 64); err == nil && n >= rev {
				return nil
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				write(p)
				p.HSet(ctx, revKey, field, rev)
				return nil
			})
			wrote = err == nil
			return err
		}, revKey)
		if errors.Is(err, redis.TxFailedErr) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("redisq: tenant setting %s: %w", field, err)
		}
		return wrote, nil
	}
	return false, fmt.Errorf("redisq: tenant setting %s: %w after %d attempts", field, redis.TxFailedErr, putAttempts)
}
