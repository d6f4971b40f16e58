package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bulkaction/bulkaction/pkg/api"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/jspub"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// publishChunk bounds the bytes of spooled messages read back and
// published at once.
const publishChunk = 4 << 20

// SubmitResponse is the body of a 202 answer to POST …/jobs.
type SubmitResponse = api.SubmitResponse

// groupRef returns the request's group: its tenant (the key's, or an admin's
// tenant parameter) and the groupId path value. It answers 404 itself when
// the key does not reach the tenant, 400 for a bad id.
func groupRef(w http.ResponseWriter, r *http.Request) (contracts.GroupRef, bool) {
	p := principal(r)
	tenant, ok := p.tenantFor(r)
	if !ok {
		if p.Admin {
			writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, "an admin key must name the tenant",
				FieldError{Field: "tenant", Detail: "missing", Limit: "required with an admin key"})
		} else {
			writeProblem(w, r, http.StatusNotFound, slugNotFound, "no such group")
		}
		return contracts.GroupRef{}, false
	}
	g := contracts.Group(tenant, r.PathValue("groupId"))
	if err := g.Validate(); err != nil {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, "bad group or tenant id", fieldError(err))
		return contracts.GroupRef{}, false
	}
	return g, true
}

// groupSettings reads the optional priority, basePriority, maxInFlight,
// notBefore, window (repeated: one sending window each, in the text form
// of contracts.ParseWindow) and total query parameters (callbackUrl:
// callbackURLParam).
func groupSettings(r *http.Request) (*contracts.GroupSettings, *int64, []FieldError) {
	q := r.URL.Query()
	var s contracts.GroupSettings
	var errs []FieldError
	intParam := func(name string, lo, hi int64) (int64, bool) {
		v := q.Get(name)
		if v == "" {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo || n > hi {
			errs = append(errs, paramError(name, v, fmt.Sprintf("an integer from %d to %d", lo, hi)))
			return 0, false
		}
		return n, true
	}
	set := false
	if v := q.Get("priority"); v != "" {
		s.Priority, set = contracts.Priority(v), true
		if !s.Priority.Valid() {
			errs = append(errs, paramError("priority", v, "high, normal or low"))
		}
	}
	if n, ok := intParam("basePriority", contracts.MinBasePriority, contracts.MaxBasePriority); ok {
		s.BasePriority, set = n, true
	}
	if n, ok := intParam("maxInFlight", 0, contracts.MaxInFlight); ok {
		s.MaxInFlight, set = n, true
	}
	if v := q.Get("notBefore"); v != "" {
		s.NotBefore, set = v, true
		if err := (contracts.GroupSettings{NotBefore: v}).Validate(); err != nil {
			fe := fieldError(err)
			fe.Field = "notBefore"
			errs = append(errs, fe)
		}
	}
	for i, v := range q["window"] {
		w, err := contracts.ParseWindow(fmt.Sprintf("window[%d]", i), v)
		if err != nil {
			errs = append(errs, fieldError(err))
			continue
		}
		s.Windows, set = append(s.Windows, w), true
	}
	if len(s.Windows) > contracts.MaxWindows {
		errs = append(errs, paramError("window", fmt.Sprintf("%d windows", len(s.Windows)), fmt.Sprintf("at most %d", contracts.MaxWindows)))
	}
	total, terrs := totalParam(r)
	errs = append(errs, terrs...)
	if !set {
		return nil, total, errs
	}
	return &s, total, errs
}

// totalParam reads the optional total query parameter.
func totalParam(r *http.Request) (*int64, []FieldError) {
	v := r.URL.Query().Get("total")
	if v == "" {
		return nil, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > contracts.MaxTotal {
		return nil, []FieldError{paramError("total", v, fmt.Sprintf("an integer from 0 to %d", contracts.MaxTotal))}
	}
	return &n, nil
}

// submitJobs: POST /v1/groups/{groupId}/jobs. The body is a JSON array of
// jobs or NDJSON (one job per line), read as a stream; every job is
// validated and encoded into "jobs" messages kept in a spool, and only
// when the whole body is valid are the messages published. Then, with
// ?total=, the group is sealed.
func (g *Gateway) submitJobs(w http.ResponseWriter, r *http.Request) {
	ref, ok := groupRef(w, r)
	if !ok {
		return
	}
	settings, total, errs := groupSettings(r)
	if cb, cerrs := g.callbackURLParam(r); cb != "" || len(cerrs) > 0 {
		errs = append(errs, cerrs...)
		if settings == nil {
			settings = &contracts.GroupSettings{}
		}
		settings.CallbackURL = cb
	}
	if len(errs) > 0 {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, "bad query parameter", errs...)
		return
	}
	ndjson, err := bodyFormat(r)
	if err != nil {
		writeProblem(w, r, http.StatusUnsupportedMediaType, slugMediaType, err.Error())
		return
	}
	c := clock(r)
	check, err := g.q.ReadSubmitCheck(r.Context(), ref)
	c.mark("check")
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	if check.State.Terminal() {
		writeProblem(w, r, http.StatusConflict, slugGroupEnded,
			fmt.Sprintf("group %s is %s: it takes no more jobs", ref.ID, check.State))
		return
	}
	checkedAt := time.Now()

	sp := &spool{dir: g.cfg.SpoolDir, memLimit: g.cfg.MemorySpool, subject: g.deps.Names.Submit(ref)}
	defer sp.close()
	enc := newBatcher(ref, settings, g.deps.Limits, sp)
	pacer := g.newJobPacer(r, ref.Tenant)
	defer pacer.done(w)
	body := io.Reader(r.Body)
	if pacer != nil {
		body = turnBody{r: r.Body, p: pacer}
	}
	var src jobSource
	if ndjson {
		src = newNDJSONSource(body, g.deps.Limits.MessageLimit())
	} else {
		src = newArraySource(body, g.deps.Limits.MessageLimit())
	}
	seen := newIDSet()
	for {
		job, pos, err := src.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			g.badBody(w, r, pos, err)
			return
		}
		if !pacer.read() {
			return // the client left while the request waited for its tenant's job rate
		}
		if g.tooManyJobs(w, r, pos) {
			return
		}
		if err := job.Canonicalize(g.deps.Limits); err != nil {
			fe := fieldError(err)
			fe.Line, fe.Index = pos.line, pos.indexRef()
			writeProblem(w, r, http.StatusBadRequest, slugInvalidJob, pos.String()+": "+err.Error(), fe)
			return
		}
		if first, dup := seen.add(job.JobID, pos); dup {
			detail := fmt.Sprintf("%q repeats the job id of %s", job.JobID, first)
			writeProblem(w, r, http.StatusBadRequest, slugInvalidJob, pos.String()+": jobId "+detail+"; a job id is run once per group, so nothing was submitted",
				FieldError{Field: "jobId", Detail: detail, Line: pos.line, Index: pos.indexRef(), Limit: "each job id once per request"})
			return
		}
		if err := enc.add(job); err != nil {
			if errors.Is(err, errSpool) {
				g.unavailable(w, r, err)
				return
			}
			fe := fieldError(err)
			fe.Line, fe.Index = pos.line, pos.indexRef()
			writeProblem(w, r, http.StatusBadRequest, slugTooLarge, pos.String()+": "+err.Error(), fe)
			return
		}
	}
	pacer.endRead()
	if err := enc.flush(); err != nil {
		g.unavailable(w, r, err)
		return
	}
	c.mark("read")
	if enc.jobs == 0 && total == nil {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, "the body holds no jobs and no total was given")
		return
	}
	if total != nil && *total < enc.jobs {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, fmt.Sprintf("total %d is less than the %d distinct jobs of the body; nothing was submitted", *total, enc.jobs),
			FieldError{Field: "total", Detail: strconv.FormatInt(*total, 10), Limit: fmt.Sprintf("at least the body's %d jobs", enc.jobs)})
		return
	}
	if time.Since(checkedAt) > submitCheckAge {
		// A long body: the tenant's counts and the group's refusals may
		// have moved since; the state is not asked again (the fetchers
		// refuse jobs for an ended group).
		state := check.State
		if check, err = g.q.ReadSubmitCheck(r.Context(), ref); err != nil {
			g.unavailable(w, r, err)
			return
		}
		check.State = state
		c.mark("check")
	}
	if enc.jobs > 0 && !g.withinQuota(w, r, ref.Tenant, check, enc.jobs) {
		return
	}
	rename := retryIDs(check.Refused)
	var room *redisq.SubmitRoom
	if enc.msgs > 0 {
		if room = g.reserveSubmitRoom(w, r, ref.Tenant, sp.bytes); room == nil {
			return
		}
		c.mark("room")
	}
	published, lastSeq, err := g.publishSpool(r.Context(), sp, rename)
	c.mark("publish")
	if room != nil {
		// Recorded once the answer is sent: until then the reservation
		// holds the request's bytes as the settlement would.
		defer func() {
			sendNow(w)
			g.settleSubmitRoom(context.WithoutCancel(r.Context()), room, published > 0, lastSeq)
		}()
	}
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	if total != nil {
		if err := g.client.ForTenant(ref.Tenant).Seal(r.Context(), ref.ID, *total); err != nil {
			g.unavailable(w, r, err)
			return
		}
	}
	writeJSON(w, http.StatusAccepted, SubmitResponse{Tenant: ref.Tenant, GroupID: ref.ID,
		Accepted: enc.jobs, Messages: enc.msgs, Total: total})
}

