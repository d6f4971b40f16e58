package gateway

import (
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// penaltyMax bounds how long a replica refuses a tenant on its own after
// Redis refused it, so that a limit an operator raises takes effect within
// it.
const penaltyMax = 250 * time.Millisecond

// penaltyBox remembers, per replica, the tenants a rate limit refused and
// until when: their requests are refused again without asking Redis until
// then. A tenant's rate state only moves forward with the requests that
// pass, so none of them could pass earlier; a flooding tenant then costs
// Redis about one call per refusal period instead of one per request,
// whatever it sends.
type penaltyBox struct {
	mu sync.Mutex
	m  map[penaltyKey]penalty
}

type penaltyKey struct {
	tenant string
	jobs   bool // the job rate (refuses jobs requests only)
}

type penalty struct {
	until   time.Time // refused here without Redis until then
	retryAt time.Time // when the refusal said to come back
	verdict redisq.DoorVerdict
}

// note records a refusal by a rate (slots are not remembered: one can be
// given back at any time).
func (b *penaltyBox) note(tenant string, v redisq.DoorVerdict, now time.Time) {
	if v.Allowed || v.RetryAfter <= 0 {
		return
	}
	var k penaltyKey
	switch v.Refused {
	case redisq.DoorRequestRate:
		k = penaltyKey{tenant: tenant}
	case redisq.DoorJobRate:
		k = penaltyKey{tenant: tenant, jobs: true}
	default:
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[penaltyKey]penalty{}
	} else if len(b.m) > 10_000 {
		for k, p := range b.m { // bounded: forget the expired ones
			if !p.until.After(now) {
				delete(b.m, k)
			}
		}
	}
	b.m[k] = penalty{until: now.Add(min(v.RetryAfter, penaltyMax)), retryAt: now.Add(v.RetryAfter), verdict: v}
}

// check returns the verdict that refuses a tenant's request now, if one
// is remembered: its RetryAfter is what is left of the period.
func (b *penaltyBox) check(tenant string, jobs bool, now time.Time) (redisq.DoorVerdict, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range []penaltyKey{{tenant: tenant}, {tenant: tenant, jobs: true}} {
		if k.jobs && !jobs {
			continue
		}
		p, ok := b.m[k]
		if !ok {
			continue
		}
		if p.until.After(now) {
			v := p.verdict
			v.RetryAfter = p.retryAt.Sub(now)
			v.RequestsLeft = 0
			return v, true
		}
		delete(b.m, k)
	}
	return redisq.DoorVerdict{}, false
}
