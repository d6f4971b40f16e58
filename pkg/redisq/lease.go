package redisq

import (
	"context"
	"fmt"
	"time"
)

var leaseScript = loadScript("lease")

// Lease is the key of a named lease ([Queue.TakeLease]).
func (k Keys) Lease(name string) string { return k.prefix + "lease:" + name }

// TakeLease takes the lease name for owner for ttl, or renews it when
// owner holds it already; it reports false when another owner holds it.
// A lease lets one process among several do a piece of work at a time (the
// fetchers' SUBMIT replay); a holder that stops without [Queue.ReleaseLease]
// frees it when ttl runs out. It only spares duplicate work: a Redis that
// restarts loses its leases like its other keys, so the work under a lease
// must be safe to do twice.
func (q *Queue) TakeLease(ctx context.Context, name, owner string, ttl time.Duration) (bool, error) {
	if q.global != nil {
		return q.global.TakeLease(ctx, name, owner, ttl)
	}
	v, err := q.run(ctx, "lease", leaseScript, []string{q.keys.Lease(name)}, "take", owner, max(ttl.Milliseconds(), 1))
	if err != nil {
		return false, fmt.Errorf("redisq: lease %s: %w", name, err)
	}
	n, _ := v.(int64)
	return n == 1, nil
}

// ReleaseLease frees the lease name when owner holds it.
func (q *Queue) ReleaseLease(ctx context.Context, name, owner string) error {
	if q.global != nil {
		return q.global.ReleaseLease(ctx, name, owner)
	}
	if _, err := q.run(ctx, "lease", leaseScript, []string{q.keys.Lease(name)}, "release", owner); err != nil {
		return fmt.Errorf("redisq: lease %s: %w", name, err)
	}
	return nil
}
