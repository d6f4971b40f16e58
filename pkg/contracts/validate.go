package contracts

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Fixed limits of the contract, and the default of the one configurable limit ([Limits]).
const (
	// MaxIDLen is the maximum length of a group or job ID, in bytes.
	MaxIDLen = 128
	// MaxTenantLen is the maximum length of a tenant token, in bytes.
	MaxTenantLen = 64
	// TenantPattern is the pattern every tenant token matches.
	TenantPattern = `^[A-Za-z0-9_-]{1,64}$`
	// MaxInFlight is the largest maxInFlight of a group, 1e6.
	MaxInFlight = 1_000_000
	// MaxTypeLen is the maximum length of a job type, in bytes.
	MaxTypeLen = 64
	// IDPattern is the pattern every group and job ID matches.
	IDPattern = `^[A-Za-z0-9_-]{1,128}$`
	// TypePattern is the pattern every job type matches.
	TypePattern = `^[A-Za-z0-9_-]{1,64}$`
	// MaxDestinationLen is the maximum length of a job's destination, in bytes.
	MaxDestinationLen = 128
	// DestinationPattern is the pattern every job destination matches: a type's characters and
	// dots, so that a host name ("api.partner.example") is one.
	DestinationPattern = `^[A-Za-z0-9_.-]{1,128}$`
	// MaxBasePriority is the largest basePriority, 1e12 (about 31.7 years in milliseconds). It keeps
	// fair-queue scores (now in ms + basePriority + a progress term) exact in a Redis double.
	MaxBasePriority = 1_000_000_000_000
	// MinBasePriority is the smallest basePriority, -1e12.
	MinBasePriority = -MaxBasePriority
	// MaxTotal is the largest declared total of a seal, 1e9 jobs.
	MaxTotal = 1_000_000_000
	// DefaultMaxPayloadBytes is the default payload limit, 256 KiB.
	DefaultMaxPayloadBytes = 256 << 10
	// DefaultMaxMessageBytes is the default message limit, 1 MiB (NATS's default max_payload).
	DefaultMaxMessageBytes = 1 << 20
)

// Limits are the configurable validation limits. The zero value means the defaults.
type Limits struct {
	// MaxPayloadBytes is the largest payload, in bytes of its compact JSON form. Zero or negative
	// means [DefaultMaxPayloadBytes].
	MaxPayloadBytes int
	// MaxMessageBytes is the largest message the streams accept (dead letters are cut to fit it).
	// Zero or negative means [DefaultMaxMessageBytes].
	MaxMessageBytes int
}

// MessageLimit returns the effective message limit: MaxMessageBytes, or [DefaultMaxMessageBytes]
// when that is zero or negative.
func (l Limits) MessageLimit() int {
	if l.MaxMessageBytes <= 0 {
		return DefaultMaxMessageBytes
	}
	return l.MaxMessageBytes
}

// PayloadLimit returns the effective payload limit: MaxPayloadBytes, or [DefaultMaxPayloadBytes]
// when that is zero or negative.
func (l Limits) PayloadLimit() int {
	if l.MaxPayloadBytes <= 0 {
		return DefaultMaxPayloadBytes
	}
	return l.MaxPayloadBytes
}

// Reason tokens: the last token of a dead-letter subject, and [ValidationError.Reason].
const (
	// ReasonBadJSON means the body is not JSON, or not a JSON object.
	ReasonBadJSON = "bad_json"
	// ReasonBadVersion means "v" is missing or differs from [Version].
	ReasonBadVersion = "bad_version"
	// ReasonUnknownKind means a submission's "kind" is missing or not jobs, seal, cancel, pause or
	// resume.
	ReasonUnknownKind = "unknown_kind"
	// ReasonInvalidField means a field is missing, has the wrong JSON type, is out of its limits
	// or belongs to another kind.
	ReasonInvalidField = "invalid_field"
	// ReasonTooLarge means the payload exceeds [Limits.MaxPayloadBytes].
	ReasonTooLarge = "too_large"
	// ReasonSubjectMismatch means a body's tenant or groupId differs from its subject's token, or
	// the subject is not of the message's kind.
	ReasonSubjectMismatch = "subject_mismatch"
	// ReasonInvalid is what [Reason] returns for an error that carries no reason of its own.
	ReasonInvalid = "invalid"
)

// ErrInvalid matches every [*ValidationError] under [errors.Is].
var ErrInvalid = errors.New("contracts: invalid message")

