package contracts_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// wantInvalid asserts that err is a *ValidationError with the given reason and field whose message
// names the field and contains every one of limitParts.
func wantInvalid(t *testing.T, err error, reason, field string, limitParts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got nil error, want %s on field %q", reason, field)
	}
	var ve *contracts.ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("error %v (%T) is not a *ValidationError", err, err)
	}
	if !errors.Is(err, contracts.ErrInvalid) {
		t.Errorf("errors.Is(%v, ErrInvalid) = false", err)
	}
	if ve.Reason != reason || contracts.Reason(err) != reason {
		t.Errorf("reason = %q (Reason() %q), want %q; error %v", ve.Reason, contracts.Reason(err), reason, err)
	}
	if ve.Field != field {
		t.Errorf("field = %q, want %q; error %v", ve.Field, field, err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "contracts: ") {
		t.Errorf("message %q lacks the package prefix", msg)
	}
	if field != "" && !strings.Contains(msg, field+": ") {
		t.Errorf("message %q does not name field %q", msg, field)
	}
	for _, p := range limitParts {
		if !strings.Contains(msg, p) {
			t.Errorf("message %q does not contain %q", msg, p)
		}
	}
}

var (
	idRE   = regexp.MustCompile(contracts.IDPattern)
	typeRE = regexp.MustCompile(contracts.TypePattern)
)

func TestValidateID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		v       string
		ok      bool
		problem string
	}{
		{"one char", "a", true, ""},
		{"all classes", "Az09_-", true, ""},
		{"128 chars", strings.Repeat("x", 128), true, ""},
		{"129 chars", strings.Repeat("x", 129), false, "129 characters"},
		{"empty", "", false, "empty"},
		{"dot", "a.b", false, "contains '.'"},
		{"colon", "a:b", false, "contains ':'"},
		{"open brace", "a{b", false, "contains '{'"},
		{"close brace", "a}b", false, "contains '}'"},
		{"star", "*", false, "contains '*'"},
		{"gt", "a>", false, "contains '>'"},
		{"space", "a b", false, "contains ' '"},
		{"NUL", "a\x00", false, `contains '\x00'`},
		{"non-ASCII letter", "é", false, "contains 'é'"},
		{"invalid UTF-8", "a\xff", false, "invalid UTF-8 byte 0xff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := contracts.ValidateID("jobId", tt.v)
			if got := idRE.MatchString(tt.v); got != tt.ok {
				t.Fatalf("test table disagrees with IDPattern for %q", tt.v)
			}
			if tt.ok {
				if err != nil {
					t.Fatalf("ValidateID(%q) = %v, want nil", tt.v, err)
				}
				return
			}
			wantInvalid(t, err, contracts.ReasonInvalidField, "jobId", tt.problem, "must match ^[A-Za-z0-9_-]{1,128}$")
		})
	}
}

func TestValidateType(t *testing.T) {
	t.Parallel()
	if err := contracts.ValidateType(strings.Repeat("t", 64)); err != nil {
		t.Fatalf("64-char type: %v", err)
	}
	err := contracts.ValidateType(strings.Repeat("t", 65))
	wantInvalid(t, err, contracts.ReasonInvalidField, "type", "65 characters", "must match ^[A-Za-z0-9_-]{1,64}$")
	wantInvalid(t, contracts.ValidateType(""), contracts.ReasonInvalidField, "type", "empty")
	wantInvalid(t, contracts.ValidateType("email.send"), contracts.ReasonInvalidField, "type", "contains '.'")
}

// TestValidateAgreesWithPatterns checks the hand-written checks against the documented regular
// expressions for every single byte and for strings around the length limits.
func TestValidateAgreesWithPatterns(t *testing.T) {
	t.Parallel()
	var inputs []string
	for c := 0; c < 256; c++ {
		inputs = append(inputs, string([]byte{byte(c)}), "a"+string([]byte{byte(c)})+"b")
	}
	for _, n := range []int{0, 1, 63, 64, 65, 127, 128, 129, 1000} {
		inputs = append(inputs, strings.Repeat("Z", n), strings.Repeat("-", n)+"\u00e9")
	}
	for _, in := range inputs {
		if got, want := contracts.ValidateID("groupId", in) == nil, idRE.MatchString(in); got != want {
			t.Errorf("ValidateID(%q) ok=%v, IDPattern says %v", in, got, want)
		}
		if got, want := contracts.ValidateType(in) == nil, typeRE.MatchString(in); got != want {
			t.Errorf("ValidateType(%q) ok=%v, TypePattern says %v", in, got, want)
		}
	}
}

