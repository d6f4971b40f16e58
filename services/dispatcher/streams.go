package dispatcher

import (
	"context"
	"time"

	"github.com/bulkaction/bulkaction/internal/natsutil"
)

// StreamsInterval is how often a dispatcher reads the streams' fill into
// the bulk_action_stream_* gauges.
const StreamsInterval = 10 * time.Second

// streamUsage reads every stream's bytes, messages and byte limit into the
// stream gauges (telemetry.StreamGauges).
func (p *Dispatcher) streamUsage(ctx context.Context) error {
	us, err := natsutil.StreamsUsage(ctx, p.d.JS, p.d.Names)
	if err != nil {
		return err
	}
	for _, u := range us {
		p.d.Metrics.Streams.Set(u.Stream, u.Bytes, u.Msgs, u.LimitBytes)
	}
	return nil
}
