package worker

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/jspub"
)

// Batching of results (docs/ARCHITECTURE.md §6.3).
const (
	// ResultLinger is how long the first result of a batch waits for
	// others of its group to share its RESULT message: the latency a
	// finished job pays, at most, for fewer messages.
	ResultLinger = 2 * time.Millisecond
	// MaxResultBatch is the most results one RESULT message carries; a
	// batch that reaches it is published at once.
	MaxResultBatch = 64
	// resultHeadroom is the room left under the message limit for a
	// batch's headers.
	resultHeadroom = 4 << 10
)

// results gathers the results of finished jobs into one [contracts.ResultBatch]
// per group: a result waits at most [ResultLinger] (or until its batch holds
// [MaxResultBatch] results, or as many bytes as a message takes) and is then
// published with the others, under the batch's deterministic message id
// ([contracts.ResultBatch.MsgID]). A batch no job of its group still
// running in this worker can join is published at once: waiting would only
// delay it. Every caller waits for its batch's
// PubAck, so a job's READY message is acknowledged only once its result is
// stored; a failed publish fails every result of the batch, and each job
// is then handled as if it had published alone.
type results struct {
	d      deps.Deps
	limit  int // largest body of a batch
	linger time.Duration
	mu     sync.Mutex
	open   map[contracts.GroupRef]*resultBatch
	// running counts, per group, the jobs begun (begin) that have neither
	// published a result nor left.
	running map[contracts.GroupRef]int
}

// runner is a job of a group that may publish a result: counted in
// results.running from begin until it publishes or leaves, once.
type runner struct {
	group contracts.GroupRef
	gone  bool // rs.mu
}

// resultBatch is one RESULT message being gathered, then published.
type resultBatch struct {
	group   contracts.GroupRef
	results []contracts.JobResult
	items   [][]byte        // each result's JSON, as the body carries it
	ctx     context.Context // the first result's span context, for the headers
	size    int             // bytes of the body so far
	timer   *time.Timer
	done    chan struct{} // closed once errs is set
	errs    []error       // one per result
}

// newResults returns the result batcher of a worker.
func newResults(d deps.Deps, linger time.Duration) *results {
	limit := d.Limits.MessageLimit()
	if d.NC != nil {
		if mp := int(d.NC.MaxPayload()); mp > 0 && mp < limit {
			limit = mp
		}
	}
	return &results{d: d, limit: max(limit-resultHeadroom, 1), linger: linger, open: map[contracts.GroupRef]*resultBatch{},
		running: map[contracts.GroupRef]int{}}
}

// begin counts a job of group g that may publish a result (a claimed job
// about to run); its runner must leave once it is over.
func (rs *results) begin(g contracts.GroupRef) *runner {
	rs.mu.Lock()
	rs.running[g]++
	rs.mu.Unlock()
	return &runner{group: g}
}

// leave ends r's count (nothing if it published already). When no job of
// its group is left running, the group's open batch is published now.
func (rs *results) leave(r *runner) {
	rs.mu.Lock()
	b := rs.stop(r)
	rs.mu.Unlock()
	if b != nil {
		go rs.send(b)
	}
}

// stop ends r's count, once, and returns the open batch of its group,
// detached, when no job of the group is left running; rs.mu held.
func (rs *results) stop(r *runner) *resultBatch {
	if r == nil || r.gone {
		return nil
	}
	r.gone = true
	if rs.running[r.group]--; rs.running[r.group] > 0 {
		return nil
	}
	delete(rs.running, r.group)
	if b := rs.open[r.group]; b != nil {
		return rs.detach(b)
	}
	return nil
}

// Framing of a results body around its items: {"v":2,"results":[…]}.
var (
	resultsHead = []byte(`{"v":` + strconv.Itoa(contracts.Version) + `,"results":[`)
	resultsTail = []byte(`]}`)
	batchFrame  = string(resultsHead) + string(resultsTail)
)

