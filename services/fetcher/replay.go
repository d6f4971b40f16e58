package fetcher

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/consume"
	"github.com/bulkaction/bulkaction/internal/loop"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/internal/tenantset"
)

// SUBMIT is a retained log (docs/ARCHITECTURE.md §6.7). The fetchers keep
// their position in it in Redis, the stream sequence up to which every
// message was applied, stored together with the run id of the Redis
// server process. A Redis that comes back as another process (a restart,
// a restore from an older snapshot, a promoted replica) may have lost what
// was applied after some point, and its stored position is at or before that
// point; so before applying anything more, a fetcher replays SUBMIT from
// the stored position to the stream's end, applying each message again
// (applying is idempotent), and only then makes the position current.
// Before the replay it copies the tenants bucket (package tenantset) into
// Redis: the settings written there and not in SUBMIT.

// submitLog is the name of SUBMIT's position in Redis.
const submitLog = "submit"

// Timing of the position.
const (
	// checkpointInterval is how often each fetcher stores the SUBMIT
	// consumer's ack floor as the position and purges SUBMIT.
	checkpointInterval = time.Second
	// replayBatch is the most messages a replay applies in one store.
	replayBatch = 500
	// replayWait is how long an ingest batch waits for a replay before its
	// messages are redelivered (well within the consumer's AckWait).
	replayWait = 15 * time.Second
	// replayTimeout bounds one replay; a replay that fails is started again
	// by the next batch or checkpoint.
	replayTimeout = 10 * time.Minute
	// replayLease is how long one fetcher's claim on the replay lasts
	// unless renewed (at every batch): the fetchers replay one at a time,
	// and another takes over when the one replaying dies.
	replayLease = 30 * time.Second
)

// replayState is a fetcher's share of the position: one replay at a time
// per process, and the positions it stored, to purge what is older than the
// replay window.
type replayState struct {
	base    context.Context    // Run's: a replay stops with the fetcher
	cons    jetstream.Consumer // the shared SUBMIT consumer
	wg      sync.WaitGroup     // the replay under way
	running sync.Mutex         // held by the replay under way
	mu      sync.Mutex         // guards samples and purged
	samples []positionSample
	purged  uint64 // SUBMIT purged below this sequence (by this process)
	warn    telemetry.WarnLimiter
}

// positionSample is a position stored at a time.
type positionSample struct {
	at  time.Time
	seq uint64
}

// awaitCurrent reports whether SUBMIT's position is current, the condition
// for applying submissions. When it is not, it starts a replay and waits for
// it up to replayWait, so that the batch in hand is applied after the replay
// rather than redelivered behind later messages.
func (f *Fetcher) awaitCurrent(ctx context.Context) (bool, error) {
	deadline := time.Now().Add(replayWait)
	for {
		p, err := f.d.Queue.Position(ctx, submitLog)
		if err != nil || p.Current {
			return p.Current, err
		}
		f.startReplay()
		if time.Now().After(deadline) || f.replay.base.Err() != nil {
			return false, nil // redelivered; a stopping fetcher replays nothing more
		}
		if !loop.Sleep(ctx, 50*time.Millisecond) {
			return false, ctx.Err()
		}
	}
}

// startReplay starts a replay of SUBMIT in the background, unless one runs
// in this process already.
func (f *Fetcher) startReplay() {
	if f.replay.base == nil {
		return // not running
	}
	if !f.replay.running.TryLock() {
		return
	}
	f.replay.wg.Go(func() {
		defer f.replay.running.Unlock()
		rctx, cancel := context.WithTimeout(f.replay.base, replayTimeout)
		defer cancel()
		if err := f.replaySubmit(rctx); err != nil {
			f.log.Warn("SUBMIT replay failed; it starts again with the next messages", "err", err)
		}
	})
}