// ValidationError describes why a message or a value was rejected. It matches [ErrInvalid] under
// [errors.Is].
type ValidationError struct {
	// Reason is the dead-letter reason token, one of the Reason… constants.
	Reason string
	// Field is the JSON name of the offending field; "" when the whole body is at fault.
	Field string
	// Problem says what is wrong with the value.
	Problem string
	// Limit states the rule the value broke; "" when there is nothing to add.
	Limit string
}

// Error formats e as "contracts: <field>: <problem> (<limit>)", leaving out the parts that are empty.
func (e *ValidationError) Error() string {
	s := "contracts: "
	if e.Field != "" {
		s += e.Field + ": "
	}
	s += e.Problem
	if e.Limit != "" {
		s += " (" + e.Limit + ")"
	}
	return s
}

// Is reports whether target is [ErrInvalid].
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// Reason returns the dead-letter reason token of err: the Reason of the first [*ValidationError] in
// its chain, [ReasonInvalid] for any other error, and "" for nil.
func Reason(err error) string {
	if err == nil {
		return ""
	}
	var ve *ValidationError
	if errors.As(err, &ve) && ve.Reason != "" {
		return ve.Reason
	}
	return ReasonInvalid
}

func invalidField(field, problem, limit string) *ValidationError {
	return &ValidationError{Reason: ReasonInvalidField, Field: field, Problem: problem, Limit: limit}
}

// ValidateID checks that v is a valid group or job ID (see [IDPattern]). The error, a
// [*ValidationError] with reason [ReasonInvalidField], is reported under the given field name.
func ValidateID(field, v string) error {
	return validateToken(field, v, MaxIDLen, IDPattern)
}

// ValidateTenant checks that v is a valid tenant token (see [TenantPattern]), reporting errors
// under the field name "tenant".
func ValidateTenant(v string) error {
	return validateToken("tenant", v, MaxTenantLen, TenantPattern)
}

// ValidateType checks that v is a valid job type (see [TypePattern]), reporting errors under
// the field name "type".
func ValidateType(v string) error {
	return validateToken("type", v, MaxTypeLen, TypePattern)
}

// ValidateDestination checks that v is a valid job destination (see [DestinationPattern]),
// reporting errors under the field name "destination".
func ValidateDestination(v string) error {
	return validateDottedToken("destination", v, MaxDestinationLen, DestinationPattern, true)
}

func validateToken(field, v string, maxLen int, pattern string) error {
	return validateDottedToken(field, v, maxLen, pattern, false)
}

// validateDottedToken checks v against [A-Za-z0-9_-] (and '.' with dots) of 1..maxLen bytes.
func validateDottedToken(field, v string, maxLen int, pattern string, dots bool) error {
	if v == "" {
		return invalidField(field, "empty", "must match "+pattern)
	}
	if len(v) > maxLen {
		return invalidField(field, strconv.Itoa(len(v))+" characters", "must match "+pattern)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') || c == '_' || c == '-' ||
			(dots && c == '.') {
			continue
		}
		r, size := utf8.DecodeRuneInString(v[i:])
		if r == utf8.RuneError && size <= 1 {
			return invalidField(field, fmt.Sprintf("contains invalid UTF-8 byte 0x%02x", c), "must match "+pattern)
		}
		return invalidField(field, fmt.Sprintf("contains %q", r), "must match "+pattern)
	}
	return nil
}

func versionError(v int) error {
	return &ValidationError{Reason: ReasonBadVersion, Field: "v", Problem: "got " + strconv.Itoa(v),
		Limit: "must be " + strconv.Itoa(Version)}
}

const kindLimit = "must be one of jobs, seal, cancel, pause, resume"

func kindError(k Kind) error {
	p := fmt.Sprintf("unknown kind %q", string(k))
	if k == "" {
		p = "missing"
	}
	return &ValidationError{Reason: ReasonUnknownKind, Field: "kind", Problem: p,
		Limit: kindLimit}
}

func priorityError(s string) error {
	return invalidField("priority", fmt.Sprintf("unknown priority %q", s), "must be one of high, normal, low")
}

func rangeError(field string, v, lo, hi int64) error {
	return invalidField(field, strconv.FormatInt(v, 10)+" out of range",
		"must be within ["+strconv.FormatInt(lo, 10)+", "+strconv.FormatInt(hi, 10)+"]")
}

func minError(field string, v, lo int64) error {
	return invalidField(field, strconv.FormatInt(v, 10)+" out of range", "must be >= "+strconv.FormatInt(lo, 10))
}

func notAllowed(field string, k Kind, allowed Kind) error {
	return invalidField(field, "set on kind "+string(k), "allowed only for kind "+string(allowed))
}

