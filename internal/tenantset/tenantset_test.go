package tenantset_test

import (
	"context"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/tenantset"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

func open(t *testing.T) (*pipelinetest.Env, *tenantset.Settings) {
	t.Helper()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	s, err := tenantset.Open(context.Background(), e.JS, e.Names, e.Queue)
	if err != nil {
		t.Fatal(err)
	}
	return e, s
}

func windows(t *testing.T, e *pipelinetest.Env, tenant string) []contracts.Window {
	t.Helper()
	ws, err := e.Queue.TenantWindows(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

func restore(t *testing.T, s *tenantset.Settings) int {
	t.Helper()
	n, err := s.Restore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

var (
	berlin = []contracts.Window{{Zone: "Europe/Berlin", Days: []string{"mon"}, From: "08:00", To: "12:00"}}
	york   = []contracts.Window{{Zone: "America/New_York", Days: []string{"tue"}, From: "09:00", To: "17:00"}}
)

// TestRestoreWritesWhatRedisLostOnce: a Redis that lost the settings (its
// keys gone) gets them back from the bucket, cleared windows included; a
// second restore writes nothing.
func TestRestoreWritesWhatRedisLostOnce(t *testing.T) {
	t.Parallel()
	e, s := open(t)
	ctx := context.Background()
	if err := s.SetWindows(ctx, "a", berlin); err != nil {
		t.Fatal(err)
	}
	if err := s.SetWindows(ctx, "b", york); err != nil {
		t.Fatal(err)
	}
	if err := s.SetWindows(ctx, "b", nil); err != nil { // cleared
		t.Fatal(err)
	}
	rotated, err := s.RotateCallbackSecret(ctx, "a", "whsec_1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if n := restore(t, s); n != 0 {
		t.Errorf("restore over an up-to-date Redis wrote %d entries, want 0", n)
	}

	// Redis as it was before any of them: b's windows of an older write.
	if err := e.Redis.Del(ctx, e.Keys.TenantSettingsRev(), e.Keys.TenantWindows(), e.Keys.TenantCallbackSecret("a")).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.Redis.HSet(ctx, e.Keys.TenantWindows(), "b", `[{"zone":"UTC","days":["sun"],"from":"00:00","to":"01:00"}]`).Err(); err != nil {
		t.Fatal(err)
	}
	if n := restore(t, s); n != 3 {
		t.Errorf("restore wrote %d entries, want 3", n)
	}
	if ws := windows(t, e, "a"); !reflect.DeepEqual(ws, berlin) {
		t.Errorf("a's windows %v, want %v", ws, berlin)
	}
	if ws := windows(t, e, "b"); ws != nil {
		t.Errorf("b's windows %v, want none (cleared)", ws)
	}
	sec, err := e.Queue.CallbackSecretsOf(ctx, "a")
	if err != nil || sec.Current != "whsec_1" || !sec.CreatedAt.Equal(rotated.CreatedAt) {
		t.Errorf("a's secrets %+v %v, want %+v", sec, err, rotated)
	}
	if n := restore(t, s); n != 0 {
		t.Errorf("second restore wrote %d entries, want 0", n)
	}
}

// TestOlderRevisionNeverOverwrites: a copy of an older revision (a restore
// that read the bucket before a write and writes Redis after it) leaves
// Redis as the newer write made it; a copy of a bucket made again (its
// revisions start again at 1) is written over whatever revision Redis has.
func TestOlderRevisionNeverOverwrites(t *testing.T) {
	t.Parallel()
	e, s := open(t)
	ctx := context.Background()
	if err := s.SetWindows(ctx, "a", york); err != nil {
		t.Fatal(err)
	}
	stored, err := e.Redis.HGet(ctx, e.Keys.TenantSettingsRev(), "a:windows").Result()
	if err != nil {
		t.Fatal(err)
	}
	bucket, revText, _ := strings.Cut(stored, ":")
	rev, err := strconv.ParseUint(revText, 10, 64)
	if err != nil || rev == 0 || bucket == "" {
		t.Fatalf("version of a's windows in Redis: %q", stored)
	}
	for _, r := range []uint64{rev - 1, rev} {
		v := redisq.SettingVersion{Bucket: bucket, Rev: r}
		if wrote, err := e.Queue.PutTenantWindows(ctx, "a", berlin, v); err != nil || wrote {
			t.Errorf("PutTenantWindows at %v (Redis at %q): wrote %v, %v; want not written", v, stored, wrote, err)
		}
	}
	if ws := windows(t, e, "a"); !reflect.DeepEqual(ws, york) {
		t.Errorf("a's windows %v, want %v", ws, york)
	}

	// Redis copied a's windows from a bucket since deleted, at a revision
	// the bucket of now has not reached.
	if err := e.Redis.HSet(ctx, e.Keys.TenantSettingsRev(), "a:windows", "1:999").Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.SetWindows(ctx, "a", berlin); err != nil {
		t.Fatal(err)
	}
	if ws := windows(t, e, "a"); !reflect.DeepEqual(ws, berlin) {
		t.Errorf("a's windows after a write to a bucket made again: %v, want %v", ws, berlin)
	}
	if err := e.Redis.HSet(ctx, e.Keys.TenantSettingsRev(), "a:windows", "1:999").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.Redis.HSet(ctx, e.Keys.TenantWindows(), "a", `[{"zone":"UTC","days":["sun"],"from":"00:00","to":"01:00"}]`).Err(); err != nil {
		t.Fatal(err)
	}
	if n := restore(t, s); n != 1 {
		t.Errorf("restore over a copy of a bucket made again wrote %d entries, want 1", n)
	}
	if ws := windows(t, e, "a"); !reflect.DeepEqual(ws, berlin) {
		t.Errorf("a's windows after a restore: %v, want %v", ws, berlin)
	}
}

// TestRotationTakesThePreviousSecretFromTheBucket: a Redis that came back
// with an older secret does not make that one the previous: the bucket's
// current one is.
func TestRotationTakesThePreviousSecretFromTheBucket(t *testing.T) {
	t.Parallel()
	e, s := open(t)
	ctx := context.Background()
	if _, err := s.RotateCallbackSecret(ctx, "a", "whsec_1", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RotateCallbackSecret(ctx, "a", "whsec_2", 0); err != nil {
		t.Fatal(err)
	}
	if err := e.Redis.HSet(ctx, e.Keys.TenantCallbackSecret("a"), "current", "whsec_1").Err(); err != nil {
		t.Fatal(err)
	}
	got, err := s.RotateCallbackSecret(ctx, "a", "whsec_3", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if got.Current != "whsec_3" || got.Previous != "whsec_2" {
		t.Errorf("after the rotation: current %q, previous %q; want whsec_3, whsec_2", got.Current, got.Previous)
	}
	sec, err := e.Queue.CallbackSecretsOf(ctx, "a")
	if err != nil || sec.Current != "whsec_3" || sec.Previous != "whsec_2" {
		t.Errorf("Redis: %+v %v", sec, err)
	}
}