func TestParsePriority(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]contracts.Priority{
		"":       contracts.PriorityNormal,
		"high":   contracts.PriorityHigh,
		"normal": contracts.PriorityNormal,
		"low":    contracts.PriorityLow,
	} {
		got, err := contracts.ParsePriority(in)
		if err != nil || got != want {
			t.Errorf("ParsePriority(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"HIGH", "urgent", " low", "normal\x00"} {
		got, err := contracts.ParsePriority(in)
		if got != "" {
			t.Errorf("ParsePriority(%q) = %q, want \"\"", in, got)
		}
		wantInvalid(t, err, contracts.ReasonInvalidField, "priority", "must be one of high, normal, low")
	}
	if got := fmt.Sprint(contracts.Priorities); got != "[high normal low]" {
		t.Errorf("Priorities = %s, want serving order [high normal low]", got)
	}
}

func i64(v int64) *int64 { return &v }

func validJob() contracts.Submission {
	return contracts.Submission{V: 1, Kind: contracts.KindJob, GroupID: "g1", JobID: "j1", Type: "email",
		Payload: json.RawMessage(`{"to":"a@example.com"}`), Priority: contracts.PriorityHigh, BasePriority: 5}
}

// payloadOfSize returns a JSON string literal exactly n bytes long (n >= 2).
func payloadOfSize(n int) json.RawMessage {
	return json.RawMessage(`"` + strings.Repeat("p", n-2) + `"`)
}

func TestSubmissionValidate(t *testing.T) {
	t.Parallel()
	const defLimit = contracts.DefaultMaxPayloadBytes
	tests := []struct {
		name   string
		mutate func(*contracts.Submission)
		lim    contracts.Limits
		reason string // "" = valid
		field  string
		parts  []string
	}{
		{name: "valid job", mutate: func(*contracts.Submission) {}},
		{name: "job without priority or payload", mutate: func(s *contracts.Submission) { s.Priority, s.Payload = "", nil }},
		{name: "job with null payload", mutate: func(s *contracts.Submission) { s.Payload = json.RawMessage(`null`) }},
		{name: "v 0", mutate: func(s *contracts.Submission) { s.V = 0 }, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"got 0", "must be 1"}},
		{name: "v 2", mutate: func(s *contracts.Submission) { s.V = 2 }, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"got 2"}},
		{name: "no kind", mutate: func(s *contracts.Submission) { s.Kind = "" }, reason: contracts.ReasonUnknownKind, field: "kind", parts: []string{"missing", "job, seal, cancel"}},
		{name: "unknown kind", mutate: func(s *contracts.Submission) { s.Kind = "JOB" }, reason: contracts.ReasonUnknownKind, field: "kind", parts: []string{`"JOB"`}},
		{name: "groupId 128", mutate: func(s *contracts.Submission) { s.GroupID = strings.Repeat("g", 128) }},
		{name: "groupId 129", mutate: func(s *contracts.Submission) { s.GroupID = strings.Repeat("g", 129) }, reason: contracts.ReasonInvalidField, field: "groupId", parts: []string{"129 characters", "{1,128}"}},
		{name: "jobId 128", mutate: func(s *contracts.Submission) { s.JobID = strings.Repeat("j", 128) }},
		{name: "jobId 129", mutate: func(s *contracts.Submission) { s.JobID = strings.Repeat("j", 129) }, reason: contracts.ReasonInvalidField, field: "jobId", parts: []string{"129 characters", "{1,128}"}},
		{name: "jobId missing", mutate: func(s *contracts.Submission) { s.JobID = "" }, reason: contracts.ReasonInvalidField, field: "jobId", parts: []string{"empty"}},
		{name: "type 64", mutate: func(s *contracts.Submission) { s.Type = strings.Repeat("t", 64) }},
		{name: "type 65", mutate: func(s *contracts.Submission) { s.Type = strings.Repeat("t", 65) }, reason: contracts.ReasonInvalidField, field: "type", parts: []string{"65 characters", "{1,64}"}},
		{name: "type missing", mutate: func(s *contracts.Submission) { s.Type = "" }, reason: contracts.ReasonInvalidField, field: "type", parts: []string{"empty"}},
		{name: "bad priority", mutate: func(s *contracts.Submission) { s.Priority = "urgent" }, reason: contracts.ReasonInvalidField, field: "priority", parts: []string{`"urgent"`, "high, normal, low"}},
		{name: "basePriority max", mutate: func(s *contracts.Submission) { s.BasePriority = contracts.MaxBasePriority }},
		{name: "basePriority min", mutate: func(s *contracts.Submission) { s.BasePriority = contracts.MinBasePriority }},
		{name: "basePriority max+1", mutate: func(s *contracts.Submission) { s.BasePriority = contracts.MaxBasePriority + 1 }, reason: contracts.ReasonInvalidField, field: "basePriority", parts: []string{"1000000000001 out of range", "[-1000000000000, 1000000000000]"}},
		{name: "basePriority min-1", mutate: func(s *contracts.Submission) { s.BasePriority = contracts.MinBasePriority - 1 }, reason: contracts.ReasonInvalidField, field: "basePriority", parts: []string{"-1000000000001 out of range"}},
		{name: "payload at default limit", mutate: func(s *contracts.Submission) { s.Payload = payloadOfSize(defLimit) }},
		{name: "payload one above default limit", mutate: func(s *contracts.Submission) { s.Payload = payloadOfSize(defLimit + 1) }, reason: contracts.ReasonTooLarge, field: "payload", parts: []string{"262145 bytes", "limit 262144"}},
		{name: "payload at custom limit", lim: contracts.Limits{MaxPayloadBytes: 10}, mutate: func(s *contracts.Submission) { s.Payload = payloadOfSize(10) }},
		{name: "payload above custom limit", lim: contracts.Limits{MaxPayloadBytes: 10}, mutate: func(s *contracts.Submission) { s.Payload = payloadOfSize(11) }, reason: contracts.ReasonTooLarge, field: "payload", parts: []string{"11 bytes", "limit 10"}},
		{name: "negative limit means default", lim: contracts.Limits{MaxPayloadBytes: -1}, mutate: func(s *contracts.Submission) { s.Payload = payloadOfSize(defLimit) }},
		// Whitespace does not count: the compact form [1,2,3,4,5] is 11 bytes.
		{name: "payload size is compact size", lim: contracts.Limits{MaxPayloadBytes: 11}, mutate: func(s *contracts.Submission) { s.Payload = json.RawMessage(` [ 1 , 2 , 3 , 4 , 5 ] `) }},
		// encoding/json re-encodes "<" as \u003c: 3 bytes become 8, over the limit of 7.
		{name: "payload size counts HTML escaping", lim: contracts.Limits{MaxPayloadBytes: 7}, mutate: func(s *contracts.Submission) { s.Payload = json.RawMessage(`"<"`) }, reason: contracts.ReasonTooLarge, field: "payload", parts: []string{"8 bytes", "limit 7"}},
		{name: "payload not JSON", mutate: func(s *contracts.Submission) { s.Payload = json.RawMessage(`{"a":`) }, reason: contracts.ReasonInvalidField, field: "payload", parts: []string{"not valid JSON"}},
		{name: "job with total", mutate: func(s *contracts.Submission) { s.Total = i64(1) }, reason: contracts.ReasonInvalidField, field: "total", parts: []string{"set on kind job", "allowed only for kind seal"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validJob()
			tt.mutate(&s)
			err := s.Validate(tt.lim)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			wantInvalid(t, err, tt.reason, tt.field, tt.parts...)
		})
	}
}

