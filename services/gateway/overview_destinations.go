package gateway

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// The destinations panel of the overview (docs/ARCHITECTURE.md §5 and
// §10): each destination's learned rate over time beside its 429s per
// second. Redis keeps a destination's learned rate and its counts of jobs
// reported accepted and throttled ([redisq.Queue.DestinationRates]), not
// their history: the sampler reads them with each window's admitted counts
// (one more round trip) and keeps, per window of the ring, the learned
// rate and the throttled and accepted jobs per second since the reading
// before. It keeps only the destinations with a learned rate or reports
// in that window, at most the controller's bound
// (ADAPTIVE_RATE_MAX_DESTINATIONS) per window, and the overview returns the
// [OverviewDestinations] most used over the ring.

// OverviewDestinations is how many destinations the overview shows, the
// most used (accepted plus throttled jobs) over the sampled windows first.
const OverviewDestinations = 10

// destPoint is one destination's figures in one window's sample.
type destPoint struct {
	dest string
	rate float32 // learned jobs/s; 0 = not learned
	// thr, acc are the jobs per second throttled and accepted since the
	// reading before; -1 when there was none to compare with.
	thr, acc float32
}

// destCount is a destination's counts at a reading.
type destCount struct {
	acc, thr, atMs int64
}

// sampleDests reads the destinations' learned rates and counts, and
// returns the points worth keeping, sorted by destination.
func (u *uiAPI) sampleDests(ctx context.Context) ([]destPoint, error) {
	r, err := u.g.q.DestinationRates(ctx)
	if err != nil {
		return nil, err
	}
	u.destMu.Lock()
	defer u.destMu.Unlock()
	prev := u.destPrev
	u.destPrev = make(map[string]destCount, len(r.Rates))
	u.destNow = r
	pts := []destPoint{}
	for _, d := range r.Rates {
		c := destCount{acc: d.Accepted, thr: d.Throttled, atMs: r.NowMs}
		u.destPrev[d.Destination] = c
		p := destPoint{dest: d.Destination, rate: float32(d.Rate), thr: -1, acc: -1}
		if b, ok := prev[d.Destination]; ok && c.atMs > b.atMs {
			secs := float64(c.atMs-b.atMs) / 1000
			since := func(now, before int64) float32 {
				if now < before { // forgotten and tracked again: counted from 0
					before = 0
				}
				return float32(float64(now-before) / secs)
			}
			p.acc, p.thr = since(c.acc, b.acc), since(c.thr, b.thr)
		}
		if p.rate > 0 || p.acc > 0 || p.thr > 0 || r.Stopped(d) {
			pts = append(pts, p)
		}
	}
	return pts, nil
}

// destinationsView builds the destinations part from the ring (as
// [uiAPI.recentRing] returns it) and the latest reading; allowed names the
// destinations the scope may see (nil = every one).
func (u *uiAPI) destinationsView(ring []rateSample, allowed map[string]bool) DestinationsView {
	wms := u.windowMs()
	v := DestinationsView{WindowMs: wms, Destinations: []DestinationView{}}
	u.destMu.Lock()
	now := u.destNow
	u.destMu.Unlock()
	ok := func(d string) bool { return allowed == nil || allowed[d] }
	type cand struct {
		use  float64
		last int64
		cur  *redisq.DestRate
	}
	cands := map[string]*cand{}
	get := func(d string) *cand {
		c := cands[d]
		if c == nil {
			c = &cand{}
			cands[d] = c
		}
		return c
	}
	if now != nil {
		for i := range now.Rates {
			d := &now.Rates[i]
			if ok(d.Destination) {
				c := get(d.Destination)
				c.cur, c.last = d, d.LastReportMs
			}
		}
	}
	for _, s := range ring {
		for _, p := range s.dests {
			if ok(p.dest) {
				get(p.dest).use += float64(max(p.acc, 0) + max(p.thr, 0))
			}
		}
	}
	v.Tracked = len(cands)
	names := make([]string, 0, len(cands))
	for d := range cands {
		names = append(names, d)
	}
	slices.SortFunc(names, func(a, b string) int {
		ca, cb := cands[a], cands[b]
		return cmp.Or(cmp.Compare(cb.use, ca.use), cmp.Compare(cb.last, ca.last), strings.Compare(a, b))
	})
	names = names[:min(len(names), OverviewDestinations)]
	var first, n int64
	if len(ring) > 0 {
		first, n = ring[0].window, ring[len(ring)-1].window-ring[0].window+1
		v.Start = time.UnixMilli(first * wms).UTC()
	}
	for _, name := range names {
		dv := DestinationView{Destination: name, State: DestinationNotLimited,
			Learned: make([]*float64, n), Throttled: make([]*float64, n)}
		if c := cands[name]; c.cur != nil {
			if now.Stopped(*c.cur) {
				dv.State = DestinationStopped
				until := time.UnixMilli(c.cur.StopUntilMs).UTC()
				dv.StoppedUntil = &until
			} else if c.cur.Rate > 0 {
				dv.State = DestinationLearned
			}
			if c.cur.Rate > 0 {
				r := round2(c.cur.Rate)
				dv.LearnedPerSecond = &r
			}
		}
		for _, s := range ring {
			i := s.window - first
			if s.dests == nil { // not read in this window
				continue
			}
			j, found := slices.BinarySearchFunc(s.dests, name, func(p destPoint, d string) int { return strings.Compare(p.dest, d) })
			if !found {
				zero := 0.0
				dv.Throttled[i] = &zero // no rate learned, no job reported
				dv.ThrottledPerSecond = 0
				continue
			}
			p := s.dests[j]
			if p.rate > 0 {
				r := round2(float64(p.rate))
				dv.Learned[i] = &r
			}
			dv.ThrottledPerSecond = 0
			if p.thr >= 0 {
				t := round2(float64(p.thr))
				dv.Throttled[i] = &t
				dv.ThrottledPerSecond = t
			}
		}
		v.Destinations = append(v.Destinations, dv)
	}
	return v
}
