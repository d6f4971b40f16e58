package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/internal/loop"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// Defaults of the [Limits] fields.
const (
	// DefaultMaxBodyBytes bounds a jobs request's body: a million jobs of
	// about 1 KiB.
	DefaultMaxBodyBytes = 1 << 30
	// DefaultMaxJobsPerRequest bounds the jobs of one request.
	DefaultMaxJobsPerRequest = 1_000_000
	// DefaultReadHeaderTimeout bounds the reading of a request's headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultBodyIdleTimeout is how long a request body may send nothing.
	DefaultBodyIdleTimeout = 30 * time.Second
	// DefaultSSEWriteTimeout is how long one write to an event stream may
	// take before its client is taken as gone.
	DefaultSSEWriteTimeout = 30 * time.Second
	// LimitWindow is how much of a tenant's request or job rate may be
	// spent at once: a tenant at rest may send this many seconds' worth.
	LimitWindow = 10 * time.Second
	// slotLease is how long a slot of a tenant's concurrent requests or
	// streams lasts unless renewed (every third of it while it is held), so
	// the slots of a gateway that died come back.
	slotLease = 30 * time.Second
	// maxSmallBody bounds the body of every request but a jobs request.
	maxSmallBody = 1 << 20
)

// Limits bound what one request, and one tenant, may take of the gateway
// (docs/api.md#limits). The tenant limits are shared by every gateway
// replica through Redis, apply to tenant keys (not admin keys) and may be
// set per tenant ([redisq.Queue.SetTenantDoorLimit]).
type Limits struct {
	// MaxBodyBytes bounds a jobs request's body (0 = DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// MaxJobsPerRequest bounds the jobs of one request (0 =
	// DefaultMaxJobsPerRequest).
	MaxJobsPerRequest int64
	// ReadHeaderTimeout bounds the reading of a request's headers (0 =
	// DefaultReadHeaderTimeout).
	ReadHeaderTimeout time.Duration
	// BodyIdleTimeout cuts off a request body that sends nothing this long
	// (0 = DefaultBodyIdleTimeout).
	BodyIdleTimeout time.Duration
	// SSEWriteTimeout drops an event stream whose client takes longer to
	// take a write (0 = DefaultSSEWriteTimeout).
	SSEWriteTimeout time.Duration
	// TenantRequestRate, TenantJobRate and TenantByteRate are a tenant's
	// requests, submitted jobs and bytes of jobs requests per second, of
	// which LimitWindow's worth may be spent at once;
	// TenantConcurrentRequests and TenantSSEStreams its requests running
	// and event streams open at once. 0 = no limit.
	TenantRequestRate, TenantJobRate, TenantByteRate int64
	TenantConcurrentRequests, TenantSSEStreams       int64
	// TenantSubmitBytes is the most bytes of a tenant's submissions SUBMIT
	// may hold before the fetchers apply them: a jobs request that would
	// pass it is refused whole (submitroom.go). 0 = no limit.
	TenantSubmitBytes int64
}

func (l *Limits) door() redisq.DoorDefaults {
	return redisq.DoorDefaults{RequestRate: l.TenantRequestRate, JobRate: l.TenantJobRate, ByteRate: l.TenantByteRate,
		ConcurrentRequests: l.TenantConcurrentRequests, SSEStreams: l.TenantSSEStreams,
		Window: LimitWindow, Lease: slotLease}
}

// sseOps are the operations that hold an event stream open.
var sseOps = map[string]bool{"groupEvents": true, "overviewEvents": true}

