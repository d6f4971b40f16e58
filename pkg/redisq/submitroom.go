package redisq

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

var submitRoomScript = loadScript("submit_room")

func init() { allScripts["submit_room"] = submitRoomScript }

// SubmitRoomLease is how long a reservation of [Queue.ReserveSubmitRoom]
// holds its bytes without being settled or released: a gateway that dies
// while it publishes gives them back after it.
const SubmitRoomLease = 5 * time.Minute

// submitRoomTTL is how long a tenant's room keys live after its last
// request.
const submitRoomTTL = 24 * time.Hour

// SubmitRoomField is the field suffix of a tenant's own room on SUBMIT in
// [Keys.DoorLimits]: "<tenant>:submitBytes", in bytes, 0 = unlimited.
const SubmitRoomField = "submitBytes"

// SubmitRoom is a tenant's reservation of room on SUBMIT for one request.
type SubmitRoom struct {
	// OK: the request's bytes fit in the tenant's room; they are held
	// until [SubmitRoom.Settle] or [SubmitRoom.Release].
	OK bool
	// Limit is the tenant's room in bytes (0 = unlimited).
	Limit int64
	// Held is what the tenant held before this request: bytes published and
	// not yet applied by the fetchers, or being published.
	Held int64
	// Bytes is the request's size.
	Bytes int64

	q      *Queue
	tenant string
	token  string
}

