package redisq

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// Completion callbacks (docs/ARCHITECTURE.md, completion callbacks). A group
// created with a callback URL (Job.CallbackURL) keeps it in its meta; the
// script that ends the group (record.lua, cancel.lua, through lib.lua's
// group_cleanup) writes the pending delivery in the same call: the hash
// [Keys.GroupCallback] and an entry of [Keys.CallbacksDue] due at once. A
// deliverer leases due entries ([Queue.ClaimCallbacks]), sends, and settles
// each with its lease token ([Queue.SettleCallback]); a dead deliverer's
// lease runs out and the entry is due again.

var (
	callbackClaimScript  = loadScript("callback_claim")
	callbackSettleScript = loadScript("callback_settle")
	callbackRetryScript  = loadScript("callback_retry")
)

// Callback states.
const (
	// CallbackPending: the delivery waits for its next attempt (or is being
	// attempted).
	CallbackPending = "pending"
	// CallbackDelivered: the receiver answered 2xx.
	CallbackDelivered = "delivered"
	// CallbackFailed: every attempt failed and the retry budget is spent; a
	// retry by hand ([Queue.RetryCallback]) makes it pending again.
	CallbackFailed = "failed"
)

// Callback is the delivery state of a group's completion callback.
type Callback struct {
	Group contracts.GroupRef
	// URL is where the final event is POSTed.
	URL string
	// State is [CallbackPending], [CallbackDelivered] or [CallbackFailed].
	State string
	// ID is the webhook id, the same on every attempt.
	ID string
	// EndedAt is when the group ended.
	EndedAt time.Time
	// Attempts counts the attempts made (a deliverer that died during one
	// does not count it).
	Attempts int64
	// NextAt is when the next attempt is due (pending only; zero otherwise).
	NextAt time.Time
	// LastAttemptAt is when the last attempt ended; zero before the first.
	LastAttemptAt time.Time
	// StatusCode is the HTTP status of the last attempt's response (0 = no
	// response).
	StatusCode int
	// LastError says why the last attempt failed ("" after a delivery).
	LastError string
	// DeliveredAt is when it was delivered (delivered only).
	DeliveredAt time.Time
	// FailedAt is when the retry budget ran out (failed only).
	FailedAt time.Time
}

// ClaimedCallback is a callback delivery leased by [Queue.ClaimCallbacks].
type ClaimedCallback struct {
	Group contracts.GroupRef
	URL   string
	// ID is the webhook id.
	ID string
	// Attempts counts the attempts made before this one.
	Attempts int64
	EndedAt  time.Time
	// Since is the start of the retry budget: EndedAt, or the time of a
	// retry by hand.
	Since time.Time
	// Body is the body frozen by an earlier attempt (nil = none yet:
	// [Queue.FreezeCallbackBody] freezes it).
	Body []byte
	// MetaGone reports that the group's meta has expired.
	MetaGone bool
	// Counts are the group's state and counts now.
	Counts GroupCounts
	// Now is the scripts' clock at the claim.
	Now time.Time
	// Token is the lease's token.
	Token string
}

// ClaimCallbacks leases at most n due callback deliveries for lease. With
// several shards it leases from one shard after another, starting at a
// random one, until it has n: never more than n in all, so that a batch
// still fits the lease. A shard that fails is passed over: the error
// comes with the deliveries leased from the others, which are the
// caller's to settle.
func (q *Queue) ClaimCallbacks(ctx context.Context, n int, lease time.Duration) ([]ClaimedCallback, error) {
	if q.sharded() {
		var out []ClaimedCallback
		var errs []error
		start := rand.IntN(len(q.shards))
		for k := range q.shards {
			if len(out) >= n {
				break
			}
			got, err := q.shards[(start+k)%len(q.shards)].ClaimCallbacks(ctx, n-len(out), lease)
			out = append(out, got...)
			errs = append(errs, err)
		}
		return out, errors.Join(errs...)
	}
	var b [12]byte
	_, _ = crand.Read(b[:])
	token := hex.EncodeToString(b[:])
	v, err := q.run(ctx, "callback_claim", callbackClaimScript, []string{q.keys.CallbacksDue()},
		q.keys.Prefix(), q.now(), n, ms(lease), token)
	if err != nil {
		return nil, err
	}
	l := toList(v)
	const width = 9 + groupReplyWidth
	if len(l)%width != 0 {
		return nil, fmt.Errorf("redisq: callback_claim script: %d reply values", len(l))
	}
	out := make([]ClaimedCallback, 0, len(l)/width)
	for i := 0; i < len(l); i += width {
		gk := toStr(l[i])
		tenant, gid, ok := strings.Cut(gk, ":")
		if !ok {
			return nil, fmt.Errorf("redisq: callback_claim script: group key %q", gk)
		}
		c := ClaimedCallback{
			Group: contracts.GroupRef{Tenant: tenant, ID: gid}, URL: toStr(l[i+1]), ID: toStr(l[i+2]),
			Attempts: toInt(l[i+3]), EndedAt: time.UnixMilli(toInt(l[i+4])), Since: time.UnixMilli(toInt(l[i+5])),
			MetaGone: toStr(l[i+7]) == "", Now: time.UnixMilli(toInt(l[i+8])),
			Counts: parseCounts(l[i+9 : i+width]), Token: token,
		}
		if body := toStr(l[i+6]); body != "" {
			c.Body = []byte(body)
		}
		out = append(out, c)
	}
	return out, nil
}

