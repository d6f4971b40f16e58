package fetcher

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"

	"github.com/bulkaction/bulkaction/internal/consume"
	"github.com/bulkaction/bulkaction/internal/events"
	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/internal/telemetry"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// SpanIngest is the name of the span of one submit message's ingestion, a
// child of the producer's submit span.
const SpanIngest = "bulkaction.ingest"

// Span attributes of an ingest span.
const (
	// AttrKind holds a submission's kind.
	AttrKind = attribute.Key("bulkaction.kind")
	// AttrJobCount holds the number of jobs of a jobs submission.
	AttrJobCount = attribute.Key("bulkaction.job_count")
)

// item is one submit message of a batch.
type item struct {
	*consume.Delivery
	sub   *contracts.Submission // nil when the message is invalid
	trace string                // traceparent stored with the job
	// restore: a replay restores the message's jobs, which were accepted
	// before (§6.7): no tenant quota refuses them (a store call's items
	// all have the same restore).
	restore bool
	// refused counts the jobs of a dead-lettered jobs message that were
	// refused (the others were stored).
	refused int
}

// ingest handles one batch (docs/ARCHITECTURE.md §6.1): decode, store in
// Redis in message order, then settle every message (dead letters first).
func (f *Fetcher) ingest(parent context.Context, msgs []jetstream.Msg) {
	// A batch that was received is finished even during shutdown.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), cycleTimeout)
	defer cancel()
	items := f.decode(ctx, msgs)
	ds := make([]*consume.Delivery, len(items))
	valid := false
	for i, it := range items {
		ds[i] = it.Delivery
		valid = valid || it.sub != nil
	}
	if valid {
		added, err := f.storeWhenCurrent(ctx, items)
		if err != nil {
			for _, it := range items {
				if it.sub != nil {
					it.Decide(consume.Retry(retryDelay, err))
				}
			}
		}
		if added > 0 {
			f.notifyWork()
		}
	}
	f.recordRefusals(ctx, items, true)
	f.settler.Settle(ctx, ds...)
}

// storeWhenCurrent stores items (store) once SUBMIT's position is current:
// nothing is applied to a Redis whose position is not (it restarted, maybe
// older), the replay comes first (§6.7). A batch of jobs alone is stored
// with the position check in the same round trip, and only if the server it
// reaches is the one checked; a batch with other kinds (seals, cancels,
// pauses) checks first. A batch found not current waits for the replay and
// is stored after it. It returns the jobs newly enqueued, or, when nothing
// was stored, the reason to retry every valid item.
func (f *Fetcher) storeWhenCurrent(ctx context.Context, items []*item) (int, error) {
	guarded := jobsOnly(items)
	if guarded {
		if added, err := f.store(ctx, items, true); !errors.Is(err, redisq.ErrNotCurrent) {
			return added, nil // a Redis error decided the items already
		}
	}
	current, err := f.awaitCurrent(ctx)
	if err != nil {
		return 0, err
	}
	if !current {
		return 0, errReplaying
	}
	added, err := f.store(ctx, items, guarded)
	if errors.Is(err, redisq.ErrNotCurrent) {
		return 0, errReplaying // it restarted again meanwhile
	}
	return added, nil
}

// jobsOnly reports whether every valid submission of items is of kind jobs.
func jobsOnly(items []*item) bool {
	for _, it := range items {
		if it.sub != nil && it.sub.Kind != contracts.KindJobs {
			return false
		}
	}
	return true
}

// errReplaying is the retry reason of messages received while SUBMIT is
// being replayed.
var errReplaying = errors.New("fetcher: SUBMIT is being replayed into a restarted Redis")