// canonicalPayload returns p in the form encoding/json emits when it encodes a json.RawMessage
// (compact, with <, >, & and U+2028/U+2029 escaped), or nil for an absent or null payload.
func canonicalPayload(p json.RawMessage) (json.RawMessage, error) {
	if len(p) == 0 {
		return nil, nil
	}
	if alreadyCanonical(p) {
		if string(p) == "null" {
			return nil, nil
		}
		return p, nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, invalidField("payload", "not valid JSON", "must be a JSON value")
	}
	if string(b) == "null" {
		return nil, nil
	}
	return b, nil
}

// alreadyCanonical reports whether p is valid JSON that encoding/json would
// write unchanged: no byte it removes or escapes (whitespace, <, >, &, and
// the lead byte of U+2028/U+2029) appears anywhere in it.
func alreadyCanonical(p []byte) bool {
	for _, c := range p {
		switch c {
		case ' ', '\t', '\n', '\r', '<', '>', '&', 0xE2:
			return false
		}
	}
	return json.Valid(p)
}

// payloadAbsent reports whether p is absent or JSON null.
func payloadAbsent(p json.RawMessage) bool {
	if len(p) == 0 {
		return true
	}
	c, err := canonicalPayload(p)
	return err == nil && c == nil
}

// checkPayload validates p; canonical says p is known to be in canonical form already.
func checkPayload(p json.RawMessage, lim Limits, canonical bool) error {
	size := len(p)
	if !canonical {
		c, err := canonicalPayload(p)
		if err != nil {
			return err
		}
		size = len(c)
	}
	if max := lim.PayloadLimit(); size > max {
		return &ValidationError{Reason: ReasonTooLarge, Field: "payload",
			Problem: strconv.Itoa(size) + " bytes", Limit: "limit " + strconv.Itoa(max)}
	}
	return nil
}

// Validate checks s against the contract and lim: the version, the kind, the tokens, the fields
// its kind requires, and that fields of other kinds are unset. A jobs submission is checked as a
// whole: 1..[MaxBatch] jobs with distinct job IDs, the first invalid one named by its index
// ("jobs[3].type"). Payload sizes are measured in compact JSON form. It returns a
// [*ValidationError], or nil. Validate does not know the subject; see [DecodeSubmission].
func (s *Submission) Validate(lim Limits) error {
	return s.validate(lim, false)
}

func (s *Submission) validate(lim Limits, canonical bool) error {
	if s == nil {
		return &ValidationError{Reason: ReasonInvalid, Problem: "no submission"}
	}
	if s.V != Version {
		return versionError(s.V)
	}
	if !s.Kind.Valid() {
		return kindError(s.Kind)
	}
	if err := s.Ref().Validate(); err != nil {
		return err
	}
	if s.Kind != KindSchedule && s.NotBefore != "" {
		return notAllowed("notBefore", s.Kind, KindSchedule)
	}
	if s.Kind == KindJobs {
		if s.Total != nil {
			return notAllowed("total", s.Kind, KindSeal)
		}
		if err := s.Settings().Validate(); err != nil {
			return err
		}
		return validateJobs(s.Jobs, lim, canonical)
	}
	switch {
	case s.Jobs != nil:
		return notAllowed("jobs", s.Kind, KindJobs)
	case s.Group != nil:
		return notAllowed("group", s.Kind, KindJobs)
	}
	if s.Kind == KindSchedule {
		if s.Total != nil {
			return notAllowed("total", s.Kind, KindSeal)
		}
		if s.NotBefore == "" {
			return invalidField("notBefore", "missing", "required for kind schedule")
		}
		return checkNotBefore(s.NotBefore, time.Now())
	}
	if s.Kind != KindSeal {
		if s.Total != nil {
			return notAllowed("total", s.Kind, KindSeal)
		}
		return nil
	}
	if s.Total == nil {
		return invalidField("total", "missing", "required for kind seal")
	}
	if *s.Total < 0 || *s.Total > MaxTotal {
		return rangeError("total", *s.Total, 0, MaxTotal)
	}
	return nil
}

// Validate checks the settings' ranges, reporting fields as "group.<name>".
// It returns a [*ValidationError], or nil.
func (g GroupSettings) Validate() error {
	if g.Priority != "" && !g.Priority.Valid() {
		return prefixed("group.", priorityError(string(g.Priority)))
	}
	if g.BasePriority < MinBasePriority || g.BasePriority > MaxBasePriority {
		return rangeError("group.basePriority", g.BasePriority, MinBasePriority, MaxBasePriority)
	}
	if g.MaxInFlight < 0 || g.MaxInFlight > MaxInFlight {
		return rangeError("group.maxInFlight", g.MaxInFlight, 0, MaxInFlight)
	}
	if g.CallbackURL != "" {
		if err := checkCallbackURL(g.CallbackURL); err != nil {
			return prefixed("group.", err)
		}
	}
	if g.NotBefore != "" {
		if err := checkNotBefore(g.NotBefore, time.Now()); err != nil {
			return prefixed("group.", err)
		}
	}
	return ValidateWindows("group.windows", g.Windows)
}

