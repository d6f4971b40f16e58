package aggregator

import (
	"context"
	"time"

	"github.com/bulkaction/bulkaction/internal/natsutil"
)

// resultsSettled tells how far RESULT is settled in time: the latest time
// t such that every result published before t has been taken from RESULT
// by its consumers (recorded). The repair re-leases a running job whose
// claim expired only when the expiry was seen before that time, so that a
// result backed up on RESULT (an aggregator that was down, or far behind)
// is never taken for a lost one (docs/ARCHITECTURE.md §6.5).
//
// It samples, at each stuck check, the scripts' clock and then RESULT's
// last sequence: every result published before the clock reading has a
// sequence at or below the one read after it. Once the consumers' ack
// floor reaches a sample's sequence, the sample's time is settled.
type resultsSettled struct {
	samples []settledSample // oldest first, none settled yet
	through time.Time       // zero until a sample is settled
}

type settledSample struct {
	at  time.Time
	seq uint64
}

// maxSettledSamples bounds the samples kept while RESULT's consumers lag:
// the oldest are dropped, which only delays the time settled.
const maxSettledSamples = 64

// update takes a new sample and returns the time settled through. An error
// leaves the samples as they were; the time settled never goes back.
func (s *resultsSettled) update(ctx context.Context, a *Aggregator) time.Time {
	stream := a.d.Names.StreamResult()
	now, err := a.d.Queue.Now(ctx)
	if err == nil {
		var seq uint64
		if seq, err = natsutil.LastSeq(ctx, a.d.JS, stream); err == nil {
			if len(s.samples) == maxSettledSamples {
				s.samples = append(s.samples[:0], s.samples[1:]...)
			}
			s.samples = append(s.samples, settledSample{at: now, seq: seq})
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			a.log.Warn("reading how far RESULT is settled failed; running jobs are not re-leased meanwhile", "err", err)
		}
		return s.through
	}
	floor, ok, err := natsutil.AckFloor(ctx, a.d.JS, stream)
	if err != nil || !ok {
		return s.through
	}
	n := 0
	for _, x := range s.samples {
		if x.seq > floor {
			break
		}
		s.through = x.at
		n++
	}
	s.samples = append(s.samples[:0], s.samples[n:]...)
	return s.through
}