// door bounds a request of an authenticated route: its body (size and
// idle time), its event stream's writes, and, for a tenant key, the
// tenant's rates and slots. It runs after auth and before the
// Idempotency-Key, so a refused request neither takes nor stores a key.
func (g *Gateway) door(rt route, next http.HandlerFunc) http.HandlerFunc {
	lim := &g.cfg.Limits
	slot := redisq.DoorConcurrentRequests
	sse := sseOps[rt.op]
	if sse {
		slot = redisq.DoorSSEStreams
	}
	maxBody, setting := int64(maxSmallBody), ""
	if rt.op == "submitJobs" {
		maxBody, setting = lim.MaxBodyBytes, "BULKACTION_GATEWAY_MAX_BODY_BYTES"
	}
	return func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > maxBody {
			writeBodyLimit(w, r, &BodyLimitError{Limit: maxBody, Setting: setting})
			return
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &boundedBody{r: r.Body, left: maxBody, limit: maxBody, setting: setting,
				rc: http.NewResponseController(w), idle: lim.BodyIdleTimeout}
		}
		if sse {
			dw := &deadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w), timeout: lim.SSEWriteTimeout}
			defer dw.done()
			w = dw
		}
		p := principal(r)
		if p.Admin {
			next(w, r)
			return
		}
		ctx := r.Context()
		c := clock(r)
		jobs := rt.op == "submitJobs"
		ask := doorAsk{tenant: p.Tenant, jobs: jobs, slot: slot}
		if v, refused := g.penalties.check(ask, time.Now()); refused {
			c.mark("door")
			if g.penalties.hold(ctx, p.Tenant) {
				c.mark("hold")
				v.RetryAfter = max(v.RetryAfter-refusalHold, 0)
			} else {
				w.Header().Set("Connection", "close") // too many held: the next request pays a new connection
			}
			if v.Requests > 0 {
				w.Header().Set("RateLimit-Policy", ratePolicy(redisq.DoorRequestRate, v.Requests))
			}
			g.overLimit(w, r, p.Tenant, v)
			return
		}
		id := randomID()
		v, err := g.q.DoorEnter(ctx, lim.door(), redisq.DoorEntry{Tenant: p.Tenant, Slot: slot, SlotID: id, Jobs: jobs})
		c.mark("door")
		if err != nil {
			g.penalties.forget(ask)
			g.unavailable(w, r, err)
			return
		}
		g.penalties.note(ask, v, time.Now())
		if v.Requests > 0 {
			w.Header().Set("RateLimit-Policy", ratePolicy(redisq.DoorRequestRate, v.Requests))
			w.Header().Set("RateLimit", rateState(redisq.DoorRequestRate, v.RequestsLeft, v.RequestsReset))
		}
		if !v.Allowed {
			g.overLimit(w, r, p.Tenant, v)
			return
		}
		if v.Held {
			g.slots.hold(p.Tenant, slot, id)
			defer func() {
				if !sse {
					sendNow(w) // the answer does not wait for the slot's return
				}
				g.slots.drop(p.Tenant, slot, id)
				if err := g.q.DoorLeave(context.WithoutCancel(ctx), lim.door(), p.Tenant, slot, id); err != nil {
					g.log.Warn("gateway slot not given back; its lease frees it", "tenant", p.Tenant, "err", err)
				}
				g.penalties.freed(p.Tenant, slot)
			}()
		}
		next(w, r)
	}
}

// policyName is a limit's policy name in the RateLimit headers.
func policyName(l redisq.DoorLimit) string {
	switch l {
	case redisq.DoorJobRate:
		return "jobs"
	case redisq.DoorByteRate:
		return "bytes"
	case redisq.DoorConcurrentRequests:
		return "concurrent-requests"
	case redisq.DoorSSEStreams:
		return "event-streams"
	}
	return "requests"
}

// ratePolicy is an item of RateLimit-Policy (draft-ietf-httpapi-ratelimit-
// headers): the policy's quota q per window w (seconds) of the rates; the
// slots have no window and count concurrent requests.
func ratePolicy(l redisq.DoorLimit, limit int64) string {
	name := `"` + policyName(l) + `"`
	switch l {
	case redisq.DoorRequestRate:
		return name + ";q=" + strconv.FormatInt(limit, 10) + ";w=" + strconv.Itoa(int(LimitWindow/time.Second))
	case redisq.DoorJobRate:
		return name + ";q=" + strconv.FormatInt(limit*int64(LimitWindow/time.Second), 10) + ";qu=\"jobs\";w=" + strconv.Itoa(int(LimitWindow/time.Second))
	case redisq.DoorByteRate:
		return name + ";q=" + strconv.FormatInt(limit*int64(LimitWindow/time.Second), 10) + ";qu=\"content-bytes\";w=" + strconv.Itoa(int(LimitWindow/time.Second))
	}
	return name + ";q=" + strconv.FormatInt(limit, 10) + `;qu="concurrent-requests"`
}

