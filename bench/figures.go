package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/internal/loop"
)

// Figure is one measured value, printed as
// {"bench":"e2e","name":NAME,"value":V}.
type Figure struct {
	// Bench is the Reporter's Bench, "e2e" by default.
	Bench string `json:"bench"`
	// Name names the figure (see the package documentation).
	Name string `json:"name"`
	// Value is the figure, rounded to three decimals.
	Value float64 `json:"value"`
}

// Reporter prints figures as JSON lines and keeps them. It is safe for
// concurrent use. The zero value discards the lines but keeps the figures.
type Reporter struct {
	// W receives one JSON line per figure; nil = none.
	W io.Writer
	// Bench names the benchmark in every figure; "" means "e2e".
	Bench string

	mu   sync.Mutex
	figs []Figure
}

// Add records a figure and prints it. Values are rounded to three decimals;
// NaN and infinities are printed as 0.
func (r *Reporter) Add(name string, v float64) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		v = 0
	}
	bench := r.Bench
	if bench == "" {
		bench = "e2e"
	}
	f := Figure{Bench: bench, Name: name, Value: math.Round(v*1000) / 1000}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.figs = append(r.figs, f)
	if r.W != nil {
		b, _ := json.Marshal(f)
		_, _ = fmt.Fprintf(r.W, "%s\n", b)
	}
}

// Get returns the last value recorded under name.
func (r *Reporter) Get(name string) (float64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.figs) - 1; i >= 0; i-- {
		if r.figs[i].Name == name {
			return r.figs[i].Value, true
		}
	}
	return 0, false
}

// Figures returns a copy of the recorded figures, in order.
func (r *Reporter) Figures() []Figure {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.figs)
}

// Percentile returns the p-th percentile (0 < p <= 100, nearest rank) of
// sorted, or 0 when it is empty.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	k := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	k = max(0, min(k, len(sorted)-1))
	return sorted[k]
}

// Ms converts d to fractional milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// pace calls send with the number of jobs due so that, from its start, rate
// jobs per second go out for d, checking every tick. A send that takes
// longer than a tick is caught up at the next call (the schedule is kept, so
// the rate is not lowered by slow sends). It returns the number of jobs sent.
func pace(ctx context.Context, rate float64, d, tick time.Duration, send func(n int) error) (int, error) {
	start := time.Now()
	sent := 0
	var err error
	if !loop.Until(ctx, tick, func(context.Context) bool {
		el := min(time.Since(start), d)
		if due := int(rate*el.Seconds()) - sent; due > 0 {
			if err = send(due); err != nil {
				return false
			}
			sent += due
		}
		return el < d
	}, loop.Now()) {
		return sent, ctx.Err()
	}
	return sent, err
}

// waitFor polls cond every interval until it returns true, returns an
// error, or ctx ends.
func waitFor(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	var err error
	if !loop.Until(ctx, interval, func(context.Context) bool {
		var ok bool
		ok, err = cond()
		return err == nil && !ok
	}, loop.Now()) {
		return ctx.Err()
	}
	return err
}

// jainIndex is Jain's fairness index of xs: 1 when all are equal.
func jainIndex(xs []float64) float64 {
	var s, sq float64
	for _, x := range xs {
		s += x
		sq += x * x
	}
	if sq == 0 {
		return 0
	}
	return s * s / (float64(len(xs)) * sq)
}
