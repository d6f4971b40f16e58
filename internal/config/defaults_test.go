package config_test

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/conns"
	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/aggregator"
	"github.com/bulkaction/bulkaction/services/dispatcher"
	"github.com/bulkaction/bulkaction/services/fetcher"
	"github.com/bulkaction/bulkaction/services/worker"
)

// TestDefaultTagsEqualTheConstants checks that each setting's `default:`
// tag is the default constant of the package that uses it, so a default
// has one source: the constant.
func TestDefaultTagsEqualTheConstants(t *testing.T) {
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	want := map[string]string{
		"REDIS_PREFIX":             redisq.DefaultPrefix,
		"SUBJECT_PREFIX":           contracts.DefaultPrefix,
		"ALPHA":                    "0",
		"ADMISSION_MODE":           redisq.DefaultMode,
		"GLOBAL_RPS":               strconv.Itoa(redisq.DefaultGlobalLimit),
		"RATE_LIMIT_WINDOW_MS":     ms(redisq.DefaultWindow),
		"ACTIVE_GROUP_STALE_MS":    ms(redisq.DefaultActiveStaleAfter),
		"LEASE_MS":                 ms(redisq.DefaultLease),
		"BASE_BACKOFF_MS":          ms(redisq.DefaultBaseBackoff),
		"MAX_BACKOFF_MS":           ms(redisq.DefaultMaxBackoff),
		"JOB_TTL":                  redisq.DefaultJobTTL.String(),
		"GROUP_TTL":                redisq.DefaultGroupTTL.String(),
		"ADMIT_BATCH_SIZE":         strconv.Itoa(fetcher.DefaultAdmitBatchSize),
		"INGEST_BATCH_SIZE":        strconv.Itoa(fetcher.DefaultIngestBatchSize),
		"DISPATCH_INTERVAL_MS":     ms(dispatcher.DefaultInterval),
		"DISPATCH_BATCH_SIZE":      strconv.Itoa(dispatcher.DefaultBatchSize),
		"WORKER_COUNT":             strconv.Itoa(worker.DefaultConcurrency),
		"JOB_TIMEOUT_MS":           ms(worker.DefaultJobTimeout),
		"MAX_RETRY_COUNT":          strconv.Itoa(worker.DefaultMaxRetryCount),
		"MAX_THROTTLES":            strconv.Itoa(worker.DefaultMaxThrottles),
		"MAX_DELIVERIES":           strconv.Itoa(worker.DefaultMaxDeliveries),
		"SHUTDOWN_GRACE_PERIOD_MS": ms(worker.DefaultShutdownGrace),
		"RESULT_BATCH_SIZE":        strconv.Itoa(aggregator.DefaultBatchSize),
		"STUCK_AFTER":              aggregator.DefaultStuckAfter.String(),
		"CLAIM_TTL":                redisq.DefaultClaimTTL.String(),
		"STREAM_MAX_AGE":           natsutil.DefaultMaxAge.String(),
		"DUPLICATE_WINDOW":         natsutil.DefaultDuplicateWindow.String(),
		"MAX_PAYLOAD_BYTES":        strconv.Itoa(contracts.DefaultMaxPayloadBytes),
		"UNSERVED_TYPES":           fetcher.UnservedHold,
		"READY_PACK_JOBS":          strconv.Itoa(handoff.DefaultPackJobs),
	}
	tags := map[string]string{}
	typ := reflect.TypeOf(config.Config{})
	for i := range typ.NumField() {
		f := typ.Field(i)
		tags[f.Tag.Get("envconfig")] = f.Tag.Get("default")
	}
	for name, w := range want {
		got, ok := tags[name]
		if !ok {
			t.Errorf("%s: no such setting", name)
			continue
		}
		if !sameValue(got, w) {
			t.Errorf("%s: default tag %q, the constant is %q", name, got, w)
		}
	}
}

// sameValue compares a tag with a constant's text, durations by value
// ("168h" equals "168h0m0s").
func sameValue(tag, constant string) bool {
	if tag == constant {
		return true
	}
	a, errA := time.ParseDuration(tag)
	b, errB := time.ParseDuration(constant)
	return errA == nil && errB == nil && a == b
}

// TestReadyCapacityDefaultIsTheServices checks that READY's room mapped
// from the default settings is READY's default room, the one fetchers and
// dispatchers take when their Config leaves it zero.
func TestReadyCapacityDefaultIsTheServices(t *testing.T) {
	c, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := conns.Ready(c), (handoff.ReadyConfig{}).WithDefaults(); got != want {
		t.Fatalf("READY from the settings %+v, the services' default %+v", got, want)
	}
	if want := handoff.ReadyPerWorkerSlot * worker.DefaultConcurrency; handoff.DefaultReadyCapacity != want {
		t.Fatalf("handoff.DefaultReadyCapacity %d, want %d per slot × %d slots = %d", handoff.DefaultReadyCapacity,
			handoff.ReadyPerWorkerSlot, worker.DefaultConcurrency, want)
	}
	c.ReadyQueueMaxSize, c.WorkerInstances = 0, 3
	if got, want := conns.Ready(c).Capacity, handoff.ReadyPerWorkerSlot*c.WorkerCount*3; got != want {
		t.Fatalf("READY_QUEUE_MAX_SIZE=0 with %d worker slots: room %d, want %d", c.WorkerCount*3, got, want)
	}
}
