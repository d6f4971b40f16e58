// Package events publishes group state changes to
// bulkaction.events.<tenant>.<groupId> (docs/ARCHITECTURE.md §3) and logs
// one line per change.
package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publisher publishes group events. It is the one place that publishes
// them and the one place that counts ended groups
// (bulk_action_group_completions_total).
type Publisher struct {
	js      jetstream.JetStream
	names   contracts.Names
	log     *slog.Logger
	metrics *telemetry.Metrics
	ended   EndedFunc

	mu     sync.Mutex
	stream jetstream.Stream // EVENTS, looked up once
}

// EndedFunc reports whether a group has ended: its state where it is kept
// is COMPLETED or CANCELLED.
type EndedFunc func(ctx context.Context, g contracts.GroupRef) (bool, error)

// casAttempts is how many times an event of a running group is published
// again after another event of the group overtook it (see [Publisher.Guard]).
const casAttempts = 5

// NewPublisher returns a Publisher; log nil means slog.Default(), metrics
// nil means none are counted.
func NewPublisher(js jetstream.JetStream, names contracts.Names, log *slog.Logger, metrics *telemetry.Metrics) *Publisher {
	if log == nil {
		log = slog.Default()
	}
	return &Publisher{js: js, names: names, log: log.With(telemetry.LogComponent, "events"), metrics: metrics}
}

// Guard makes the publisher check, before publishing an event of a group
// that has not ended, that the group has not ended since (ended reads its
// state) and that the group's last event does not already say as much (the
// same state with counts as high: it was read later). The event is
// published on the condition that the group's last event is still the one
// it checked, else it checks again: so an event built from counts read
// before the group's final event can never follow that final event on
// EVENTS (readers take the group's last event as its state, and an SSE
// stream ends at the final one), and a group's counts never go back.
// Without a guard, events are published as they come.
func (p *Publisher) Guard(ended EndedFunc) { p.ended = ended }

// Change is one change of a group to publish.
type Change struct {
	Group  contracts.GroupRef
	Counts redisq.GroupCounts
	// Ended is set when this change ended the group (COMPLETED or
	// CANCELLED): it is counted once, by state, whether or not the event
	// is published. Events repeated for a group that had already ended
	// leave it unset.
	Ended bool
	// Notice is carried by the event (see [contracts.GroupEvent.Notice]).
	Notice string
	// Refused is carried by the event (see [contracts.GroupEvent.Refused]);
	// set with a Notice.
	Refused *contracts.RefusedCounts
	// Progress marks a change of counts only, not of state: it is logged at
	// debug level, not info.
	Progress bool
	// Control marks a change made by a pause or a resume, which may bring a
	// group back to a state and counts it had before: such an event is
	// published without a message id, so JetStream does not drop it as a
	// duplicate of the earlier one.
	Control bool
}

// Event builds the event of a group's counts.
func Event(g contracts.GroupRef, c redisq.GroupCounts, at time.Time) contracts.GroupEvent {
	total := c.Declared
	if total < 0 {
		total = 0
	}
	return contracts.GroupEvent{
		V: contracts.Version, Tenant: g.Tenant, GroupID: g.ID, State: c.State, Total: total, Jobs: c.Jobs,
		Succeeded: c.Succeeded, Failed: c.Failed, Cancelled: c.Cancelled, At: at.UTC(),
	}
}

