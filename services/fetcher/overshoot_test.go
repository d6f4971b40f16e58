package fetcher_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/internal/testkit"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/services/dispatcher"
	"github.com/bulkaction/bulkaction/services/fetcher"
)

// TestReadyCapacityHoldsWithSeveralAdmitters: three fetchers and a
// dispatcher (releasing backed-off jobs) share one READY capacity per job
// type. Each measures READY and then admits; without the reservations in
// Redis they would each fill the room they measured, together several
// times the capacity. A slow consumer keeps room freeing while a sampler
// reads READY's jobs per type: no sample may exceed the capacity (no
// slack: reservations are taken in the admission script itself). The
// admitters pack jobs (up to 4 a message, spread over 2 slots); a pack's
// subject names its jobs, so the sampler counts jobs from READY's
// messages per subject, and the consumer counts jobs.
func TestReadyCapacityHoldsWithSeveralAdmitters(t *testing.T) {
	t.Parallel()
	const capacity, perType = 15, 240
	types := []string{"a", "b"}
	e := pipelinetest.NewEnv(t, redisq.Config{BaseBackoff: 100 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	ctx := context.Background()

	// backed-off jobs for the dispatcher: leased, claimed and retried
	var parked []redisq.Job
	for i := range 60 {
		parked = append(parked, redisq.Job{Group: contracts.Group("park", "p"), ID: fmt.Sprintf("p%03d", i), Type: types[i%2]})
	}
	for _, j := range e.Lease(t, parked) {
		if out, err := e.Queue.Claim(ctx, j.Group, j.ID, j.Attempt); err != nil || out != redisq.ClaimRun {
			t.Fatalf("claim: %s %v", out, err)
		}
		if _, err := e.Queue.Retry(ctx, j.Group, j.ID, j.Attempt, time.Duration(50+j.Attempt)*time.Millisecond, "busy"); err != nil {
			t.Fatal(err)
		}
	}
	// queued jobs for the fetchers, of several tenants and groups
	var jobs []redisq.Job
	for _, ty := range types {
		for i := range perType {
			g := contracts.Group(fmt.Sprintf("t%d", i%3), fmt.Sprintf("g%d", i%5))
			jobs = append(jobs, redisq.Job{Group: g, ID: fmt.Sprintf("%s%04d", ty, i), Type: ty})
		}
	}
	if _, err := e.Queue.EnqueueJobs(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	total := len(jobs) + len(parked)

	// the sampler: the most messages of each type READY held at once
	var peak sync.Map
	stopSampling := make(chan struct{})
	var sampling sync.WaitGroup
	sampling.Go(func() {
		st, err := e.JS.Stream(ctx, e.Names.StreamReady())
		if err != nil {
			t.Error(err)
			return
		}
		for {
			select {
			case <-stopSampling:
				return
			default:
			}
			info, err := st.Info(ctx, jetstream.WithSubjectFilter(e.Names.ReadyAll()))
			if err != nil {
				continue
			}
			jobsOf := map[string]uint64{}
			for subj, n := range info.State.Subjects {
				if ty, per, ok := e.Names.ReadyFromSubject(subj); ok {
					jobsOf[ty] += n * uint64(per)
				}
			}
			for ty, n := range jobsOf {
				for {
					old, _ := peak.LoadOrStore(ty, n)
					if old.(uint64) >= n || peak.CompareAndSwap(ty, old, n) {
						break
					}
				}
			}
		}
	})

	for range 3 {
		nc, js := e.Connect(t)
		testkit.Start(t, newFetcher(t, fetcher.Config{Ready: handoff.ReadyConfig{Capacity: capacity, PackJobs: 4, WorkerSlots: 2}, AdmitBatchSize: 64}, e.DepsWith(nc, js)))
	}
	nc, js := e.Connect(t)
	d, err := dispatcher.New(dispatcher.Config{Ready: handoff.ReadyConfig{Capacity: capacity, PackJobs: 4, WorkerSlots: 2}, Interval: 5 * time.Millisecond}, e.DepsWith(nc, js))
	if err != nil {
		t.Fatal(err)
	}
	testkit.Start(t, d)

	// a slow worker: one message of either type every 2 ms
	cons, err := e.JS.CreateOrUpdateConsumer(ctx, e.Names.StreamReady(), jetstream.ConsumerConfig{
		Durable: "slow", FilterSubject: e.Names.ReadyAll(), AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	var consumed atomic.Int64
	deadline := time.Now().Add(60 * time.Second)
	for consumed.Load() < int64(total) && time.Now().Before(deadline) {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			continue
		}
		for m := range batch.Messages() {
			time.Sleep(2 * time.Millisecond)
			rb, err := contracts.DecodeReadyBatch(m.Data(), contracts.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
			consumed.Add(int64(len(rb.Jobs)))
		}
	}
	close(stopSampling)
	sampling.Wait()
	if got := consumed.Load(); got != int64(total) {
		t.Fatalf("consumed %d of %d jobs", got, total)
	}
	for _, ty := range types {
		p, _ := peak.Load(ty)
		n, _ := p.(uint64)
		t.Logf("type %s: at most %d jobs on READY (capacity %d)", ty, n, capacity)
		if n > capacity {
			t.Errorf("type %s: READY held %d jobs, capacity %d", ty, n, capacity)
		}
		if n < capacity/2 {
			t.Errorf("type %s: READY held at most %d jobs: the admitters did not fill it", ty, n)
		}
	}
}