// decode opens each message's ingest span and decodes it; an invalid
// message is decided as a dead letter.
func (f *Fetcher) decode(ctx context.Context, msgs []jetstream.Msg) []*item {
	items := make([]*item, len(msgs))
	for i, m := range msgs {
		it := &item{Delivery: consume.Open(ctx, f.tracer, SpanIngest, m)}
		sub, err := contracts.DecodeSubmission(m.Subject(), m.Data(), f.d.Limits)
		if err != nil {
			it.Decide(consume.DeadLetter(err))
		} else {
			it.sub = sub
			it.trace = handoff.Traceparent(it.Ctx)
			it.Span.SetAttributes(handoff.AttrTenant.String(sub.Tenant), handoff.AttrGroupID.String(sub.GroupID),
				AttrKind.String(string(sub.Kind)))
			if sub.Kind == contracts.KindJobs {
				it.Span.SetAttributes(AttrJobCount.Int(len(sub.Jobs)))
				if len(sub.Jobs) == 1 {
					it.Span.SetAttributes(handoff.AttrJobID.String(sub.Jobs[0].JobID), handoff.AttrJobType.String(sub.Jobs[0].Type))
				}
			}
		}
		items[i] = it
	}
	return items
}

// notifyWork wakes the fetchers' admission: jobs were queued. This
// fetcher's own is woken at once, the others by the work notification.
func (f *Fetcher) notifyWork() {
	f.wakeAdmission()
	if err := f.d.NC.Publish(f.d.Names.Notify("work"), f.origin); err != nil {
		f.log.Debug("notify", "err", err)
	}
}

