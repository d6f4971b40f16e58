package contracts

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Version is the value of the "v" field of every message. A message with any other version is
// rejected with reason [ReasonBadVersion].
const Version = 2

// MaxBatch is the most items a jobs, ready or results message carries.
const MaxBatch = 1000

// Priority is the serving level of a job's group in the fair queue. The zero value "" means
// [PriorityNormal].
type Priority string

// The priority levels, served strictly in the order of [Priorities].
const (
	// PriorityHigh is served before every other level.
	PriorityHigh Priority = "high"
	// PriorityNormal is the default level.
	PriorityNormal Priority = "normal"
	// PriorityLow is served only when the other levels are empty.
	PriorityLow Priority = "low"
)

// Priorities lists the priority levels in serving order: high, normal, low. Callers must not
// modify it.
var Priorities = []Priority{PriorityHigh, PriorityNormal, PriorityLow}

// Valid reports whether p is one of the three levels. The empty string is not a level (see
// [ParsePriority] and [Priority.OrDefault]).
func (p Priority) Valid() bool {
	switch p {
	case PriorityHigh, PriorityNormal, PriorityLow:
		return true
	}
	return false
}

// OrDefault returns p, or [PriorityNormal] when p is empty.
func (p Priority) OrDefault() Priority {
	if p == "" {
		return PriorityNormal
	}
	return p
}

// ParsePriority parses a priority name. The empty string yields [PriorityNormal]; any name other
// than "high", "normal" or "low" (matched exactly) is an error with reason [ReasonInvalidField].
func ParsePriority(s string) (Priority, error) {
	p := Priority(s).OrDefault()
	if !p.Valid() {
		return "", priorityError(s)
	}
	return p, nil
}

// Kind tells which of its forms a [Submission] takes. The zero value is not a kind: a submission
// without one is rejected with reason [ReasonUnknownKind].
type Kind string

// The submission kinds.
const (
	// KindJobs submits 1..[MaxBatch] jobs of a group, validated as a whole.
	KindJobs Kind = "jobs"
	// KindSeal declares the number of distinct jobs the group has in total.
	KindSeal Kind = "seal"
	// KindCancel ends the group early: queued and backed-off jobs are dropped and counted as cancelled.
	KindCancel Kind = "cancel"
	// KindPause stops admitting the group's jobs; the group keeps its place in the fair queue.
	KindPause Kind = "pause"
	// KindResume lets a paused group's jobs be admitted again.
	KindResume Kind = "resume"
	// KindSchedule moves the notBefore of a group that has not started yet (its jobs have
	// not been admitted): earlier or later, a past time starting it at once.
	KindSchedule Kind = "schedule"
)

// Kinds lists every kind, in the order error messages name them. Callers must not modify it.
var Kinds = []Kind{KindJobs, KindSeal, KindCancel, KindPause, KindResume, KindSchedule}

// Valid reports whether k is one of the kinds.
func (k Kind) Valid() bool {
	switch k {
	case KindJobs, KindSeal, KindCancel, KindPause, KindResume, KindSchedule:
		return true
	}
	return false
}

// GroupRef identifies a group: a group is named by its tenant and its groupId, so two tenants may
// use the same groupId without touching each other. The zero value names no group.
type GroupRef struct {
	// Tenant is the tenant token (see [TenantPattern]).
	Tenant string
	// ID is the groupId token (see [IDPattern]).
	ID string
}

// Group returns the GroupRef of tenant and groupID.
func Group(tenant, groupID string) GroupRef { return GroupRef{Tenant: tenant, ID: groupID} }

// String returns "<tenant>/<groupId>", the form logs and errors use.
func (g GroupRef) String() string { return g.Tenant + "/" + g.ID }

// Validate checks both tokens: the tenant against [TenantPattern] (field "tenant") and the ID
// against [IDPattern] (field "groupId").
func (g GroupRef) Validate() error {
	if err := ValidateTenant(g.Tenant); err != nil {
		return err
	}
	return ValidateID("groupId", g.ID)
}