// ErrCallbackLeaseLost is returned when a callback's lease ran out and went
// to another deliverer (or the delivery was settled): nothing changed.
var ErrCallbackLeaseLost = errors.New("redisq: callback lease lost")

// FreezeCallbackBody stores body as the body of every attempt of c's
// delivery, unless one is stored already; it returns the stored body.
func (q *Queue) FreezeCallbackBody(ctx context.Context, c *ClaimedCallback, body []byte) ([]byte, error) {
	if q.sharded() {
		return q.For(c.Group.Tenant).FreezeCallbackBody(ctx, c, body)
	}
	v, err := q.settleCallback(ctx, c, "body", string(body), "", "", 0)
	if err != nil {
		return nil, err
	}
	return []byte(toStr(toList(v)[1])), nil
}

// CallbackOutcome is how an attempt of a delivery is settled.
type CallbackOutcome int

// Callback outcomes of [Queue.SettleCallback].
const (
	// CallbackWait: not attempted; due again at the given time.
	CallbackWait CallbackOutcome = iota
	// CallbackOK: the receiver took it (2xx).
	CallbackOK
	// CallbackRetry: the attempt failed; due again at the given time.
	CallbackRetry
	// CallbackGiveUp: the attempt failed and the retry budget is spent.
	CallbackGiveUp
)

// SettleCallback settles the attempt of c with outcome: status is the
// response's HTTP status (0 = none), errText why it failed, next when it is
// due again (CallbackWait, CallbackRetry). An ended delivery (CallbackOK,
// CallbackGiveUp) keeps its state for GroupTTL. It returns
// [ErrCallbackLeaseLost] when c's lease is no longer held.
func (q *Queue) SettleCallback(ctx context.Context, c *ClaimedCallback, outcome CallbackOutcome, status int, errText string, next time.Time) error {
	if q.sharded() {
		return q.For(c.Group.Tenant).SettleCallback(ctx, c, outcome, status, errText, next)
	}
	ops := map[CallbackOutcome]string{CallbackWait: "wait", CallbackOK: "delivered", CallbackRetry: "retry", CallbackGiveUp: "failed"}
	op, ok := ops[outcome]
	if !ok {
		return fmt.Errorf("redisq: settle callback: outcome %d", outcome)
	}
	nextArg := ""
	if outcome == CallbackWait || outcome == CallbackRetry {
		nextArg = strconv.FormatInt(next.UnixMilli(), 10)
	}
	_, err := q.settleCallback(ctx, c, op, strconv.Itoa(status), nextArg, errText, secs(q.cfg.GroupTTL))
	return err
}

func (q *Queue) settleCallback(ctx context.Context, c *ClaimedCallback, op, arg, next, errText string, ttl int64) (any, error) {
	v, err := q.run(ctx, "callback_settle", callbackSettleScript,
		[]string{q.keys.CallbacksDue(), q.keys.GroupCallback(c.Group)},
		groupKey(c.Group), c.Token, op, q.now(), arg, next, errText, ttl)
	if err != nil {
		return nil, err
	}
	if toInt(toList(v)[0]) != 1 {
		return nil, ErrCallbackLeaseLost
	}
	return v, nil
}

// ErrNoCallback is returned by [Queue.RetryCallback] for a group without a
// callback delivery.
var ErrNoCallback = errors.New("redisq: group has no callback delivery")

