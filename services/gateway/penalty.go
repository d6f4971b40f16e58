package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// penaltyMax bounds how long a replica refuses a tenant on its own after
// Redis refused it, so that a limit an operator raises, or a slot another
// replica gives back, takes effect within it.
const penaltyMax = 250 * time.Millisecond

// probeTimeout is how long a replica waits for the one request that asks
// Redis again after a penalty before it lets another ask (the first one's
// Redis call may hang).
const probeTimeout = time.Second

// penaltyBox remembers, per replica, the tenants a limit refused and until
// when: their requests are refused again without asking Redis until then.
// A tenant's rate state only moves forward with the requests that pass, so
// none of them could pass earlier; a slot refusal lasts until this replica
// gives back one of the tenant's slots of that kind, or penaltyMax, as
// another replica's may free at any time (the refusal asks the client to
// come back in a second). When a penalty is over, one request of the
// tenant asks Redis while its others are still refused here, so a flood
// costs Redis about one call per refusal period, whatever it sends and
// however many connections it sends it over.
type penaltyBox struct {
	mu      sync.Mutex
	m       map[penaltyKey]*penalty
	holding map[string]int // refusals waiting per tenant (hold)
	held    int            // and of all tenants
}

// penaltyKey is a tenant and the limit that refused it.
type penaltyKey struct {
	tenant string
	limit  redisq.DoorLimit
}

type penalty struct {
	until   time.Time // refused here without Redis until then
	retryAt time.Time // when the refusal said to come back
	verdict redisq.DoorVerdict
	probe   time.Time // when a request started asking Redis after until (zero: none is)
}

// doorAsk is what one request asks of the door: the tenant, whether it is
// a jobs request (the job rate applies) and the slot it takes.
type doorAsk struct {
	tenant string
	jobs   bool
	slot   redisq.DoorLimit
}

// keys are the penalties that apply to the request.
func (a doorAsk) keys() []penaltyKey {
	ks := []penaltyKey{{a.tenant, redisq.DoorRequestRate}, {a.tenant, a.slot}}
	if a.jobs {
		ks = append(ks, penaltyKey{a.tenant, redisq.DoorJobRate}, penaltyKey{a.tenant, redisq.DoorByteRate})
	}
	return ks
}

// check returns the verdict that refuses the request now, if one is
// remembered: its RetryAfter is what is left of the period. When a
// penalty is over and no other request is asking Redis about it, the
// request becomes the one that asks: the caller must then report Redis's
// answer with note, or its failure with forget.
func (b *penaltyBox) check(a doorAsk, now time.Time) (redisq.DoorVerdict, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var probes []*penalty
	for _, k := range a.keys() {
		p, ok := b.m[k]
		if !ok {
			continue
		}
		if p.until.After(now) || (!p.probe.IsZero() && now.Sub(p.probe) < probeTimeout) {
			for _, q := range probes { // this request does not ask after all
				q.probe = time.Time{}
			}
			v := p.verdict
			v.RetryAfter = max(p.retryAt.Sub(now), 0)
			v.RequestsLeft = 0
			return v, true
		}
		probes = append(probes, p)
	}
	for _, p := range probes {
		p.probe = now
	}
	return redisq.DoorVerdict{}, false
}

// note records Redis's answer to a request: a refusal by a limit starts
// (or renews) its penalty; a pass ends every penalty the request was
// checked against.
func (b *penaltyBox) note(a doorAsk, v redisq.DoorVerdict, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if v.Allowed {
		for _, k := range a.keys() {
			delete(b.m, k)
		}
		return
	}
	b.forgetLocked(a)
	if v.RetryAfter <= 0 {
		return
	}
	switch v.Refused {
	case redisq.DoorRequestRate, redisq.DoorJobRate, redisq.DoorByteRate, redisq.DoorConcurrentRequests, redisq.DoorSSEStreams:
	default:
		return
	}
	if b.m == nil {
		b.m = map[penaltyKey]*penalty{}
	} else if len(b.m) > 10_000 {
		for k, p := range b.m { // bounded: forget the expired ones
			if !p.until.After(now) && p.probe.IsZero() {
				delete(b.m, k)
			}
		}
	}
	b.m[penaltyKey{a.tenant, v.Refused}] = &penalty{until: now.Add(min(v.RetryAfter, penaltyMax)),
		retryAt: now.Add(v.RetryAfter), verdict: v}
}

// forget ends the request's asking without an answer (Redis failed): the
// next request asks instead.
func (b *penaltyBox) forget(a doorAsk) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.forgetLocked(a)
}

func (b *penaltyBox) forgetLocked(a doorAsk) {
	for _, k := range a.keys() {
		if p, ok := b.m[k]; ok {
			p.probe = time.Time{}
		}
	}
}

// freed ends a slot penalty of the tenant: this replica gave one back.
func (b *penaltyBox) freed(tenant string, slot redisq.DoorLimit) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, penaltyKey{tenant, slot})
}

// Refusals the gateway gives by itself are answered after refusalHold:
// a tenant that sends again before the Retry-After of a refusal (which is
// at least a second) waits for its next 429 as long as it was told to wait,
// so a client that loops on refusals makes about one request a second per
// connection, however many connections it runs, instead of thousands, and
// each costs a parked goroutine and a timer rather than a CPU. A client
// that honours Retry-After never meets the hold, nor does another tenant.
// At most holdPerTenant refusals of a tenant (holdTotal of all) wait at
// once on a replica; past that a refusal is answered at once and its
// connection closed, so that the client pays a new connection for its
// next request.
const (
	refusalHold   = time.Second
	holdPerTenant = 1024
	holdTotal     = 8192
)

// hold waits refusalHold before a refusal of tenant is answered, or until
// ctx ends. It returns false at once, without waiting, when too many
// refusals already wait.
func (b *penaltyBox) hold(ctx context.Context, tenant string) bool {
	b.mu.Lock()
	if b.holding == nil {
		b.holding = map[string]int{}
	}
	if b.holding[tenant] >= holdPerTenant || b.held >= holdTotal {
		b.mu.Unlock()
		return false
	}
	b.holding[tenant]++
	b.held++
	b.mu.Unlock()
	t := time.NewTimer(refusalHold)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	b.mu.Lock()
	if b.holding[tenant]--; b.holding[tenant] == 0 {
		delete(b.holding, tenant)
	}
	b.held--
	b.mu.Unlock()
	return true
}
