package cli

import (
	"context"
	"time"

	"github.com/bulkaction/bulkaction/pkg/api"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// CallbackOf reads the delivery state of g's completion callback, as the
// API and `status --json` show it: nil for a group without a callback URL;
// state waiting until the group ends.
func CallbackOf(ctx context.Context, q *redisq.Queue, g contracts.GroupRef) (*api.Callback, error) {
	c, ok, err := q.CallbackOf(ctx, g)
	if err != nil {
		return nil, err
	}
	if !ok {
		u, err := q.CallbackURLOf(ctx, g)
		if err != nil || u == "" {
			return nil, err
		}
		return &api.Callback{URL: u, State: api.CallbackWaiting}, nil
	}
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		u := t.UTC()
		return &u
	}
	v := &api.Callback{
		URL: c.URL, State: c.State, WebhookID: c.ID, Attempts: c.Attempts, LastAttemptAt: at(c.LastAttemptAt),
		StatusCode: c.StatusCode, LastError: c.LastError, DeliveredAt: at(c.DeliveredAt), FailedAt: at(c.FailedAt),
	}
	if c.State == redisq.CallbackPending {
		v.NextAttemptAt = at(c.NextAt)
	}
	return v, nil
}
