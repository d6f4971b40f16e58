package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// QueuedResult is what one system's backlog costs in Redis: Jobs queued
// jobs of PayloadBytes each, and the growth of used_memory they caused.
type QueuedResult struct {
	Jobs, PayloadBytes int
	Bytes              int64
}

// PerJob is the bytes per queued job, payload included.
func (r QueuedResult) PerJob() float64 { return float64(r.Bytes) / float64(r.Jobs) }

// queuedPayload is a JSON payload of exactly n bytes (at least 8):
// {"p":"xx…"}, the same as the BullMQ peer's "queued" operation.
func queuedPayload(n int) []byte {
	return []byte(`{"p":"` + strings.Repeat("x", max(0, n-8)) + `"}`)
}

// QueuedPipeline enqueues jobs jobs of payloadBytes into one group through
// pkg/redisq with its default configuration, on env's redis-server, and
// returns the growth of used_memory: the backlog of one bulk action, as
// the fetchers leave it when no worker takes it.
func QueuedPipeline(ctx context.Context, env *Env, jobs, payloadBytes int) (QueuedResult, error) {
	opt, err := redis.ParseURL(env.RedisURL(PipelineDB))
	if err != nil {
		return QueuedResult{}, err
	}
	rdb := redis.NewClient(opt)
	defer func() { _ = rdb.Close() }()
	q, err := redisq.New(ctx, rdb, redisq.Config{})
	if err != nil {
		return QueuedResult{}, err
	}
	before, err := env.UsedMemory(ctx)
	if err != nil {
		return QueuedResult{}, err
	}
	g := contracts.GroupRef{Tenant: "bench", ID: "queued"}
	p := queuedPayload(payloadBytes)
	batch := make([]redisq.Job, 0, 1000)
	for i := 0; i < jobs; {
		batch = batch[:0]
		for ; i < jobs && len(batch) < cap(batch); i++ {
			batch = append(batch, redisq.Job{Group: g, ID: jobID(i), Type: "noop", Payload: p})
		}
		out, err := q.EnqueueBatch(ctx, batch)
		if err != nil {
			return QueuedResult{}, err
		}
		for k, o := range out {
			if o != redisq.Added {
				return QueuedResult{}, fmt.Errorf("bench: queued job %s: %v", batch[k].ID, o)
			}
		}
	}
	after, err := env.UsedMemory(ctx)
	return QueuedResult{Jobs: jobs, PayloadBytes: len(p), Bytes: after - before}, err
}

// Queued adds jobs jobs whose data's JSON is payloadBytes long to a queue
// of their own with addBulk (1000 per call) while no Worker runs
// (peer.mjs's "queued" operation), and returns the growth of env's
// used_memory. env must be the server the peer uses.
func (b *BullMQ) Queued(ctx context.Context, env *Env, jobs, payloadBytes int) (QueuedResult, error) {
	before, err := env.UsedMemory(ctx)
	if err != nil {
		return QueuedResult{}, err
	}
	if _, err := b.call(ctx, map[string]any{"op": "queued", "jobs": jobs, "payload_bytes": payloadBytes}); err != nil {
		return QueuedResult{}, err
	}
	after, err := env.UsedMemory(ctx)
	return QueuedResult{Jobs: jobs, PayloadBytes: payloadBytes, Bytes: after - before}, err
}