// bodyFormat tells NDJSON (application/x-ndjson, application/jsonl) from a
// JSON array (application/json, or no type).
func bodyFormat(r *http.Request) (ndjson bool, err error) {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return false, nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false, fmt.Errorf("bad Content-Type %q", ct)
	}
	switch mt {
	case "application/json":
		return false, nil
	case "application/x-ndjson", "application/ndjson", "application/jsonl", "application/x-jsonlines":
		return true, nil
	}
	return false, fmt.Errorf("Content-Type %s: send application/json (an array of jobs) or application/x-ndjson (a job per line)", mt)
}

// submitCheckAge is how old a jobs request's check (its group's state, its
// tenant's quota counts, its group's refused message ids) may be when the
// body has been read; a request whose body took longer reads it again.
const submitCheckAge = time.Second

// withinQuota answers 429 when n more jobs (and, for a new group, one more
// active group) would take the tenant over a quota (docs/ARCHITECTURE.md
// §5). The fetcher enforces the quotas on every message; this check spares
// the producer a request that would be dead-lettered as over_quota. It
// counts every job of the request as new, so a retried request near the
// limit may be refused until jobs finish.
func (g *Gateway) withinQuota(w http.ResponseWriter, r *http.Request, tenant string, check *redisq.SubmitCheck, n int64) bool {
	tq, groupExists := check.Quota, check.State != ""
	over := func(name string, count, add, limit int64) bool {
		if limit <= 0 || count+add <= limit {
			return false
		}
		w.Header().Set("Retry-After", "5")
		writeProblem(w, r, http.StatusTooManyRequests, slugOverQuota,
			fmt.Sprintf("tenant %s has %d %s; this request would make %d", tenant, count, name, count+add),
			FieldError{Field: name, Detail: fmt.Sprintf("%d + %d", count, add), Limit: fmt.Sprintf("at most %d (tenant quota)", limit)})
		return true
	}
	if !groupExists && over("activeGroups", tq.ActiveGroups, 1, tq.MaxActiveGroups) {
		return false
	}
	return !over("queuedJobs", tq.QueuedJobs, n, tq.MaxQueuedJobs)
}