// rateState is an item of RateLimit: r what is left, t the seconds until
// the quota is whole again.
func rateState(l redisq.DoorLimit, left int64, reset time.Duration) string {
	return `"` + policyName(l) + `";r=` + strconv.FormatInt(left, 10) + ";t=" + strconv.FormatInt(ceilSeconds(reset), 10)
}

func ceilSeconds(d time.Duration) int64 {
	return int64(math.Ceil(d.Seconds()))
}

// overLimit answers 429 for a request a tenant limit refused.
func (g *Gateway) overLimit(w http.ResponseWriter, r *http.Request, tenant string, v redisq.DoorVerdict) {
	retry := max(1, ceilSeconds(v.RetryAfter))
	h := w.Header()
	h.Set("Retry-After", strconv.FormatInt(retry, 10))
	if v.Refused != redisq.DoorRequestRate {
		pol := ratePolicy(v.Refused, v.Limit)
		if p := h.Get("RateLimit-Policy"); p != "" {
			pol = p + ", " + pol
		}
		h.Set("RateLimit-Policy", pol)
	}
	h.Set("RateLimit", rateState(v.Refused, 0, time.Duration(retry)*time.Second))
	writeProblem(w, r, http.StatusTooManyRequests, slugRateLimited,
		fmt.Sprintf("tenant %s is over its limit %s of %d (%s); retry after %d s", tenant, v.Refused, v.Limit, v.Refused.Meaning(), retry),
		FieldError{Field: string(v.Refused), Detail: "over the limit",
			Limit: fmt.Sprintf("%s is %d: the most %s", v.Refused, v.Limit, v.Refused.Meaning())})
}

// paceEvery is how many jobs, and paceBytes how many bytes of its body, a
// request reads between two charges of its tenant's job and byte rates.
const (
	paceEvery = 1000
	paceBytes = 4 << 20
)

// jobPacer spends a tenant's job and byte rates on the jobs a request
// reads, and the bytes of its body, as it reads them, accepted or not:
// once the tenant's burst is spent, reading waits for the rates, so however
// many requests a tenant sends at once, the gateway parses its jobs at its
// job rate and its bytes at its byte rate, no faster (admin keys are not
// limited). A failure to charge only logs: the door let the request in.
type jobPacer struct {
	g       *Gateway
	r       *http.Request
	tenant  string
	body    *boundedBody // what the request's body has read, for the bytes
	pending int64        // jobs read since the last charge
	charged int64        // bytes charged so far
	turn    bool         // holds a turn of the tenant's (readTurns)
}

func (g *Gateway) newJobPacer(r *http.Request, tenant string) *jobPacer {
	if principal(r).Admin {
		return nil
	}
	body, _ := r.Body.(*boundedBody)
	return &jobPacer{g: g, r: r, tenant: tenant, body: body}
}

// unread is the bytes of the body read and not yet charged.
func (p *jobPacer) unread() int64 {
	if p.body == nil {
		return 0
	}
	return p.body.limit - p.body.left - p.charged
}

// read counts one job read; every paceEvery jobs or paceBytes bytes it
// charges them and waits for the tenant's rates if its burst is spent.
// The request reads holding one of its tenant's turns (readTurns), given
// back at every charge and taken again after it. It returns false once the
// request is gone.
func (p *jobPacer) read() bool {
	if p == nil {
		return true
	}
	if !p.turn && !p.takeTurn() {
		return false
	}
	p.pending++
	if p.pending < paceEvery && p.unread() < paceBytes {
		return true
	}
	p.endRead()
	if wait := p.charge(); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-p.r.Context().Done():
			return false
		}
	}
	return p.takeTurn()
}

func (p *jobPacer) takeTurn() bool {
	p.turn = p.g.turns.take(p.r.Context(), p.tenant)
	return p.turn
}

