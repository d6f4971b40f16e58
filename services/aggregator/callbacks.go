package aggregator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/internal/events"
	"github.com/bulkaction/bulkaction/internal/loop"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/webhook"
)

// Completion callbacks (docs/ARCHITECTURE.md, completion callbacks): the
// aggregators deliver them. The script that ends a group (in an aggregator,
// or a cancel) writes its pending delivery into Redis; every aggregator
// leases due deliveries, POSTs each group's final event signed with its
// tenant's secret, and settles the lease: delivered, retried later with
// exponential backoff, or failed once the retry budget is spent.

// Defaults of the callback settings of [Config].
const (
	// DefaultCallbackRetryFor is how long a delivery is retried.
	DefaultCallbackRetryFor = 24 * time.Hour
	// DefaultCallbackFirstRetry is the delay before the second attempt;
	// each later delay doubles, up to [CallbackMaxRetryDelay].
	DefaultCallbackFirstRetry = 5 * time.Second
	// DefaultCallbackTimeout bounds one attempt (connecting, sending and
	// reading the response).
	DefaultCallbackTimeout = 10 * time.Second
	// CallbackMaxRetryDelay caps the delay between two attempts.
	CallbackMaxRetryDelay = time.Hour
)

const (
	// callbackEvery is how often an aggregator looks for due callbacks.
	callbackEvery = 500 * time.Millisecond
	// callbackBatch is the most deliveries leased at once.
	callbackBatch = 32
	// callbackParallel is the most deliveries sent at once.
	callbackParallel = 8
	// callbackSettleWait: the final event of a CANCELLED group waits for its
	// running jobs' results (every job counted) at most this long after the
	// group ended; then it is sent with the counts it has.
	callbackSettleWait = 10 * time.Minute
	// callbackSettleRecheck is how often an unsettled cancelled group is
	// looked at again.
	callbackSettleRecheck = 2 * time.Second
	// callbackBodyRead bounds how much of a response is read.
	callbackBodyRead = 4 << 10
	// callbackErrorText bounds the error text kept with a delivery.
	callbackErrorText = 300
)

// callbackRetryDelay is the delay after the n-th failed attempt (n >= 1):
// first, doubling, at most CallbackMaxRetryDelay.
func callbackRetryDelay(first time.Duration, n int64) time.Duration {
	d := first
	for i := int64(1); i < n && d < CallbackMaxRetryDelay; i++ {
		d *= 2
	}
	return min(d, CallbackMaxRetryDelay)
}

// callbacks is the deliverer of one aggregator.
type callbacks struct {
	a        *Aggregator
	outbound *builtin.Outbound
	client   *http.Client
	lease    time.Duration
}

func newCallbacks(a *Aggregator) (*callbacks, error) {
	out, err := builtin.NewOutbound(builtin.Options{AllowedHosts: a.cfg.CallbackAllowedHosts, AllowAnyHost: a.cfg.CallbackAllowAnyHost})
	if err != nil {
		return nil, fmt.Errorf("aggregator: callback hosts: %w", err)
	}
	return &callbacks{
		a: a, outbound: out, client: out.Client(a.cfg.CallbackTimeout),
		// a lease outlasts an attempt by far, so two deliverers never send
		// at once unless one stalls for that long
		lease: 3*a.cfg.CallbackTimeout + 5*time.Second,
	}, nil
}

// run delivers due callbacks until ctx ends; an attempt in progress then
// is finished.
func (c *callbacks) run(ctx context.Context) {
	loop.Every(ctx, callbackEvery, func(ctx context.Context) {
		for ctx.Err() == nil && c.round(ctx) == callbackBatch {
		}
	})
}

// round leases and delivers one batch; it returns how many it leased.
func (c *callbacks) round(ctx context.Context) int {
	base := context.WithoutCancel(ctx)
	claimed, err := c.a.d.Queue.ClaimCallbacks(ctx, callbackBatch, c.lease)
	if err != nil {
		if ctx.Err() == nil {
			c.a.warn("leasing due callbacks failed", "err", err)
		}
		if len(claimed) == 0 {
			return 0
		}
		// with shards, the shards that answered leased these: deliver
		// them rather than leave them to their lease's end
	}
	if n, err := c.a.d.Queue.PendingCallbacks(ctx); err == nil {
		c.a.d.Metrics.CallbacksPending.Set(float64(n))
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, callbackParallel)
	for i := range claimed {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			sctx, cancel := context.WithTimeout(base, c.lease)
			defer cancel()
			c.deliver(sctx, &claimed[i])
		})
	}
	wg.Wait()
	return len(claimed)
}

