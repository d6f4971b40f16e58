package status

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bulkaction/bulkaction/pkg/api"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Submitted reports whether the SUBMIT stream holds messages for g: jobs
// or controls published and perhaps not stored in Redis yet. It is false
// when js is nil.
func Submitted(ctx context.Context, js jetstream.JetStream, names contracts.Names, g contracts.GroupRef) (bool, error) {
	if js == nil {
		return false, nil
	}
	st, err := js.Stream(ctx, names.StreamSubmit())
	if err != nil {
		return false, err
	}
	subject := names.Submit(g)
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return false, err
	}
	return info.State.Subjects[subject] > 0, nil
}

// Find reads g from Redis. When Redis does not know it, pending says
// whether the SUBMIT stream holds messages for it (js may be nil: then
// false; true when SUBMIT cannot be read), so that a group submitted a
// moment ago and not stored yet is not taken for a typo.
func Find(ctx context.Context, q *redisq.Queue, js jetstream.JetStream, names contracts.Names, g contracts.GroupRef) (info *redisq.GroupInfo, pending bool, err error) {
	info, ok, err := q.Group(ctx, g)
	if err != nil {
		return nil, false, err
	}
	if ok {
		return info, false, nil
	}
	pending, err = Submitted(ctx, js, names, g)
	if err != nil {
		// SUBMIT could not be read: take the group as on its way rather
		// than refuse what may be a group just submitted.
		return nil, true, nil
	}
	return nil, pending, nil
}

// CallbackOf reads the delivery state of g's completion callback, as the
// group's view shows it: nil for a group without a callback URL; state
// waiting until the group ends.
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
	v := &api.Callback{
		URL: c.URL, State: c.State, WebhookID: c.ID, Attempts: c.Attempts, LastAttemptAt: timePtr(c.LastAttemptAt),
		StatusCode: c.StatusCode, LastError: c.LastError, DeliveredAt: timePtr(c.DeliveredAt), FailedAt: timePtr(c.FailedAt),
	}
	if c.State == redisq.CallbackPending {
		v.NextAttemptAt = timePtr(c.NextAt)
	}
	return v, nil
}