// badBody answers a body that cannot be read as jobs.
func (g *Gateway) badBody(w http.ResponseWriter, r *http.Request, pos position, err error) {
	if bodyRefused(w, r, err) {
		return
	}
	var tl *tooLongError
	if errors.As(err, &tl) {
		fe := FieldError{Line: pos.line, Index: pos.indexRef(), Detail: "more than " + strconv.Itoa(tl.limit) + " bytes",
			Limit: "a job is at most " + strconv.Itoa(tl.limit) + " bytes (BULKACTION_MAX_MSG_SIZE)"}
		writeProblem(w, r, http.StatusRequestEntityTooLarge, slugTooLarge, pos.String()+": job too large", fe)
		return
	}
	var rd *readError
	if errors.As(err, &rd) {
		// The client went away or the connection broke: nothing to answer.
		g.log.Debug("jobs body unreadable", "err", rd.err)
		writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, "the body could not be read")
		return
	}
	var ve *contracts.ValidationError
	if errors.As(err, &ve) {
		// a job's field: a key spelt in another case or given twice, invalid UTF-8
		fe := fieldError(err)
		fe.Line, fe.Index = pos.line, pos.indexRef()
		writeProblem(w, r, http.StatusBadRequest, slugInvalidJob, pos.String()+": "+err.Error(), fe)
		return
	}
	fe := FieldError{Line: pos.line, Detail: err.Error()}
	if pos.index >= 0 {
		fe.Index = pos.indexRef()
	}
	writeProblem(w, r, http.StatusBadRequest, slugInvalidBody, pos.String()+": "+err.Error(), fe)
}

