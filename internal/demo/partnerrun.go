package demo

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Reading is one reading of the learned rate of the partner API's
// destination.
type Reading struct {
	// At is the time of the reading since the start of the demo.
	At time.Duration
	// Rate is the learned rate in jobs/s; 0 while none is learned (no
	// throttle seen yet: the destination is not limited).
	Rate float64
	// Stopped says a Retry-After stopped the destination.
	Stopped bool
}

// PartnerRun is what the partner API saw of a run and what the adaptive
// rate learned of it. The zero value is a partner nobody called.
type PartnerRun struct {
	// Capacity is the partner API's capacity over the run.
	Capacity Capacity
	// Destination is the destination its callers' outcomes were learned
	// under: their job type ("http").
	Destination string
	// Groups are the groups that called it ("hooli/crm-sync").
	Groups []string
	// Accepted and Throttled count the calls it answered 200 and 429.
	Accepted, Throttled int64
	// Learned are the readings of the learned rate while a group calling
	// it ran, oldest first.
	Learned []Reading
	// End is when the last group calling it ended (0 if one has not).
	End time.Duration
}

// partnerTrack follows the partner API during a run.
type partnerTrack struct {
	p *Partner
	// dest is the destination the partner's jobs are learned under (the
	// URL's host for http jobs), typ their job type
	dest, typ string
	readings  []Reading
}

// running says whether a group calling the partner is submitted and has
// not ended.
func (pt *partnerTrack) running(groups []*tracked, mu *sync.Mutex) bool {
	mu.Lock()
	defer mu.Unlock()
	for _, t := range groups {
		if t.Partner && t.submitted >= 0 && !t.ended {
			return true
		}
	}
	return false
}

// observe keeps the learned rate of the partner's destination in r, read
// at `at`.
func (pt *partnerTrack) observe(at time.Duration, r *redisq.DestRates) {
	rd := Reading{At: at}
	for _, d := range r.Rates {
		if d.Destination == pt.dest {
			rd.Rate, rd.Stopped = d.Rate, r.Stopped(d)
		}
	}
	pt.readings = append(pt.readings, rd)
}

// partnerNow is the partner API's line of the live view.
type partnerNow struct {
	name     string
	capacity float64
	last     *Reading // nil before the first reading
}

func (pt *partnerTrack) now(at time.Duration) *partnerNow {
	n := &partnerNow{name: pt.p.Capacity().Name, capacity: pt.p.Capacity().At(at)}
	if len(pt.readings) > 0 {
		last := pt.readings[len(pt.readings)-1] // a copy: the view reads it from its own goroutine
		n.last = &last
	}
	return n
}

// String is e.g. "hooli's partner API: capacity 60/s, learned 55.2/s".
func (n *partnerNow) String() string {
	s := fmt.Sprintf("%s: capacity %s", n.name, fmtRate(n.capacity))
	switch {
	case n.last == nil:
	case n.last.Rate <= 0:
		s += ", no rate learned yet"
	default:
		s += ", learned " + fmtRate(n.last.Rate)
		if n.last.Stopped {
			s += " (stopped by a Retry-After)"
		}
	}
	return s
}

// result sums up the partner's part of the run.
func (pt *partnerTrack) result(groups []*tracked) *PartnerRun {
	r := &PartnerRun{Capacity: pt.p.Capacity(), Destination: pt.dest, Learned: pt.readings}
	r.Accepted, r.Throttled = pt.p.Calls()
	ended := true
	for _, t := range groups {
		if !t.Partner {
			continue
		}
		r.Groups = append(r.Groups, t.Tenant+"/"+t.id)
		ended = ended && t.ended
		r.End = max(r.End, t.endedAt)
	}
	if !ended {
		r.End = 0
	}
	return r
}

// PhaseRate is the rate learned of the partner over the second half of
// one phase of its capacity (the first half is the time it takes to find
// a new capacity).
type PhaseRate struct {
	// From and To bound the readings averaged, since the start of the demo.
	From, To time.Duration
	// Learned is the mean of their learned rates, jobs/s; 0 when none of
	// them had a rate (no 429 yet).
	Learned float64
	// Capacity is the phase's capacity, calls/s.
	Capacity float64
}

// PhaseRates are the learned rate over the second half of each phase that
// the partner's callers reached, up to their end: the mean of the readings
// of that half that have a rate. The last phase reached ends with the last
// reading.
func (r *PartnerRun) PhaseRates() []PhaseRate {
	if len(r.Learned) == 0 {
		return nil
	}
	lastAt := r.Learned[len(r.Learned)-1].At
	var out []PhaseRate
	for i, ph := range r.Capacity.Phases {
		if ph.From > lastAt {
			break
		}
		end := lastAt
		if i+1 < len(r.Capacity.Phases) && r.Capacity.Phases[i+1].From < end {
			end = r.Capacity.Phases[i+1].From
		}
		pr := PhaseRate{From: ph.From + (end-ph.From)/2, To: end, Capacity: ph.Rps}
		var sum float64
		var n, seen int
		for _, rd := range r.Learned {
			if rd.At < pr.From || rd.At > pr.To || (rd.At == pr.To && end != lastAt) {
				continue
			}
			seen++
			if rd.Rate > 0 {
				sum += rd.Rate
				n++
			}
		}
		if seen == 0 {
			continue
		}
		if n > 0 {
			pr.Learned = sum / float64(n)
		}
		out = append(out, pr)
	}
	return out
}

// PartnerLine is the summary's line on the partner API: its callers'
// throttles per job, and the rate learned over the second half of each
// phase beside the capacity, e.g. "hooli/crm-sync called hooli's partner
// API: 0.08 throttles per job (125 429s, 1500 calls accepted); learned
// rate over the second half of each phase (its capacity): 62/s (60/s)
// 6.0-12.0s, 24/s (20/s) 18.0-24.0s, 101/s (100/s) 28.2-32.2s". A phase
// whose readings show no rate learned yet (no 429 yet) says "none". ""
// without a partner.
func (s *Summary) PartnerLine() string {
	r := s.Partner
	if r == nil {
		return ""
	}
	var jobs int
	var throttles int64
	for _, g := range s.Groups {
		for _, id := range r.Groups {
			if g.ID == id {
				jobs += g.Jobs
				throttles += g.Throttles
			}
		}
	}
	line := fmt.Sprintf("%s called %s: %.2f throttles per job (%d 429s, %d calls accepted)",
		joinAnd(r.Groups), r.Capacity.Name, perJob(throttles, jobs), r.Throttled, r.Accepted)
	phases := r.PhaseRates()
	if len(phases) == 0 {
		return line
	}
	parts := make([]string, 0, len(phases))
	for _, ph := range phases {
		learned := "none"
		if ph.Learned > 0 {
			learned = rate(roundRate(ph.Learned)) + "/s"
		}
		parts = append(parts, fmt.Sprintf("%s (%s/s) %.1f-%.1fs", learned, rate(ph.Capacity), ph.From.Seconds(), ph.To.Seconds()))
	}
	return line + "; learned rate over the second half of each phase (its capacity): " + strings.Join(parts, ", ")
}

// roundRate rounds a learned rate for the summary: whole jobs/s, a tenth
// below 10.
func roundRate(r float64) float64 {
	if r >= 10 {
		return float64(int64(r + 0.5))
	}
	return float64(int64(r*10+0.5)) / 10
}