func TestSealAndCancelValidate(t *testing.T) {
	t.Parallel()
	seal := func(total *int64) contracts.Submission {
		return contracts.Submission{V: 1, Kind: contracts.KindSeal, GroupID: "g", Total: total}
	}
	cancel := contracts.Submission{V: 1, Kind: contracts.KindCancel, GroupID: "g"}
	tests := []struct {
		name   string
		s      contracts.Submission
		reason string
		field  string
		parts  []string
	}{
		{name: "seal 0", s: seal(i64(0))},
		{name: "seal max", s: seal(i64(contracts.MaxTotal))},
		{name: "seal null payload", s: func() contracts.Submission { s := seal(i64(1)); s.Payload = json.RawMessage(" null "); return s }()},
		{name: "seal without total", s: seal(nil), reason: contracts.ReasonInvalidField, field: "total", parts: []string{"missing", "required for kind seal"}},
		{name: "seal negative", s: seal(i64(-1)), reason: contracts.ReasonInvalidField, field: "total", parts: []string{"-1 out of range", "[0, 1000000000]"}},
		{name: "seal max+1", s: seal(i64(contracts.MaxTotal + 1)), reason: contracts.ReasonInvalidField, field: "total", parts: []string{"1000000001 out of range"}},
		{name: "seal bad group", s: func() contracts.Submission { s := seal(i64(1)); s.GroupID = "a:b"; return s }(), reason: contracts.ReasonInvalidField, field: "groupId", parts: []string{"contains ':'"}},
		{name: "seal with jobId", s: func() contracts.Submission { s := seal(i64(1)); s.JobID = "j"; return s }(), reason: contracts.ReasonInvalidField, field: "jobId", parts: []string{"set on kind seal", "allowed only for kind job"}},
		{name: "seal with type", s: func() contracts.Submission { s := seal(i64(1)); s.Type = "t"; return s }(), reason: contracts.ReasonInvalidField, field: "type"},
		{name: "seal with payload", s: func() contracts.Submission { s := seal(i64(1)); s.Payload = json.RawMessage(`{}`); return s }(), reason: contracts.ReasonInvalidField, field: "payload"},
		{name: "seal with priority", s: func() contracts.Submission { s := seal(i64(1)); s.Priority = contracts.PriorityLow; return s }(), reason: contracts.ReasonInvalidField, field: "priority"},
		{name: "seal with basePriority", s: func() contracts.Submission { s := seal(i64(1)); s.BasePriority = -3; return s }(), reason: contracts.ReasonInvalidField, field: "basePriority"},
		{name: "cancel", s: cancel},
		{name: "cancel with total", s: func() contracts.Submission { s := cancel; s.Total = i64(3); return s }(), reason: contracts.ReasonInvalidField, field: "total", parts: []string{"set on kind cancel"}},
		{name: "cancel with jobId", s: func() contracts.Submission { s := cancel; s.JobID = "j"; return s }(), reason: contracts.ReasonInvalidField, field: "jobId"},
		{name: "cancel without group", s: func() contracts.Submission { s := cancel; s.GroupID = ""; return s }(), reason: contracts.ReasonInvalidField, field: "groupId", parts: []string{"empty"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Validate(contracts.Limits{})
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			wantInvalid(t, err, tt.reason, tt.field, tt.parts...)
		})
	}
}