// unavailable answers 503 for a failure of Redis or NATS; the request can
// be retried (jobs are idempotent by their ids).
func (g *Gateway) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return
	}
	g.log.Error("request failed", "path", r.URL.Path, "err", err)
	w.Header().Set("Retry-After", "1")
	writeProblem(w, r, http.StatusServiceUnavailable, slugUnavailable,
		"the request could not be completed; retry it (with the same Idempotency-Key): jobs are deduplicated by id")
}

// publishSpool publishes the spooled messages, a chunk at a time; rename,
// when set, may give a message another id (a retry of a refused message).
// It returns how many chunks it published, whole or in part, and the
// highest SUBMIT sequence their PubAcks reported.
func (g *Gateway) publishSpool(ctx context.Context, sp *spool, rename func(*nats.Msg)) (published int, lastSeq uint64, err error) {
	it, err := sp.reader()
	if err != nil {
		return 0, 0, err
	}
	for ; ; published++ {
		var msgs []*nats.Msg
		size := 0
		for size < publishChunk {
			m, err := it.next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return published, lastSeq, err
			}
			if rename != nil {
				rename(m)
			}
			msgs = append(msgs, m)
			size += len(m.Data)
		}
		if len(msgs) == 0 {
			return published, lastSeq, nil
		}
		errs, last := jspub.PublishWindowSeq(ctx, g.deps.JS, msgs, 256)
		lastSeq = max(lastSeq, last)
		for _, err := range errs {
			if err != nil {
				return published + 1, lastSeq, fmt.Errorf("gateway: publish jobs: %w", err)
			}
		}
	}
}

// idSet remembers the job ids of a request and where each was first met.
// It keeps a 64-bit hash of each id (seeded per request), so a body of
// millions of jobs costs a few tens of bytes per job.
type idSet struct {
	seed maphash.Seed
	at   map[uint64]position
}

func newIDSet() *idSet { return &idSet{seed: maphash.MakeSeed(), at: map[uint64]position{}} }

// add records id at pos; dup is true, with the first position, when the
// request already had it.
func (s *idSet) add(id string, pos position) (first position, dup bool) {
	h := maphash.String(s.seed, id)
	if first, dup = s.at[h]; dup {
		return first, true
	}
	s.at[h] = pos
	return pos, false
}

