package fetcher

import (
	"testing"
	"time"
)

// TestShardGrantIsSpreadOverItsPeriod: a shard's grant comes due evenly
// over its period, a job as soon as its part of the period has begun;
// what a round left comes due at once up to the catch-up's worth, the
// rest of it skipped; dueAt is when the next job comes due.
func TestShardGrantIsSpreadOverItsPeriod(t *testing.T) {
	const period = 100 * time.Millisecond
	start := time.Unix(1_000, 0)
	budget := func(admitted int64) *shardBudget {
		return &shardBudget{ends: start.Add(period), jobs: 20, admitted: admitted}
	}
	// the catch-up at rounds closer than the gap (20 ms) of a grant of 20
	// jobs a period: 4 jobs
	for _, c := range []struct {
		at           time.Duration
		admitted     int64
		due, skipped int64
	}{
		{-10 * time.Millisecond, 0, 0, 0}, // the grant came early: nothing yet
		{0, 0, 0, 0},
		{time.Millisecond, 0, 1, 0},                            // the first job's part began
		{20 * time.Millisecond, 0, 4, 0},                       // a round late: caught up
		{50 * time.Millisecond, 8, 2, 0},                       // half the period, less what was admitted
		{50 * time.Millisecond, 12, -2, 0},                     // a round ahead: nothing due
		{52*time.Millisecond + 500*time.Microsecond, 10, 1, 0}, // the 11th job's part began at 50 ms
		{50 * time.Millisecond, 0, 4, 6},                       // a stall: 4 caught up, 6 skipped
		{150 * time.Millisecond, 16, 4, 0},                     // past the period's end: all that is left
	} {
		b := budget(c.admitted)
		if got := b.due(start.Add(c.at), period, shardCatchUp(0, period)); got != c.due || b.skipped != c.skipped {
			t.Errorf("at %s with %d admitted: %d due and %d skipped, want %d and %d", c.at, c.admitted, got, b.skipped, c.due, c.skipped)
		}
	}
	// after a stall, the pace goes on from what was skipped
	b := budget(0)
	b.due(start.Add(50*time.Millisecond), period, shardCatchUp(0, period))
	b.admitted = 4
	if got := b.due(start.Add(60*time.Millisecond), period, shardCatchUp(0, period)); got != 2 || b.skipped != 6 {
		t.Errorf("10 ms after a stall's round: %d due, %d skipped; want 2 and 6", got, b.skipped)
	}
	b = budget(5)
	if at := b.dueAt(period); at.Sub(start) <= 25*time.Millisecond || at.Sub(start) > 26*time.Millisecond || b.due(at, period, shardCatchUp(0, period)) != 1 {
		t.Errorf("with 5 of 20 admitted, the next job is due %s into the period (%d due then), want just after 25ms",
			at.Sub(start), b.due(at, period, shardCatchUp(0, period)))
	}
	b = budget(14)
	b.skipped = 6
	if at := b.dueAt(period); !at.Equal(b.ends) {
		t.Errorf("with the grant all admitted or skipped, the next job is due at %s, want the period's end", at.Sub(start))
	}
}

// TestShardCatchUpFollowsTheRounds: a round catches up twice the rounds'
// usual spacing, at least twice the gap between rounds and at most the
// period.
func TestShardCatchUpFollowsTheRounds(t *testing.T) {
	const period = 100 * time.Millisecond
	for _, c := range []struct{ interval, want time.Duration }{
		{0, 2 * shardRoundGap},
		{5 * time.Millisecond, 2 * shardRoundGap},
		{30 * time.Millisecond, 60 * time.Millisecond},
		{80 * time.Millisecond, period},
	} {
		if got := shardCatchUp(c.interval, period); got != c.want {
			t.Errorf("rounds %s apart: catch up %s, want %s", c.interval, got, c.want)
		}
	}
}