// Submission is the body of <prefix>.submit.<tenant>.<groupId>: jobs, a seal, a cancel, a pause or
// a resume, as Kind says. Fields that belong to another kind must be left at their zero values.
// The zero value is not a valid submission (V and Kind are required).
type Submission struct {
	// V is the contract version; it must equal [Version].
	V int `json:"v"`
	// Kind says which form this submission takes; required.
	Kind Kind `json:"kind"`
	// Tenant is the group's tenant. The subject is authoritative: a body may leave it out, and
	// one that names it must name the subject's <tenant> token. [DecodeSubmission] fills it in.
	Tenant string `json:"tenant,omitempty"`
	// GroupID is the group the submission belongs to; like Tenant, optional in the body, and when
	// given it must equal the subject's <groupId> token.
	GroupID string `json:"groupId,omitempty"`
	// Jobs are the jobs submitted (kind jobs only): 1..[MaxBatch] of them, with distinct job IDs.
	Jobs []SubmitJob `json:"jobs,omitempty"`
	// Group holds the group's settings (kind jobs only, optional). They apply when the message
	// creates the group; a later message with other settings is reported, never silently applied.
	Group *GroupSettings `json:"group,omitempty"`
	// Total is the number of distinct jobs the group has (kind seal only; required there),
	// within [0, MaxTotal]. Nil means not given.
	Total *int64 `json:"total,omitempty"`
	// NotBefore is the group's new notBefore (kind schedule only; required there), an RFC 3339
	// date-time as [GroupSettings.NotBefore].
	NotBefore string `json:"notBefore,omitempty"`
}

// Ref returns the group the submission names.
func (s *Submission) Ref() GroupRef { return GroupRef{Tenant: s.Tenant, ID: s.GroupID} }