// publish adds r (of group g, its trace context in ctx) to its group's
// batch and waits until the batch was published: nil once RESULT stored
// it. The publish has its own timeout (settleTimeout). run is the job's
// runner (nil: none), which stops counting.
func (rs *results) publish(ctx context.Context, g contracts.GroupRef, r contracts.JobResult, run *runner) error {
	r.Tenant, r.GroupID = "", "" // the subject names the group
	item, err := json.Marshal(&r)
	if err != nil {
		return err
	}
	r.Tenant, r.GroupID = g.Tenant, g.ID
	var flush *resultBatch // a full batch this call publishes
	rs.mu.Lock()
	b := rs.open[g]
	if b != nil && b.size+1+len(item) > rs.limit {
		flush = rs.detach(b)
		b = nil
	}
	if b == nil {
		b = &resultBatch{group: g, ctx: ctx, size: len(batchFrame), done: make(chan struct{})}
		rs.open[g] = b
		if rs.linger > 0 {
			b.timer = time.AfterFunc(rs.linger, func() { rs.flushOpen(b) })
		}
	} else {
		b.size++ // the comma
	}
	k := len(b.results)
	b.results = append(b.results, r)
	b.items = append(b.items, item)
	b.size += len(item)
	var full *resultBatch
	if rs.linger <= 0 || len(b.results) >= MaxResultBatch {
		full = rs.detach(b)
	}
	if last := rs.stop(run); last != nil {
		full = last // no job of g left running here: nothing else would join
	}
	rs.mu.Unlock()
	if flush != nil {
		go rs.send(flush)
	}
	if full != nil {
		rs.send(full)
	}
	<-b.done
	return b.errs[k]
}

// detach takes b out of the open batches and stops its timer; rs.mu held.
func (rs *results) detach(b *resultBatch) *resultBatch {
	if rs.open[b.group] == b {
		delete(rs.open, b.group)
	}
	if b.timer != nil {
		b.timer.Stop()
	}
	return b
}

// flushOpen publishes b when its linger is over, unless it left already.
func (rs *results) flushOpen(b *resultBatch) {
	rs.mu.Lock()
	if rs.open[b.group] != b {
		rs.mu.Unlock()
		return
	}
	rs.detach(b)
	rs.mu.Unlock()
	rs.send(b)
}

// flushAll publishes every open batch now (the worker is stopping).
func (rs *results) flushAll() {
	rs.mu.Lock()
	var bs []*resultBatch
	for _, b := range rs.open {
		bs = append(bs, rs.detach(b))
	}
	rs.mu.Unlock()
	for _, b := range bs {
		go rs.send(b)
	}
}

// send publishes b and tells its callers. A batch the stream refuses as
// too large (its message limit below the worker's) is published again one
// result per message.
func (rs *results) send(b *resultBatch) {
	b.errs = make([]error, len(b.results))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(b.ctx), settleTimeout)
	defer cancel()
	m := rs.message(b.ctx, b.group, b.results, b.items)
	err := jspub.PublishWindow(ctx, rs.d.JS, []*nats.Msg{m}, 0)[0]
	if err != nil && len(b.results) > 1 && tooLarge(err) {
		msgs := make([]*nats.Msg, len(b.results))
		for i := range b.results {
			msgs[i] = rs.message(b.ctx, b.group, b.results[i:i+1], b.items[i:i+1])
		}
		copy(b.errs, jspub.PublishWindow(ctx, rs.d.JS, msgs, 0))
	} else {
		for i := range b.errs {
			b.errs[i] = err
		}
	}
	close(b.done)
}

// message is the RESULT message of results of group g (items: their JSON,
// encoded by publish without the group, which the subject names), with
// the trace context of ctx.
func (rs *results) message(ctx context.Context, g contracts.GroupRef, results []contracts.JobResult, items [][]byte) *nats.Msg {
	size := len(batchFrame) + len(items)
	for _, it := range items {
		size += len(it)
	}
	data := make([]byte, 0, size)
	data = append(data, resultsHead...)
	for i, it := range items {
		if i > 0 {
			data = append(data, ',')
		}
		data = append(data, it...)
	}
	data = append(data, resultsTail...)
	rb := contracts.ResultBatch{V: contracts.Version, Results: results} // the message id names the group
	m := nats.NewMsg(rs.d.Names.Result(g))
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, rb.MsgID())
	telemetry.InjectHeader(ctx, m.Header)
	return m
}

// tooLarge reports whether a publish was refused because the message
// exceeds the stream's or the server's size limit.
func tooLarge(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
		return true
	}
	return errors.Is(err, nats.ErrMaxPayload)
}
