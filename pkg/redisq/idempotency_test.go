package redisq_test

import (
	"context"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// An Idempotency-Key's record: one request locks it; only that request
// renews, releases or completes it, and once completed every request reads
// the stored response.
func TestIdempotencyStoreOwnerChecked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q, _ := setup(t, redisq.Config{}, false)
	s := q.Idempotency()
	id := redisq.IdempotencyKey{Scope: "t:acme", Hash: "abc"}
	if _, ok, err := s.Get(ctx, id); err != nil || ok {
		t.Fatalf("get before a lock: %v %v", ok, err)
	}
	if ok, err := s.Lock(ctx, id, "first", time.Minute); err != nil || !ok {
		t.Fatalf("first lock: %v %v", ok, err)
	}
	if ok, err := s.Lock(ctx, id, "second", time.Minute); err != nil || ok {
		t.Fatalf("second lock of a held key: %v %v", ok, err)
	}
	if rec, ok, err := s.Get(ctx, id); err != nil || !ok || rec.State != redisq.IdempotencyRunning || rec.Owner != "first" {
		t.Fatalf("the lock reads %+v %v %v", rec, ok, err)
	}
	for name, step := range map[string]func() (bool, error){
		"renew":   func() (bool, error) { return s.Renew(ctx, id, "second", time.Minute) },
		"release": func() (bool, error) { return s.Release(ctx, id, "second") },
		"complete": func() (bool, error) {
			return s.Complete(ctx, id, "second", redisq.IdempotencyRecord{State: redisq.IdempotencyDone}, 0)
		},
	} {
		if ok, err := step(); err != nil || ok {
			t.Errorf("%s by another request: %v %v", name, ok, err)
		}
	}
	if ok, err := s.Renew(ctx, id, "first", time.Minute); err != nil || !ok {
		t.Errorf("renew by the owner: %v %v", ok, err)
	}
	done := redisq.IdempotencyRecord{State: redisq.IdempotencyDone, Fingerprint: "fp", Status: 202, ContentType: "application/json", Body: []byte(`{"ok":true}`)}
	if ok, err := s.Complete(ctx, id, "first", done, time.Hour); err != nil || !ok {
		t.Fatalf("complete by the owner: %v %v", ok, err)
	}
	rec, ok, err := s.Get(ctx, id)
	if err != nil || !ok || rec.State != redisq.IdempotencyDone || rec.Status != 202 || string(rec.Body) != `{"ok":true}` || rec.Fingerprint != "fp" {
		t.Fatalf("the response reads %+v %v %v", rec, ok, err)
	}
	if ok, _ := s.Release(ctx, id, "first"); ok {
		t.Error("a stored response was released as a lock")
	}
	other := redisq.IdempotencyKey{Scope: "t:acme", Hash: "def"}
	if ok, _ := s.Lock(ctx, other, "x", time.Minute); !ok {
		t.Fatal("lock of another key")
	}
	if ok, err := s.Release(ctx, other, "x"); err != nil || !ok {
		t.Errorf("release by the owner: %v %v", ok, err)
	}
	if _, ok, _ := s.Get(ctx, other); ok {
		t.Error("a released key still has a record")
	}
}
