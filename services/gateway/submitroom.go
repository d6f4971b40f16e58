package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

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
	floor, _, err := natsutil.AckFloor(ctx, g.deps.JS, g.deps.Names.StreamSubmit())
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
// bytes count until the fetchers' ack floor on SUBMIT passes SUBMIT's last
// sequence now. A failure only logs: the request is published.
func (g *Gateway) settleSubmitRoom(ctx context.Context, room *redisq.SubmitRoom, published bool) {
	var err error
	if published {
		var seq uint64
		if seq, err = natsutil.LastSeq(ctx, g.deps.JS, g.deps.Names.StreamSubmit()); err == nil {
			err = room.Settle(ctx, seq)
		}
	} else {
		err = room.Release(ctx)
	}
	if err != nil && ctx.Err() == nil {
		g.log.Warn("a request's room on SUBMIT not recorded; it lapses in "+redisq.SubmitRoomLease.String(), "err", err)
	}
}
