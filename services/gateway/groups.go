package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bulkaction/bulkaction/internal/handoff"
	"github.com/bulkaction/bulkaction/pkg/api"
	"github.com/bulkaction/bulkaction/pkg/client"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/status"
)

// GroupView is the body of GET /v1/groups/{groupId} and an item of GET
// /v1/groups ([api.Group]).
type GroupView = api.Group

// GroupStatus is the live part of a group's view ([api.GroupStatus]).
type GroupStatus = api.GroupStatus

// MaxFullViewLimit is the most groups of a page of GET /v1/groups with
// view=full: each is a full status read (about ten Redis round trips), so
// a page costs at most this many, and READY's room is measured once per
// page rather than once per group.
const MaxFullViewLimit = 50

// statusOptions are the options of a group's full status read; with
// shared, READY's room is measured by the first read that needs it and
// reused by the others (one page of GET /v1/groups?view=full).
func (g *Gateway) statusOptions(shared bool) status.Options {
	var opt status.Options
	if g.cfg.ReadyCapacity <= 0 {
		return opt
	}
	room := handoff.NewRoom(g.deps, g.cfg.ReadyCapacity)
	opt.Room = func(ctx context.Context) (map[string]int, int, error) {
		rooms, err := room.Measure(ctx)
		return rooms.ByType, rooms.Capacity, err
	}
	if shared {
		measure := opt.Room
		var once sync.Once
		var byType map[string]int
		var other int
		var err error
		opt.Room = func(ctx context.Context) (map[string]int, int, error) {
			once.Do(func() { byType, other, err = measure(ctx) })
			return byType, other, err
		}
	}
	return opt
}

// fullView reads everything about one group; nil when it does not exist.
func (g *Gateway) fullView(ctx context.Context, ref contracts.GroupRef) (*GroupView, error) {
	return g.fullViewWith(ctx, ref, g.statusOptions(false))
}

// fullViewWith is fullView with the status read's options.
func (g *Gateway) fullViewWith(ctx context.Context, ref contracts.GroupRef, opt status.Options) (*GroupView, error) {
	s, err := status.Read(ctx, g.q, ref, opt)
	if errors.Is(err, status.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s.View(), nil
}

func round2(f float64) float64 { return status.Round2(f) }

// getGroup: GET /v1/groups/{groupId}.
func (g *Gateway) getGroup(w http.ResponseWriter, r *http.Request) {
	ref, ok := groupRef(w, r)
	if !ok {
		return
	}
	v, err := g.fullView(r.Context(), ref)
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	if v == nil {
		g.groupNotFound(w, r, ref)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// GroupList is the body of GET /v1/groups.
type GroupList = api.GroupList

// listGroups: GET /v1/groups?state=&limit=&cursor=&view=. A tenant key
// lists its tenant; an admin key every tenant, or one with ?tenant=. With
// view=full a page holds at most MaxFullViewLimit groups.
func (g *Gateway) listGroups(w http.ResponseWriter, r *http.Request) {
	p := principal(r)
	q := r.URL.Query()
	tenant, ok := p.tenantFor(r)
	if !ok && !p.Admin {
		writeJSON(w, http.StatusOK, GroupList{Groups: []*GroupView{}})
		return
	}
	if tenant != "" {
		if err := contracts.ValidateTenant(tenant); err != nil {
			writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, "bad tenant", fieldError(err))
			return
		}
	}
	o := redisq.ListOptions{Tenant: tenant, Cursor: q.Get("cursor"), Limit: 50}
	var errs []FieldError
	for _, s := range q["state"] {
		for _, one := range strings.Split(s, ",") {
			st := contracts.GroupState(strings.ToUpper(strings.TrimSpace(one)))
			if !st.Valid() {
				errs = append(errs, paramError("state", one, "CREATED, RUNNING, PAUSED, AGGREGATING, COMPLETED or CANCELLED"))
				continue
			}
			o.States = append(o.States, st)
		}
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > redisq.MaxListLimit {
			errs = append(errs, paramError("limit", v, fmt.Sprintf("1 to %d", redisq.MaxListLimit)))
		}
		o.Limit = n
	}
	full := false
	switch v := q.Get("view"); v {
	case "", "summary":
	case "full":
		full = true
		if o.Limit > MaxFullViewLimit {
			errs = append(errs, paramError("limit", q.Get("limit"), fmt.Sprintf("1 to %d with view=full", MaxFullViewLimit)))
		}
	default:
		errs = append(errs, paramError("view", v, "summary or full"))
	}
	if len(errs) > 0 {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, "bad query parameter", errs...)
		return
	}
	infos, next, err := g.q.ListGroups(r.Context(), o)
	if errors.Is(err, redisq.ErrBadCursor) {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, "bad cursor", paramError("cursor", o.Cursor, "a next value of an earlier page"))
		return
	}
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	out := GroupList{Groups: make([]*GroupView, 0, len(infos))}
	opt := g.statusOptions(true)
	for _, info := range infos {
		v := status.Summary(info)
		if full {
			fv, err := g.fullViewWith(r.Context(), info.Group, opt)
			if err != nil {
				g.unavailable(w, r, err)
				return
			}
			if fv == nil {
				continue
			}
			v = fv
		}
		out.Groups = append(out.Groups, v)
	}
	if next != "" {
		out.Next = &next
	}
	writeJSON(w, http.StatusOK, out)
}

