package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// submitRoomLimit names a tenant's room on SUBMIT in problems.
const submitRoomLimit = "gateway.submitBytes"

// submitRoomRetry is the Retry-After of a request refused for its tenant's
// room on SUBMIT: the fetchers apply a full share in seconds.
const submitRoomRetry = 5

// reserveSubmitRoom reserves a jobs request's bytes in its tenant's room on
// SUBMIT (Limits.TenantSubmitBytes, or the tenant's own
// "<tenant>:submitBytes" in the door-limits HASH) before anything of it is
// published, so that no tenant fills the stream every tenant's submissions
// need. A request that does not fit is refused whole: 413 when it is larger
// than the room itself, else 429 until the fetchers have applied enough of
// the tenant's earlier requests. It returns nil after writing the answer.
func (g *Gateway) reserveSubmitRoom(w http.ResponseWriter, r *http.Request, tenant string, bytes int64) *redisq.SubmitRoom {
	ctx := r.Context()
	floor, err := g.submitFloor.get(ctx, func(ctx context.Context) (uint64, error) {
		f, _, err := natsutil.AckFloor(ctx, g.deps.JS, g.deps.Names.StreamSubmit())
		return f, err
	})
	if err != nil {
		g.unavailable(w, r, err)
		return nil
	}
	room, err := g.q.ReserveSubmitRoom(ctx, tenant, bytes, g.cfg.Limits.TenantSubmitBytes, floor)
	if err != nil {
		g.unavailable(w, r, err)
		return nil
	}
	if room.OK {
		return room
	}
	limit := fmt.Sprintf("%s is %d: the most bytes of a tenant's submissions SUBMIT may hold before the fetchers apply them", submitRoomLimit, room.Limit)
	if bytes > room.Limit {
		writeProblem(w, r, http.StatusRequestEntityTooLarge, slugTooLarge,
			fmt.Sprintf("the request's %d bytes of messages are more than tenant %s's room on SUBMIT (%d bytes); split it into smaller requests; nothing was submitted", bytes, tenant, room.Limit),
			FieldError{Field: submitRoomLimit, Detail: strconv.FormatInt(bytes, 10) + " bytes", Limit: limit})
		return nil
	}
	w.Header().Set("Retry-After", strconv.Itoa(submitRoomRetry))
	writeProblem(w, r, http.StatusTooManyRequests, slugRateLimited,
		fmt.Sprintf("tenant %s has %d bytes of submissions on SUBMIT not applied yet, and this request's %d would pass its room of %d; nothing was submitted; retry after %d s",
			tenant, room.Held, bytes, room.Limit, submitRoomRetry),
		FieldError{Field: submitRoomLimit, Detail: "over the limit", Limit: limit})
	return nil
}

// settleSubmitRoom records a published request in its tenant's room: its
// bytes count until the fetchers' ack floor on SUBMIT passes the request's
// last message (lastSeq, from its PubAcks; SUBMIT's last sequence now when
// none was acknowledged). A failure only logs: the request is published.
func (g *Gateway) settleSubmitRoom(ctx context.Context, room *redisq.SubmitRoom, published bool, lastSeq uint64) {
	var err error
	if published {
		seq := lastSeq
		if seq == 0 {
			seq, err = natsutil.LastSeq(ctx, g.deps.JS, g.deps.Names.StreamSubmit())
		}
		if err == nil {
			err = room.Settle(ctx, seq)
		}
	} else {
		err = room.Release(ctx)
	}
	if err != nil && ctx.Err() == nil {
		g.log.Warn("a request's room on SUBMIT not recorded; it lapses in "+redisq.SubmitRoomLease.String(), "err", err)
	}
}

// floorTTL is how long the gateway reuses the fetchers' ack floor on
// SUBMIT it read for one request for the next ones. A floor that old only
// frees a tenant's applied bytes a moment later (the room is checked
// against less than it could be), while each read is two JetStream API
// calls that every request would otherwise queue behind.
const floorTTL = 250 * time.Millisecond

// floorCache keeps the last ack floor read. Once it is older than floorTTL
// the next request reads it again while the others go on with the one they
// have (an older floor only counts a room fuller than it is): no request
// but the first ever waits for another's read.
type floorCache struct {
	mu      sync.Mutex
	at      time.Time
	floor   uint64
	reading bool
}

func (c *floorCache) get(ctx context.Context, read func(context.Context) (uint64, error)) (uint64, error) {
	c.mu.Lock()
	if !c.at.IsZero() && (c.reading || time.Since(c.at) < floorTTL) {
		f := c.floor
		c.mu.Unlock()
		return f, nil
	}
	first := c.at.IsZero()
	if first {
		// Nothing to go on with: the first requests read one after another.
		defer c.mu.Unlock()
	} else {
		c.reading = true
		c.mu.Unlock()
	}
	f, err := read(ctx)
	if !first {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.reading = false
	}
	if err != nil {
		return 0, err
	}
	c.floor, c.at = f, time.Now()
	return c.floor, nil
}