// SubmitJob is one job of a jobs submission.
type SubmitJob struct {
	// JobID identifies the job within its group; required. A job is run once per (tenant,
	// groupId, jobId) for the whole life of the group, however often it is submitted.
	JobID string `json:"jobId"`
	// Type routes the job to the workers of that type; required.
	Type string `json:"type"`
	// Destination names the downstream the job calls (a partner's host, an account of a
	// provider), whose accepted rate the adaptive rate learns (docs/ARCHITECTURE.md §5); ""
	// means its type. It matches [DestinationPattern]: at most [MaxDestinationLen] bytes. The
	// built-in http type without one gets its URL's host at ingest. It is carried to the
	// worker ([ReadyJob.Destination]), which reports outcomes under it, and admission gates
	// the job by its learned rate as well as its type's limit. A tenant has at most
	// ADAPTIVE_RATE_MAX_DESTINATIONS_PER_TENANT at once; past it a job falls back to its type.
	Destination string `json:"destination,omitempty"`
	// Payload is the job's input, any JSON value. Nil or absent means JSON null. At most
	// [Limits.MaxPayloadBytes] bytes in compact form.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// GroupSettings are the settings a jobs submission gives the group it creates.
type GroupSettings struct {
	// Priority is the group's serving level; "" means [PriorityNormal].
	Priority Priority `json:"priority,omitempty"`
	// BasePriority is added to the group's fair-queue score, smaller is served earlier; 0 by
	// default, within [MinBasePriority, MaxBasePriority].
	BasePriority int64 `json:"basePriority,omitempty"`
	// MaxInFlight bounds the group's admitted but unfinished jobs; 0 means unlimited, at most
	// [MaxInFlight].
	MaxInFlight int64 `json:"maxInFlight,omitempty"`
	// CallbackURL is the group's completion callback: when the group ends (COMPLETED or
	// CANCELLED) its final [GroupEvent] is POSTed there, signed in the Standard Webhooks format
	// with its tenant's callback secret, at least once. An absolute http or https URL without
	// user information or fragment, at most [MaxCallbackURLBytes] bytes; "" means none. Where it
	// may point is decided by the deliverer's outbound rules (the http processor's allowed hosts).
	CallbackURL string `json:"callbackUrl,omitempty"`
	// NotBefore holds the group's jobs back until this time, an RFC 3339 date-time with a
	// time zone offset ("2026-11-27T09:00:00+01:00"): they are accepted, counted and validated
	// at once but not admitted before it. At most [MaxNotBeforeAhead] after the time the
	// settings are checked; a time in the past holds nothing; "" means none.
	NotBefore string `json:"notBefore,omitempty"`
	// Windows are the group's sending windows: its jobs are admitted only while one of them is
	// open; in-flight jobs finish when they close. At most [MaxWindows]; none means the
	// tenant's default windows when it has some, else always open.
	Windows []Window `json:"windows,omitempty"`
}

// Window is a weekly sending window: open on each of its Days while the clock of its Zone shows
// a time within [From, To). A To at or before From ends the window on the next day (a window
// from 22:00 to 06:00 on fri is open from Friday 22:00 to Saturday 06:00). On a day when the
// clocks change, the window is open exactly while the local clock shows such a time: a From
// that does not exist (02:30 when 02:00 jumps to 03:00) opens it at the jump, and an hour that
// repeats is inside it both times.
type Window struct {
	// Zone is an IANA time zone name ("Europe/Berlin", "UTC"); required.
	Zone string `json:"zone"`
	// Days are the days the window opens on: "mon", "tue", "wed", "thu", "fri", "sat",
	// "sun", each at most once; 1 to 7 of them, required.
	Days []string `json:"days"`
	// From is the local time the window opens, "HH:MM" from "00:00" to "23:59"; required.
	From string `json:"from"`
	// To is the local time the window closes, "HH:MM" from "00:00" to "24:00"; required,
	// and not equal to From.
	To string `json:"to"`
}

// MaxWindows is the most [Window]s of a group or tenant.
const MaxWindows = 16

// MaxNotBeforeAhead is the furthest a [GroupSettings.NotBefore] may be ahead of the time it is
// checked.
const MaxNotBeforeAhead = 366 * 24 * time.Hour

// MaxCallbackURLBytes is the longest [GroupSettings.CallbackURL].
const MaxCallbackURLBytes = 2048

// IsZero reports whether g sets nothing (every field its zero value).
func (g GroupSettings) IsZero() bool {
	return g.Priority == "" && g.BasePriority == 0 && g.MaxInFlight == 0 && g.CallbackURL == "" &&
		g.NotBefore == "" && len(g.Windows) == 0
}

// Settings returns s's group settings, the defaults when it has none.
func (s *Submission) Settings() GroupSettings {
	if s.Group == nil {
		return GroupSettings{}
	}
	return *s.Group
}

// MsgID returns the Nats-Msg-Id header value for s according to its kind: [JobsMsgID] for jobs,
// [SealMsgID] for a seal (a nil Total counts as 0) and [CancelMsgID] for a cancel. A pause or a
// resume has none ("": each one counts, so pause, resume, pause is not deduplicated), nor has an
// unknown kind.
func (s *Submission) MsgID() string {
	g := s.Ref()
	switch s.Kind {
	case KindJobs:
		return JobsMsgID(g, s.Jobs)
	case KindSeal:
		var total int64
		if s.Total != nil {
			total = *s.Total
		}
		return SealMsgID(g, total)
	case KindCancel:
		return CancelMsgID(g)
	}
	return ""
}

// ReadyBatch is the body of <prefix>.ready.<type>: 1..[MaxBatch] jobs admitted for execution, all
// of the subject's type. The zero value is not valid.
type ReadyBatch struct {
	// V is the contract version; it must equal [Version].
	V int `json:"v"`
	// Jobs are the admitted jobs.
	Jobs []ReadyJob `json:"jobs"`
}

// MsgID returns the Nats-Msg-Id header value for b: [ReadyMsgID] for a batch of one, and a digest
// of every job's IDs and attempt for a larger batch.
func (b *ReadyBatch) MsgID() string {
	if len(b.Jobs) == 1 {
		return b.Jobs[0].MsgID()
	}
	return batchMsgID("ready", len(b.Jobs), func(buf []byte, i int) []byte {
		j := &b.Jobs[i]
		return appendReadyMsgID(buf, j.Tenant, j.GroupID, j.JobID, j.Attempt)
	})
}

// ReadyJob is one attempt of a job admitted for execution, an item of a [ReadyBatch].
type ReadyJob struct {
	// Tenant is the job's tenant; required.
	Tenant string `json:"tenant"`
	// GroupID is the job's group; required.
	GroupID string `json:"groupId"`
	// JobID identifies the job within its group; required.
	JobID string `json:"jobId"`
	// Type is the job type, also the last token of the subject; required.
	Type string `json:"type"`
	// Payload is the job's input as submitted. Nil or absent means JSON null.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Attempt numbers the attempts of the job, starting at 1.
	Attempt int `json:"attempt"`
	// Destination is the job's explicit destination (see [SubmitJob.Destination]); absent
	// means its type. Workers report the job's outcome under it (the adaptive rate).
	Destination string `json:"destination,omitempty"`
}

// Ref returns the job's group.
func (r *ReadyJob) Ref() GroupRef { return GroupRef{Tenant: r.Tenant, ID: r.GroupID} }

// MsgID returns [ReadyMsgID] of r's IDs and attempt.
func (r *ReadyJob) MsgID() string { return ReadyMsgID(r.Ref(), r.JobID, r.Attempt) }

// ResultStatus is the outcome of one attempt. The zero value is not a status.
type ResultStatus string

// The result statuses.
const (
	// ResultSuccess means the processor finished the job.
	ResultSuccess ResultStatus = "SUCCESS"
	// ResultFailed means the job failed for good (a permanent error, or retries exhausted).
	ResultFailed ResultStatus = "FAILED"
)

// Valid reports whether s is [ResultSuccess] or [ResultFailed].
func (s ResultStatus) Valid() bool { return s == ResultSuccess || s == ResultFailed }

// ResultBatch is the body of <prefix>.result.<tenant>.<groupId>: the terminal outcomes of 1..
// [MaxBatch] job attempts of that group. The zero value is not valid.
type ResultBatch struct {
	// V is the contract version; it must equal [Version].
	V int `json:"v"`
	// Results are the outcomes.
	Results []JobResult `json:"results"`
}

// MsgID returns the Nats-Msg-Id header value for b: [ResultMsgID] for a batch of one, and a digest
// of every result's IDs and attempt for a larger batch.
func (b *ResultBatch) MsgID() string {
	if len(b.Results) == 1 {
		return b.Results[0].MsgID()
	}
	return batchMsgID("result", len(b.Results), func(buf []byte, i int) []byte {
		r := &b.Results[i]
		return append(appendReadyMsgID(buf, r.Tenant, r.GroupID, r.JobID, r.Attempt), ":result"...)
	})
}

// JobResult is the terminal outcome of one job attempt, an item of a [ResultBatch]. The zero value
// is not valid (the IDs, Attempt and Status are required).
type JobResult struct {
	// Tenant is the job's tenant. The subject is authoritative: a body may leave it out, and one
	// that names it must name the subject's <tenant> token. [DecodeResultBatch] fills it in.
	Tenant string `json:"tenant,omitempty"`
	// GroupID is the job's group, optional in the body like Tenant.
	GroupID string `json:"groupId,omitempty"`
	// JobID identifies the job within its group; required.
	JobID string `json:"jobId"`
	// Attempt is the attempt this result belongs to, starting at 1.
	Attempt int `json:"attempt"`
	// Status is SUCCESS or FAILED.
	Status ResultStatus `json:"status"`
	// Error describes the failure; empty when there is none.
	Error string `json:"error,omitempty"`
	// DurationMs is how long the attempt ran, in milliseconds; 0 or more.
	DurationMs int64 `json:"durationMs"`
}

// Ref returns the result's group.
func (r *JobResult) Ref() GroupRef { return GroupRef{Tenant: r.Tenant, ID: r.GroupID} }

// MsgID returns the Nats-Msg-Id header value for r, [ResultMsgID] of its IDs and attempt.
func (r *JobResult) MsgID() string { return ResultMsgID(r.Ref(), r.JobID, r.Attempt) }

// GroupState is the state of a group's life cycle: CREATED → RUNNING → AGGREGATING → COMPLETED,
// PAUSED (to and from CREATED, RUNNING or AGGREGATING), or CANCELLED from any non-terminal state. The zero value is not a state.
type GroupState string

// The group states.
const (
	// StateCreated means the group exists and none of its jobs has been admitted yet.
	StateCreated GroupState = "CREATED"
	// StateRunning means the group's jobs are being admitted and executed.
	StateRunning GroupState = "RUNNING"
	// StateAggregating means the group is sealed and its remaining results are being counted.
	StateAggregating GroupState = "AGGREGATING"
	// StateCompleted means the group is sealed and every job is terminal; Succeeded+Failed == Total.
	StateCompleted GroupState = "COMPLETED"
	// StateCancelled means the group was ended early; Succeeded+Failed+Cancelled == Jobs.
	StateCancelled GroupState = "CANCELLED"
	// StatePaused means admission skips the group, which keeps its place, until it is resumed.
	StatePaused GroupState = "PAUSED"
)

// Valid reports whether s is one of the six states.
func (s GroupState) Valid() bool {
	switch s {
	case StateCreated, StateRunning, StateAggregating, StateCompleted, StateCancelled, StatePaused:
		return true
	}
	return false
}

// Terminal reports whether s is final: [StateCompleted] or [StateCancelled].
func (s GroupState) Terminal() bool { return s == StateCompleted || s == StateCancelled }

// Ref returns the event's group.
func (e *GroupEvent) Ref() GroupRef { return GroupRef{Tenant: e.Tenant, ID: e.GroupID} }

// Final reports whether e is a group's last word: COMPLETED, or CANCELLED with every job accounted
// for (succeeded + failed + cancelled == jobs). A CANCELLED event whose counts do not add up yet is
// followed by another once the jobs that were running settle.
func (e *GroupEvent) Final() bool {
	switch e.State {
	case StateCompleted:
		return true
	case StateCancelled:
		return e.Succeeded+e.Failed+e.Cancelled >= e.Jobs
	}
	return false
}

// GroupEvent is the body of <prefix>.events.<tenant>.<groupId>: the public status feed of a group.
// One is published on every state change and, while the counts change, at most about once a
// second, so the last event of a group carries its current state and counts. The zero value is not
// valid (V, Tenant, GroupID and State are required).
type GroupEvent struct {
	// V is the contract version; it must equal [Version].
	V int `json:"v"`
	// Tenant is the group's tenant; required.
	Tenant string `json:"tenant"`
	// GroupID is the group the event describes; required.
	GroupID string `json:"groupId"`
	// State is the group's state after the change.
	State GroupState `json:"state"`
	// Total is the declared total of the seal; 0 while the group is not sealed.
	Total int64 `json:"total"`
	// Jobs is the number of distinct jobs received so far.
	Jobs int64 `json:"jobs"`
	// Succeeded counts the jobs that ended with SUCCESS.
	Succeeded int64 `json:"succeeded"`
	// Failed counts the jobs that ended with FAILED.
	Failed int64 `json:"failed"`
	// Cancelled counts the jobs dropped by a cancel.
	Cancelled int64 `json:"cancelled"`
	// At is when the change happened.
	At time.Time `json:"at"`
	// Notice reports, when set, something the group's producer should know that changed no
	// state: a submission whose group settings differ from the group's (they are not applied),
	// or a pause or resume that did nothing. Empty otherwise.
	Notice string `json:"notice,omitempty"`
	// Refused, when set, counts what the pipeline refused of the group's submissions after their
	// publish was acknowledged (dead-lettered: over_quota, over_total, group_ended, bad_seal, an
	// invalid message), as of this event. It is carried by the notice published when a message of
	// the group is refused, and by the CREATED event of a group whose first messages were refused;
	// nil otherwise.
	Refused *RefusedCounts `json:"refused,omitempty"`
}

// RefusedCounts is the refused part of a [GroupEvent]: the messages of the group the pipeline
// refused so far, their refused jobs, and the reason of the last one.
type RefusedCounts struct {
	// Messages counts the refused messages.
	Messages int64 `json:"messages"`
	// Jobs counts their refused jobs (a message refused in part counts those only).
	Jobs int64 `json:"jobs"`
	// Reason is the dead-letter reason of the last refused message.
	Reason string `json:"reason"`
}

// DeadLetter is the body of <prefix>.dlq.<reason>: a message that was rejected, and why. Build one
// with [NewDeadLetter].
type DeadLetter struct {
	// V is the contract version; it must equal [Version].
	V int `json:"v"`
	// Reason is the reason token, also the last token of the subject (see [Reason]).
	Reason string `json:"reason"`
	// Error is the rejection's error message.
	Error string `json:"error"`
	// Subject is the subject the rejected message arrived on.
	Subject string `json:"subject"`
	// Message is the rejected body when it is valid JSON; nil otherwise.
	Message json.RawMessage `json:"message,omitempty"`
	// Raw is the rejected body as text when it is not valid JSON, or the start of a body too large
	// to carry whole (then Truncated is set); "" otherwise.
	Raw string `json:"raw,omitempty"`
	// Truncated is set when the body did not fit in the dead letter: Raw then holds its start, up to
	// a rune boundary, and Size its length.
	Truncated bool `json:"truncated,omitempty"`
	// Size is the length in bytes of the rejected body when it was truncated; 0 otherwise.
	Size int `json:"size,omitempty"`
}

// MaxDeadLetterError is the longest error text a dead letter carries; a longer one is cut, ending
// in "…".
const MaxDeadLetterError = 1024

// Encode returns the JSON of d in at most limit bytes (limit > 0). When the whole of it does not fit
// — a body near the message limit grows up to six times when escaped into JSON — the body is
// replaced by as much of its start as fits, as text in Raw, with Truncated and Size set; so a dead
// letter is never larger than the dead-letter stream accepts. It fails only when even an empty
// body does not fit (limit too small for the reason, error and subject).
func (d DeadLetter) Encode(limit int) ([]byte, error) {
	d.Error = cut(d.Error, MaxDeadLetterError)
	data, err := json.Marshal(&d)
	if err != nil || len(data) <= limit {
		return data, err
	}
	body := d.Raw
	if d.Message != nil {
		body = string(d.Message)
	}
	d.Message, d.Raw, d.Truncated, d.Size = nil, "", true, len(body)
	empty, err := json.Marshal(&d)
	if err != nil {
		return nil, err
	}
	// The start of the body that fits, measured by its escaped size (an
	// upper bound of what json.Marshal writes), then encoded once; the loop
	// only trims what the bound got wrong.
	room := limit - len(empty) - len(`,"raw":""`)
	if room < 0 {
		return nil, fmt.Errorf("contracts: a dead letter needs %d bytes, the limit is %d", len(empty), limit)
	}
	d.Raw = escapedPrefix(body, room)
	for {
		data, err = json.Marshal(&d)
		if err != nil || len(data) <= limit || d.Raw == "" {
			return data, err
		}
		d.Raw = runePrefix(d.Raw, len(d.Raw)-(len(data)-limit))
	}
}

// escapedPrefix returns the longest start of s, cut on a rune boundary,
// whose JSON string encoding takes at most room bytes. It counts each rune
// at the most json.Marshal writes for it.
func escapedPrefix(s string, room int) string {
	used := 0
	for i, r := range s {
		size := utf8.RuneLen(r)
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			size = 6 // an invalid byte becomes \ufffd
		case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
			size = 2
		case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029':
			size = 6
		}
		if used+size > room {
			return s[:i]
		}
		used += size
	}
	return s
}

// cut returns s cut to at most n bytes on a rune boundary, ending in "…" when it was cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = "…"
	return runePrefix(s, max(n-len(mark), 0)) + mark
}

// runePrefix returns the longest start of s of at most n bytes that ends on a rune boundary.
func runePrefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// NewDeadLetter describes a rejected message: the reason is [Reason](err) and the error text
// err.Error() (both "" for a nil err); a body that is valid JSON goes into Message, any other body
// into Raw.
func NewDeadLetter(subject string, data []byte, err error) DeadLetter {
	d := DeadLetter{V: Version, Reason: Reason(err), Subject: subject}
	if err != nil {
		d.Error = err.Error()
	}
	if json.Valid(data) {
		d.Message = json.RawMessage(append([]byte(nil), data...))
	} else {
		d.Raw = string(data)
	}
	return d
}