// checkCallbackURL checks the form of a callback URL (not where it points: that is the
// deliverer's outbound rules).
func checkCallbackURL(s string) error {
	const field = "callbackUrl"
	if len(s) > MaxCallbackURLBytes {
		return invalidField(field, fmt.Sprintf("%d bytes", len(s)), fmt.Sprintf("at most %d bytes", MaxCallbackURLBytes))
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return invalidField(field, "not a URL", "an absolute http or https URL")
	case !strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https"):
		return invalidField(field, fmt.Sprintf("scheme %q", u.Scheme), "an absolute http or https URL")
	case u.Hostname() == "":
		return invalidField(field, "no host", "an absolute http or https URL")
	case u.User != nil:
		return invalidField(field, "user information", "no user information (credentials) in the URL")
	case u.Fragment != "" || strings.Contains(s, "#"):
		return invalidField(field, "a fragment", "no fragment")
	}
	return nil
}

func validateJobs(jobs []SubmitJob, lim Limits, canonical bool) error {
	if err := checkBatch("jobs", len(jobs)); err != nil {
		return err
	}
	var seen map[string]int
	if len(jobs) > 1 {
		seen = make(map[string]int, len(jobs))
	}
	for i := range jobs {
		j := &jobs[i]
		if err := j.validate(lim, canonical); err != nil {
			return ItemError("jobs", i, err)
		}
		if seen != nil {
			if k, dup := seen[j.JobID]; dup {
				return invalidField(itemField("jobs", i)+"jobId", "duplicate of "+itemField("jobs", k)+"jobId",
					"job IDs must be distinct within a message")
			}
			seen[j.JobID] = i
		}
	}
	return nil
}

// Validate checks one job of a jobs submission on its own: its id, its type,
// its destination when it names one, that its payload is valid UTF-8
// ([CheckUTF8]) and the payload's size in compact JSON form, reporting the
// fields as jobId, type, destination and payload ([ItemError] names the
// job's index). It returns a
// [*ValidationError], or nil.
func (j *SubmitJob) Validate(lim Limits) error { return j.validate(lim, false) }

// Canonicalize validates j as [SubmitJob.Validate] does and replaces its
// Payload with the canonical form, the bytes encoding/json writes for a
// json.RawMessage (compact, with <, >, & and U+2028/U+2029 escaped; nil for
// an absent or null payload), so that encoding j again costs no second
// pass over the payload.
func (j *SubmitJob) Canonicalize(lim Limits) error {
	if err := ValidateID("jobId", j.JobID); err != nil {
		return err
	}
	if err := ValidateType(j.Type); err != nil {
		return err
	}
	if j.Destination != "" {
		if err := ValidateDestination(j.Destination); err != nil {
			return err
		}
	}
	if err := CheckUTF8("payload", j.Payload); err != nil {
		return err
	}
	c, err := canonicalPayload(j.Payload)
	if err != nil {
		return err
	}
	j.Payload = c
	return checkPayload(c, lim, true)
}

func (j *SubmitJob) validate(lim Limits, canonical bool) error {
	if err := ValidateID("jobId", j.JobID); err != nil {
		return err
	}
	if err := ValidateType(j.Type); err != nil {
		return err
	}
	if j.Destination != "" {
		if err := ValidateDestination(j.Destination); err != nil {
			return err
		}
	}
	if err := CheckUTF8("payload", j.Payload); err != nil {
		return err
	}
	return checkPayload(j.Payload, lim, canonical)
}

// ItemError names the item an error of an array's item is about: the field
// of a [*ValidationError] becomes "<array>[i].<field>" (e.g. jobs[3].type).
// Any other error is returned as it is.
func ItemError(array string, i int, err error) error {
	return prefixed(itemField(array, i), err)
}

// checkBatch checks the length of an array of items.
func checkBatch(field string, n int) error {
	if n < 1 || n > MaxBatch {
		return invalidField(field, strconv.Itoa(n)+" items", "must hold 1 to "+strconv.Itoa(MaxBatch))
	}
	return nil
}

// itemField returns "<field>[i]." for an item's fields.
func itemField(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]." }

// prefixed puts head in front of the field of a *ValidationError.
func prefixed(head string, err error) error {
	var ve *ValidationError
	if errors.As(err, &ve) {
		c := *ve
		c.Field = head + c.Field
		return &c
	}
	return err
}

