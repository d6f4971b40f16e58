package bench

import (
	"context"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/internal/loop"
	"github.com/bulkaction/bulkaction/internal/natsutil"
)

// Depths are where the jobs of a run waited, averaged over samples taken
// every [SampleInterval]: messages held by the SUBMIT, READY and RESULT
// streams (waiting or unacknowledged) and leased jobs in Redis (admitted,
// not yet confirmed on READY).
type Depths struct {
	// Samples is how many samples were taken.
	Samples int
	// Submit, Ready and Result are the mean messages held by each stream.
	Submit, Ready, Result float64
	// Inflight is the mean number of leased jobs.
	Inflight float64
	// ReadyBelowWorkersShare is the share of samples in which READY held
	// fewer messages than the worker count.
	ReadyBelowWorkersShare float64
}

// SampleInterval is how often [Pipeline] samples the stream depths during a
// throughput run.
const SampleInterval = 50 * time.Millisecond

// sampleDepths samples until the returned function is called, which returns
// the averages.
func (p *Pipeline) sampleDepths(ctx context.Context) (stop func() Depths) {
	ctx, cancel := context.WithCancel(ctx)
	var d Depths
	var wg sync.WaitGroup
	names := p.conns.Names
	streams := []string{names.StreamSubmit(), names.StreamReady(), names.StreamResult()}
	wg.Go(func() {
		loop.Until(ctx, SampleInterval, func(ctx context.Context) bool {
			var v [3]uint64
			for i, s := range streams {
				n, err := natsutil.Unsettled(ctx, p.conns.JS, s)
				if err != nil {
					return false
				}
				v[i] = n
			}
			sz, err := p.conns.Queue.Sizes(ctx)
			if err != nil {
				return false
			}
			inf := sz.Inflight
			d.Samples++
			d.Submit += float64(v[0])
			d.Ready += float64(v[1])
			d.Result += float64(v[2])
			d.Inflight += float64(inf)
			if v[1] < uint64(p.cfg.WorkerCount) {
				d.ReadyBelowWorkersShare++
			}
			return true
		})
	})
	return func() Depths {
		cancel()
		wg.Wait()
		if n := float64(d.Samples); n > 0 {
			d.Submit /= n
			d.Ready /= n
			d.Result /= n
			d.Inflight /= n
			d.ReadyBelowWorkersShare /= n
		}
		return d
	}
}