// RetryCallback makes g's failed callback delivery pending again, due at
// once, with a new retry budget. It returns the state the delivery had: for
// [CallbackPending] or [CallbackDelivered] nothing changed; a group without
// a delivery gives [ErrNoCallback].
func (q *Queue) RetryCallback(ctx context.Context, g contracts.GroupRef) (string, error) {
	if q.sharded() {
		return q.For(g.Tenant).RetryCallback(ctx, g)
	}
	v, err := q.run(ctx, "callback_retry", callbackRetryScript,
		[]string{q.keys.CallbacksDue(), q.keys.GroupCallback(g)}, groupKey(g), q.now())
	if err != nil {
		return "", err
	}
	st := toStr(v)
	if st == "none" {
		return "", ErrNoCallback
	}
	return st, nil
}

// CallbackOf returns g's callback delivery; ok is false when it has none
// (no callback URL, not ended yet, or expired).
func (q *Queue) CallbackOf(ctx context.Context, g contracts.GroupRef) (c *Callback, ok bool, err error) {
	if q.sharded() {
		return q.For(g.Tenant).CallbackOf(ctx, g)
	}
	m, err := q.rdb.HGetAll(ctx, q.keys.GroupCallback(g)).Result()
	if err != nil {
		return nil, false, fmt.Errorf("redisq: callback of %s: %w", g, err)
	}
	if m["state"] == "" {
		return nil, false, nil
	}
	at := func(f string) time.Time {
		n, _ := strconv.ParseInt(m[f], 10, 64)
		if n == 0 {
			return time.Time{}
		}
		return time.UnixMilli(n)
	}
	n := func(f string) int64 { v, _ := strconv.ParseInt(m[f], 10, 64); return v }
	return &Callback{
		Group: g, URL: m["url"], State: m["state"], ID: m["id"], EndedAt: at("endedAt"), Attempts: n("attempts"),
		NextAt: at("nextAt"), LastAttemptAt: at("lastAttemptAt"), StatusCode: int(n("statusCode")),
		LastError: m["lastError"], DeliveredAt: at("deliveredAt"), FailedAt: at("failedAt"),
	}, true, nil
}

// CallbackURLOf returns the callback URL a group was created with ("" =
// none, or no such group).
func (q *Queue) CallbackURLOf(ctx context.Context, g contracts.GroupRef) (string, error) {
	if q.sharded() {
		return q.For(g.Tenant).CallbackURLOf(ctx, g)
	}
	u, err := q.rdb.HGet(ctx, q.keys.GroupMeta(g), "callbackUrl").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("redisq: callback url of %s: %w", g, err)
	}
	return u, nil
}

// PendingCallbacks counts the callback deliveries pending (due or leased),
// of every shard.
func (q *Queue) PendingCallbacks(ctx context.Context) (int64, error) {
	if q.sharded() {
		return sumShards(q, func(s *Queue) (int64, error) { return s.PendingCallbacks(ctx) })
	}
	n, err := q.rdb.ZCard(ctx, q.keys.CallbacksDue()).Result()
	if err != nil {
		return 0, fmt.Errorf("redisq: pending callbacks: %w", err)
	}
	return n, nil
}

// CallbackSecrets are a tenant's callback signing secrets.
type CallbackSecrets struct {
	// Current signs every delivery; "" = the tenant has none.
	Current   string
	CreatedAt time.Time
	// Previous also signs while a rotation's grace period lasts (until
	// PreviousUntil); "" = none.
	Previous      string
	PreviousUntil time.Time
}

// Signing returns the secrets that sign a delivery at now: the current one,
// and the previous one while its grace period lasts.
func (s CallbackSecrets) Signing(now time.Time) []string {
	var out []string
	if s.Current != "" {
		out = append(out, s.Current)
	}
	if s.Previous != "" && now.Before(s.PreviousUntil) {
		out = append(out, s.Previous)
	}
	return out
}

// CallbackSecretsOf returns tenant's callback secrets (zero when it has
// none).
func (q *Queue) CallbackSecretsOf(ctx context.Context, tenant string) (CallbackSecrets, error) {
	if q.sharded() {
		return q.For(tenant).CallbackSecretsOf(ctx, tenant)
	}
	m, err := q.rdb.HGetAll(ctx, q.keys.TenantCallbackSecret(tenant)).Result()
	if err != nil {
		return CallbackSecrets{}, fmt.Errorf("redisq: callback secrets of tenant %s: %w", tenant, err)
	}
	at := func(f string) time.Time {
		n, _ := strconv.ParseInt(m[f], 10, 64)
		if n == 0 {
			return time.Time{}
		}
		return time.UnixMilli(n)
	}
	return CallbackSecrets{Current: m["current"], CreatedAt: at("createdAt"), Previous: m["previous"], PreviousUntil: at("previousUntil")}, nil
}
