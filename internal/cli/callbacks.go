package cli

import (
	"context"
	"fmt"
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

// CallbackText describes a callback's delivery on one line, as `bulkaction
// status` shows it.
func CallbackText(c *api.Callback) string {
	ts := func(t *time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch {
	case c.State == api.CallbackWaiting:
		return fmt.Sprintf("%s, when the group ends", c.URL)
	case c.State == api.CallbackDelivered && c.DeliveredAt != nil:
		return fmt.Sprintf("delivered to %s at %s (HTTP %d, attempt %d)", c.URL, ts(c.DeliveredAt), c.StatusCode, c.Attempts)
	case c.State == api.CallbackFailed:
		return fmt.Sprintf("FAILED to %s after %d attempts: %s (retry: bulkaction callback retry)", c.URL, c.Attempts, c.LastError)
	}
	s := fmt.Sprintf("pending to %s, %d attempts so far", c.URL, c.Attempts)
	if c.NextAttemptAt != nil {
		s += ", next at " + ts(c.NextAttemptAt)
	}
	if c.LastError != "" {
		s += "; last error: " + c.LastError
	}
	return s
}