func TestReadyJobValidate(t *testing.T) {
	t.Parallel()
	valid := func() contracts.ReadyJob {
		return contracts.ReadyJob{V: 1, GroupID: "g", JobID: "j", Type: "t", Payload: json.RawMessage(`[1]`), Attempt: 1}
	}
	tests := []struct {
		name   string
		mutate func(*contracts.ReadyJob)
		lim    contracts.Limits
		reason string
		field  string
		parts  []string
	}{
		{name: "valid", mutate: func(*contracts.ReadyJob) {}},
		{name: "nil payload", mutate: func(r *contracts.ReadyJob) { r.Payload = nil }},
		{name: "v 2", mutate: func(r *contracts.ReadyJob) { r.V = 2 }, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"must be 1"}},
		{name: "groupId 129", mutate: func(r *contracts.ReadyJob) { r.GroupID = strings.Repeat("g", 129) }, reason: contracts.ReasonInvalidField, field: "groupId", parts: []string{"{1,128}"}},
		{name: "jobId 128", mutate: func(r *contracts.ReadyJob) { r.JobID = strings.Repeat("j", 128) }},
		{name: "jobId 129", mutate: func(r *contracts.ReadyJob) { r.JobID = strings.Repeat("j", 129) }, reason: contracts.ReasonInvalidField, field: "jobId", parts: []string{"{1,128}"}},
		{name: "type 65", mutate: func(r *contracts.ReadyJob) { r.Type = strings.Repeat("t", 65) }, reason: contracts.ReasonInvalidField, field: "type", parts: []string{"{1,64}"}},
		{name: "attempt 0", mutate: func(r *contracts.ReadyJob) { r.Attempt = 0 }, reason: contracts.ReasonInvalidField, field: "attempt", parts: []string{"0 out of range", "must be >= 1"}},
		{name: "payload at limit", lim: contracts.Limits{MaxPayloadBytes: 100}, mutate: func(r *contracts.ReadyJob) { r.Payload = payloadOfSize(100) }},
		{name: "payload above limit", lim: contracts.Limits{MaxPayloadBytes: 100}, mutate: func(r *contracts.ReadyJob) { r.Payload = payloadOfSize(101) }, reason: contracts.ReasonTooLarge, field: "payload", parts: []string{"101 bytes", "limit 100"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := valid()
			tt.mutate(&r)
			err := r.Validate(tt.lim)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			wantInvalid(t, err, tt.reason, tt.field, tt.parts...)
		})
	}
}

