package redisq

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

var idempotencyScript = loadScript("idempotency")

// Idempotency-Key record states ([IdempotencyRecord.State]).
const (
	// IdempotencyRunning: the first request with the key holds it as a
	// lock while it runs.
	IdempotencyRunning = "running"
	// IdempotencyDone: the record holds the first request's response.
	IdempotencyDone = "done"
)

// IdempotencyRecord is what the store keeps for an Idempotency-Key of the
// HTTP API: a running request's lock, or the response it stored.
type IdempotencyRecord struct {
	// State is IdempotencyRunning or IdempotencyDone.
	State string `json:"state"`
	// Owner is the id of the request holding the lock (running only).
	Owner string `json:"owner,omitempty"`
	// Fingerprint is the hash of the request the response answers.
	Fingerprint string `json:"fp,omitempty"`
	// Status, ContentType and Body are the stored response.
	Status      int    `json:"status,omitempty"`
	ContentType string `json:"ct,omitempty"`
	Body        []byte `json:"body,omitempty"`
}

// IdempotencyKey names an Idempotency-Key's record: the scope it belongs
// to (a tenant or the admin) and a hash of the header's value. With
// several shards the record is kept in the shard of its scope's tenant (a
// scope "t:<tenant>" names the tenant; another scope, such as "admin", is
// placed as a tenant of that name would be).
type IdempotencyKey struct{ Scope, Hash string }

// shard is the queue that keeps id's record.
func (s *Idempotency) shard(id IdempotencyKey) *Queue {
	if !s.q.sharded() {
		return s.q
	}
	tenant, ok := strings.CutPrefix(id.Scope, "t:")
	if !ok {
		tenant = id.Scope
	}
	return s.q.For(tenant)
}

// Idempotency is the store of the HTTP API's Idempotency-Keys
// ([Queue.Idempotency]). The steps after Lock apply only while the record
// is still the caller's lock (lua/idempotency.lua).
type Idempotency struct{ q *Queue }

// Idempotency returns the queue's Idempotency-Key store.
func (q *Queue) Idempotency() *Idempotency { return &Idempotency{q: q} }

func (s *Idempotency) step(ctx context.Context, id IdempotencyKey, op, owner string, args ...any) (bool, error) {
	q := s.shard(id)
	v, err := q.run(ctx, "idempotency", idempotencyScript, []string{q.keys.Idempotency(id.Scope, id.Hash)}, append([]any{op, owner}, args...)...)
	if err != nil {
		return false, err
	}
	n, _ := v.(int64)
	return n == 1, nil
}

// Lock takes id for the request owner for ttl, unless a record exists:
// ok is false when another request holds the key or stored its response.
func (s *Idempotency) Lock(ctx context.Context, id IdempotencyKey, owner string, ttl time.Duration) (ok bool, err error) {
	lock, err := json.Marshal(IdempotencyRecord{State: IdempotencyRunning, Owner: owner})
	if err != nil {
		return false, err
	}
	return s.step(ctx, id, "lock", owner, lock, ttl.Milliseconds())
}

// Get reads id's record; ok is false when there is none.
func (s *Idempotency) Get(ctx context.Context, id IdempotencyKey) (rec *IdempotencyRecord, ok bool, err error) {
	q := s.shard(id)
	raw, err := q.rdb.Get(ctx, q.keys.Idempotency(id.Scope, id.Hash)).Bytes()
	if isNil(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("redisq: idempotency record: %w", err)
	}
	rec = &IdempotencyRecord{}
	if err := json.Unmarshal(raw, rec); err != nil {
		return nil, false, fmt.Errorf("redisq: idempotency record: %w", err)
	}
	return rec, true, nil
}

// Renew extends owner's lock of id to ttl; false when it is not owner's.
func (s *Idempotency) Renew(ctx context.Context, id IdempotencyKey, owner string, ttl time.Duration) (bool, error) {
	return s.step(ctx, id, "renew", owner, ttl.Milliseconds())
}

// Release deletes owner's lock of id; false when it is not owner's.
func (s *Idempotency) Release(ctx context.Context, id IdempotencyKey, owner string) (bool, error) {
	return s.step(ctx, id, "release", owner)
}

// Complete replaces owner's lock of id with the response rec, kept for ttl
// (0 = no expiry); false, storing nothing, when the lock is not owner's
// (it expired and another request took the key).
func (s *Idempotency) Complete(ctx context.Context, id IdempotencyKey, owner string, rec IdempotencyRecord, ttl time.Duration) (bool, error) {
	done, err := json.Marshal(rec)
	if err != nil {
		return false, err
	}
	return s.step(ctx, id, "complete", owner, done, ttl.Milliseconds())
}