// wakeAdmission wakes this fetcher's admission loop (a wake-up already
// pending is enough).
func (f *Fetcher) wakeAdmission() {
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// store applies the valid submissions of items to Redis in message order:
// consecutive jobs go in one EnqueueJobs call, and a seal or cancel is
// applied after the jobs before it. After a Redis error the remaining
// messages are not applied (they are redelivered, keeping their order
// behind the failed one). It returns the number of jobs newly enqueued.
// guarded (items hold jobs only) stores them only while SUBMIT's position
// is current (redisq.Queue.EnqueueJobsIfCurrent): when it is not, nothing
// is applied or decided, and the error is redisq.ErrNotCurrent.
func (f *Fetcher) store(ctx context.Context, items []*item, guarded bool) (int, error) {
	added := 0
	var pending []*item
	var failed error
	flush := func() {
		if len(pending) == 0 {
			return
		}
		n, err := f.enqueue(ctx, pending, guarded)
		added += n
		if err != nil {
			failed = err
		}
		pending = pending[:0]
	}
	for _, it := range items {
		if it.sub == nil {
			continue // invalid: already rejected
		}
		if failed == nil && it.sub.Kind != contracts.KindJobs {
			flush()
		}
		if failed != nil {
			it.Decide(consume.Retry(retryDelay, failed))
			continue
		}
		var err error
		switch it.sub.Kind {
		case contracts.KindJobs:
			pending = append(pending, it)
		case contracts.KindSeal:
			err = f.seal(ctx, it)
		case contracts.KindCancel:
			err = f.cancel(ctx, it)
		case contracts.KindPause, contracts.KindResume:
			err = f.control(ctx, it)
		case contracts.KindSchedule:
			err = f.reschedule(ctx, it)
		}
		if err != nil {
			failed = err
			it.Decide(consume.Retry(retryDelay, err))
		}
	}
	flush()
	if errors.Is(failed, redisq.ErrNotCurrent) {
		return 0, failed
	}
	if failed != nil {
		f.log.Warn("storing submissions failed; they will be redelivered", "err", failed, "delay", retryDelay)
	}
	return added, failed
}

// enqueue stores the jobs of items in one call and decides their fates: a
// message whose jobs were all added or known is acknowledged; one with jobs
// the group refused (it ended, or its sealed total is reached) is
// dead-lettered with those jobs named, the others staying stored; one whose
// new jobs a tenant quota refused (each message is one unit: all its new
// jobs or none) is dead-lettered as over_quota, naming the quota, its limit
// and the tenant's count. On a Redis error every item is negatively
// acknowledged. guarded: see store (on redisq.ErrNotCurrent nothing is
// decided).
func (f *Fetcher) enqueue(ctx context.Context, items []*item, guarded bool) (added int, err error) {
	total := 0
	for _, it := range items {
		total += len(it.sub.Jobs)
	}
	jobs := make([]redisq.Job, 0, total) // sized once: a job is a large struct, and batches hold thousands
	for m, it := range items {
		s := it.sub
		set := s.Settings()
		for _, j := range s.Jobs {
			jobs = append(jobs, redisq.Job{
				Group: s.Ref(), ID: j.JobID, Type: j.Type, Payload: j.Payload, Destination: jobDestination(&j),
				Priority: set.Priority, BasePriority: set.BasePriority, MaxInFlight: set.MaxInFlight, CallbackURL: set.CallbackURL,
				NotBefore: set.NotBefore, Windows: set.Windows,
				Trace:   it.trace,
				Message: m, // the tenant quotas take or refuse a message's new jobs together
			})
		}
	}
	var res *redisq.EnqueueResult
	switch {
	case guarded:
		res, err = f.d.Queue.EnqueueJobsIfCurrent(ctx, submitLog, jobs)
	case items[0].restore:
		res, err = f.d.Queue.RestoreJobs(ctx, jobs)
	default:
		res, err = f.d.Queue.EnqueueJobs(ctx, jobs)
	}
	if errors.Is(err, redisq.ErrNotCurrent) {
		return 0, err
	}
	if err != nil {
		for _, it := range items {
			it.Decide(consume.Retry(retryDelay, err))
		}
		return 0, err
	}
	addedIn := map[contracts.GroupRef]int64{}
	k := 0
	for _, it := range items {
		var over, ended, quota []int
		var refusal *redisq.QuotaRefusal
		n := 0
		for i := range it.sub.Jobs {
			switch o := res.Outcomes[k]; {
			case o == redisq.Added:
				f.d.Metrics.EnqueueTotal.Inc()
				n++
			case o == redisq.Duplicate:
				f.d.Metrics.EnqueueDuplicateTotal.Inc()
			case o == redisq.RejectedSealed:
				over = append(over, i)
			case o.QuotaRefused():
				quota = append(quota, i)
				if refusal == nil && res.Refusals != nil {
					refusal = res.Refusals[k]
				}
			default:
				ended = append(ended, i)
			}
			k++
		}
		addedIn[it.sub.Ref()] += int64(n)
		added += n
		it.Span.SetAttributes(attribute.Int("bulkaction.enqueue.added", n))
		it.refused = len(ended) + len(over) + len(quota)
		switch {
		case len(ended) > 0:
			it.Decide(consume.DeadLetter(&contracts.ValidationError{Reason: ReasonGroupEnded, Field: "jobs",
				Problem: fmt.Sprintf("%s of group %s refused: the group was cancelled or completed", jobList(ended), it.sub.Ref()),
				Limit:   "jobs are accepted until the group ends"}))
		case len(over) > 0:
			problem := fmt.Sprintf("%s of group %s refused: new jobs beyond the sealed total", jobList(over), it.sub.Ref())
			if len(quota) > 0 {
				qe := quotaError(it.sub.Ref(), quota, refusal)
				problem += "; " + qe.Problem + " (" + qe.Limit + ")"
			}
			it.Decide(consume.DeadLetter(&contracts.ValidationError{Reason: ReasonOverTotal, Field: "jobs",
				Problem: problem, Limit: "the group is sealed and already has its declared number of jobs"}))
		case len(quota) > 0:
			it.Decide(consume.DeadLetter(quotaError(it.sub.Ref(), quota, refusal)))
		default:
			it.Decide(consume.Ack())
		}
	}
	groups := make(map[contracts.GroupRef]redisq.EnqueuedGroup, len(res.Groups))
	for _, g := range res.Groups {
		groups[g.Group] = g
		if g.DestinationsRefused > 0 {
			f.destinationsRefused(g.Group.Tenant, g.DestinationsRefused)
		}
		if g.Created {
			f.publishEvent(ctx, f.withRefused(ctx, events.Change{Group: g.Group,
				Counts: redisq.GroupCounts{State: contracts.StateCreated, Declared: -1, Jobs: addedIn[g.Group]}}))
		}
	}
	// Every message whose settings differ from its group's is reported,
	// also when an earlier message of this batch created the group; a
	// dead-lettered message is reported by its dead letter.
	for _, it := range items {
		if it.sub.Group == nil || it.Decision().IsDeadLetter() {
			continue
		}
		g := groups[it.sub.Ref()]
		if notice := settingsNotice(it.sub.Settings(), g.Settings); notice != "" {
			f.publishEvent(ctx, events.Change{Group: g.Group, Counts: g.Counts, Notice: notice})
		}
	}
	return added, nil
}

// quotaError is the dead letter of a jobs message a tenant quota refused:
// it names the jobs, the quota, its limit and the tenant's count.
func quotaError(g contracts.GroupRef, idx []int, r *redisq.QuotaRefusal) *contracts.ValidationError {
	e := &contracts.ValidationError{Reason: ReasonOverQuota, Field: "jobs",
		Problem: fmt.Sprintf("%s of group %s refused: over the tenant's quota", jobList(idx), g),
		Limit:   "a tenant quota"}
	if r != nil {
		e.Problem = fmt.Sprintf("%s of group %s refused: %s", jobList(idx), g, r.Problem())
		e.Limit = r.LimitText()
	}
	return e
}

// jobList names the jobs at idx: "jobs[2], jobs[5] and 3 more".
func jobList(idx []int) string {
	const show = 5
	var b strings.Builder
	for i, k := range idx {
		if i == show {
			fmt.Fprintf(&b, " and %d more", len(idx)-show)
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "jobs[%d]", k)
	}
	return b.String()
}

// settingsNotice describes how the settings a submission asked for differ
// from the group's own, which it keeps; "" when they agree.
func settingsNotice(want, have contracts.GroupSettings) string {
	var diffs []string
	if p, q := want.Priority.OrDefault(), have.Priority.OrDefault(); p != q {
		diffs = append(diffs, fmt.Sprintf("priority %s (the group keeps %s)", p, q))
	}
	if want.BasePriority != have.BasePriority {
		diffs = append(diffs, fmt.Sprintf("basePriority %d (the group keeps %d)", want.BasePriority, have.BasePriority))
	}
	if want.CallbackURL != have.CallbackURL {
		have := have.CallbackURL
		if have == "" {
			have = "none"
		}
		diffs = append(diffs, fmt.Sprintf("callbackUrl %q (the group keeps %s)", want.CallbackURL, have))
	}
	if want.MaxInFlight != have.MaxInFlight {
		diffs = append(diffs, fmt.Sprintf("maxInFlight %d (the group keeps %d)", want.MaxInFlight, have.MaxInFlight))
	}
	// a submission without a schedule asks for none in particular (a group
	// may have its tenant's default windows): only one that names another
	// is reported
	if want.NotBefore != "" && !sameTime(want.NotBefore, have.NotBefore) {
		have := have.NotBefore
		if have == "" {
			have = "none"
		}
		diffs = append(diffs, fmt.Sprintf("notBefore %s (the group keeps %s)", want.NotBefore, have))
	}
	if len(want.Windows) > 0 && !reflect.DeepEqual(want.Windows, have.Windows) {
		diffs = append(diffs, fmt.Sprintf("windows %s (the group keeps %s)", windowsText(want.Windows), windowsText(have.Windows)))
	}
	if diffs == nil {
		return ""
	}
	return "group settings not applied: the group exists; a submission asked for " + strings.Join(diffs, ", ")
}

// sameTime reports whether two RFC 3339 times are the same instant to the
// millisecond (a group keeps its notBefore in milliseconds).
func sameTime(a, b string) bool {
	ta, err1 := time.Parse(time.RFC3339Nano, a)
	tb, err2 := time.Parse(time.RFC3339Nano, b)
	return err1 == nil && err2 == nil && ta.UnixMilli() == tb.UnixMilli()
}

// windowsText is sending windows as a notice names them.
func windowsText(ws []contracts.Window) string {
	if len(ws) == 0 {
		return "none"
	}
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = fmt.Sprintf("%s %s–%s %s", strings.Join(w.Days, ","), w.From, w.To, w.Zone)
	}
	return strings.Join(parts, "; ")
}