func TestJobResultValidate(t *testing.T) {
	t.Parallel()
	valid := func() contracts.JobResult {
		return contracts.JobResult{V: 1, GroupID: "g", JobID: "j", Attempt: 2, Status: contracts.ResultFailed, Error: "boom", DurationMs: 12}
	}
	tests := []struct {
		name   string
		mutate func(*contracts.JobResult)
		reason string
		field  string
		parts  []string
	}{
		{name: "valid", mutate: func(*contracts.JobResult) {}},
		{name: "success, zero duration", mutate: func(r *contracts.JobResult) { r.Status, r.Error, r.DurationMs = contracts.ResultSuccess, "", 0 }},
		{name: "v 0", mutate: func(r *contracts.JobResult) { r.V = 0 }, reason: contracts.ReasonBadVersion, field: "v"},
		{name: "bad group", mutate: func(r *contracts.JobResult) { r.GroupID = "g>" }, reason: contracts.ReasonInvalidField, field: "groupId", parts: []string{"contains '>'"}},
		{name: "bad job", mutate: func(r *contracts.JobResult) { r.JobID = "" }, reason: contracts.ReasonInvalidField, field: "jobId"},
		{name: "attempt 0", mutate: func(r *contracts.JobResult) { r.Attempt = 0 }, reason: contracts.ReasonInvalidField, field: "attempt", parts: []string{"must be >= 1"}},
		{name: "status lower case", mutate: func(r *contracts.JobResult) { r.Status = "success" }, reason: contracts.ReasonInvalidField, field: "status", parts: []string{`"success"`, "SUCCESS, FAILED"}},
		{name: "negative duration", mutate: func(r *contracts.JobResult) { r.DurationMs = -1 }, reason: contracts.ReasonInvalidField, field: "durationMs", parts: []string{"-1 out of range", "must be >= 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := valid()
			tt.mutate(&r)
			err := r.Validate()
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			wantInvalid(t, err, tt.reason, tt.field, tt.parts...)
		})
	}
}

func TestGroupEventValidate(t *testing.T) {
	t.Parallel()
	valid := contracts.GroupEvent{V: 1, GroupID: "g", State: contracts.StateRunning, Jobs: 3, Succeeded: 1}
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid event: %v", err)
	}
	for _, tt := range []struct {
		field  string
		mutate func(*contracts.GroupEvent)
	}{
		{"state", func(e *contracts.GroupEvent) { e.State = "DONE" }},
		{"groupId", func(e *contracts.GroupEvent) { e.GroupID = "" }},
		{"total", func(e *contracts.GroupEvent) { e.Total = -1 }},
		{"jobs", func(e *contracts.GroupEvent) { e.Jobs = -1 }},
		{"succeeded", func(e *contracts.GroupEvent) { e.Succeeded = -1 }},
		{"failed", func(e *contracts.GroupEvent) { e.Failed = -1 }},
		{"cancelled", func(e *contracts.GroupEvent) { e.Cancelled = -1 }},
	} {
		e := valid
		tt.mutate(&e)
		wantInvalid(t, e.Validate(), contracts.ReasonInvalidField, tt.field)
	}
	e := valid
	e.V = 3
	wantInvalid(t, e.Validate(), contracts.ReasonBadVersion, "v", "got 3")
}

