package fetcher

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/consume"
	"github.com/bulkaction/bulkaction/internal/events"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// maxNoticeError bounds the error quoted in a refusal's notice.
const maxNoticeError = 512

// recordRefusals records each message of items decided as a dead letter in
// the group its subject names (redisq.Queue.RecordRefusal), whatever the
// reason (over_quota, over_total, group_ended, bad_seal, an invalid body),
// so that the group's producer sees what was refused after its publish was
// acknowledged (docs/ARCHITECTURE.md §6.1): the group's reading and its
// listing report it, and the gateway publishes a retry of a refused message
// under a new id. A group that exists also gets a notice event carrying its
// refused counts, one per batch. A message of a subject that names no valid
// group is not recorded. A redelivery of a message recorded before is not
// counted again.
//
// A refusal that cannot be recorded (Redis failed) makes its message a
// retry when retry is set, since its dead letter is not published yet and
// applying it again is idempotent; otherwise (a replay) it is logged.
func (f *Fetcher) recordRefusals(ctx context.Context, items []*item, retry bool) {
	type notice struct {
		ch events.Change
		n  int
	}
	var order []contracts.GroupRef
	notices := map[contracts.GroupRef]*notice{}
	for _, it := range items {
		dec := it.Decision()
		if !dec.IsDeadLetter() || dec.Err() == nil {
			continue
		}
		g, ok := f.d.Names.GroupFromSubject(it.Msg.Subject())
		if !ok {
			continue
		}
		jobs := int64(it.refused)
		if it.sub == nil {
			jobs = countJobs(it.Msg.Data())
		}
		reason := contracts.Reason(dec.Err())
		res, err := f.d.Queue.RecordRefusal(ctx, g, redisq.Refusal{MsgID: it.Msg.Headers().Get(jetstream.MsgIDHeader),
			Seq: streamSeq(it.Msg), Reason: reason, Error: dec.Err().Error(), Jobs: jobs})
		if err != nil {
			if retry {
				it.Decide(consume.Retry(retryDelay, fmt.Errorf("fetcher: recording a refused message: %w", err)))
				continue
			}
			f.log.Warn("refused message not recorded in its group", "tenant", g.Tenant, "group", g.ID, "reason", reason, "err", err)
			continue
		}
		if !res.Recorded || !res.Exists {
			continue
		}
		text := dec.Err().Error()
		if len(text) > maxNoticeError {
			text = text[:maxNoticeError] + "…"
		}
		nt := notices[g]
		if nt == nil {
			nt = &notice{}
			notices[g] = nt
			order = append(order, g)
		}
		nt.n++
		nt.ch = events.Change{Group: g, Counts: res.Group,
			Notice:  fmt.Sprintf("submission refused (%s): %s", reason, text),
			Refused: &contracts.RefusedCounts{Messages: res.Messages, Jobs: res.Jobs, Reason: reason}}
		if nt.n > 1 {
			nt.ch.Notice = fmt.Sprintf("%d submissions refused, the last (%s): %s", nt.n, reason, text)
		}
	}
	for _, g := range order {
		f.publishEvent(ctx, notices[g].ch)
	}
}

// countJobs returns the number of items of an invalid message's "jobs"
// array, 0 when it has none or is not JSON.
func countJobs(data []byte) int64 {
	var body struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	if json.Unmarshal(data, &body) != nil {
		return 0
	}
	return int64(len(body.Jobs))
}

// withRefused adds to ch, the event of a group just created, the refusals
// recorded before the group existed (its first messages were refused, then
// a seal or later jobs created it), so that its events say so from the
// start; ch unchanged when there are none (or they cannot be read).
func (f *Fetcher) withRefused(ctx context.Context, ch events.Change) events.Change {
	r, err := f.d.Queue.GroupRefusals(ctx, ch.Group)
	if err != nil || r == nil {
		return ch
	}
	ch.Refused = &contracts.RefusedCounts{Messages: r.Messages, Jobs: r.Jobs, Reason: r.Last.Reason}
	return ch
}