// seal applies a seal message; a non-nil error is a storage error.
func (f *Fetcher) seal(ctx context.Context, it *item) error {
	var total int64
	if it.sub.Total != nil {
		total = *it.sub.Total
	}
	res, err := f.d.Queue.Seal(ctx, it.sub.Ref(), total)
	if err != nil {
		return err
	}
	it.Span.SetAttributes(attribute.String("bulkaction.seal.outcome", string(res.Outcome)))
	switch res.Outcome {
	case redisq.SealConflict, redisq.SealTooMany:
		problem := fmt.Sprintf("group %s is already sealed with total %d", it.sub.Ref(), res.Group.Declared)
		if res.Outcome == redisq.SealTooMany {
			problem = fmt.Sprintf("group %s already has %d distinct jobs", it.sub.Ref(), res.Group.Jobs)
		}
		it.Decide(consume.DeadLetter(&contracts.ValidationError{Reason: ReasonBadSeal, Field: "total",
			Problem: fmt.Sprintf("%d: %s", total, problem), Limit: "a group is sealed once, with at least the jobs it has"}))
		return nil
	case redisq.Sealed:
		switch {
		case res.Transition != "":
			c := res.Group
			c.State = res.Transition
			f.publishEvent(ctx, events.Change{Group: it.sub.Ref(), Counts: c, Ended: c.State.Terminal()})
		case res.Group.State == contracts.StateCreated && res.Group.Jobs == 0:
			// The seal came first and created the group.
			f.publishEvent(ctx, f.withRefused(ctx, events.Change{Group: it.sub.Ref(), Counts: res.Group}))
		}
	}
	it.Decide(consume.Ack())
	return nil
}