// ControlResponse is the body of a 202 answer to seal, cancel, pause and
// resume.
type ControlResponse = api.ControlResponse

// control: POST …/cancel, …/pause, …/resume. The message is published;
// its effect shows in the group's state and events.
func (g *Gateway) control(w http.ResponseWriter, r *http.Request) {
	ref, ok := groupRef(w, r)
	if !ok {
		return
	}
	kind := contracts.KindResume
	switch {
	case strings.HasSuffix(r.URL.Path, "/cancel"):
		kind = contracts.KindCancel
	case strings.HasSuffix(r.URL.Path, "/pause"):
		kind = contracts.KindPause
	}
	if !g.groupKnown(w, r, ref, kind) {
		return
	}
	c := g.client.ForTenant(ref.Tenant)
	var err error
	switch kind {
	case contracts.KindCancel:
		err = c.Cancel(r.Context(), ref.ID)
	case contracts.KindPause:
		err = c.Pause(r.Context(), ref.ID)
	default:
		err = c.Resume(r.Context(), ref.ID)
	}
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, ControlResponse{Tenant: ref.Tenant, GroupID: ref.ID, Kind: kind})
}

// sealGroup: POST …/seal with {"total": n} (or ?total=n).
func (g *Gateway) sealGroup(w http.ResponseWriter, r *http.Request) {
	ref, ok := groupRef(w, r)
	if !ok {
		return
	}
	total, errs := totalParam(r)
	if len(errs) > 0 {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, "bad query parameter", errs...)
		return
	}
	if total == nil {
		var body struct {
			Total *int64 `json:"total"`
		}
		raw, err := io.ReadAll(io.LimitReader(r.Body, 4096))
		if err != nil {
			writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, "the body could not be read")
			return
		}
		if fe := decodeBody(raw, &body, "total"); fe != nil {
			writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, `send {"total": <jobs>} or ?total=`, *fe)
			return
		}
		if body.Total == nil {
			writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, `send {"total": <jobs>} or ?total=`,
				FieldError{Field: "total", Detail: "missing", Limit: fmt.Sprintf("an integer from 0 to %d", contracts.MaxTotal)})
			return
		}
		if *body.Total < 0 || *body.Total > contracts.MaxTotal {
			writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, "total out of range",
				FieldError{Field: "total", Detail: strconv.FormatInt(*body.Total, 10), Limit: fmt.Sprintf("an integer from 0 to %d", contracts.MaxTotal)})
			return
		}
		total = body.Total
	}
	if !g.groupKnown(w, r, ref, contracts.KindSeal) {
		return
	}
	if err := g.client.ForTenant(ref.Tenant).Seal(r.Context(), ref.ID, *total); err != nil {
		g.unavailable(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, ControlResponse{Tenant: ref.Tenant, GroupID: ref.ID, Kind: contracts.KindSeal, Total: total})
}

// scheduleGroup: POST …/schedule with {"notBefore": "<RFC 3339>"}: moves
// the start of a group that has not started (a schedule message).
func (g *Gateway) scheduleGroup(w http.ResponseWriter, r *http.Request) {
	ref, ok := groupRef(w, r)
	if !ok {
		return
	}
	const hint = `send {"notBefore": "<RFC 3339 date-time>"}`
	var body struct {
		NotBefore *string `json:"notBefore"`
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 4096))
	if err != nil {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, "the body could not be read")
		return
	}
	if fe := decodeBody(raw, &body, "notBefore"); fe != nil {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, hint, *fe)
		return
	}
	if body.NotBefore == nil || *body.NotBefore == "" {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, hint,
			FieldError{Field: "notBefore", Detail: "missing", Limit: "an RFC 3339 date-time with a time zone offset, e.g. 2026-11-27T09:00:00+01:00"})
		return
	}
	if err := (contracts.GroupSettings{NotBefore: *body.NotBefore}).Validate(); err != nil {
		fe := fieldError(err)
		fe.Field = "notBefore"
		writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, hint, fe)
		return
	}
	nb, _ := contracts.ParseNotBefore(*body.NotBefore) // checked above
	if !g.groupKnown(w, r, ref, contracts.KindSchedule) {
		return
	}
	if err := g.client.ForTenant(ref.Tenant).Reschedule(r.Context(), ref.ID, nb); err != nil {
		g.unavailable(w, r, err)
		return
	}
	u := nb.UTC()
	writeJSON(w, http.StatusAccepted, ControlResponse{Tenant: ref.Tenant, GroupID: ref.ID, Kind: contracts.KindSchedule, NotBefore: &u})
}