// position is where a job is in the body.
type position struct {
	line  int // 1-based NDJSON line, 0 for an array
	index int // 0-based job index, -1 before the first
}

// indexRef is the index for a FieldError: a copy, so that a position
// whose index a problem names is not moved to the heap for every job read.
func (p position) indexRef() *int {
	i := p.index
	return &i
}

func (p position) String() string {
	if p.line > 0 {
		return "line " + strconv.Itoa(p.line)
	}
	if p.index < 0 {
		return "body"
	}
	return "jobs[" + strconv.Itoa(p.index) + "]"
}

// tooLongError is a job longer than the message limit.
type tooLongError struct{ limit int }

func (e *tooLongError) Error() string { return "job longer than " + strconv.Itoa(e.limit) + " bytes" }

// readError is a failure to read the body itself.
type readError struct{ err error }

func (e *readError) Error() string { return "reading the body: " + e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// jobSource yields the jobs of a body in order; io.EOF after the last.
type jobSource interface {
	next() (contracts.SubmitJob, position, error)
}

// ndjsonSource reads one job per line; blank lines are skipped.
type ndjsonSource struct {
	br    *bufio.Reader
	limit int
	line  int
	index int
	buf   []byte
}

func newNDJSONSource(r io.Reader, limit int) *ndjsonSource {
	return &ndjsonSource{br: bufio.NewReaderSize(r, 64<<10), limit: limit, index: -1}
}

func (s *ndjsonSource) next() (contracts.SubmitJob, position, error) {
	for {
		s.line++
		line, err := s.readLine()
		if err != nil && (!errors.Is(err, io.EOF) || len(line) == 0) {
			return contracts.SubmitJob{}, position{line: s.line, index: s.index + 1}, err
		}
		line = bytes.Trim(line, " \t\r") // JSON's whitespace, not Unicode's
		if len(line) == 0 {
			continue
		}
		s.index++
		j, err := decodeJobValue(line)
		return j, position{line: s.line, index: s.index}, err
	}
}

// readLine returns the next line without its newline, at most limit bytes
// (a longer line is a *tooLongError, and the rest of it is not kept).
func (s *ndjsonSource) readLine() ([]byte, error) {
	s.buf = s.buf[:0]
	for {
		chunk, err := s.br.ReadSlice('\n')
		if len(s.buf)+len(chunk) > s.limit+1 {
			return nil, &tooLongError{limit: s.limit}
		}
		s.buf = append(s.buf, chunk...)
		switch {
		case err == nil:
			return s.buf[:len(s.buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			return s.buf, io.EOF
		default:
			return nil, &readError{err}
		}
	}
}

// arraySource reads a JSON array of jobs element by element.
type arraySource struct {
	dec     *json.Decoder
	guard   *guardReader
	limit   int
	index   int
	started bool
}

func newArraySource(r io.Reader, limit int) *arraySource {
	gr := &guardReader{r: r, limit: int64(limit) + 64<<10}
	return &arraySource{dec: json.NewDecoder(gr), guard: gr, limit: limit, index: -1}
}

func (s *arraySource) next() (contracts.SubmitJob, position, error) {
	pos := position{index: s.index + 1}
	if !s.started {
		s.started = true
		tok, err := s.dec.Token()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return contracts.SubmitJob{}, position{index: -1}, errors.New("empty body: send a JSON array of jobs")
			}
			return contracts.SubmitJob{}, position{index: -1}, s.wrap(err)
		}
		if d, ok := tok.(json.Delim); !ok || d != '[' {
			return contracts.SubmitJob{}, position{index: -1}, errors.New("the body must be a JSON array of jobs (or NDJSON with Content-Type application/x-ndjson)")
		}
	}
	if !s.dec.More() {
		tok, err := s.dec.Token()
		if err != nil {
			return contracts.SubmitJob{}, pos, s.wrap(err)
		}
		if d, ok := tok.(json.Delim); !ok || d != ']' {
			return contracts.SubmitJob{}, pos, fmt.Errorf("unexpected %v", tok)
		}
		if _, err := s.dec.Token(); !errors.Is(err, io.EOF) {
			return contracts.SubmitJob{}, pos, errors.New("data after the array")
		}
		return contracts.SubmitJob{}, pos, io.EOF
	}
	s.index++
	start := s.dec.InputOffset()
	s.guard.base = start
	var raw json.RawMessage
	if err := s.dec.Decode(&raw); err != nil {
		return contracts.SubmitJob{}, pos, s.wrap(err)
	}
	if len(raw) > s.limit {
		return contracts.SubmitJob{}, pos, &tooLongError{limit: s.limit}
	}
	j, err := decodeJobValue(raw)
	return j, pos, err
}

func (s *arraySource) wrap(err error) error {
	var tl *tooLongError
	var rd *readError
	if errors.As(err, &tl) || errors.As(err, &rd) {
		return err
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("malformed JSON at byte %d: %s", se.Offset, se.Error())
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("the body ends inside the array")
	}
	return err
}

// guardReader fails once more than limit bytes were read past base (the
// start of the current array element), so one huge element cannot fill
// memory.
type guardReader struct {
	r     io.Reader
	read  int64
	base  int64
	limit int64
}

func (g *guardReader) Read(p []byte) (int, error) {
	if g.read-g.base > g.limit {
		return 0, &tooLongError{limit: int(g.limit - 64<<10)}
	}
	n, err := g.r.Read(p)
	g.read += int64(n)
	if err != nil && !errors.Is(err, io.EOF) {
		err = &readError{err}
	}
	return n, err
}

// jobFields are the fields of a job object.
var jobFields = []string{"jobId", "type", "destination", "payload"}

// decodeJob decodes one job object strictly: unknown fields are errors,
// so a misspelt "payload" is not silently dropped, and so are a field
// spelt in another case ("jobid"), a field given twice and invalid UTF-8
// (a *contracts.ValidationError naming the field).
func decodeJob(data []byte, j *contracts.SubmitJob) error {
	v, err := decodeJobValue(data)
	*j = v
	return err
}

// decodeJobValue is decodeJob returning the job: a job of the common form
// is not moved to the heap (only the slow path's decoder needs a pointer),
// which saves an allocation for every job a body holds.
func decodeJobValue(data []byte) (contracts.SubmitJob, error) {
	if j, ok := parseJobFast(data); ok {
		return j, nil
	}
	var j contracts.SubmitJob
	err := decodeJobSlow(data, &j)
	return j, err
}

// decodeJobSlow is decodeJob without its fast path.
func decodeJobSlow(data []byte, j *contracts.SubmitJob) error {
	if err := contracts.CheckObject(data, jobFields...); err != nil {
		return err
	}
	if i := skipWS(data, 0); i == len(data) || data[i] != '{' {
		return errors.New("a job must be a JSON object {\"jobId\", \"type\", \"payload\"}")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(j); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("malformed JSON at byte %d of the job: %s", se.Offset, se.Error())
		}
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return fmt.Errorf("field %s: want a JSON %s", te.Field, te.Type)
		}
		if msg, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return fmt.Errorf("unknown field %s (a job has jobId, type, destination and payload)", msg)
		}
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value on the line")
	}
	return nil
}

