package fetcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/telemetry"
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
		if time.Now().After(deadline) {
			return false, nil
		}
		if !handoff.Sleep(ctx, 50*time.Millisecond) {
			return false, ctx.Err()
		}
	}
}

// startReplay starts a replay of SUBMIT in the background, unless one runs
// in this process already.
func (f *Fetcher) startReplay() {
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
// last message, then makes the position current. Messages that would be
// dead-lettered are not dead-lettered again (they were when first
// received); a Redis error stops the replay, leaving the position as it was.
func (f *Fetcher) replaySubmit(ctx context.Context) error {
	p, err := f.d.Queue.Position(ctx, submitLog)
	if err != nil || p.Current {
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
	applied := 0
	if from <= last {
		applied, err = f.applyRange(ctx, from, last)
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
	f.log.Warn("Redis restarted: SUBMIT replayed from its stored position", "from", from, "to", last,
		"messages", applied, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// applyRange reads SUBMIT from sequence from to last with an ordered
// consumer and stores the valid messages as the ingest does, in order.
func (f *Fetcher) applyRange(ctx context.Context, from, last uint64) (int, error) {
	cons, err := f.d.JS.OrderedConsumer(ctx, f.d.Names.StreamSubmit(), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{f.d.Names.SubmitAll()},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    from,
	})
	if err != nil {
		return 0, fmt.Errorf("replay consumer: %w", err)
	}
	applied, next := 0, from
	for next <= last {
		// Asking for no more than the range holds returns as soon as it
		// arrived; fewer arrive only when some were deleted meanwhile.
		batch, err := cons.Fetch(int(min(replayBatch, last-next+1)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return applied, fmt.Errorf("replay fetch: %w", err)
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil || md.Sequence.Stream > last {
				continue
			}
			next = md.Sequence.Stream + 1
			msgs = append(msgs, m)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return applied, fmt.Errorf("replay fetch: %w", err)
		}
		if len(msgs) == 0 {
			return applied, ctx.Err() // the rest was deleted meanwhile
		}
		if err := f.reapply(ctx, msgs); err != nil {
			return applied, err
		}
		applied += len(msgs)
	}
	return applied, nil
}

// reapply stores msgs as the ingest would; a message the ingest would
// dead-letter is dropped (it was dead-lettered when first received).
func (f *Fetcher) reapply(ctx context.Context, msgs []jetstream.Msg) error {
	items := f.decode(ctx, msgs)
	added, _ := f.store(ctx, items, false) // its errors are the items' decisions
	if added > 0 {
		f.notifyWork()
	}
	f.d.Metrics.SubmitReplayed.WithLabelValues("replayed").Add(float64(len(msgs)))
	for _, it := range items {
		it.Span.End()
		if err := it.Decision().Err(); err != nil && !it.Decision().IsDeadLetter() {
			return fmt.Errorf("replay: %w", err)
		}
	}
	return nil
}

// checkpointLoop stores the SUBMIT consumer's ack floor as the position
// every checkpointInterval (every message up to it was applied before it
// was acknowledged), starts a replay when the position is not current, and
// purges SUBMIT of the applied messages older than the replay window.
func (f *Fetcher) checkpointLoop(ctx context.Context, cons jetstream.Consumer) {
	t := time.NewTicker(checkpointInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := f.checkpoint(ctx, cons); err != nil && ctx.Err() == nil {
			f.log.Debug("SUBMIT checkpoint", "err", err)
		}
	}
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