// cancel applies a cancel message; a non-nil error is a storage error.
func (f *Fetcher) cancel(ctx context.Context, it *item) error {
	res, err := f.d.Queue.Cancel(ctx, it.sub.Ref())
	if err != nil {
		return err
	}
	it.Span.SetAttributes(attribute.String("bulkaction.cancel.outcome", string(res.Outcome)))
	switch res.Outcome {
	case redisq.Cancelled:
		c := res.Group
		c.State = contracts.StateCancelled
		f.publishEvent(ctx, events.Change{Group: it.sub.Ref(), Counts: c, Ended: true})
	default:
		f.log.Debug("cancel had no effect", "tenant", it.sub.Tenant, "group", it.sub.GroupID, "outcome", string(res.Outcome))
	}
	it.Decide(consume.Ack())
	return nil
}

// control applies a pause or resume message; a non-nil error is a storage
// error. Pauses and resumes apply in publish order: the message's SUBMIT
// sequence goes with it (redisq.SubmitSeq), and one older than the last
// pause or resume its group took is superseded (acknowledged, counted,
// nothing changed). A change of state is published; one that changed
// nothing (the group was already in that state, or ended, or the message was
// superseded) is published as a notice; a resume of a group that does not
// exist publishes nothing.
func (f *Fetcher) control(ctx context.Context, it *item) error {
	op := f.d.Queue.Pause
	if it.sub.Kind == contracts.KindResume {
		op = f.d.Queue.Resume
	}
	return f.applyControl(ctx, it, func(seq redisq.ControlOption) (*redisq.ControlResult, error) {
		return op(ctx, it.sub.Ref(), seq)
	}, func(res *redisq.ControlResult, ch *events.Change) {
		if res.Transition != "" {
			ch.Counts.State = res.Transition
		} else {
			ch.Notice = fmt.Sprintf("%s had no effect: %s", it.sub.Kind, res.Outcome)
		}
	})
}

// reschedule applies a schedule message (a group's new notBefore); a
// non-nil error is a storage error. Schedule messages apply in publish
// order among themselves (redisq.SubmitSeq). A move is published as a
// notice on the group's events, as is one that changed nothing (the group
// has started or ended, or the message was superseded); one for a group
// that does not exist publishes nothing.
func (f *Fetcher) reschedule(ctx context.Context, it *item) error {
	nb, err := contracts.ParseNotBefore(it.sub.NotBefore)
	if err != nil {
		return err // validated before: not reached
	}
	return f.applyControl(ctx, it, func(seq redisq.ControlOption) (*redisq.ControlResult, error) {
		return f.d.Queue.Reschedule(ctx, it.sub.Ref(), nb, seq)
	}, func(res *redisq.ControlResult, ch *events.Change) {
		if res.Outcome == redisq.Rescheduled {
			ch.Notice = "notBefore moved to " + nb.UTC().Format(time.RFC3339Nano)
			f.wakeAdmission()
		} else {
			ch.Notice = fmt.Sprintf("schedule had no effect: %s", res.Outcome)
		}
	})
}