// groupKnown answers for a seal, cancel, pause or resume of a group that
// does not exist, and returns false: 404 unless the request asks to create
// it with ?create=true (a mistyped id would otherwise create an empty
// group that counts against its tenant's quota); a group whose messages
// are in SUBMIT and not stored yet exists. A resume creates nothing, and a
// pause or resume of a group that has ended is 409 group-ended. A group
// created here is listed in the group indexes (GET /v1/groups).
func (g *Gateway) groupKnown(w http.ResponseWriter, r *http.Request, ref contracts.GroupRef, kind contracts.Kind) bool {
	create := false
	if v := r.URL.Query().Get("create"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil || kind == contracts.KindResume || kind == contracts.KindSchedule {
			limit := "true or false"
			if kind == contracts.KindResume || kind == contracts.KindSchedule {
				limit = "not taken by resume: a group that does not exist has nothing to resume"
			}
			writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, "bad query parameter", paramError("create", v, limit))
			return false
		}
		create = b
	}
	info, pending, err := status.Find(r.Context(), g.q, g.deps.JS, g.deps.Names, ref)
	if err != nil {
		g.unavailable(w, r, err)
		return false
	}
	switch {
	case info != nil && info.State.Terminal() && (kind == contracts.KindPause || kind == contracts.KindResume || kind == contracts.KindSchedule):
		writeProblem(w, r, http.StatusConflict, slugGroupEnded, fmt.Sprintf("group %s is %s: there is nothing to %s", ref.ID, info.State, kind))
		return false
	case info != nil || pending:
		return true
	case !create:
		hint := "; ?create=true " + string(kind) + "s it before its first job"
		if kind == contracts.KindResume || kind == contracts.KindSchedule {
			hint = ""
		}
		writeProblem(w, r, http.StatusNotFound, slugNotFound, "no such group: nothing was ever submitted to it"+hint)
		return false
	}
	now, err := g.q.Now(r.Context())
	if err == nil {
		err = g.q.IndexGroup(r.Context(), ref, now.UnixMilli())
	}
	if err != nil {
		g.unavailable(w, r, err)
		return false
	}
	return true
}

// FailureView is an item of GET …/failures.
type FailureView = api.Failure

// FailureList is the body of GET …/failures.
type FailureList = api.FailureList

// listFailures: GET …/failures?limit=&cursor=, newest first. A payload
// above FailurePayloadHead bytes is listed by its size and first bytes, and
// a page stops early (with a next cursor) once the payloads it read reach
// redisq.MaxFailuresPageBytes: one call's work and answer are bounded in
// bytes as well as in entries.
func (g *Gateway) listFailures(w http.ResponseWriter, r *http.Request) {
	ref, ok := groupRef(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > redisq.MaxFailuresPage {
			writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, "bad query parameter",
				paramError("limit", v, fmt.Sprintf("1 to %d", redisq.MaxFailuresPage)))
			return
		}
		limit = n
	}
	version, exists, err := g.q.FailuresVersion(r.Context(), ref)
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	if !exists {
		writeProblem(w, r, http.StatusNotFound, slugNotFound, "no such group")
		return
	}
	key, now := failuresPageKey{ref: ref, cursor: q.Get("cursor"), limit: limit}, time.Now()
	if body, ok := g.failures.get(key, version, now); ok {
		writeJSONBody(w, http.StatusOK, body)
		return
	}
	fs, next, err := g.q.FailuresPage(r.Context(), ref, redisq.FailuresQuery{After: q.Get("cursor"), Limit: limit, Head: FailurePayloadHead})
	if errors.Is(err, redisq.ErrBadCursor) {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, "bad cursor", paramError("cursor", q.Get("cursor"), "a next value of an earlier page"))
		return
	}
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	kept, err := g.q.FailuresKept(r.Context(), ref)
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	out := FailureList{Failures: make([]FailureView, 0, len(fs)), Kept: kept}
	for _, f := range fs {
		out.Failures = append(out.Failures, failureView(f))
	}
	if next != "" {
		out.Next = &next
	}
	body, err := encodeJSON(out)
	if err != nil {
		writeProblem(w, r, http.StatusInternalServerError, slugInternal, "internal error")
		return
	}
	g.failures.put(key, version, now, body)
	writeJSONBody(w, http.StatusOK, body)
}