// replaySubmit applies SUBMIT again from the stored position to the stream's
// last message, then makes the position current. Accepted messages are
// restored whatever the tenant quotas say; what cannot be stored of them is
// dead-lettered now; messages dead-lettered when first received are not
// dead-lettered again (reapply). A Redis error, or a dead letter that could
// not be stored, stops the replay, leaving the position as it was.
func (f *Fetcher) replaySubmit(ctx context.Context) error {
	p, err := f.d.Queue.Position(ctx, submitLog)
	if err != nil || p.Current {
		return err
	}
	// One fetcher replays at a time: the others wait for the position to
	// become current (awaitCurrent) instead of applying the same range
	// again, which would be correct (applying is idempotent) but double the
	// work and the replay's counts.
	owner := string(f.origin)
	if ok, err := f.d.Queue.TakeLease(ctx, submitLog, owner, replayLease); err != nil || !ok {
		return err
	}
	defer func() {
		if err := f.d.Queue.ReleaseLease(context.WithoutCancel(ctx), submitLog, owner); err != nil {
			f.log.Warn("SUBMIT replay lease not released; it runs out by itself", "err", err)
		}
	}()
	if p, err = f.d.Queue.Position(ctx, submitLog); err != nil || p.Current {
		return err // another fetcher replayed while this one took the lease
	}
	// The tenant settings SUBMIT does not carry (default windows, callback
	// secrets) come back from their bucket first, so that the groups the
	// replay creates again take the tenant's windows of now.
	if err := f.restoreTenantSettings(ctx); err != nil {
		return err
	}
	ci, err := f.replay.cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", f.cfg.Durable, err)
	}
	if p.StoredRunID == "" && p.Seq == 0 && ci.AckFloor.Stream == 0 {
		// A new installation: no position was ever stored and no
		// message acknowledged, so none was applied.
		_, err := f.d.Queue.ResetPosition(ctx, submitLog, p, 0)
		return err
	}
	stream, err := f.d.JS.Stream(ctx, f.d.Names.StreamSubmit())
	if err != nil {
		return fmt.Errorf("stream %s: %w", f.d.Names.StreamSubmit(), err)
	}
	info := stream.CachedInfo() // read just now by Stream
	// Only messages the consumer delivered can have been applied; those
	// still pending are applied again when delivered again (idempotent),
	// and dead-lettered then if they must be.
	last, from := min(info.State.LastSeq, ci.Delivered.Stream), p.Seq+1
	if first := info.State.FirstSeq; from < first && last >= from {
		gone := min(first, last+1) - from
		f.d.Metrics.SubmitReplayed.WithLabelValues("purged").Add(float64(gone))
		f.log.Error("SUBMIT no longer holds messages the replay needs: Redis came back older than SUBMIT_REPLAY_WINDOW, "+
			"what those messages submitted is lost", "from", from, "to", first-1, "messages", gone)
		from = first
	}
	start := time.Now()
	var n replayCount
	if from <= last {
		n, err = f.applyRange(ctx, from, last)
		if err != nil {
			return err
		}
	}
	np, err := f.d.Queue.ResetPosition(ctx, submitLog, p, last)
	if err != nil {
		return err
	}
	if !np.Current || np.Seq < last {
		return fmt.Errorf("position not reset (now %d, current %v): Redis restarted again during the replay", np.Seq, np.Current)
	}
	logf := f.log.Warn
	if from > last {
		logf = f.log.Info // Redis came back with all SUBMIT had applied: nothing to replay
	}
	logf("Redis restarted: SUBMIT replayed from its stored position", "from", from, "to", last,
		"replayed", n.replayed, "dead_lettered", n.deadLettered, "rejected_before", n.rejectedBefore,
		"took", time.Since(start).Round(time.Millisecond))
	if n.deadLettered > 0 {
		f.log.Error("SUBMIT replay: accepted messages could not be stored again and were dead-lettered",
			"messages", n.deadLettered)
	}
	return nil
}

// replayCount counts the messages of a replay by outcome (the outcomes of
// bulk_action_submit_replayed_total).
type replayCount struct {
	replayed       int // stored again (their jobs added or already there)
	deadLettered   int // accepted, but not storable again: dead-lettered now
	rejectedBefore int // dead-lettered when first received
}