// endRead gives back the request's turn, if it holds one: the request is
// not reading now (it charges its tenant's rates, or its body ended).
func (p *jobPacer) endRead() {
	if p != nil && p.turn {
		p.turn = false
		p.g.turns.give(p.tenant)
	}
}

// charge spends the jobs and bytes read since the last charge and returns
// how long to wait before reading more.
func (p *jobPacer) charge() time.Duration {
	if p == nil {
		return 0
	}
	n, size := p.pending, p.unread()
	if n == 0 && size <= 0 {
		return 0
	}
	p.pending, p.charged = 0, p.charged+size
	wait, err := p.g.q.DoorCharge(context.WithoutCancel(p.r.Context()), p.g.cfg.Limits.door(), p.tenant, n, size)
	if err != nil {
		p.g.log.Warn("job rate not charged", "tenant", p.tenant, "err", err)
	}
	return wait
}

// done charges what is left; the request does not wait for it (its answer
// is sent first).
func (p *jobPacer) done(w http.ResponseWriter) {
	p.endRead()
	if p != nil && (p.pending > 0 || p.unread() > 0) {
		sendNow(w)
		_ = p.charge()
	}
}

// tooManyJobs answers 413 once a request holds more jobs than
// MaxJobsPerRequest allows, at the first job past it.
func (g *Gateway) tooManyJobs(w http.ResponseWriter, r *http.Request, pos position) bool {
	max := g.cfg.Limits.MaxJobsPerRequest
	if int64(pos.index) < max {
		return false
	}
	writeProblem(w, r, http.StatusRequestEntityTooLarge, slugTooLarge,
		fmt.Sprintf("%s: more than %d jobs in one request; nothing was submitted: split the jobs over several requests", pos, max),
		FieldError{Line: pos.line, Index: pos.indexRef(), Detail: "more than " + strconv.FormatInt(max, 10) + " jobs",
			Limit: "at most " + strconv.FormatInt(max, 10) + " jobs per request (BULKACTION_GATEWAY_MAX_JOBS_PER_REQUEST)"})
	return true
}

// BodyLimitError is a request body longer than its limit.
type BodyLimitError struct {
	Limit   int64
	Setting string // the setting of the limit, "" for a fixed one
}

func (e *BodyLimitError) Error() string {
	return "the body is longer than " + strconv.FormatInt(e.Limit, 10) + " bytes"
}

// bodyIdleError is a request body that sent nothing for the idle timeout.
type bodyIdleError struct{ idle time.Duration }

func (e *bodyIdleError) Error() string {
	return "the body sent nothing for " + e.idle.String()
}

// bodyRefused answers a body a limit cut off: 413 past its size, 408 when
// it stalled. It returns false for any other error.
func bodyRefused(w http.ResponseWriter, r *http.Request, err error) bool {
	var bl *BodyLimitError
	if errors.As(err, &bl) {
		writeBodyLimit(w, r, bl)
		return true
	}
	var bi *bodyIdleError
	if errors.As(err, &bi) {
		w.Header().Set("Connection", "close")
		writeProblem(w, r, http.StatusRequestTimeout, slugBodyTimeout,
			bi.Error()+"; nothing was submitted",
			FieldError{Field: "body", Detail: bi.Error(),
				Limit: "a body may pause at most " + bi.idle.String() + " (BULKACTION_GATEWAY_BODY_IDLE_TIMEOUT)"})
		return true
	}
	return false
}

func writeBodyLimit(w http.ResponseWriter, r *http.Request, e *BodyLimitError) {
	limit := "at most " + strconv.FormatInt(e.Limit, 10) + " bytes"
	if e.Setting != "" {
		limit += " (" + e.Setting + ")"
	}
	w.Header().Set("Connection", "close")
	writeProblem(w, r, http.StatusRequestEntityTooLarge, slugTooLarge, e.Error()+"; nothing was submitted",
		FieldError{Field: "body", Detail: e.Error(), Limit: limit})
}

