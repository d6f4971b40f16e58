package redisq

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// DoorLimit names a per-tenant limit of the gateway (docs/api.md#limits):
// what a tenant may ask of the HTTP API, as opposed to the quotas on what
// it may have queued. The gateway replicas share their state in Redis.
type DoorLimit string

// Gateway limits per tenant.
const (
	// DoorRequestRate is a tenant's requests per second.
	DoorRequestRate DoorLimit = "gateway.requestRate"
	// DoorJobRate is a tenant's submitted jobs per second.
	DoorJobRate DoorLimit = "gateway.jobRate"
	// DoorByteRate is a tenant's submitted bytes per second (the bodies
	// of its jobs requests).
	DoorByteRate DoorLimit = "gateway.byteRate"
	// DoorConcurrentRequests is a tenant's requests running at once (SSE
	// streams not counted).
	DoorConcurrentRequests DoorLimit = "gateway.concurrentRequests"
	// DoorSSEStreams is a tenant's open Server-Sent Events streams.
	DoorSSEStreams DoorLimit = "gateway.sseStreams"
)

// DoorLimits lists the gateway limits.
var DoorLimits = []DoorLimit{DoorRequestRate, DoorJobRate, DoorByteRate, DoorConcurrentRequests, DoorSSEStreams}

// field is the limit's field suffix in [Keys.DoorLimits] and its name in
// door.lua.
func (l DoorLimit) field() string {
	switch l {
	case DoorRequestRate:
		return "requests"
	case DoorJobRate:
		return "jobs"
	case DoorByteRate:
		return "bytes"
	case DoorConcurrentRequests:
		return "concurrent"
	case DoorSSEStreams:
		return "sse"
	}
	return ""
}

func doorLimitOf(field string) DoorLimit {
	for _, l := range DoorLimits {
		if l.field() == field {
			return l
		}
	}
	return ""
}

// Meaning says what the limit bounds.
func (l DoorLimit) Meaning() string {
	switch l {
	case DoorRequestRate:
		return "requests per second of a tenant"
	case DoorJobRate:
		return "jobs per second a tenant may submit"
	case DoorByteRate:
		return "bytes of jobs requests per second a tenant may send"
	case DoorConcurrentRequests:
		return "requests of a tenant running at once"
	case DoorSSEStreams:
		return "event streams a tenant may keep open"
	}
	return ""
}

// DoorLimits is the HASH of the tenants' own gateway limits: field
// "<tenant>:requests", "<tenant>:jobs", "<tenant>:bytes" (per second), "<tenant>:concurrent"
// or "<tenant>:sse" (at once); 0 = unlimited; a tenant without a field has
// the gateway's default.
func (k Keys) DoorLimits() string { return k.prefix + "door-limits" }

// DoorState is one of a tenant's gateway-limit keys: "requests", "jobs"
// and "bytes" (the rates' state), "concurrent" and "sse" (the slots held).
func (k Keys) DoorState(tenant, what string) string {
	return k.prefix + "door:" + tenant + ":" + what
}

// SetTenantDoorLimit sets a tenant's own gateway limit: limit >= 0, 0
// meaning unlimited whatever the default, or [QuotaDefault] to remove it
// (the gateway's default applies again). Every gateway replica applies it
// to the next request.
func (q *Queue) SetTenantDoorLimit(ctx context.Context, tenant string, l DoorLimit, limit int64) error {
	if q.sharded() {
		return q.For(tenant).SetTenantDoorLimit(ctx, tenant, l, limit)
	}
	if err := contracts.ValidateTenant(tenant); err != nil {
		return fmt.Errorf("redisq: gateway limit: %w", err)
	}
	if !slices.Contains(DoorLimits, l) {
		return fmt.Errorf("redisq: gateway limit of %s: unknown limit %q", tenant, l)
	}
	if limit < QuotaDefault {
		return fmt.Errorf("redisq: gateway limit %s of %s: %d: must be >= 0 (0 = unlimited)", l, tenant, limit)
	}
	field := tenant + ":" + l.field()
	var err error
	if limit == QuotaDefault {
		err = q.rdb.HDel(ctx, q.keys.DoorLimits(), field).Err()
	} else {
		err = q.rdb.HSet(ctx, q.keys.DoorLimits(), field, limit).Err()
	}
	if err != nil {
		return fmt.Errorf("redisq: gateway limit %s of %s: %w", l, tenant, err)
	}
	return nil
}

// TenantDoorLimits returns a tenant's own gateway limits (those it has;
// the others are the gateway's defaults).
func (q *Queue) TenantDoorLimits(ctx context.Context, tenant string) (map[DoorLimit]int64, error) {
	if q.sharded() {
		return q.For(tenant).TenantDoorLimits(ctx, tenant)
	}
	if err := contracts.ValidateTenant(tenant); err != nil {
		return nil, fmt.Errorf("redisq: gateway limits: %w", err)
	}
	fields := make([]string, len(DoorLimits))
	for i, l := range DoorLimits {
		fields[i] = tenant + ":" + l.field()
	}
	vals, err := q.rdb.HMGet(ctx, q.keys.DoorLimits(), fields...).Result()
	if err != nil {
		return nil, fmt.Errorf("redisq: gateway limits of %s: %w", tenant, err)
	}
	out := map[DoorLimit]int64{}
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			out[DoorLimits[i]] = n
		}
	}
	return out, nil
}

