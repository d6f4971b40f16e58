package config_test

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
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

// TestReadyCapacityDefaultIsTheServices checks that the settings' READY
// capacity, at default settings, is the services' default capacity.
func TestReadyCapacityDefaultIsTheServices(t *testing.T) {
	c, err := config.Load()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.ReadyCapacity(), handoff.DefaultReadyCapacity; got != want {
		t.Fatalf("settings' READY capacity %d, services' default %d", got, want)
	}
	if want := handoff.ReadyPerWorkerSlot * worker.DefaultConcurrency; handoff.DefaultReadyCapacity != want {
		t.Fatalf("handoff.DefaultReadyCapacity %d, want %d per slot × %d slots = %d", handoff.DefaultReadyCapacity,
			handoff.ReadyPerWorkerSlot, worker.DefaultConcurrency, want)
	}
	if fetcher.DefaultReadyCapacity != handoff.DefaultReadyCapacity || dispatcher.DefaultReadyCapacity != handoff.DefaultReadyCapacity {
		t.Fatal("fetcher and dispatcher must use handoff.DefaultReadyCapacity")
	}
}
