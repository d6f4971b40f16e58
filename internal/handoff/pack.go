package handoff

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"

	"github.com/bulkaction/bulkaction/internal/deps"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// DefaultPackJobs is the pack size of a hand-off that sets none: up to 16
// jobs of one type per READY message. A pack shares one publish, one
// PubAck, one stored message, one delivery and one ack among its jobs.
// A worker runs the first job of a message in the slot it was pulled with
// and each further one in a slot of its own as one frees up, and the
// message stays on READY (and in its type's room, see [Room]) until its
// last job is settled; [Packing.Spread] keeps a round of few jobs from
// going to fewer workers than it could. The trade-off was measured with
// the end-to-end benchmark (docs/ARCHITECTURE.md §6.2): 16 against 1 more than
// doubles the throughput of noop jobs, and halves the CPU per job; 32
// adds nothing measurable. 1 gives the lowest latency to one job.
const DefaultPackJobs = 16

// packHeadroom is the room left under the message limit for a pack's
// headers (message id, traceparent, one [HeaderJobTraceparent] value per
// job: about 700 bytes for 8 jobs).
const packHeadroom = 4 << 10

// HeaderJobTraceparent is the header of a READY message of several jobs
// that lists each job's W3C traceparent, one value per job in the order of
// the body's jobs (the traceparent header is the first job's). A consumer
// that finds as many values as jobs may parent each job's span on its own.
const HeaderJobTraceparent = "Bulkaction-Job-Traceparent"

// AttrPackSize is the number of jobs of the READY message a job was
// published in, set on hand-off spans of packs of more than one job.
const AttrPackSize = attribute.Key("bulkaction.ready.pack_size")

// packLimit is the largest body a READY pack may have: the message limit
// (the streams' and the server's, the lower) less the headers' room.
func packLimit(d deps.Deps) int {
	limit := d.Limits.MessageLimit()
	if d.NC != nil {
		if mp := int(d.NC.MaxPayload()); mp > 0 && mp < limit {
			limit = mp
		}
	}
	return max(limit-packHeadroom, 1)
}

// readyItem is the JSON of job j as an item of a [contracts.ReadyBatch].
func readyItem(j redisq.LeasedJob) ([]byte, error) {
	rj := contracts.ReadyJob{Tenant: j.Group.Tenant, GroupID: j.Group.ID, JobID: j.ID, Type: j.Type, Attempt: j.Attempt,
		Destination: j.Destination}
	if len(j.Payload) > 0 {
		rj.Payload = json.RawMessage(j.Payload)
	}
	b, err := json.Marshal(&rj)
	if err != nil {
		return nil, fmt.Errorf("encode ready job: %w", err)
	}
	return b, nil
}

// Framing of a ready batch around its items: {"v":2,"jobs":[…]}.
var (
	batchHead = []byte(`{"v":` + strconv.Itoa(contracts.Version) + `,"jobs":[`)
	batchTail = []byte(`]}`)
)

// tooLarge reports whether a publish was refused because the message
// exceeds the stream's or the server's size limit.
func tooLarge(err error) bool {
	var api *jetstream.APIError
	if errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
		return true
	}
	return errors.Is(err, nats.ErrMaxPayload)
}

// packs splits the jobs at idx (indexes into jobs, each encoded in items)
// into READY messages: the jobs of each type, in a canonical order (by
// tenant, group and id, so that the same jobs handed out again, as a
// reclaim does after a lost confirm, form the same packs and the
// re-publish is deduplicated), cut into as few packs as pk.Jobs jobs a
// pack allows but no fewer than pk.Spread (nor than one job a pack), of
// even sizes (9 jobs make packs of 5 and 4, not 8 and 1), and
// cut again wherever a pack's body would exceed limit bytes. A job marked
// alone gets a message of its own. Types come in the order of their first
// job in idx.
func packs(jobs []redisq.LeasedJob, items [][]byte, idx []int, alone []bool, pk Packing, limit int) [][]int {
	per := pk.Jobs
	var types []string
	byType := map[string][]int{}
	var out [][]int
	for _, i := range idx {
		if alone[i] || per <= 1 {
			out = append(out, []int{i})
			continue
		}
		t := jobs[i].Type
		if _, ok := byType[t]; !ok {
			types = append(types, t)
		}
		byType[t] = append(byType[t], i)
	}
	for _, t := range types {
		js := byType[t]
		slices.SortFunc(js, func(a, b int) int {
			x, y := jobs[a], jobs[b]
			return cmp.Or(strings.Compare(x.Group.Tenant, y.Group.Tenant), strings.Compare(x.Group.ID, y.Group.ID),
				strings.Compare(x.ID, y.ID))
		})
		n := (len(js) + per - 1) / per      // packs by count
		n = max(n, min(len(js), pk.Spread)) // spread over the worker slots
		for k := 0; k < n; k++ {
			part := js[k*len(js)/n : (k+1)*len(js)/n]
			// cut by bytes
			start, size := 0, len(batchHead)+len(batchTail)
			for e, i := range part {
				add := len(items[i])
				if e > start {
					add++ // the comma
				}
				if e > start && size+add > limit {
					out = append(out, part[start:e])
					start, size, add = e, len(batchHead)+len(batchTail), len(items[i])
				}
				size += add
			}
			out = append(out, part[start:])
		}
	}
	return out
}

// readyMsg is the READY message of the pack p (indexes into jobs, all of
// one type, encoded in items): a [contracts.ReadyBatch] of those jobs on
// d.Names.ReadyPack(type, jobs) with the batch's message id, the first job's trace
// context (ctxs) in the headers and, for more than one job, every job's in
// [HeaderJobTraceparent].
func readyMsg(d deps.Deps, jobs []redisq.LeasedJob, items [][]byte, ctxs []context.Context, p []int) *nats.Msg {
	size := len(batchHead) + len(batchTail) + len(p)
	for _, i := range p {
		size += len(items[i])
	}
	data := make([]byte, 0, size)
	data = append(data, batchHead...)
	// the ids and attempts name the message (the payloads do not)
	ids := contracts.ReadyBatch{Jobs: make([]contracts.ReadyJob, len(p))}
	for k, i := range p {
		if k > 0 {
			data = append(data, ',')
		}
		data = append(data, items[i]...)
		j := jobs[i]
		ids.Jobs[k] = contracts.ReadyJob{Tenant: j.Group.Tenant, GroupID: j.Group.ID, JobID: j.ID, Attempt: j.Attempt}
	}
	data = append(data, batchTail...)
	m := nats.NewMsg(d.Names.ReadyPack(jobs[p[0]].Type, len(p)))
	m.Data = data
	m.Header.Set(jetstream.MsgIDHeader, ids.MsgID())
	telemetry.InjectHeader(ctxs[p[0]], m.Header)
	if len(p) > 1 {
		for _, i := range p {
			m.Header.Add(HeaderJobTraceparent, Traceparent(ctxs[i]))
		}
	}
	return m
}
