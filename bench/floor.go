package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/config"
	"github.com/bulkaction/bulkaction/internal/conns"
	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/jspub"
)

// FloorPrefix is the subject prefix of the streams [NatsFloor] relays
// through, apart from the pipeline's.
const FloorPrefix = "benchfloor"

// floorBatch is how many messages one relay stage fetches, publishes and
// acknowledges at once.
const floorBatch = 256

// FloorResult is what [NatsFloor] measured.
type FloorResult struct {
	Jobs    int
	Elapsed time.Duration
	// CPU is this process's CPU time over the run: the NATS server and the
	// relay's client side together.
	CPU time.Duration
}

// JobsPerSec is the relay's throughput.
func (r FloorResult) JobsPerSec() float64 { return float64(r.Jobs) / r.Elapsed.Seconds() }

// CPUPerJob is the process CPU time per relayed job.
func (r FloorResult) CPUPerJob() time.Duration { return r.CPU / time.Duration(r.Jobs) }

// NatsFloor measures what the three stored JetStream hops of a job cost on
// their own, with no Redis and no service logic: it publishes jobs
// submissions to a SUBMIT stream and relays them, as ready jobs and then
// results, through READY and RESULT streams configured exactly as the
// pipeline's (the configuration's storage, work-queue retention, duplicate
// window; see natsutil.StreamConfigs), each message with its contract body
// and Nats-Msg-Id. Each hop is one stage that fetches up to 256 messages,
// publishes the next hop's messages asynchronously, awaits their PubAcks and
// acknowledges what it fetched: the batching the pipeline's services use at
// best. No system can carry a job through those hops faster on this machine,
// so this bounds the pipeline's throughput from above.
func NatsFloor(ctx context.Context, natsURL string, jobs int) (FloorResult, error) {
	cfg, err := config.Load()
	if err != nil {
		return FloorResult{}, err
	}
	nc, err := nats.Connect(natsURL)
	if err != nil {
		return FloorResult{}, fmt.Errorf("bench: floor: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return FloorResult{}, err
	}
	names := contracts.Names{Prefix: FloorPrefix}
	floorGroup := contracts.Group("bench", "floor")
	floorSeq.Add(1)
	if err := natsutil.EnsureStreams(ctx, js, names, conns.StreamSettings(cfg)); err != nil {
		return FloorResult{}, err
	}
	hops := []struct {
		stream string
		next   func(i int) (*nats.Msg, error) // nil: the last hop
	}{
		{names.StreamSubmit(), func(i int) (*nats.Msg, error) {
			return floorMsg(names.Ready("noop"), &contracts.ReadyBatch{V: contracts.Version, Jobs: []contracts.ReadyJob{{
				Tenant: floorGroup.Tenant, GroupID: floorGroup.ID, JobID: jobID(i), Type: "noop", Payload: json.RawMessage(`{}`), Attempt: 1}}})
		}},
		{names.StreamReady(), func(i int) (*nats.Msg, error) {
			return floorMsg(names.Result(floorGroup), &contracts.ResultBatch{V: contracts.Version, Results: []contracts.JobResult{{
				JobID: jobID(i), Attempt: 1, Status: contracts.ResultSuccess}}})
		}},
		{names.StreamResult(), nil},
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(hops))
	var wg sync.WaitGroup
	start, cpu0 := time.Now(), processCPU()
	for h, hop := range hops {
		cons, err := js.CreateOrUpdateConsumer(ctx, hop.stream, jetstream.ConsumerConfig{
			Durable: "floor", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 10 * floorBatch,
		})
		if err != nil {
			return FloorResult{}, fmt.Errorf("bench: floor: consumer on %s: %w", hop.stream, err)
		}
		wg.Go(func() {
			if errs[h] = relay(rctx, js, cons, jobs, hop.next); errs[h] != nil {
				cancel()
			}
		})
	}
	msgs := make([]*nats.Msg, 0, floorBatch)
	for i := 0; i < jobs && rctx.Err() == nil; i++ {
		m, err := floorMsg(names.Submit(floorGroup), &contracts.Submission{V: contracts.Version, Kind: contracts.KindJobs,
			Jobs: []contracts.SubmitJob{{JobID: jobID(i), Type: "noop", Payload: json.RawMessage(`{}`)}}})
		if err != nil {
			return FloorResult{}, err
		}
		if msgs = append(msgs, m); len(msgs) == cap(msgs) || i == jobs-1 {
			if err := errors.Join(jspub.PublishWindow(rctx, js, msgs, 0)...); err != nil {
				cancel()
				wg.Wait()
				return FloorResult{}, fmt.Errorf("bench: floor: submit: %w", err)
			}
			msgs = msgs[:0]
		}
	}
	wg.Wait()
	res := FloorResult{Jobs: jobs, Elapsed: time.Since(start), CPU: processCPU() - cpu0}
	if err := errors.Join(errs...); err != nil {
		return FloorResult{}, fmt.Errorf("bench: floor: %w", err)
	}
	for _, s := range []string{names.StreamSubmit(), names.StreamReady(), names.StreamResult(),
		names.StreamEvents(), names.StreamDLQ()} {
		_ = js.DeleteStream(ctx, s)
	}
	return res, nil
}

// floorSeq keeps message ids of different floor runs apart.
var floorSeq atomic.Int64

// floorMsg is a message to subject with body v and its contract
// Nats-Msg-Id.
func floorMsg(subject string, v interface{ MsgID() string }) (*nats.Msg, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(subject)
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s:%d", v.MsgID(), floorSeq.Load()))
	return m, nil
}

// relay moves jobs messages from cons to the next hop (none when next is
// nil): fetch a batch, publish the next messages, await their PubAcks,
// acknowledge the batch.
func relay(ctx context.Context, js jetstream.JetStream, cons jetstream.Consumer, jobs int,
	next func(i int) (*nats.Msg, error)) error {
	var in []jetstream.Msg
	out := make([]*nats.Msg, 0, floorBatch)
	for done := 0; done < jobs; {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err := cons.Fetch(floorBatch, jetstream.FetchMaxWait(100*time.Millisecond))
		if err != nil {
			return err
		}
		in = in[:0]
		for m := range batch.Messages() {
			in = append(in, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return err
		}
		if next != nil && len(in) > 0 {
			out = out[:0]
			for k := range in {
				m, err := next(done + k)
				if err != nil {
					return err
				}
				out = append(out, m)
			}
			if err := errors.Join(jspub.PublishWindow(ctx, js, out, 0)...); err != nil {
				return err
			}
		}
		for _, m := range in {
			if err := m.Ack(); err != nil {
				return err
			}
		}
		done += len(in)
	}
	return nil
}
