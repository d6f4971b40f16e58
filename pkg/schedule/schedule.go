package schedule

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// Interval is a span of time during which a window is open: from Open
// (inclusive) to Close (exclusive).
type Interval struct {
	Open, Close time.Time
}

// Horizon is how far ahead [Intervals] looks by default: a week and a day,
// so that every weekly window opens at least once within it.
const Horizon = 8 * 24 * time.Hour

// MaxIntervals is the most intervals [Intervals] returns by default.
const MaxIntervals = 16

// Intervals returns the times at which the windows ws are open from now
// on, within horizon (0 = [Horizon]), merged (overlapping or touching
// intervals of several windows are one) and in order, at most max of them
// (0 = [MaxIntervals]). The first one may have begun before now: its Close
// is after now. Windows that [contracts.ValidateWindows] refuses are an
// error.
//
// A window is open exactly while the clock of its zone shows a time within
// [From, To) on one of its days (a To at or before From ends on the next
// day). On a day when the clocks jump forward, a From inside the jump
// opens the window at the jump; when they go back, the repeated hour is
// inside the window both times it is shown.
func Intervals(ws []contracts.Window, now time.Time, horizon time.Duration, max int) ([]Interval, error) {
	if err := contracts.ValidateWindows("windows", ws); err != nil {
		return nil, err
	}
	if horizon <= 0 {
		horizon = Horizon
	}
	if max <= 0 {
		max = MaxIntervals
	}
	end := now.Add(horizon)
	var all []Interval
	for _, w := range ws {
		loc, _ := contracts.LoadZone(w.Zone)
		all = append(all, windowIntervals(w, loc, now, end)...)
	}
	slices.SortFunc(all, func(a, b Interval) int { return a.Open.Compare(b.Open) })
	var out []Interval
	for _, iv := range all {
		if n := len(out); n > 0 && !iv.Open.After(out[n-1].Close) {
			if iv.Close.After(out[n-1].Close) {
				out[n-1].Close = iv.Close
			}
			continue
		}
		out = append(out, iv)
	}
	if len(out) > max {
		out = out[:max]
	}
	return out, nil
}

// span is a stretch of time with one UTC offset (seconds east of UTC).
type span struct {
	from, to int64 // Unix seconds, [from, to)
	offset   int64
}

// spans cuts [from, to) at the zone's offset changes. Offsets are looked at
// every quarter hour, and each change is then found to the second.
func spans(loc *time.Location, from, to int64) []span {
	offsetAt := func(u int64) int64 {
		_, off := time.Unix(u, 0).In(loc).Zone()
		return int64(off)
	}
	const step = 15 * 60
	var out []span
	start, cur := from, offsetAt(from)
	for t := from; t < to; {
		next := min(t+step, to)
		if o := offsetAt(next); o != cur {
			lo, hi := t, next // offsetAt(lo) == cur, offsetAt(hi) != cur
			for hi-lo > 1 {
				mid := lo + (hi-lo)/2
				if offsetAt(mid) == cur {
					lo = mid
				} else {
					hi = mid
				}
			}
			out = append(out, span{start, hi, cur})
			start, cur = hi, offsetAt(hi)
		}
		t = next
	}
	return append(out, span{start, to, cur})
}

// windowIntervals returns the intervals of one window that end after from
// and begin before to, not merged.
func windowIntervals(w contracts.Window, loc *time.Location, from, to time.Time) []Interval {
	fromMin, _ := contracts.ParseClock(w.From)
	toMin, _ := contracts.ParseClock(w.To)
	length := toMin - fromMin
	if length <= 0 {
		length += 24 * 60
	}
	var days [7]bool
	for _, d := range w.Days {
		wd, _ := contracts.ParseWeekday(d)
		days[wd] = true
	}
	// Wall-clock time as Unix seconds of the same wall time in UTC: an
	// instant u with offset o shows the wall time u+o.
	lo, hi := from.Unix()-2*86400, to.Unix()+86400
	sp := spans(loc, lo, hi)
	var out []Interval
	first := from.In(loc)
	day := time.Date(first.Year(), first.Month(), first.Day()-2, 0, 0, 0, 0, time.UTC)
	for ; day.Unix()-14*3600 < hi; day = day.AddDate(0, 0, 1) {
		if !days[day.Weekday()] {
			continue
		}
		wFrom := day.Unix() + int64(fromMin)*60
		wTo := wFrom + int64(length)*60
		for _, s := range sp {
			// the instants of s whose wall time is within [wFrom, wTo)
			a, b := max(s.from, wFrom-s.offset), min(s.to, wTo-s.offset)
			if a >= b || b <= from.Unix() || a >= to.Unix() {
				continue
			}
			out = append(out, Interval{Open: time.Unix(a, 0).UTC(), Close: time.Unix(b, 0).UTC()})
		}
	}
	return out
}

// Encode writes intervals as the group meta keeps them for admission:
// "open,close,open,close,…" in Unix milliseconds.
func Encode(ivs []Interval) string {
	var b strings.Builder
	for i, iv := range ivs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(iv.Open.UnixMilli(), 10))
		b.WriteByte(',')
		b.WriteString(strconv.FormatInt(iv.Close.UnixMilli(), 10))
	}
	return b.String()
}

// Decode reads what [Encode] wrote.
func Decode(s string) ([]Interval, error) {
	if s == "" {
		return nil, nil
	}
	f := strings.Split(s, ",")
	if len(f)%2 != 0 {
		return nil, fmt.Errorf("schedule: %d values, not pairs", len(f))
	}
	out := make([]Interval, 0, len(f)/2)
	for i := 0; i < len(f); i += 2 {
		o, err1 := strconv.ParseInt(f[i], 10, 64)
		c, err2 := strconv.ParseInt(f[i+1], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("schedule: %q: not Unix milliseconds", s)
		}
		out = append(out, Interval{time.UnixMilli(o).UTC(), time.UnixMilli(c).UTC()})
	}
	return out, nil
}

// Next says, from intervals in order, whether now is inside one (open,
// until its close) or else when the next one opens (zero when none is
// known).
func Next(ivs []Interval, now time.Time) (open bool, at time.Time) {
	for _, iv := range ivs {
		if iv.Close.After(now) {
			if !iv.Open.After(now) {
				return true, iv.Close
			}
			return false, iv.Open
		}
	}
	return false, time.Time{}
}
