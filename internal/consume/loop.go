package consume

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/internal/loop"
	"github.com/bulkaction/bulkaction/internal/telemetry"
)

// Defaults of [Loop].
const (
	// DefaultIdleWait is how long a pull waits for a message when none is
	// waiting; it also bounds how long stopping takes.
	DefaultIdleWait = time.Second
	// DefaultErrorWait is the pause after a failed pull.
	DefaultErrorWait = time.Second
)

// Loop pulls messages from a JetStream consumer and hands them to Handle
// in batches until its context ends: the one consume loop of every
// service. With no work waiting it asks for one message and waits up to
// IdleWait for it, then takes what else is there without waiting; while
// messages keep coming it takes what is there without waiting. A batch
// handed to Handle is never larger than Batch, nor than the free Slots.
type Loop struct {
	// Consumer is the pull consumer; required.
	Consumer jetstream.Consumer
	// Batch is the most messages one pull takes; required (>= 1).
	Batch int
	// Slots, when set, bounds the messages being handled: a slot is taken
	// for each message pulled and the handler gives it back (Slots.Release)
	// when the message is settled. nil = no bound beyond Batch, and Handle
	// handles each batch before the next pull.
	Slots *Slots
	// Handle handles one batch; it decides and settles every message (now,
	// or later from goroutines of its own when Slots is set). It runs with
	// the loop's context, which ends at shutdown: work under way should
	// finish with a context of its own.
	Handle func(ctx context.Context, msgs []jetstream.Msg)
	// Log receives failed pulls (at most one warning a second); nil =
	// slog.Default().
	Log *slog.Logger
	// Name names the consumer in log lines.
	Name string
	// IdleWait: 0 = DefaultIdleWait. ErrorWait: 0 = DefaultErrorWait.
	IdleWait, ErrorWait time.Duration
}

// Run pulls and handles until ctx ends, then returns once the batch being
// handled returns.
func (l *Loop) Run(ctx context.Context) {
	idleWait, errorWait := l.IdleWait, l.ErrorWait
	if idleWait == 0 {
		idleWait = DefaultIdleWait
	}
	if errorWait == 0 {
		errorWait = DefaultErrorWait
	}
	log := l.Log
	if log == nil {
		log = slog.Default()
	}
	warn := telemetry.WarnLimiter{Interval: time.Second}
	idle := true
	for ctx.Err() == nil {
		// Reserve room for the pull: one slot at least (waiting for it),
		// then as many more as are free.
		n := l.Batch
		if l.Slots != nil {
			if !l.Slots.Acquire(ctx) {
				return
			}
			n = 1
			if !idle {
				n += l.Slots.TryAcquire(l.Batch - 1)
			}
		}
		// A new slice each pull: a handler may keep the batch (the worker
		// handles it in goroutines of its own).
		var msgs []jetstream.Msg
		var err error
		if idle {
			b, ferr := l.Consumer.Fetch(1, jetstream.FetchMaxWait(idleWait))
			msgs, err = collect(msgs, b, ferr)
			if err == nil && len(msgs) == 1 && l.Batch > 1 {
				more := l.Batch - 1
				if l.Slots != nil {
					more = l.Slots.TryAcquire(more)
					n += more
				}
				if more > 0 {
					b, ferr := l.Consumer.FetchNoWait(more)
					msgs, err = collect(msgs, b, ferr)
				}
			}
		} else {
			b, ferr := l.Consumer.FetchNoWait(n)
			msgs, err = collect(msgs, b, ferr)
		}
		if l.Slots != nil {
			l.Slots.Release(n - len(msgs))
		}
		if len(msgs) > 0 {
			l.Handle(ctx, msgs)
		}
		idle = len(msgs) == 0
		if err != nil && ctx.Err() == nil {
			warn.Warn(log, "pull failed", "consumer", l.Name, "err", err)
			idle = true
			if !loop.Sleep(ctx, errorWait) {
				return
			}
		}
	}
}

// collect appends the messages of one pull to msgs.
func collect(msgs []jetstream.Msg, b jetstream.MessageBatch, err error) ([]jetstream.Msg, error) {
	if err != nil {
		return msgs, err
	}
	for m := range b.Messages() {
		msgs = append(msgs, m)
	}
	return msgs, b.Error()
}

// Slots bounds how many messages are being handled at once.
type Slots struct{ ch chan struct{} }

// NewSlots returns n slots (n >= 1).
func NewSlots(n int) *Slots { return &Slots{ch: make(chan struct{}, max(n, 1))} }

// Acquire takes a slot, waiting for one; false when ctx ended first.
func (s *Slots) Acquire(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	select {
	case s.ch <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// TryAcquire takes up to n free slots without waiting and returns how many.
func (s *Slots) TryAcquire(n int) int {
	for i := 0; i < n; i++ {
		select {
		case s.ch <- struct{}{}:
		default:
			return i
		}
	}
	return n
}

// Release gives back n slots.
func (s *Slots) Release(n int) {
	for i := 0; i < n; i++ {
		<-s.ch
	}
}