// deliver makes one attempt of a leased delivery and settles it.
func (c *callbacks) deliver(ctx context.Context, cb *redisq.ClaimedCallback) {
	q := c.a.d.Queue
	log := c.a.log.With("tenant", cb.Group.Tenant, "group", cb.Group.ID, "webhookId", cb.ID)
	body := cb.Body
	if body == nil {
		if !cb.MetaGone && cb.Counts.State == contracts.StateCancelled &&
			cb.Counts.Succeeded+cb.Counts.Failed+cb.Counts.Cancelled < cb.Counts.Jobs &&
			cb.Now.Sub(cb.EndedAt) < callbackSettleWait {
			// running jobs of a cancelled group still count: the final event follows them
			if err := q.SettleCallback(ctx, cb, redisq.CallbackWait, 0, "", cb.Now.Add(callbackSettleRecheck)); err != nil {
				c.settleFailed(log, err)
			}
			return
		}
		if cb.MetaGone {
			c.finish(ctx, log, cb, 0, errors.New("the group expired before its final event could be built"), true)
			return
		}
		ev := events.Event(cb.Group, cb.Counts, cb.EndedAt)
		b, err := json.Marshal(ev)
		if err != nil {
			c.finish(ctx, log, cb, 0, err, true)
			return
		}
		if body, err = q.FreezeCallbackBody(ctx, cb, b); err != nil {
			c.settleFailed(log, err)
			return
		}
	}
	status, err := c.post(ctx, cb, body)
	c.finish(ctx, log, cb, status, err, false)
}

// post sends one attempt; a nil error means a 2xx answer.
func (c *callbacks) post(ctx context.Context, cb *redisq.ClaimedCallback, body []byte) (int, error) {
	u, err := url.Parse(cb.URL)
	if err != nil {
		return 0, fmt.Errorf("callback URL: %w", err)
	}
	if err := c.outbound.CheckURL(u); err != nil {
		return 0, err
	}
	secrets, err := c.a.d.Queue.CallbackSecretsOf(ctx, cb.Group.Tenant)
	if err != nil {
		return 0, err
	}
	now, err := c.a.d.Queue.Now(ctx)
	if err != nil {
		return 0, err
	}
	signing := secrets.Signing(now)
	if len(signing) == 0 {
		return 0, fmt.Errorf("tenant %s has no callback secret (create one: POST /v1/callback-secret)", cb.Group.Tenant)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "bulkaction-callbacks")
	if err := webhook.SetHeaders(req.Header, signing, cb.ID, time.Now(), body); err != nil {
		return 0, errors.New("the tenant's callback secret is invalid: set a new one")
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, callbackBodyRead))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, callbackBodyRead)) // lets the connection be reused
	if resp.StatusCode/100 == 2 {
		return resp.StatusCode, nil
	}
	msg := "HTTP " + strconv.Itoa(resp.StatusCode)
	if t := bytes.TrimSpace(head); len(t) > 0 {
		msg += ": " + string(t)
	}
	return resp.StatusCode, errors.New(msg)
}

// finish settles an attempt: delivered, retried after the backoff while the
// retry budget lasts, else failed (at once when final).
func (c *callbacks) finish(ctx context.Context, log interface {
	Info(string, ...any)
	Warn(string, ...any)
}, cb *redisq.ClaimedCallback, status int, err error, final bool) {
	m := c.a.d.Metrics.Callbacks
	q := c.a.d.Queue
	if err == nil {
		if serr := q.SettleCallback(ctx, cb, redisq.CallbackOK, status, "", time.Time{}); serr != nil {
			c.settleFailed(log, serr)
			return
		}
		m.WithLabelValues(telemetry.CallbackDelivered).Inc()
		log.Info("callback delivered", "status", status, "attempt", cb.Attempts+1)
		return
	}
	text := err.Error()
	if len(text) > callbackErrorText {
		text = text[:callbackErrorText] + "…"
	}
	now, nerr := q.Now(ctx)
	if nerr != nil {
		now = time.Now()
	}
	next := now.Add(callbackRetryDelay(c.a.cfg.CallbackFirstRetry, cb.Attempts+1))
	if !final && next.Before(cb.Since.Add(c.a.cfg.CallbackRetryFor)) {
		if serr := q.SettleCallback(ctx, cb, redisq.CallbackRetry, status, text, next); serr != nil {
			c.settleFailed(log, serr)
			return
		}
		m.WithLabelValues(telemetry.CallbackRetry).Inc()
		log.Info("callback attempt failed; retrying", "attempt", cb.Attempts+1, "next", next, "err", text)
		return
	}
	if serr := q.SettleCallback(ctx, cb, redisq.CallbackGiveUp, status, text, time.Time{}); serr != nil {
		c.settleFailed(log, serr)
		return
	}
	m.WithLabelValues(telemetry.CallbackFailed).Inc()
	log.Warn("callback failed: no more retries (retry it by hand)", "attempts", cb.Attempts+1, "err", text)
}

func (c *callbacks) settleFailed(log interface{ Warn(string, ...any) }, err error) {
	if errors.Is(err, redisq.ErrCallbackLeaseLost) {
		log.Warn("callback lease ran out during the attempt; another deliverer has it")
		return
	}
	log.Warn("settling a callback attempt failed; it is attempted again when its lease runs out", "err", err)
}