// batcher packs validated jobs into "jobs" messages of up to MaxBatch jobs
// within the message limit (headers counted) and writes them to a spool.
type batcher struct {
	ref    contracts.GroupRef
	group  []byte // `"group":{...},` or empty
	limit  int
	sp     *spool
	batch  []contracts.SubmitJob
	body   bytes.Buffer
	jobs   int64
	msgs   int64
	scrap  bytes.Buffer
	header int // the fixed part of the message: envelope and header
}

func newBatcher(ref contracts.GroupRef, settings *contracts.GroupSettings, lim contracts.Limits, sp *spool) *batcher {
	b := &batcher{ref: ref, limit: lim.MessageLimit(), sp: sp}
	if settings != nil {
		gs, _ := json.Marshal(settings)
		b.group = append(append([]byte(`"group":`), gs...), ',')
	}
	return b
}

const envelopeHead = `{"v":2,"kind":"jobs",`

// msgIDHeader is the wire size of a Nats-Msg-Id header without its value.
const msgIDHeader = len("NATS/1.0\r\n\r\n") + len("Nats-Msg-Id: \r\n")

// add encodes j and appends it to the current message, flushing first when
// it would not fit. Its job id is not one the request had before (the
// caller refuses a repeat first, idSet), so a message never holds an id
// twice.
func (b *batcher) add(j contracts.SubmitJob) error {
	b.scrap.Reset()
	if err := encodeJob(&b.scrap, j); err != nil {
		return err
	}
	// The msg id grows with the batch; a bound for it: tenant:group:jobs:<n>:<hash>.
	fixed := len(envelopeHead) + len(b.group) + len(`"jobs":[]}`) + msgIDHeader + len(b.ref.Tenant) + len(b.ref.ID) + 96
	if fixed+b.scrap.Len() > b.limit {
		return &contracts.ValidationError{Reason: contracts.ReasonTooLarge, Field: "",
			Problem: fmt.Sprintf("a message of %d bytes", fixed+b.scrap.Len()), Limit: fmt.Sprintf("limit %d", b.limit)}
	}
	if len(b.batch) > 0 && (len(b.batch) == contracts.MaxBatch || fixed+b.body.Len()+1+b.scrap.Len() > b.limit) {
		if err := b.flush(); err != nil {
			return err
		}
	}
	if len(b.batch) > 0 {
		b.body.WriteByte(',')
	}
	b.body.Write(b.scrap.Bytes())
	b.batch = append(b.batch, contracts.SubmitJob{JobID: j.JobID})
	return nil
}

