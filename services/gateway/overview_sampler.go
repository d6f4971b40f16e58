package gateway

import (
	"context"
	"slices"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// The admitted-rate sampler behind the dashboard's chart
// (docs/ARCHITECTURE.md §10). The rate limiter keeps one counter per window
// that lives for two windows only, and nothing in Redis keeps the admitted
// rate over time. The gateway therefore samples the counters of the last
// complete window, once a window, into a ring of [OverviewHistory] windows
// held in its process: the global count, the active tenants, the backoff
// queue's size and each active tenant's count ([redisq.Queue.WindowCounts],
// two round trips). The sampling starts with the first dashboard request
// and goes on until the gateway stops; a replica's ring starts empty, and
// windows nobody sampled are null.

// OverviewHistory is how many rate-limit windows of admitted counts the
// gateway keeps for the overview's chart (5 minutes of 1 s windows).
const OverviewHistory = 300

// rateSample is one window's admitted counts.
type rateSample struct {
	window  int64
	global  int64
	active  int64
	backoff int64
	tenants map[string]int64
	// dests are the destinations' figures, sorted by name (only those
	// with a learned rate or reports); nil when they were not read.
	dests []destPoint
}

// nowMs is the time the rate limiter sees (Redis TIME, or the queue's
// clock when it has one).
func (u *uiAPI) nowMs(ctx context.Context) (int64, error) {
	t, err := u.g.q.Now(ctx)
	if err != nil {
		return 0, err
	}
	return t.UnixMilli(), nil
}

func (u *uiAPI) windowMs() int64 { return max(u.g.q.Config().Window.Milliseconds(), 1) }

// sample adds the last complete window to the ring unless it is there.
func (u *uiAPI) sample(ctx context.Context) error {
	// The sampling loop and a reading may call it at once: the second waits
	// and finds the window sampled, rather than read the destinations' counts
	// again a few ms later (a rate over a few ms is noise).
	u.sampleMu.Lock()
	defer u.sampleMu.Unlock()
	now, err := u.nowMs(ctx)
	if err != nil {
		return err
	}
	w := now/u.windowMs() - 1
	u.ringMu.Lock()
	done := len(u.ring) > 0 && u.ring[len(u.ring)-1].window >= w
	u.ringMu.Unlock()
	if done {
		return nil
	}
	c, err := u.g.q.WindowCounts(ctx, w)
	if err != nil {
		return err
	}
	s := rateSample{window: w, active: c.Active, backoff: c.BackingOff, global: c.Global, tenants: c.Tenants}
	if s.dests, err = u.sampleDests(ctx); err != nil {
		u.g.log.Debug("dashboard: destinations not sampled", "err", err)
	}
	u.ringMu.Lock()
	defer u.ringMu.Unlock()
	if len(u.ring) > 0 && u.ring[len(u.ring)-1].window >= w {
		return nil
	}
	u.ring = append(u.ring, s)
	if len(u.ring) > OverviewHistory {
		u.ring = slices.Delete(u.ring, 0, len(u.ring)-OverviewHistory)
	}
	return nil
}

// startSampling starts the sampling loop once: it samples every window
// until the gateway shuts its streams (the hub's closeAll drops the
// loop's subscription to a group no event names).
func (u *uiAPI) startSampling() {
	u.ringMu.Lock()
	if u.sampling {
		u.ringMu.Unlock()
		return
	}
	u.sampling = true
	u.ringMu.Unlock()
	sub, err := u.g.hub.subscribe(contracts.GroupRef{ID: "dashboard-sampler"})
	if err != nil {
		return // shutting down
	}
	go func() {
		defer u.g.hub.unsubscribe(sub)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		every := time.Duration(u.windowMs()) * time.Millisecond
		t := time.NewTicker(min(every, time.Second))
		defer t.Stop()
		for {
			if err := u.sample(ctx); err != nil {
				u.g.log.Debug("dashboard: admitted rate not sampled", "err", err)
			}
			select {
			case <-sub.dropped:
				return
			case <-t.C:
			}
		}
	}()
}

// recentRing is a copy of the ring's samples of the last OverviewHistory
// windows up to the last sampled one.
func (u *uiAPI) recentRing() []rateSample {
	u.ringMu.Lock()
	ring := slices.Clone(u.ring)
	u.ringMu.Unlock()
	if len(ring) > 0 {
		first := ring[len(ring)-1].window - OverviewHistory + 1
		for len(ring) > 0 && ring[0].window < first {
			ring = ring[1:]
		}
	}
	return ring
}

// rateView builds the rate part from the ring (as recentRing returns it).
func (u *uiAPI) rateView(ring []rateSample, tenant string, active, weight int64) RateView {
	wms := u.windowMs()
	global := int64(u.g.q.Config().GlobalLimit)
	limitAt := func(active int64) int64 {
		if tenant == "" {
			return global
		}
		return tenantLimit(global, active, weight)
	}
	v := RateView{WindowMs: wms, Limit: limitAt(active)}
	perSec := 1000 / float64(wms)
	v.LimitPerSecond = round2(float64(v.Limit) * perSec)
	h := RateHistory{WindowMs: wms, Admitted: []*int64{}, Limit: []*int64{}, Backoff: []*int64{}}
	if len(ring) > 0 {
		first, last := ring[0].window, ring[len(ring)-1].window
		h.Start = time.UnixMilli(first * wms).UTC()
		n := int(last - first + 1)
		h.Admitted, h.Limit, h.Backoff = make([]*int64, n), make([]*int64, n), make([]*int64, n)
		for _, s := range ring {
			i := s.window - first
			a, l, b := s.global, limitAt(s.active), s.backoff
			if tenant != "" {
				a = s.tenants[tenant]
			}
			h.Admitted[i], h.Limit[i] = &a, &l
			if tenant == "" {
				h.Backoff[i] = &b
			}
		}
		s := ring[len(ring)-1]
		a := s.global
		if tenant != "" {
			a = s.tenants[tenant]
		}
		v.Admitted = &a
		v.AdmittedPerSecond = round2(float64(a) * perSec)
	}
	v.History = h
	return v
}

// tenantLimit is the most a tenant may be admitted in a window: its share,
// but never more than the global limit, which caps every tenant together
// (a weight above 1 can make the share alone larger).
func tenantLimit(limit, active, weight int64) int64 {
	return min(redisq.TenantShare(limit, active, weight), limit)
}