// ReserveSubmitRoom reserves bytes of a tenant's room on SUBMIT for a
// request about to be published: what the tenant's earlier requests hold
// there (published, and not at or below ackFloor, the fetchers' ack floor
// on SUBMIT) plus bytes must stay within its limit, its own in
// [Keys.DoorLimits] (field "<tenant>:submitBytes") or else defaultLimit
// (0 = unlimited). Every gateway replica shares the tenant's count.
func (q *Queue) ReserveSubmitRoom(ctx context.Context, tenant string, bytes, defaultLimit int64, ackFloor uint64) (*SubmitRoom, error) {
	if q.sharded() {
		return q.For(tenant).ReserveSubmitRoom(ctx, tenant, bytes, defaultLimit, ackFloor)
	}
	if err := contracts.ValidateTenant(tenant); err != nil {
		return nil, fmt.Errorf("redisq: submit room: %w", err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	r := &SubmitRoom{q: q, tenant: tenant, token: hex.EncodeToString(b[:]), Bytes: bytes}
	v, err := q.run(ctx, "submit_room", submitRoomScript, q.submitRoomKeys(tenant), "reserve", tenant, q.now(),
		submitRoomTTL.Milliseconds(), max(defaultLimit, 0), strconv.FormatUint(ackFloor, 10), r.token, bytes, SubmitRoomLease.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("redisq: submit room of %s: %w", tenant, err)
	}
	l := toList(v)
	r.OK, r.Held, r.Limit = toInt(l[0]) == 1, toInt(l[1]), toInt(l[2])
	return r, nil
}

// Settle records that the request is published: its bytes count until the
// fetchers' ack floor on SUBMIT reaches seq (SUBMIT's last sequence once its
// last message was acknowledged). A reservation that was refused or is
// unlimited records nothing.
func (r *SubmitRoom) Settle(ctx context.Context, seq uint64) error {
	return r.end(ctx, "settle", strconv.FormatUint(seq, 10))
}

// Release gives the reservation back: nothing of the request was published.
func (r *SubmitRoom) Release(ctx context.Context) error { return r.end(ctx, "release") }

func (r *SubmitRoom) end(ctx context.Context, mode string, extra ...any) error {
	if r == nil || !r.OK || r.Limit == 0 {
		return nil
	}
	args := append([]any{mode, r.tenant, r.q.now(), submitRoomTTL.Milliseconds(), r.token, r.Bytes}, extra...)
	if _, err := r.q.run(ctx, "submit_room", submitRoomScript, r.q.submitRoomKeys(r.tenant), args...); err != nil {
		return fmt.Errorf("redisq: submit room of %s: %w", r.tenant, err)
	}
	return nil
}

func (q *Queue) submitRoomKeys(tenant string) []string {
	return []string{q.keys.DoorLimits(), q.keys.DoorState(tenant, "submit-published"),
		q.keys.DoorState(tenant, "submit-reserved"), q.keys.DoorState(tenant, "submit-bytes")}
}

// SetTenantSubmitRoom sets a tenant's own room on SUBMIT in bytes: limit >=
// 0, 0 meaning unlimited, or [QuotaDefault] to remove it (the gateway's
// GATEWAY_TENANT_SUBMIT_BYTES applies again).
func (q *Queue) SetTenantSubmitRoom(ctx context.Context, tenant string, limit int64) error {
	if q.sharded() {
		return q.For(tenant).SetTenantSubmitRoom(ctx, tenant, limit)
	}
	if err := contracts.ValidateTenant(tenant); err != nil {
		return fmt.Errorf("redisq: submit room: %w", err)
	}
	if limit < QuotaDefault {
		return fmt.Errorf("redisq: submit room of %s: %d: must be >= 0 (0 = unlimited)", tenant, limit)
	}
	field := tenant + ":" + SubmitRoomField
	var err error
	if limit == QuotaDefault {
		err = q.rdb.HDel(ctx, q.keys.DoorLimits(), field).Err()
	} else {
		err = q.rdb.HSet(ctx, q.keys.DoorLimits(), field, limit).Err()
	}
	if err != nil {
		return fmt.Errorf("redisq: submit room of %s: %w", tenant, err)
	}
	return nil
}

// TenantSubmitRoom returns a tenant's own room on SUBMIT; ok is false when
// it has none (the gateway's default applies).
func (q *Queue) TenantSubmitRoom(ctx context.Context, tenant string) (limit int64, ok bool, err error) {
	if q.sharded() {
		return q.For(tenant).TenantSubmitRoom(ctx, tenant)
	}
	if err := contracts.ValidateTenant(tenant); err != nil {
		return 0, false, fmt.Errorf("redisq: submit room: %w", err)
	}
	v, err := q.rdb.HGet(ctx, q.keys.DoorLimits(), tenant+":"+SubmitRoomField).Int64()
	if isNil(err) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("redisq: submit room of %s: %w", tenant, err)
	}
	return v, true, nil
}

// SubmitCheck is what a jobs request reads of Redis before it publishes,
// besides its room on SUBMIT.
type SubmitCheck struct {
	// State is the group's state, "" when the group does not exist
	// ([Queue.GroupState]).
	State contracts.GroupState
	// Quota is the tenant's quotas and counts ([Queue.TenantQuota]).
	Quota TenantQuota
	// Refused is the group's refused message ids ([Queue.RefusedMsgIDs]).
	Refused map[string]struct{}
}

// ReadSubmitCheck reads g's state, its tenant's quotas and counts and g's
// refused message ids in one round trip: a jobs request on a busy Redis
// waits for one answer instead of three.
func (q *Queue) ReadSubmitCheck(ctx context.Context, g contracts.GroupRef) (*SubmitCheck, error) {
	if q.sharded() {
		return q.For(g.Tenant).ReadSubmitCheck(ctx, g)
	}
	if err := g.Validate(); err != nil {
		return nil, fmt.Errorf("redisq: submit check: %w", err)
	}
	pipe := q.rdb.Pipeline()
	state := pipe.HGet(ctx, q.keys.GroupMeta(g), "status")
	quota := q.queueQuotas(ctx, pipe, []string{g.Tenant})
	refused := pipe.ZRange(ctx, q.keys.GroupRefusedIDs(g), 0, -1)
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		return nil, fmt.Errorf("redisq: submit check of %s: %w", g, err)
	}
	return &SubmitCheck{State: contracts.GroupState(state.Val()), Quota: quota()[0], Refused: idSet(refused.Val())}, nil
}