// DoorDefaults are the gateway limits of a tenant without its own (0 =
// unlimited), the window a rate may be spent in at once, and the lease of
// a slot (renewed while it is held).
type DoorDefaults struct {
	RequestRate, JobRate, ByteRate int64 // per second
	ConcurrentRequests, SSEStreams int64
	Window, Lease                  time.Duration
}

// DoorEntry is a request at the door.
type DoorEntry struct {
	Tenant string
	// Slot is DoorConcurrentRequests or DoorSSEStreams (the slot the
	// request holds while it runs), or "" for none.
	Slot DoorLimit
	// SlotID names the slot (unique per request).
	SlotID string
	// Jobs refuses the request when the tenant has no job rate or byte
	// rate left.
	Jobs bool
}

// DoorVerdict is the door's answer.
type DoorVerdict struct {
	Allowed bool
	// Refused is the limit that refused the request, Limit its value in
	// force and RetryAfter when to come back.
	Refused    DoorLimit
	Limit      int64
	RetryAfter time.Duration
	// Requests is the tenant's request limit per window (0 = unlimited),
	// RequestsLeft what is left of it, RequestsReset when it is whole again.
	Requests, RequestsLeft int64
	RequestsReset          time.Duration
	// Held says the slot was taken: leave it with [Queue.DoorLeave].
	Held bool
}

var doorScript = loadScript("door")

func (d DoorDefaults) window() int64 {
	if d.Window <= 0 {
		return 10_000
	}
	return d.Window.Milliseconds()
}

func (d DoorDefaults) lease() int64 {
	if d.Lease <= 0 {
		return 30_000
	}
	return d.Lease.Milliseconds()
}

func (q *Queue) doorKeys(tenant string, slot DoorLimit) []string {
	f := slot.field()
	if f == "" {
		f = DoorConcurrentRequests.field()
	}
	return []string{q.keys.DoorLimits(), q.keys.DoorState(tenant, "requests"), q.keys.DoorState(tenant, "jobs"), q.keys.DoorState(tenant, f),
		q.keys.DoorState(tenant, "bytes")}
}

// DoorEnter takes one request of the tenant, and its slot, if every limit
// allows.
func (q *Queue) DoorEnter(ctx context.Context, d DoorDefaults, e DoorEntry) (DoorVerdict, error) {
	if q.sharded() {
		return q.For(e.Tenant).DoorEnter(ctx, d, e)
	}
	slotDefault := int64(0)
	switch e.Slot {
	case DoorConcurrentRequests:
		slotDefault = d.ConcurrentRequests
	case DoorSSEStreams:
		slotDefault = d.SSEStreams
	}
	jobs := "0"
	if e.Jobs {
		jobs = "1"
	}
	v, err := q.run(ctx, "door", doorScript, q.doorKeys(e.Tenant, e.Slot), "enter", e.Tenant, q.now(), d.window(),
		d.RequestRate, d.JobRate, e.Slot.field(), slotDefault, e.SlotID, d.lease(), jobs, d.ByteRate)
	if err != nil {
		return DoorVerdict{}, err
	}
	r, ok := v.([]any)
	if !ok || len(r) != 8 {
		return DoorVerdict{}, fmt.Errorf("redisq: door script: unexpected reply %v", v)
	}
	num := func(i int) int64 { n, _ := r[i].(int64); return n }
	name, _ := r[1].(string)
	return DoorVerdict{Allowed: num(0) == 1, Refused: doorLimitOf(name), Limit: num(2),
		RetryAfter: time.Duration(num(3)) * time.Millisecond, Requests: num(4), RequestsLeft: num(5),
		RequestsReset: time.Duration(num(6)) * time.Millisecond, Held: num(7) == 1}, nil
}

// DoorCharge spends n submitted jobs of the tenant's job rate and size
// bytes of its byte rate. It may go past the window: the tenant's next
// submissions wait until the debt is paid off, so one large request passes
// and the rates hold over time. It returns how far the larger debt goes
// past the window (0 within it): a reader of the tenant's jobs that waits
// that long before reading more holds the tenant to its rates however many
// requests it sends at once.
func (q *Queue) DoorCharge(ctx context.Context, d DoorDefaults, tenant string, n, size int64) (time.Duration, error) {
	if q.sharded() {
		return q.For(tenant).DoorCharge(ctx, d, tenant, n, size)
	}
	v, err := q.run(ctx, "door", doorScript, q.doorKeys(tenant, ""), "charge", tenant, q.now(), d.window(), d.JobRate, n,
		d.ByteRate, size)
	if err != nil {
		return 0, err
	}
	ms, _ := v.(int64)
	return time.Duration(ms) * time.Millisecond, nil
}

// DoorRenew extends the leases of slots a gateway still holds, all of one
// tenant and kind.
func (q *Queue) DoorRenew(ctx context.Context, d DoorDefaults, tenant string, slot DoorLimit, ids []string) error {
	if q.sharded() {
		return q.For(tenant).DoorRenew(ctx, d, tenant, slot, ids)
	}
	args := []any{"renew", tenant, q.now(), d.window(), d.lease()}
	for _, id := range ids {
		args = append(args, id)
	}
	_, err := q.run(ctx, "door", doorScript, q.doorKeys(tenant, slot), args...)
	return err
}

// DoorLeave gives a slot back.
func (q *Queue) DoorLeave(ctx context.Context, d DoorDefaults, tenant string, slot DoorLimit, id string) error {
	if q.sharded() {
		return q.For(tenant).DoorLeave(ctx, d, tenant, slot, id)
	}
	_, err := q.run(ctx, "door", doorScript, q.doorKeys(tenant, slot), "leave", tenant, q.now(), d.window(), id)
	return err
}
