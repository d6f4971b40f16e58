// Package loop runs the background loops of the services: a function
// called at a fixed interval until a context ends ([Every], [Until]), and
// a wait that ends early with its context ([Sleep]).
package loop

import (
	"context"
	"time"
)

// Option changes how [Every] and [Until] pace their calls.
type Option func(*options)

type options struct {
	now      bool // first call at once
	afterRun bool // the interval runs from the end of each call
}

// Now makes the first call at once instead of after one interval.
func Now() Option { return func(o *options) { o.now = true } }

// AfterRun makes the interval run from the end of each call, so a slow
// call never brings the next one closer. Without it the calls follow a
// ticker: one interval apart from start to start, and a call that takes
// longer than the interval is followed by the next at once (ticks missed
// meanwhile are dropped).
func AfterRun() Option { return func(o *options) { o.afterRun = true } }

// Every calls f every d until ctx is done; a call in progress when ctx ends
// is not interrupted. f gets ctx.
func Every(ctx context.Context, d time.Duration, f func(context.Context), opts ...Option) {
	Until(ctx, d, func(ctx context.Context) bool {
		f(ctx)
		return true
	}, opts...)
}

// Until calls f every d until f returns false or ctx is done. It reports
// whether f ended the loop (false: ctx did).
func Until(ctx context.Context, d time.Duration, f func(context.Context) bool, opts ...Option) bool {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	var tick <-chan time.Time
	var timer *time.Timer
	if o.afterRun {
		timer = time.NewTimer(d)
		defer timer.Stop()
		tick = timer.C
	} else {
		t := time.NewTicker(d) // started before a first call at once: the pace is from the start
		defer t.Stop()
		tick = t.C
	}
	if o.now {
		if ctx.Err() != nil {
			return false
		}
		if !f(ctx) {
			return true
		}
		if timer != nil {
			timer.Reset(d)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick:
		}
		if ctx.Err() != nil { // both were ready and select took the tick
			return false
		}
		if !f(ctx) {
			return true
		}
		if timer != nil {
			timer.Reset(d)
		}
	}
}

// Sleep waits for d or until ctx is done; it reports whether ctx is still
// live.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