// Validate checks b against the contract and lim: the version, 1..[MaxBatch] jobs of one type, and
// for each job the tokens, the payload size (in compact JSON form) and an attempt of at least 1. The
// first invalid job is named by its index. It returns a [*ValidationError], or nil.
func (b *ReadyBatch) Validate(lim Limits) error {
	return b.validate(lim, false)
}

func (b *ReadyBatch) validate(lim Limits, canonical bool) error {
	if b == nil {
		return &ValidationError{Reason: ReasonInvalid, Problem: "no ready batch"}
	}
	if b.V != Version {
		return versionError(b.V)
	}
	if err := checkBatch("jobs", len(b.Jobs)); err != nil {
		return err
	}
	for i := range b.Jobs {
		if err := b.Jobs[i].validate(lim, canonical); err != nil {
			return prefixed(itemField("jobs", i), err)
		}
		if b.Jobs[i].Type != b.Jobs[0].Type {
			return invalidField(itemField("jobs", i)+"type", strconv.Quote(b.Jobs[i].Type)+" differs from jobs[0]",
				"a ready message holds jobs of one type")
		}
	}
	return nil
}

func (r *ReadyJob) validate(lim Limits, canonical bool) error {
	if err := r.Ref().Validate(); err != nil {
		return err
	}
	if err := ValidateID("jobId", r.JobID); err != nil {
		return err
	}
	if err := ValidateType(r.Type); err != nil {
		return err
	}
	if r.Attempt < 1 {
		return minError("attempt", int64(r.Attempt), 1)
	}
	if r.Destination != "" {
		if err := ValidateDestination(r.Destination); err != nil {
			return err
		}
	}
	return checkPayload(r.Payload, lim, canonical)
}

// Validate checks b against the contract: the version, 1..[MaxBatch] results, and for each the
// tokens (Tenant and GroupID included: see [DecodeResultBatch], which fills them from the subject),
// an attempt of at least 1, a known status and a duration of 0 or more. It returns a
// [*ValidationError], or nil.
func (b *ResultBatch) Validate() error {
	if b == nil {
		return &ValidationError{Reason: ReasonInvalid, Problem: "no result batch"}
	}
	if b.V != Version {
		return versionError(b.V)
	}
	if err := checkBatch("results", len(b.Results)); err != nil {
		return err
	}
	for i := range b.Results {
		if err := b.Results[i].Validate(); err != nil {
			return prefixed(itemField("results", i), err)
		}
	}
	return nil
}

// Validate checks one result: the tokens, an attempt of at least 1, a known status and a duration
// of 0 or more. It returns a [*ValidationError], or nil.
func (r *JobResult) Validate() error {
	if r == nil {
		return &ValidationError{Reason: ReasonInvalid, Problem: "no job result"}
	}
	if err := r.Ref().Validate(); err != nil {
		return err
	}
	if err := ValidateID("jobId", r.JobID); err != nil {
		return err
	}
	if r.Attempt < 1 {
		return minError("attempt", int64(r.Attempt), 1)
	}
	if !r.Status.Valid() {
		return invalidField("status", fmt.Sprintf("unknown status %q", string(r.Status)), "must be one of SUCCESS, FAILED")
	}
	if r.DurationMs < 0 {
		return minError("durationMs", r.DurationMs, 0)
	}
	return nil
}

// Validate checks e against the contract: the version, the tokens, a known state and counters of
// 0 or more. It does not check how the counters relate to each other. It returns a
// [*ValidationError], or nil.
func (e *GroupEvent) Validate() error {
	if e == nil {
		return &ValidationError{Reason: ReasonInvalid, Problem: "no group event"}
	}
	if e.V != Version {
		return versionError(e.V)
	}
	if err := e.Ref().Validate(); err != nil {
		return err
	}
	if !e.State.Valid() {
		return invalidField("state", fmt.Sprintf("unknown state %q", string(e.State)),
			"must be one of CREATED, RUNNING, AGGREGATING, COMPLETED, CANCELLED, PAUSED")
	}
	for _, c := range []struct {
		name string
		v    int64
	}{{"total", e.Total}, {"jobs", e.Jobs}, {"succeeded", e.Succeeded}, {"failed", e.Failed}, {"cancelled", e.Cancelled}} {
		if c.v < 0 {
			return minError(c.name, c.v, 0)
		}
	}
	if r := e.Refused; r != nil {
		if r.Messages < 0 {
			return minError("refused.messages", r.Messages, 0)
		}
		if r.Jobs < 0 {
			return minError("refused.jobs", r.Jobs, 0)
		}
	}
	return nil
}