// applyRange reads SUBMIT from sequence from to last with an ordered
// consumer and stores the valid messages as the ingest does, in order.
func (f *Fetcher) applyRange(ctx context.Context, from, last uint64) (replayCount, error) {
	var n replayCount
	cons, err := f.d.JS.OrderedConsumer(ctx, f.d.Names.StreamSubmit(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{f.d.Names.SubmitAll()},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    from,
	})
	if err != nil {
		return n, fmt.Errorf("replay consumer: %w", err)
	}
	var rejected map[uint64]string // read once the first message's time is known
	next := from
	for next <= last {
		// Asking for no more than the range holds returns as soon as it
		// arrived; fewer arrive only when some were deleted meanwhile.
		batch, err := cons.Fetch(int(min(replayBatch, last-next+1)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return n, fmt.Errorf("replay fetch: %w", err)
		}
		var msgs []jetstream.Msg
		var since time.Time
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil || md.Sequence.Stream > last {
				continue
			}
			if since.IsZero() {
				since = md.Timestamp
			}
			next = md.Sequence.Stream + 1
			msgs = append(msgs, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return n, fmt.Errorf("replay fetch: %w", err)
		}
		if len(msgs) == 0 {
			return n, ctx.Err() // the rest was deleted meanwhile
		}
		if rejected == nil {
			if rejected, err = f.rejectedBefore(ctx, since, from, last); err != nil {
				return n, err
			}
		}
		if ok, err := f.d.Queue.TakeLease(ctx, submitLog, string(f.origin), replayLease); err != nil {
			return n, err
		} else if !ok {
			return n, errors.New("another fetcher took over the replay (this one took longer than its lease between two batches)")
		}
		c, err := f.reapply(ctx, msgs, rejected)
		if err != nil {
			return n, err
		}
		n.replayed += c.replayed
		n.deadLettered += c.deadLettered
		n.rejectedBefore += c.rejectedBefore
	}
	return n, nil
}

// dlqClockSkew is how much earlier than the first replayed message the
// replay reads the DLQ from: the two streams' servers may not agree on the
// time.
const dlqClockSkew = time.Minute

// rejectedBefore returns the reason of each message of SUBMIT from..last
// that was dead-lettered when first received, by sequence: a dead letter's
// Nats-Msg-Id names the stream and sequence of its message
// (deadletter.Message). It reads the headers of the DLQ stream's messages
// stored since since (the time of the first message of the range, less a
// margin): a message is dead-lettered after it was stored.
func (f *Fetcher) rejectedBefore(ctx context.Context, since time.Time, from, last uint64) (map[uint64]string, error) {
	out := map[uint64]string{}
	stream, err := f.d.JS.Stream(ctx, f.d.Names.StreamDLQ())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", f.d.Names.StreamDLQ(), err)
	}
	st := stream.CachedInfo().State // read just now by Stream
	since = since.Add(-dlqClockSkew)
	if st.Msgs == 0 || st.LastTime.Before(since) {
		return out, nil
	}
	cons, err := f.d.JS.OrderedConsumer(ctx, f.d.Names.StreamDLQ(), jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartTimePolicy,
		OptStartTime:  &since,
		HeadersOnly:   true,
	})
	if err != nil {
		return nil, fmt.Errorf("DLQ consumer: %w", err)
	}
	prefix := "dlq:" + f.d.Names.StreamSubmit() + ":"
	for {
		batch, err := cons.Fetch(replayBatch, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("DLQ fetch: %w", err)
		}
		got, done := 0, false
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				continue
			}
			if id, ok := strings.CutPrefix(m.Headers().Get(jetstream.MsgIDHeader), prefix); ok {
				if seq, err := strconv.ParseUint(id, 10, 64); err == nil && seq >= from && seq <= last {
					out[seq] = m.Subject()[strings.LastIndexByte(m.Subject(), '.')+1:]
				}
			}
			done = done || md.NumPending == 0 || md.Sequence.Stream >= st.LastSeq
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("DLQ fetch: %w", err)
		}
		if done || got == 0 {
			return out, nil
		}
	}
}

// reapply stores msgs as the ingest does, in order (docs/ARCHITECTURE.md
// §6.7), rejected naming the messages dead-lettered when first received
// (rejectedBefore). Those are not dead-lettered again: one a tenant quota
// refused is left out (nothing of it was stored), any other is applied as
// the ingest would (the part of it that was stored then). Every other
// message was accepted, and its jobs are restored whatever the tenant
// quotas say (they were admitted once; redisq.Queue.RestoreJobs); what
// cannot be stored of it (its group ended, or reached its sealed total, in
// the Redis that came back) is dead-lettered now with its reason. A Redis
// error or a dead letter not stored fails the call, before anything is
// counted: the replay starts again (applying is idempotent).
func (f *Fetcher) reapply(ctx context.Context, msgs []jetstream.Msg, rejected map[uint64]string) (replayCount, error) {
	var n replayCount
	items := f.decode(ctx, msgs)
	defer func() {
		for _, it := range items {
			it.Span.End()
		}
	}()
	apply := make([]*item, 0, len(items))
	before := make([]bool, len(items))
	for i, it := range items {
		var reason string
		reason, before[i] = rejected[streamSeq(it.Msg)]
		if reason == ReasonOverQuota {
			continue
		}
		it.restore = !before[i]
		apply = append(apply, it)
	}
	// A store call's items are all restored or all not.
	added := 0
	for i := 0; i < len(apply); {
		j := i + 1
		for j < len(apply) && apply[j].restore == apply[i].restore {
			j++
		}
		a, err := f.store(ctx, apply[i:j], false)
		added += a
		if err != nil {
			return n, fmt.Errorf("replay: %w", err)
		}
		i = j
	}
	if added > 0 {
		f.notifyWork()
	}
	var dead []*consume.Delivery
	for i, it := range items {
		switch dec := it.Decision(); {
		case before[i]:
			n.rejectedBefore++
		case dec.IsDeadLetter():
			dead = append(dead, it.Delivery)
		case !dec.IsAck():
			return n, fmt.Errorf("replay: message %d not stored (%s): %v", streamSeq(it.Msg), dec, dec.Err())
		default:
			n.replayed++
		}
	}
	f.recordRefusals(ctx, items, false)
	f.settler.PublishDeadLetters(ctx, dead...)
	for _, d := range dead {
		if !d.Decision().IsDeadLetter() {
			return n, fmt.Errorf("replay: %w", d.Decision().Err())
		}
	}
	n.deadLettered = len(dead)
	m := f.d.Metrics.SubmitReplayed
	m.WithLabelValues("replayed").Add(float64(n.replayed))
	m.WithLabelValues("dead_lettered").Add(float64(n.deadLettered))
	m.WithLabelValues("rejected_before").Add(float64(n.rejectedBefore))
	return n, nil
}

