package fetcher

import (
	"testing"
	"time"
)

// TestShardGrantIsSpreadOverItsPeriod: a shard's grant comes due evenly
// over its period, a job as soon as its part of the period has begun, and
// what a round left comes due at once; dueAt is when the next job does.
func TestShardGrantIsSpreadOverItsPeriod(t *testing.T) {
	const period = 100 * time.Millisecond
	start := time.Unix(1_000, 0)
	b := &shardBudget{ends: start.Add(period), jobs: 20}
	for _, c := range []struct {
		at       time.Duration
		admitted int64
		due      int64
	}{
		{-10 * time.Millisecond, 0, 0}, // the grant came early: nothing yet
		{0, 0, 0},
		{time.Millisecond, 0, 1},                            // the first job's part began
		{50 * time.Millisecond, 0, 10},                      // half the period: half the grant
		{50 * time.Millisecond, 8, 2},                       // less what was admitted
		{50 * time.Millisecond, 12, -2},                     // a round ahead: nothing due
		{52*time.Millisecond + 500*time.Microsecond, 10, 1}, // the 11th job's part began at 50 ms
		{100 * time.Millisecond, 3, 17},                     // the period's end: all that is left
		{150 * time.Millisecond, 3, 17},                     // and no more after it
	} {
		b.admitted = c.admitted
		if got := b.due(start.Add(c.at), period); got != c.due {
			t.Errorf("at %s with %d admitted: %d due, want %d", c.at, c.admitted, got, c.due)
		}
	}
	b.admitted = 5
	if at := b.dueAt(period); at.Sub(start) <= 25*time.Millisecond || at.Sub(start) > 26*time.Millisecond || b.due(at, period) != 1 {
		t.Errorf("with 5 of 20 admitted, the next job is due %s into the period (%d due then), want just after 25ms",
			at.Sub(start), b.due(at, period))
	}
	b.admitted = 20
	if at := b.dueAt(period); !at.Equal(b.ends) {
		t.Errorf("with the grant all admitted, the next job is due at %s, want the period's end", at.Sub(start))
	}
}
