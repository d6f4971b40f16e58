package aggregator

import (
	"context"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/internal/events"
	"github.com/bulkaction/bulkaction/internal/loop"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

const (
	// progressEvery is the least time between two events of a group whose
	// counts change without a change of state (docs/ARCHITECTURE.md §3:
	// EVENTS is the public status feed).
	progressEvery = time.Second
	// progressForget is how long a group's entry is kept after its last
	// event, once nothing is pending for it.
	progressForget = time.Minute
)

// progress knows when each group's counts were last published by this
// aggregator and which groups have counts not published yet, so that the
// last event of a running group is at most about progressEvery old.
type progress struct {
	every time.Duration
	mu    sync.Mutex
	last  map[contracts.GroupRef]*progressState
}

type progressState struct {
	at      time.Time // when an event of the group was last published
	pending bool      // counts changed since
}

// due reports whether g's changed counts may be published now; when not,
// they are left pending for [Aggregator.publishProgress].
func (p *progress) due(g contracts.GroupRef, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.last[g]
	if st == nil || now.Sub(st.at) >= p.every {
		return true
	}
	st.pending = true
	return false
}

// published notes that an event of g was published at now.
func (p *progress) published(g contracts.GroupRef, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.last[g] = &progressState{at: now}
}

// retry marks g's counts pending again after its event could not be
// published, so that [Aggregator.publishProgress] publishes them.
func (p *progress) retry(g contracts.GroupRef) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.last[g]; st != nil {
		st.pending = true
	} else {
		p.last[g] = &progressState{pending: true}
	}
}

// take returns the pending groups whose last event is at least p.every old
// (and forgets them as pending), dropping entries idle for progressForget.
// A group taken counts as published at now: until p.every has passed, its
// changes are left pending (see due), so the event its caller publishes is
// not joined by another one, and changes made meanwhile are not lost.
func (p *progress) take(now time.Time) []contracts.GroupRef {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []contracts.GroupRef
	for g, st := range p.last {
		switch {
		case st.pending && now.Sub(st.at) >= p.every:
			st.pending, st.at = false, now
			out = append(out, g)
		case !st.pending && now.Sub(st.at) >= progressForget:
			delete(p.last, g)
		}
	}
	return out
}

// publishProgress publishes, every quarter of progressEvery until ctx ends,
// the current counts of the groups whose counts changed since their last
// event, read from Redis so that they include what other aggregators
// recorded.
func (a *Aggregator) publishProgress(ctx context.Context) {
	loop.Every(ctx, a.progress.every/4, func(ctx context.Context) {
		for _, g := range a.progress.take(time.Now()) {
			// Read and publish under publishMu, so that an event the batch
			// in progress publishes (a COMPLETED one, say) comes after this
			// one if it counts more.
			a.publishMu.Lock()
			pctx, cancel := context.WithTimeout(ctx, settleTimeout)
			info, ok, err := a.d.Queue.Group(pctx, g)
			published := false
			if err == nil && ok && !info.State.Terminal() {
				err = a.d.Events.Publish(pctx, events.Change{Group: g, Counts: info.GroupCounts, Progress: true})
				published = err == nil
			}
			cancel()
			a.publishMu.Unlock()
			if err != nil && ctx.Err() == nil {
				a.warn("progress event not published", "tenant", g.Tenant, "group", g.ID, "err", err)
				a.progress.retry(g)
			}
			if published {
				a.sampleProgress(ctx, g)
			}
		}
	})
}

// sampleProgress appends a sample of each group's progress to its history
// in Redis ([redisq.Queue.RecordProgress]), from which status measures the
// group's rate over its last 30 s. It runs where the group's counts are
// published, so about once a second per running group; a sample that
// cannot be written is only logged (the next one will be).
func (a *Aggregator) sampleProgress(ctx context.Context, groups ...contracts.GroupRef) {
	if len(groups) == 0 {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := a.d.Queue.RecordProgress(sctx, groups...); err != nil {
		a.warn("progress samples not written", "groups", len(groups), "err", err)
	}
}