// RetryResponse is the body of a 202 answer to retry-failed.
type RetryResponse = api.RetryResponse

// retryFailed: POST …/retry-failed [{"groupId": "<new id>"}] submits the
// group's kept failed jobs (same ids, types and payloads) as a new sealed
// group, linked to the old one (retryOf / retries in the group views). The
// failures are read and submitted a page at a time (a page holds at most
// redisq.MaxFailuresPageBytes of payloads), so the gateway never holds more
// than one page whatever the group kept. Each kept failure is submitted
// once: the pages neither repeat nor skip an entry, and two calls that
// race for the same new group submit the same job ids to it, which the
// group takes once.
func (g *Gateway) retryFailed(w http.ResponseWriter, r *http.Request) {
	ref, ok := groupRef(w, r)
	if !ok {
		return
	}
	var body struct {
		GroupID string `json:"groupId"`
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, 4096))
	if err != nil {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, "the body could not be read")
		return
	}
	if len(strings.TrimSpace(string(raw))) > 0 {
		if fe := decodeBody(raw, &body, "groupId"); fe != nil {
			writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, `send nothing or {"groupId": "<new group id>"}: `+fe.Detail, *fe)
			return
		}
	}
	info, found, err := g.q.Group(r.Context(), ref)
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	if !found {
		writeProblem(w, r, http.StatusNotFound, slugNotFound, "no such group")
		return
	}
	if body.GroupID == "" {
		_, retries, err := g.q.Links(r.Context(), ref)
		if err != nil {
			g.unavailable(w, r, err)
			return
		}
		suffix := "-retry-" + strconv.Itoa(len(retries)+1)
		base := ref.ID
		if len(base)+len(suffix) > contracts.MaxIDLen {
			base = base[:contracts.MaxIDLen-len(suffix)]
		}
		body.GroupID = base + suffix
	}
	to := contracts.Group(ref.Tenant, body.GroupID)
	if err := to.Validate(); err != nil {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, "bad groupId", fieldError(err))
		return
	}
	if to == ref {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, "the retry group must be a new group",
			FieldError{Field: "groupId", Detail: "equals the failed group's id"})
		return
	}
	if _, exists, err := g.q.Group(r.Context(), to); err != nil {
		g.unavailable(w, r, err)
		return
	} else if exists {
		writeProblem(w, r, http.StatusConflict, slugGroupExists,
			fmt.Sprintf("group %s exists: a retry makes a new group", to.ID),
			FieldError{Field: "groupId", Detail: "names an existing group", Limit: "a new group id"})
		return
	}
	c := g.client.ForTenant(ref.Tenant)
	settings := contracts.GroupSettings{Priority: info.Priority, BasePriority: info.BasePriority, MaxInFlight: info.MaxInFlight}
	var jobs []client.Job
	var sent, skipped int64
	cursor := ""
	for {
		fs, next, err := g.q.Failures(r.Context(), ref, cursor, redisq.MaxFailuresPage)
		if err != nil {
			g.unavailable(w, r, err)
			return
		}
		jobs = jobs[:0]
		for _, f := range fs {
			if f.Type == "" {
				skipped++
				continue
			}
			jobs = append(jobs, client.Job{ID: f.JobID, Type: f.Type, Payload: f.Payload})
		}
		if len(jobs) > 0 {
			if err := c.SubmitGroup(r.Context(), to.ID, settings, jobs...); err != nil {
				g.unavailable(w, r, err)
				return
			}
			sent += int64(len(jobs))
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if sent == 0 {
		writeProblem(w, r, http.StatusConflict, slugNothingFailed,
			fmt.Sprintf("group %s has no failed jobs to retry (%d failed, %d expired)", ref.ID, info.Failed, skipped))
		return
	}
	if err := c.Seal(r.Context(), to.ID, sent); err != nil {
		g.unavailable(w, r, err)
		return
	}
	if err := g.q.LinkRetry(r.Context(), ref, to, 2*g.cfg.GroupTTL); err != nil {
		g.unavailable(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, RetryResponse{Tenant: to.Tenant, GroupID: to.ID, RetryOf: ref.ID,
		Jobs: sent, Skipped: skipped})
}