// flush writes the current message to the spool.
func (b *batcher) flush() error {
	if len(b.batch) == 0 {
		return nil
	}
	if err := b.sp.write(contracts.JobsMsgID(b.ref, b.batch),
		[]byte(envelopeHead), b.group, []byte(`"jobs":[`), b.body.Bytes(), []byte(`]}`)); err != nil {
		return err
	}
	b.jobs += int64(len(b.batch))
	b.msgs++
	b.batch = b.batch[:0]
	b.body.Reset()
	return nil
}

// encodeJob writes j, canonicalized ([contracts.SubmitJob.Canonicalize]:
// ids, types and destinations need no escaping, the payload is in its final
// form), as the contract's compact JSON.
func encodeJob(buf *bytes.Buffer, j contracts.SubmitJob) error {
	buf.WriteString(`{"jobId":"`)
	buf.WriteString(j.JobID)
	buf.WriteString(`","type":"`)
	buf.WriteString(j.Type)
	buf.WriteByte('"')
	if j.Destination != "" {
		// validated: a token that needs no escaping
		buf.WriteString(`,"destination":"`)
		buf.WriteString(j.Destination)
		buf.WriteByte('"')
	}
	if len(j.Payload) > 0 {
		buf.WriteString(`,"payload":`)
		buf.Write(j.Payload)
	}
	buf.WriteByte('}')
	return nil
}

// errSpool marks a failure of the spool itself (disk full): a 503.
var errSpool = errors.New("gateway: spool")

// spoolChunk is the size of the memory spool's chunks; a request's first
// chunk is firstSpoolChunk, and each next one twice the last, up to
// spoolChunk, so that a small request allocates (and clears) little.
const (
	spoolChunk      = 1 << 20
	firstSpoolChunk = 32 << 10
)