// Publish publishes the group's current state and waits for the PubAck. The
// message id is derived from the state and counts, so publishing the same
// change again (after a crash) is deduplicated by JetStream.
func (p *Publisher) Publish(ctx context.Context, ch Change) error {
	g, c := ch.Group, ch.Counts
	if ch.Ended && p.metrics != nil {
		p.metrics.GroupCompletions.WithLabelValues(completionLabel(c.State)).Inc()
	}
	ev := Event(g, c, time.Now())
	ev.Notice, ev.Refused = ch.Notice, ch.Refused
	data, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	msg := nats.NewMsg(p.names.Events(g))
	msg.Data = data
	if ch.Notice == "" && !ch.Control {
		// A notice is news each time; a state and counts are published once.
		msg.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%s:%s:%s:%d:%d:%d:%d", g.Tenant, g.ID, c.State, c.Done, c.Cancelled, c.Jobs, c.Declared))
	}
	if p.ended == nil || c.State.Terminal() {
		if _, err := p.js.PublishMsg(ctx, msg); err != nil {
			return fmt.Errorf("events: publish %s %s: %w", g, c.State, err)
		}
	} else if published, err := p.publishLive(ctx, g, &ev, msg); err != nil || !published {
		if err != nil {
			return fmt.Errorf("events: publish %s %s: %w", g, c.State, err)
		}
		p.log.Debug("group event not published: the group has ended, or a newer event came first", "tenant", g.Tenant,
			"group", g.ID, "state", string(c.State))
		return nil
	}
	if ch.Notice != "" {
		p.log.Warn("group notice", "tenant", g.Tenant, "group", g.ID, "state", string(c.State), "notice", ch.Notice)
		return nil
	}
	level := slog.LevelInfo
	if ch.Progress {
		level = slog.LevelDebug
	}
	p.log.Log(ctx, level, "group state", "tenant", g.Tenant, "group", g.ID, "state", string(c.State), "total", ev.Total,
		"jobs", c.Jobs, "succeeded", c.Succeeded, "failed", c.Failed, "cancelled", c.Cancelled)
	return nil
}

// publishLive publishes ev (as msg), an event of a group in a state that
// is not final, unless the group has ended or the subject's last event
// already says as much: it reads the subject's last event, then asks
// whether the group ended, then publishes expecting that last event's
// sequence, and starts again when another event came first. It reports
// false when it published nothing.
func (p *Publisher) publishLive(ctx context.Context, g contracts.GroupRef, ev *contracts.GroupEvent, msg *nats.Msg) (bool, error) {
	stream, err := p.events(ctx)
	if err != nil {
		return false, err
	}
	for attempt := 1; ; attempt++ {
		var last uint64
		m, err := stream.GetLastMsgForSubject(ctx, msg.Subject)
		switch {
		case err == nil:
			last = m.Sequence
			if prev, derr := contracts.DecodeGroupEvent(m.Data); derr == nil && covers(prev, ev) {
				return false, nil // an event as new came first (counts read later)
			}
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			return false, err
		}
		ended, err := p.ended(ctx, g)
		if err != nil || ended {
			return false, err
		}
		_, err = p.js.PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(last))
		var apiErr *jetstream.APIError
		if err == nil || !errors.As(err, &apiErr) || attempt == casAttempts ||
			(apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence && apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return err == nil, err
		}
	}
}

// covers reports whether prev says all that ev says: the same state, no
// notice in either, and counts no lower (a group's counts only grow). A
// notice does not stand for a state event: a reader that leaves notices
// out would miss the state.
func covers(prev, ev *contracts.GroupEvent) bool {
	return ev.Notice == "" && prev.Notice == "" && prev.State == ev.State && prev.Total >= ev.Total && prev.Jobs >= ev.Jobs &&
		prev.Succeeded >= ev.Succeeded && prev.Failed >= ev.Failed && prev.Cancelled >= ev.Cancelled
}

// events returns the EVENTS stream.
func (p *Publisher) events(ctx context.Context) (jetstream.Stream, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stream == nil {
		s, err := p.js.Stream(ctx, p.names.StreamEvents())
		if err != nil {
			return nil, err
		}
		p.stream = s
	}
	return p.stream, nil
}

// completionLabel is the group_completions_total label of an ended state.
func completionLabel(s contracts.GroupState) string {
	if s == contracts.StateCancelled {
		return telemetry.StateCancelled
	}
	return telemetry.StateCompleted
}