// streamSeq returns m's stream sequence (0 when its metadata cannot be
// read).
func streamSeq(m jetstream.Msg) uint64 {
	md, err := m.Metadata()
	if err != nil {
		return 0
	}
	return md.Sequence.Stream
}

// checkpointLoop stores the SUBMIT consumer's ack floor as the position
// every checkpointInterval (every message up to it was applied before it
// was acknowledged), starts a replay when the position is not current, and
// purges SUBMIT of the applied messages older than the replay window.
func (f *Fetcher) checkpointLoop(ctx context.Context, cons jetstream.Consumer) {
	loop.Every(ctx, checkpointInterval, func(ctx context.Context) {
		if err := f.checkpoint(ctx, cons); err != nil && ctx.Err() == nil {
			f.log.Debug("SUBMIT checkpoint", "err", err)
		}
	})
}

func (f *Fetcher) checkpoint(ctx context.Context, cons jetstream.Consumer) error {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	info, err := cons.Info(cctx)
	if err != nil {
		return err
	}
	p, err := f.d.Queue.AdvancePosition(cctx, submitLog, info.AckFloor.Stream)
	if err != nil {
		return err
	}
	if !p.Current {
		f.startReplay()
		return nil
	}
	return f.purge(cctx, p.Seq)
}

// purge removes from SUBMIT the messages up to the position stored at least
// the replay window ago, or up to pos when SUBMIT is half full.
func (f *Fetcher) purge(ctx context.Context, pos uint64) error {
	now := time.Now()
	rs := &f.replay
	rs.mu.Lock()
	rs.samples = append(rs.samples, positionSample{at: now, seq: pos})
	upTo := uint64(0)
	if f.cfg.ReplayWindow < 0 {
		upTo = pos
	}
	i := 0
	for i < len(rs.samples) && now.Sub(rs.samples[i].at) >= f.cfg.ReplayWindow {
		upTo = max(upTo, rs.samples[i].seq)
		i++
	}
	rs.samples = rs.samples[i:]
	purged := rs.purged
	rs.mu.Unlock()

	stream, err := f.d.JS.Stream(ctx, f.d.Names.StreamSubmit())
	if err != nil {
		return err
	}
	info := stream.CachedInfo() // read just now by Stream
	if limit := info.Config.MaxBytes; limit > 0 && upTo < pos {
		if info.State.Bytes >= uint64(limit)/2 {
			if ok, _ := rs.warn.Allow(); ok {
				f.log.Warn("SUBMIT is half full: applied messages purged before SUBMIT_REPLAY_WINDOW ends; "+
					"a Redis restored from an older snapshot may lose submissions", "bytes", info.State.Bytes, "limit", limit)
			}
			upTo = pos
		}
	}
	if upTo == 0 || upTo+1 <= purged {
		return nil
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSequence(upTo+1)); err != nil {
		return err
	}
	rs.mu.Lock()
	rs.purged = max(rs.purged, upTo+1)
	rs.mu.Unlock()
	return nil
}

// restoreTenantSettings copies the tenants bucket, the durable record of the
// tenants' default windows and callback secrets, into Redis: what Redis
// holds older than the bucket is written again.
func (f *Fetcher) restoreTenantSettings(ctx context.Context) error {
	ts, err := tenantset.Open(ctx, f.d.JS, f.d.Names, f.d.Queue)
	if err != nil {
		return err
	}
	n, err := ts.Restore(ctx)
	if n > 0 {
		f.log.Warn("tenant settings older in Redis than in their bucket: restored", "entries", n)
	}
	return err
}