// boundedBody is a request body that fails past its limit and when no byte
// arrives for the idle timeout: the connection's read deadline is pushed
// back before every read, and lifted once the body ends.
type boundedBody struct {
	r           io.ReadCloser
	left, limit int64
	setting     string
	rc          *http.ResponseController
	idle        time.Duration
	armed       bool
	err         error
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if b.idle > 0 && b.rc.SetReadDeadline(time.Now().Add(b.idle)) == nil {
		b.armed = true
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1]
	}
	n, err := b.r.Read(p)
	if int64(n) > b.left {
		n, b.left = int(b.left), 0
		b.err = &BodyLimitError{Limit: b.limit, Setting: b.setting}
		return n, b.err
	}
	b.left -= int64(n)
	switch {
	case err == nil:
	case errors.Is(err, io.EOF):
		b.disarm()
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.err = &bodyIdleError{idle: b.idle}
		return n, b.err
	}
	return n, err
}

// disarm lifts the read deadline, so the server's own reads of the
// connection (to notice a client that leaves) are not cut off.
func (b *boundedBody) disarm() {
	if b.armed {
		b.armed = false
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}

func (b *boundedBody) Close() error { return b.r.Close() }

// deadlineWriter gives every write of an event stream a deadline, so a
// client that stops reading is dropped instead of holding its handler.
type deadlineWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	failed  bool
	armed   bool
}

func (d *deadlineWriter) arm() {
	if d.timeout > 0 && d.rc.SetWriteDeadline(time.Now().Add(d.timeout)) == nil {
		d.armed = true
	}
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	d.arm()
	n, err := d.ResponseWriter.Write(p)
	if err != nil {
		d.failed = true
	}
	return n, err
}

func (d *deadlineWriter) Flush() { _ = d.FlushError() }

// FlushError flushes within the deadline (http.ResponseController uses it).
func (d *deadlineWriter) FlushError() error {
	d.arm()
	err := http.NewResponseController(d.ResponseWriter).Flush()
	if err != nil {
		d.failed = true
	}
	return err
}

// Unwrap gives http.ResponseController the underlying writer.
func (d *deadlineWriter) Unwrap() http.ResponseWriter { return d.ResponseWriter }

// done lifts the deadline of a stream that ended well, for the next
// request on the connection; a connection whose write timed out is closed.
func (d *deadlineWriter) done() {
	if d.armed && !d.failed {
		_ = d.rc.SetWriteDeadline(time.Time{})
	}
}

// slotSet is the tenant slots this gateway holds, renewed every third of
// their lease while held.
type slotSet struct {
	mu   sync.Mutex
	held map[slotKey]map[string]struct{}
}

type slotKey struct {
	tenant string
	slot   redisq.DoorLimit
}

func (s *slotSet) hold(tenant string, slot redisq.DoorLimit, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held = map[slotKey]map[string]struct{}{}
	}
	k := slotKey{tenant, slot}
	if s.held[k] == nil {
		s.held[k] = map[string]struct{}{}
	}
	s.held[k][id] = struct{}{}
}

func (s *slotSet) drop(tenant string, slot redisq.DoorLimit, id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := slotKey{tenant, slot}
	delete(s.held[k], id)
	if len(s.held[k]) == 0 {
		delete(s.held, k)
	}
}

// renewSlots keeps the leases of the slots held until ctx ends.
func (g *Gateway) renewSlots(ctx context.Context) {
	loop.Every(ctx, slotLease/3, func(ctx context.Context) {
		g.slots.mu.Lock()
		batch := map[slotKey][]string{}
		for k, ids := range g.slots.held {
			for id := range ids {
				batch[k] = append(batch[k], id)
			}
		}
		g.slots.mu.Unlock()
		for k, ids := range batch {
			for len(ids) > 0 {
				n := min(len(ids), 500)
				if err := g.q.DoorRenew(ctx, g.cfg.Limits.door(), k.tenant, k.slot, ids[:n]); err != nil && ctx.Err() == nil {
					g.log.Warn("gateway slots not renewed", "tenant", k.tenant, "err", err)
				}
				ids = ids[n:]
			}
		}
	})
}
