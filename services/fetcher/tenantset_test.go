package fetcher_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/tenantset"
	"github.com/bulkaction/bulkaction/internal/testenv"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/fetcher"
)

// TestRedisRestoredFromAnOlderSnapshotKeepsTenantSettings: a tenant's
// default windows and callback secret, set and rotated after the snapshot a
// Redis comes back from, are not in SUBMIT: the fetcher's replay copies
// them back from the tenants bucket, so the restore brings back neither the
// windows nor the secret of then.
func TestRedisRestoredFromAnOlderSnapshotKeepsTenantSettings(t *testing.T) {
	t.Parallel()
	srv := testenv.NewRedisServer(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: 1})
	t.Cleanup(func() { rdb.Close() })
	e := pipelinetest.NewEnvWithRedis(t, rdb, redisq.Config{Prefix: "ts:"})
	ctx := context.Background()
	testkit.Start(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: 10}}, e.Deps()))
	c := client.New(e.JS, client.Options{})
	ts, err := tenantset.Open(ctx, e.JS, e.Names, e.Queue)
	if err != nil {
		t.Fatal(err)
	}
	const tenant = "acme"
	oldWs := []contracts.Window{{Zone: "Europe/Berlin", Days: []string{"mon"}, From: "08:00", To: "12:00"}}
	newWs := []contracts.Window{{Zone: "America/New_York", Days: []string{"tue", "wed"}, From: "09:00", To: "17:00"}}
	if err := ts.SetWindows(ctx, tenant, oldWs); err != nil {
		t.Fatal(err)
	}
	if _, err := ts.RotateCallbackSecret(ctx, tenant, "whsec_old", 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Submit(ctx, "a", clientJobs("a", 0, 3)...); err != nil {
		t.Fatal(err)
	}
	waitSubmitDrained(t, e)
	waitPosition(t, e)
	snap := dumpKeys(t, rdb, "ts:")

	// Written after the snapshot: Redis loses them with the restore.
	if err := ts.SetWindows(ctx, tenant, newWs); err != nil {
		t.Fatal(err)
	}
	rotated, err := ts.RotateCallbackSecret(ctx, tenant, "whsec_new", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Previous != "whsec_old" {
		t.Fatalf("rotation: previous %q, want whsec_old", rotated.Previous)
	}

	restoreSnapshot(t, srv, snap)
	if ws, err := e.Queue.TenantWindows(ctx, tenant); err != nil || !reflect.DeepEqual(ws, oldWs) {
		t.Fatalf("restored Redis has windows %v, %v: want the snapshot's %v", ws, err, oldWs)
	}
	// Something to ingest after the restore: the fetcher sees the restart.
	if err := c.Submit(ctx, "b", clientJobs("b", 0, 1)...); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the position current", 0, func() bool {
		p, err := e.Queue.Position(ctx, "submit")
		return err == nil && p.Current
	})
	if ws, err := e.Queue.TenantWindows(ctx, tenant); err != nil || !reflect.DeepEqual(ws, newWs) {
		t.Errorf("windows after the replay: %v, %v; want %v", ws, err, newWs)
	}
	sec, err := e.Queue.CallbackSecretsOf(ctx, tenant)
	if err != nil {
		t.Fatal(err)
	}
	if sec.Current != "whsec_new" || sec.Previous != "whsec_old" || !sec.CreatedAt.Equal(rotated.CreatedAt) ||
		!sec.PreviousUntil.Equal(rotated.PreviousUntil) {
		t.Errorf("callback secrets after the replay: %+v, want %+v", sec, rotated)
	}
}

// TestFetcherStartCompletesATenantSettingRedisMissed: a setting the bucket
// has and Redis has not (its write to Redis failed after the bucket's) is
// in Redis once a fetcher has started, with no replay to do.
func TestFetcherStartCompletesATenantSettingRedisMissed(t *testing.T) {
	t.Parallel()
	e := pipelinetest.NewEnv(t, redisq.Config{})
	ctx := context.Background()
	stop := testkit.Start(t, newFetcher(t, fetcher.Config{}, e.Deps()))
	testkit.WaitFor(t, "the position current", 0, func() bool {
		p, err := e.Queue.Position(ctx, "submit")
		return err == nil && p.Current
	})
	stop()

	kv, err := e.JS.KeyValue(ctx, e.Names.BucketTenants())
	if err != nil {
		t.Fatal(err)
	}
	ws := []contracts.Window{{Zone: "Asia/Kolkata", Days: []string{"fri"}, From: "10:00", To: "18:00"}}
	if _, err := kv.Put(ctx, "acme.windows", []byte(`[{"zone":"Asia/Kolkata","days":["fri"],"from":"10:00","to":"18:00"}]`)); err != nil {
		t.Fatal(err)
	}
	f := newFetcher(t, fetcher.Config{}, e.Deps())
	testkit.Start(t, f)
	testkit.WaitFor(t, "the fetcher ready (once the start's copy is done)", 0, func() bool {
		select {
		case <-f.Ready():
			return true
		default:
			return false
		}
	})
	if got, err := e.Queue.TenantWindows(ctx, "acme"); err != nil || !reflect.DeepEqual(got, ws) {
		t.Errorf("windows once the fetcher started: %v, %v; want %v", got, err, ws)
	}
}
