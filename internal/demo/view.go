package demo

import (
	"fmt"
	"io"
	"math"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// view shows the snapshots of a run.
type view interface {
	update(s *snapshot)
	// close shows the last snapshot for good; the view is not used again.
	close()
}

// fmtRate formats a rate in jobs per second.
func fmtRate(r float64) string {
	if r >= 100 {
		return fmt.Sprintf("%.0f/s", r)
	}
	return fmt.Sprintf("%.1f/s", r)
}

// fmtETA formats an ETA in seconds (< 0 = unknown).
func fmtETA(sec float64) string {
	if sec < 0 {
		return "eta ?"
	}
	d := time.Duration(math.Ceil(sec)) * time.Second
	return "eta " + d.String()
}

// globalLine is the line of the rate limiter and the total throughput,
// and of the partner API's capacity and learned rate when there is one.
func globalLine(s *snapshot) string {
	line := fmt.Sprintf("global: admitted %s of %s limit, completing %s, %d active tenant(s)",
		fmtRate(s.rate.Admitted), fmtRate(s.rate.Limit), fmtRate(s.completedRate()), s.rate.ActiveTenants)
	if s.partner != nil {
		line += "; " + s.partner.String()
	}
	return line
}

// detail is a row's text after its counters: rate, ETA and congestion,
// or its state when it has not started or has ended.
func (r row) detail() string {
	switch {
	case r.ended:
		return r.state
	case r.state == "not submitted yet" || r.state == "SUBMITTING":
		return r.state
	}
	s := fmt.Sprintf("%8s  %-12s congestion %s", fmtRate(r.rate), fmtETA(r.eta), r.level)
	if r.held != "" {
		s += "  waiting: " + r.held
	}
	return s
}

// plainView prints a block of lines every interval, and a line when a
// group ends, for output that is not a terminal.
type plainView struct {
	out   io.Writer
	every time.Duration
	last  time.Time
	ended map[string]bool
	snap  *snapshot
}

func (v *plainView) update(s *snapshot) {
	v.snap = s
	if v.ended == nil {
		v.ended = map[string]bool{}
	}
	for _, r := range s.groups {
		if r.ended && !v.ended[r.id] {
			v.ended[r.id] = true
			fmt.Fprintf(v.out, "[%6.1fs] %s %s: %d/%d jobs\n", s.elapsed.Seconds(), r.id, r.state, r.settled, r.total)
		}
	}
	if time.Since(v.last) >= v.every {
		v.last = time.Now()
		v.print(s)
	}
}

func (v *plainView) print(s *snapshot) {
	fmt.Fprintf(v.out, "[%6.1fs] %s\n", s.elapsed.Seconds(), globalLine(s))
	tw := tabwriter.NewWriter(v.out, 0, 4, 2, ' ', 0)
	for _, r := range s.groups {
		pct := 0.0
		if r.total > 0 {
			pct = 100 * float64(r.settled) / float64(r.total)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d/%d\t%5.1f%%\t%s\n", r.id, r.priority, r.settled, r.total, pct, r.detail())
	}
	_ = tw.Flush()
}

func (v *plainView) close() {
	if v.snap != nil {
		v.print(v.snap)
	}
}

// barView redraws a progress bar per group and a global line, for a
// terminal.
type barView struct {
	p      *mpb.Progress
	mu     sync.Mutex
	snap   *snapshot
	global *mpb.Bar
	bars   []*mpb.Bar
	rows   []row
}

func newBarView(out io.Writer, groups []*tracked, w Workload) *barView {
	v := &barView{
		p:    mpb.New(mpb.WithOutput(out), mpb.WithAutoRefresh(), mpb.WithRefreshRate(200*time.Millisecond)),
		snap: &snapshot{},
		rows: make([]row, len(groups)),
	}
	width := 0
	for _, t := range groups {
		width = max(width, len(t.Tenant)+1+len(t.id))
	}
	v.global = v.p.New(0, mpb.NopStyle(), mpb.PrependDecorators(decor.Any(func(decor.Statistics) string {
		v.mu.Lock()
		defer v.mu.Unlock()
		return fmt.Sprintf("[%5.1fs] %s", v.snap.elapsed.Seconds(), globalLine(v.snap))
	})))
	for i, t := range groups {
		v.rows[i] = rowOf(t, false)
		v.bars = append(v.bars, v.p.AddBar(int64(t.Jobs),
			mpb.PrependDecorators(
				decor.Name(t.Tenant+"/"+t.id, decor.WC{W: width + 1, C: decor.DindentRight}),
				decor.Name(string(t.Priority.OrDefault()), decor.WC{W: 7, C: decor.DindentRight}),
			),
			mpb.AppendDecorators(
				decor.CountersNoUnit("%d/%d", decor.WC{W: 12}),
				decor.Any(func(decor.Statistics) string {
					v.mu.Lock()
					defer v.mu.Unlock()
					return "  " + v.rows[i].detail()
				}),
			),
		))
	}
	return v
}

func (v *barView) update(s *snapshot) {
	v.mu.Lock()
	v.snap = s
	copy(v.rows, s.groups)
	v.mu.Unlock()
	for i, r := range s.groups {
		v.bars[i].SetCurrent(r.settled)
		if r.ended && !r.completed {
			v.bars[i].Abort(false)
		}
	}
}

func (v *barView) close() {
	v.mu.Lock()
	rows := append([]row(nil), v.rows...)
	v.mu.Unlock()
	for i, b := range v.bars {
		if rows[i].completed {
			b.SetCurrent(rows[i].total)
		} else {
			b.Abort(false)
		}
	}
	v.global.SetTotal(-1, true)
	v.p.Wait()
}
