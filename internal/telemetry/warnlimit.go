package telemetry

import (
	"log/slog"
	"sync"
	"time"
)

// WarnLimiter logs at warn level at most once per interval; the lines in
// between go to debug level and are counted ("suppressed") in the next warn
// line. Services use it for failures that can hit every job at once (Redis
// or NATS down), so a log is not flooded. The zero value lets every line
// through.
type WarnLimiter struct {
	Interval time.Duration

	mu      sync.Mutex
	last    time.Time
	skipped int
}

// Allow reports whether a line may go out now, and how many were held back
// since the last one.
func (l *WarnLimiter) Allow() (ok bool, skipped int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < l.Interval {
		l.skipped++
		return false, 0
	}
	l.last, skipped, l.skipped = now, l.skipped, 0
	return true, skipped
}

// Warn logs msg on log at warn level when allowed, else at debug level.
func (l *WarnLimiter) Warn(log *slog.Logger, msg string, args ...any) {
	if ok, skipped := l.Allow(); ok {
		if skipped > 0 {
			args = append(args, "suppressed", skipped)
		}
		log.Warn(msg, args...)
		return
	}
	log.Debug(msg, args...)
}
