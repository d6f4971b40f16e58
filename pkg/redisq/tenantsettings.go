package redisq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// TenantSettingsRev is the HASH of the version of each tenant setting whose
// durable record is in JetStream (docs/ARCHITECTURE.md §6.7) that Redis
// holds a copy of (field: "<tenant>:windows" or "<tenant>:callback-secret",
// value: "<bucket>:<revision>", a [SettingVersion]). A copy is written only
// over an older revision of the same bucket, so a late restore never undoes
// a newer write.
func (k Keys) TenantSettingsRev() string { return k.prefix + "tenant-settings-rev" }

// SettingVersion is the version of a tenant setting's record: the bucket it
// is in, as an id that changes when the bucket is made again (its revisions
// then start again at 1), and its revision there.
type SettingVersion struct {
	Bucket string
	Rev    uint64
}

func (v SettingVersion) String() string { return v.Bucket + ":" + strconv.FormatUint(v.Rev, 10) }

// newerThan reports whether v is to be written over a copy of version
// stored ("" = none): a later revision, or one of another bucket.
func (v SettingVersion) newerThan(stored string) bool {
	i := strings.LastIndexByte(stored, ':')
	if i < 0 || stored[:i] != v.Bucket {
		return true
	}
	rev, err := strconv.ParseUint(stored[i+1:], 10, 64)
	return err != nil || rev < v.Rev
}

// putAttempts bounds the optimistic transactions of a revisioned write that
// other writers keep interrupting.
const putAttempts = 10

// PutTenantWindows makes ws (none: no windows) tenant's default sending
// windows as version v of their durable record, unless Redis holds that
// revision of the same bucket or a later one already. It reports whether it
// wrote.
func (q *Queue) PutTenantWindows(ctx context.Context, tenant string, ws []contracts.Window, v SettingVersion) (bool, error) {
	if q.sharded() {
		return q.For(tenant).PutTenantWindows(ctx, tenant, ws, v)
	}
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
	return q.putRevisioned(ctx, tenant+":windows", v, func(p redis.Pipeliner) {
		if val == "" {
			p.HDel(ctx, q.keys.TenantWindows(), tenant)
		} else {
			p.HSet(ctx, q.keys.TenantWindows(), tenant, val)
		}
	})
}

// PutCallbackSecrets makes s tenant's callback secrets as version v of
// their durable record, unless Redis holds that revision of the same bucket
// or a later one already. It reports whether it wrote.
func (q *Queue) PutCallbackSecrets(ctx context.Context, tenant string, s CallbackSecrets, v SettingVersion) (bool, error) {
	if q.sharded() {
		return q.For(tenant).PutCallbackSecrets(ctx, tenant, s, v)
	}
	if err := contracts.ValidateTenant(tenant); err != nil {
		return false, err
	}
	key := q.keys.TenantCallbackSecret(tenant)
	return q.putRevisioned(ctx, tenant+":callback-secret", v, func(p redis.Pipeliner) {
		p.Del(ctx, key)
		if s.Current != "" {
			p.HSet(ctx, key, "current", s.Current, "createdAt", s.CreatedAt.UnixMilli())
		}
		if s.Previous != "" {
			p.HSet(ctx, key, "previous", s.Previous, "previousUntil", s.PreviousUntil.UnixMilli())
		}
	})
}

// putRevisioned runs write and records v as field's version in one
// transaction, unless the recorded version is v or later.
func (q *Queue) putRevisioned(ctx context.Context, field string, v SettingVersion, write func(redis.Pipeliner)) (bool, error) {
	revKey := q.keys.TenantSettingsRev()
	for range putAttempts {
		wrote := false
		err := q.rdb.Watch(ctx, func(tx *redis.Tx) error {
			cur, err := tx.HGet(ctx, revKey, field).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return err
			}
			if !v.newerThan(cur) {
				return nil
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				write(p)
				p.HSet(ctx, revKey, field, v.String())
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