func TestGroupStateTerminal(t *testing.T) {
	t.Parallel()
	for s, want := range map[contracts.GroupState]bool{
		contracts.StateCreated: false, contracts.StateRunning: false, contracts.StateAggregating: false,
		contracts.StateCompleted: true, contracts.StateCancelled: true, "": false, "FAILED": false,
	} {
		if got := s.Terminal(); got != want {
			t.Errorf("%q.Terminal() = %v, want %v", s, got, want)
		}
	}
}

func TestNilReceivers(t *testing.T) {
	t.Parallel()
	for name, err := range map[string]error{
		"Submission": (*contracts.Submission)(nil).Validate(contracts.Limits{}),
		"ReadyJob":   (*contracts.ReadyJob)(nil).Validate(contracts.Limits{}),
		"JobResult":  (*contracts.JobResult)(nil).Validate(),
		"GroupEvent": (*contracts.GroupEvent)(nil).Validate(),
	} {
		if !errors.Is(err, contracts.ErrInvalid) {
			t.Errorf("nil %s: Validate = %v, want ErrInvalid", name, err)
		}
	}
}

func TestValidationErrorFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		e    contracts.ValidationError
		want string
	}{
		{contracts.ValidationError{Field: "jobId", Problem: "contains '.'", Limit: "must match ^[A-Za-z0-9_-]{1,128}$"},
			"contracts: jobId: contains '.' (must match ^[A-Za-z0-9_-]{1,128}$)"},
		{contracts.ValidationError{Field: "payload", Problem: "300000 bytes", Limit: "limit 262144"},
			"contracts: payload: 300000 bytes (limit 262144)"},
		{contracts.ValidationError{Problem: "body is not JSON: x"}, "contracts: body is not JSON: x"},
		{contracts.ValidationError{Field: "f", Problem: "p"}, "contracts: f: p"},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
	// The brief's own example, produced by the code rather than built by hand.
	err := contracts.ValidateID("jobId", "a.b")
	if got, want := err.Error(), "contracts: jobId: contains '.' (must match ^[A-Za-z0-9_-]{1,128}$)"; got != want {
		t.Errorf("ValidateID error = %q, want %q", got, want)
	}
	s := validJob()
	s.Payload = payloadOfSize(300000)
	if got, want := s.Validate(contracts.Limits{}).Error(), "contracts: payload: 300000 bytes (limit 262144)"; got != want {
		t.Errorf("payload error = %q, want %q", got, want)
	}
}

func TestReason(t *testing.T) {
	t.Parallel()
	ve := &contracts.ValidationError{Reason: contracts.ReasonTooLarge, Field: "payload", Problem: "x"}
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"validation error", ve, contracts.ReasonTooLarge},
		{"wrapped", fmt.Errorf("ingest: %w", ve), contracts.ReasonTooLarge},
		{"joined", errors.Join(io.EOF, ve), contracts.ReasonTooLarge},
		{"other error", io.EOF, contracts.ReasonInvalid},
		{"bare ErrInvalid", contracts.ErrInvalid, contracts.ReasonInvalid},
		{"no reason set", &contracts.ValidationError{Problem: "x"}, contracts.ReasonInvalid},
	}
	for _, tt := range tests {
		if got := contracts.Reason(tt.err); got != tt.want {
			t.Errorf("%s: Reason = %q, want %q", tt.name, got, tt.want)
		}
	}
	if errors.Is(io.EOF, contracts.ErrInvalid) {
		t.Error("io.EOF matches ErrInvalid")
	}
	if !errors.Is(fmt.Errorf("wrap: %w", ve), contracts.ErrInvalid) {
		t.Error("wrapped ValidationError does not match ErrInvalid")
	}
}
