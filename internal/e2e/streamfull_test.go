package e2e_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/stack"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor"
)

// READY filled to its byte limit (STREAM_READY_MAX_BYTES) while no worker
// runs: admission stops at the limit, nothing is dead-lettered or lost, and
// once a worker makes room every job runs exactly once and the group
// completes with exact counts.
func TestReadyFullByBytesLosesNoJob(t *testing.T) {
	e := newEnv(t)
	const limit = 4 << 20
	cfg := e.config(func(c *config.Config) {
		c.StreamReadyMaxBytes = limit
		c.UnservedTypes = "admit" // admit without a live worker, so READY fills
		c.ReadyQueueMaxSize = 1000
	})
	var mu sync.Mutex
	runs := map[string]int{}
	mux := processor.NewMux()
	mux.HandleFunc("pad", func(ctx context.Context, job *processor.Job) error {
		mu.Lock()
		runs[job.JobID]++
		mu.Unlock()
		return nil
	})
	r := e.start(cfg, []string{stack.TargetFetcher, stack.TargetDispatcher, stack.TargetAggregator}, mux)
	q := r.st.Conns.Queue
	ctx := context.Background()

	const n = 60 // 60 jobs of ~100 KB: 6 MB, more than READY takes
	payload := `{"pad":"` + strings.Repeat("x", 100_000) + `"}`
	e.submit("big", "pad", n, payload, "")

	ready, err := e.js.Stream(ctx, contracts.Names{Prefix: cfg.SubjectPrefix}.StreamReady())
	if err != nil {
		t.Fatal(err)
	}
	var held uint64
	testkit.WaitFor(t, "READY at its byte limit", 30*time.Second, func() bool {
		info, err := ready.Info(ctx)
		if err != nil {
			return false
		}
		held = info.State.Msgs
		return info.State.Bytes+uint64(cfg.MaxMsgSize) > limit
	})
	time.Sleep(500 * time.Millisecond) // admission rounds go on against the full stream
	info, err := ready.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Bytes > limit || info.State.Msgs >= n {
		t.Fatalf("READY holds %d bytes in %d messages: want at most %d bytes and jobs left waiting", info.State.Bytes, info.State.Msgs, limit)
	}
	if g := group(t, q, "big"); g.Done != 0 || g.Jobs != n {
		t.Fatalf("group while READY is full: %+v", g.GroupCounts)
	}
	if dlq := e.dlqMsgs(cfg); dlq != 0 {
		t.Fatalf("%d messages dead-lettered", dlq)
	}
	t.Logf("READY full with %d of %d jobs (%d bytes)", held, n, info.State.Bytes)

	// Room returns: a worker drains READY.
	wcfg := *cfg
	e.start(&wcfg, []string{stack.TargetWorker}, mux)
	ev := e.wait("big", 2*time.Minute)
	if ev.State != contracts.StateCompleted || ev.Succeeded != n || ev.Failed != 0 {
		t.Fatalf("final event %+v", ev)
	}
	mu.Lock()
	for i := range n {
		if id := jobID(i); runs[id] != 1 {
			t.Errorf("job %s ran %d times, want once", id, runs[id])
		}
	}
	mu.Unlock()
	pipelinetest.WaitWorkStreamsEmpty(t, e.js, contracts.Names{Prefix: cfg.SubjectPrefix}, 30*time.Second)
	pipelinetest.CheckGroupTTLs(t, r.st.Conns.Redis, e.prefix)
}

// jobID is the id env.submit gives its i-th job.
func jobID(i int) string { return fmt.Sprintf("job-%06d", i) }

// dlqMsgs returns how many messages the DLQ stream holds.
func (e *env) dlqMsgs(cfg *config.Config) uint64 {
	e.t.Helper()
	st, err := e.js.Stream(context.Background(), contracts.Names{Prefix: cfg.SubjectPrefix}.StreamDLQ())
	if err != nil {
		e.t.Fatal(err)
	}
	return st.CachedInfo().State.Msgs
}