// applyControl applies a control message (pause, resume, schedule) with
// op, given the message's SUBMIT sequence, counts its outcome, and
// publishes the group's event as event shapes it; a message for a group
// that does not exist publishes nothing. A non-nil error is a storage
// error.
func (f *Fetcher) applyControl(ctx context.Context, it *item, op func(redisq.ControlOption) (*redisq.ControlResult, error),
	event func(*redisq.ControlResult, *events.Change)) error {
	var seq uint64
	if md, err := it.Msg.Metadata(); err == nil {
		seq = md.Sequence.Stream
	}
	res, err := op(redisq.SubmitSeq(seq))
	if err != nil {
		return err
	}
	it.Span.SetAttributes(attribute.String("bulkaction.control.outcome", string(res.Outcome)))
	f.d.Metrics.ControlMessages.WithLabelValues(string(it.sub.Kind), string(res.Outcome)).Inc()
	if res.Outcome == redisq.ControlUnknown {
		// No group: nothing to publish (an event needs a state).
		f.log.Debug("control message for an unknown group", "kind", string(it.sub.Kind), "tenant", it.sub.Tenant, "group", it.sub.GroupID)
		it.Decide(consume.Ack())
		return nil
	}
	ch := events.Change{Group: it.sub.Ref(), Counts: res.Group, Control: true}
	event(res, &ch)
	f.publishEvent(ctx, ch)
	it.Decide(consume.Ack())
	return nil
}

// publishEvent publishes a group event; a failure is logged (the state in
// Redis is what counts; the event stream is informational).
func (f *Fetcher) publishEvent(ctx context.Context, ch events.Change) {
	if err := f.d.Events.Publish(ctx, ch); err != nil {
		f.log.Warn("group event not published", "tenant", ch.Group.Tenant, "group", ch.Group.ID, "state", string(ch.Counts.State), "err", err)
	}
}

// jobDestination is the destination a job is stored with: its own, else,
// for the built-in http type, its URL's host (builtin.Destination; a URL
// without a usable host leaves the type), else none (its type).
func jobDestination(j *contracts.SubmitJob) string {
	if j.Destination != "" || j.Type != builtin.TypeHTTP {
		return j.Destination
	}
	d, _ := builtin.Destination(j.Payload)
	return d
}

// destWarn limits the warnings about a tenant's refused destinations to
// one a minute per tenant.
type destWarn struct {
	mu  sync.Mutex
	per map[string]*telemetry.WarnLimiter
}

// destinationsRefused counts n jobs of tenant stored without their
// explicit destination (the tenant has its most destinations: they fall
// back to their type) and warns, at most once a minute per tenant.
func (f *Fetcher) destinationsRefused(tenant string, n int) {
	f.d.Metrics.DestinationsRefused.WithLabelValues("tenant").Add(float64(n))
	w := &f.destLog
	w.mu.Lock()
	if w.per == nil {
		w.per = map[string]*telemetry.WarnLimiter{}
	}
	l := w.per[tenant]
	if l == nil {
		if len(w.per) >= destWarnTenants {
			clear(w.per)
		}
		l = &telemetry.WarnLimiter{Interval: time.Minute}
		w.per[tenant] = l
	}
	w.mu.Unlock()
	l.Warn(f.log, "jobs stored without their destination: the tenant has its most destinations, they fall back to their type",
		"tenant", tenant, "jobs", n, "max", f.d.Queue.Config().Adaptive.MaxDestinationsPerTenant)
}

// destWarnTenants bounds the tenants destWarn remembers.
const destWarnTenants = 1000