// spool keeps encoded messages, in memory up to memLimit bytes (in chunks,
// so a small request allocates little), then in a temporary file. Each
// record is the lengths of the msg id and of the data, then both.
type spool struct {
	dir      string
	memLimit int
	subject  string
	chunks   [][]byte
	memUsed  int
	bytes    int64 // what the messages take on SUBMIT: subjects, ids and data
	f        *os.File
	w        *bufio.Writer
}

// write appends one message, its data given in parts.
func (s *spool) write(msgID string, parts ...[]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	var hdr [8]byte
	binary.LittleEndian.PutUint32(hdr[:4], uint32(len(msgID)))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(n))
	size := len(hdr) + len(msgID) + n
	s.bytes += int64(len(s.subject) + len(msgID) + n)
	if s.f == nil && s.memUsed+size <= s.memLimit {
		last := len(s.chunks) - 1
		if last < 0 || cap(s.chunks[last])-len(s.chunks[last]) < size {
			next := firstSpoolChunk
			if last >= 0 {
				next = min(2*cap(s.chunks[last]), spoolChunk)
			}
			s.chunks = append(s.chunks, make([]byte, 0, max(next, size)))
			last++
		}
		c := append(s.chunks[last], hdr[:]...)
		c = append(c, msgID...)
		for _, p := range parts {
			c = append(c, p...)
		}
		s.chunks[last] = c
		s.memUsed += size
		return nil
	}
	if s.f == nil {
		f, err := os.CreateTemp(s.dir, "bulkaction-gateway-*.spool")
		if err != nil {
			return fmt.Errorf("%w: %w", errSpool, err)
		}
		s.f, s.w = f, bufio.NewWriterSize(f, 256<<10)
	}
	if _, err := s.w.Write(hdr[:]); err != nil {
		return fmt.Errorf("%w: %w", errSpool, err)
	}
	if _, err := s.w.WriteString(msgID); err != nil {
		return fmt.Errorf("%w: %w", errSpool, err)
	}
	for _, p := range parts {
		if _, err := s.w.Write(p); err != nil {
			return fmt.Errorf("%w: %w", errSpool, err)
		}
	}
	return nil
}

// spoolReader reads the messages back, the in-memory ones first.
type spoolReader struct {
	r       io.Reader
	subject string
}

// reader returns the spooled messages.
func (s *spool) reader() (*spoolReader, error) {
	readers := make([]io.Reader, 0, len(s.chunks)+1)
	for _, c := range s.chunks {
		readers = append(readers, bytes.NewReader(c))
	}
	if s.f != nil {
		if err := s.w.Flush(); err != nil {
			return nil, fmt.Errorf("%w: %w", errSpool, err)
		}
		if _, err := s.f.Seek(0, io.SeekStart); err != nil {
			return nil, fmt.Errorf("%w: %w", errSpool, err)
		}
		readers = append(readers, bufio.NewReaderSize(s.f, 256<<10))
	}
	return &spoolReader{r: io.MultiReader(readers...), subject: s.subject}, nil
}

func (sr *spoolReader) next() (*nats.Msg, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(sr.r, hdr[:]); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, fmt.Errorf("%w: %w", errSpool, err)
	}
	n := binary.LittleEndian.Uint32(hdr[:4])
	buf := make([]byte, n+binary.LittleEndian.Uint32(hdr[4:]))
	if _, err := io.ReadFull(sr.r, buf); err != nil {
		return nil, fmt.Errorf("%w: %w", errSpool, err)
	}
	m := nats.NewMsg(sr.subject)
	m.Header.Set(nats.MsgIdHdr, string(buf[:n]))
	m.Data = buf[n:]
	return m, nil
}

// close removes the temporary file.
func (s *spool) close() {
	if s.f != nil {
		_ = s.f.Close()
		_ = os.Remove(s.f.Name())
	}
}
