package contracts_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

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
	idRE     = regexp.MustCompile(contracts.IDPattern)
	tenantRE = regexp.MustCompile(contracts.TenantPattern)
	typeRE   = regexp.MustCompile(contracts.TypePattern)
	destRE   = regexp.MustCompile(contracts.DestinationPattern)
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

func TestValidateTenant(t *testing.T) {
	t.Parallel()
	if err := contracts.ValidateTenant(strings.Repeat("t", contracts.MaxTenantLen)); err != nil {
		t.Fatalf("64-char tenant: %v", err)
	}
	wantInvalid(t, contracts.ValidateTenant(strings.Repeat("t", 65)), contracts.ReasonInvalidField, "tenant",
		"65 characters", "must match ^[A-Za-z0-9_-]{1,64}$")
	wantInvalid(t, contracts.ValidateTenant(""), contracts.ReasonInvalidField, "tenant", "empty")
	wantInvalid(t, contracts.ValidateTenant("acme.eu"), contracts.ReasonInvalidField, "tenant", "contains '.'")
	wantInvalid(t, contracts.ValidateTenant("acme:eu"), contracts.ReasonInvalidField, "tenant", "contains ':'")
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
		if got, want := contracts.ValidateTenant(in) == nil, tenantRE.MatchString(in); got != want {
			t.Errorf("ValidateTenant(%q) ok=%v, TenantPattern says %v", in, got, want)
		}
		if got, want := contracts.ValidateDestination(in) == nil, destRE.MatchString(in); got != want {
			t.Errorf("ValidateDestination(%q) ok=%v, DestinationPattern says %v", in, got, want)
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

// acme is the group most tests use; the default subjects below name it.
var acme = contracts.Group("acme", "g1")

// validJobs returns a valid jobs submission of three jobs of two types, with group settings.
func validJobs() contracts.Submission {
	return contracts.Submission{V: contracts.Version, Kind: contracts.KindJobs, Tenant: "acme", GroupID: "g1",
		Jobs: []contracts.SubmitJob{
			{JobID: "j1", Type: "email", Payload: json.RawMessage(`{"to":"a@example.com"}`)},
			{JobID: "j2", Type: "sms"},
			{JobID: "j3", Type: "email", Payload: json.RawMessage(`[1,2]`)},
		},
		Group: &contracts.GroupSettings{Priority: contracts.PriorityHigh, BasePriority: 5, MaxInFlight: 10},
	}
}

// manyJobs returns n valid jobs with distinct IDs.
func manyJobs(n int) []contracts.SubmitJob {
	jobs := make([]contracts.SubmitJob, n)
	for i := range jobs {
		jobs[i] = contracts.SubmitJob{JobID: "j" + strconv.Itoa(i), Type: "t"}
	}
	return jobs
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
		{name: "valid jobs", mutate: func(*contracts.Submission) {}},
		{name: "one job, no settings", mutate: func(s *contracts.Submission) { s.Jobs, s.Group = s.Jobs[:1], nil }},
		{name: "empty settings", mutate: func(s *contracts.Submission) { s.Group = &contracts.GroupSettings{} }},
		{name: "notBefore", mutate: func(s *contracts.Submission) {
			s.Group = &contracts.GroupSettings{NotBefore: "2026-11-27T09:00:00+01:00"}
		}},
		{name: "notBefore not RFC 3339", mutate: func(s *contracts.Submission) { s.Group = &contracts.GroupSettings{NotBefore: "tomorrow"} }, reason: contracts.ReasonInvalidField, field: "group.notBefore", parts: []string{`"tomorrow"`, "RFC 3339"}},
		{name: "notBefore without offset", mutate: func(s *contracts.Submission) { s.Group = &contracts.GroupSettings{NotBefore: "2026-11-27T09:00:00"} }, reason: contracts.ReasonInvalidField, field: "group.notBefore", parts: []string{"offset"}},
		{name: "notBefore too far", mutate: func(s *contracts.Submission) {
			s.Group = &contracts.GroupSettings{NotBefore: time.Now().AddDate(2, 0, 0).Format(time.RFC3339)}
		}, reason: contracts.ReasonInvalidField, field: "group.notBefore", parts: []string{"366 days"}},
		{name: "windows", mutate: func(s *contracts.Submission) {
			s.Group = &contracts.GroupSettings{Windows: []contracts.Window{{Zone: "Europe/Berlin", Days: []string{"mon", "fri"}, From: "22:00", To: "06:00"}, {Zone: "UTC", Days: []string{"sun"}, From: "00:00", To: "24:00"}}}
		}},
		{name: "window zone unknown", mutate: func(s *contracts.Submission) {
			s.Group = &contracts.GroupSettings{Windows: []contracts.Window{{Zone: "Europe/Atlantis", Days: []string{"mon"}, From: "09:00", To: "17:00"}}}
		}, reason: contracts.ReasonInvalidField, field: "group.windows[0].zone", parts: []string{"Europe/Atlantis", "IANA"}},
		{name: "window zone Local", mutate: func(s *contracts.Submission) {
			s.Group = &contracts.GroupSettings{Windows: []contracts.Window{{Zone: "Local", Days: []string{"mon"}, From: "09:00", To: "17:00"}}}
		}, reason: contracts.ReasonInvalidField, field: "group.windows[0].zone", parts: []string{"IANA"}},
		{name: "window day", mutate: func(s *contracts.Submission) {
			s.Group = &contracts.GroupSettings{Windows: []contracts.Window{{Zone: "UTC", Days: []string{"mon", "Tuesday"}, From: "09:00", To: "17:00"}}}
		}, reason: contracts.ReasonInvalidField, field: "group.windows[0].days[1]", parts: []string{`"Tuesday"`, "mon, tue"}},
		{name: "window no days", mutate: func(s *contracts.Submission) {
			s.Group = &contracts.GroupSettings{Windows: []contracts.Window{{Zone: "UTC", From: "09:00", To: "17:00"}}}
		}, reason: contracts.ReasonInvalidField, field: "group.windows[0].days", parts: []string{"0 days", "1 to 7"}},
		{name: "window from 24:00", mutate: func(s *contracts.Submission) {
			s.Group = &contracts.GroupSettings{Windows: []contracts.Window{{Zone: "UTC", Days: []string{"mon"}, From: "24:00", To: "17:00"}}}
		}, reason: contracts.ReasonInvalidField, field: "group.windows[0].from", parts: []string{"00:00 to 23:59"}},
		{name: "window to 9:5", mutate: func(s *contracts.Submission) {
			s.Group = &contracts.GroupSettings{Windows: []contracts.Window{{Zone: "UTC", Days: []string{"mon"}, From: "09:00", To: "9:5"}}}
		}, reason: contracts.ReasonInvalidField, field: "group.windows[0].to", parts: []string{"HH:MM"}},
		{name: "window empty", mutate: func(s *contracts.Submission) {
			s.Group = &contracts.GroupSettings{Windows: []contracts.Window{{Zone: "UTC", Days: []string{"mon"}, From: "09:00", To: "09:00"}}}
		}, reason: contracts.ReasonInvalidField, field: "group.windows[0].to", parts: []string{"equals from"}},
		{name: "too many windows", mutate: func(s *contracts.Submission) {
			ws := make([]contracts.Window, contracts.MaxWindows+1)
			for i := range ws {
				ws[i] = contracts.Window{Zone: "UTC", Days: []string{"mon"}, From: "09:00", To: "10:00"}
			}
			s.Group = &contracts.GroupSettings{Windows: ws}
		}, reason: contracts.ReasonInvalidField, field: "group.windows", parts: []string{"17 windows", "at most 16"}},
		{name: "null payload", mutate: func(s *contracts.Submission) { s.Jobs[0].Payload = json.RawMessage(` null `) }},
		{name: "v 0", mutate: func(s *contracts.Submission) { s.V = 0 }, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"got 0", "must be 2"}},
		{name: "v 1", mutate: func(s *contracts.Submission) { s.V = 1 }, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"got 1", "must be 2"}},
		{name: "v 3", mutate: func(s *contracts.Submission) { s.V = 3 }, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"got 3"}},
		{name: "no kind", mutate: func(s *contracts.Submission) { s.Kind = "" }, reason: contracts.ReasonUnknownKind, field: "kind", parts: []string{"missing", "jobs, seal, cancel, pause, resume"}},
		{name: "v1 kind job", mutate: func(s *contracts.Submission) { s.Kind = "job" }, reason: contracts.ReasonUnknownKind, field: "kind", parts: []string{`"job"`}},
		{name: "kind upper case", mutate: func(s *contracts.Submission) { s.Kind = "JOBS" }, reason: contracts.ReasonUnknownKind, field: "kind", parts: []string{`"JOBS"`}},
		{name: "tenant 64", mutate: func(s *contracts.Submission) { s.Tenant = strings.Repeat("t", 64) }},
		{name: "tenant 65", mutate: func(s *contracts.Submission) { s.Tenant = strings.Repeat("t", 65) }, reason: contracts.ReasonInvalidField, field: "tenant", parts: []string{"65 characters", "{1,64}"}},
		{name: "tenant missing", mutate: func(s *contracts.Submission) { s.Tenant = "" }, reason: contracts.ReasonInvalidField, field: "tenant", parts: []string{"empty"}},
		{name: "tenant with dot", mutate: func(s *contracts.Submission) { s.Tenant = "a.b" }, reason: contracts.ReasonInvalidField, field: "tenant", parts: []string{"contains '.'"}},
		{name: "groupId 128", mutate: func(s *contracts.Submission) { s.GroupID = strings.Repeat("g", 128) }},
		{name: "groupId 129", mutate: func(s *contracts.Submission) { s.GroupID = strings.Repeat("g", 129) }, reason: contracts.ReasonInvalidField, field: "groupId", parts: []string{"129 characters", "{1,128}"}},
		{name: "groupId missing", mutate: func(s *contracts.Submission) { s.GroupID = "" }, reason: contracts.ReasonInvalidField, field: "groupId", parts: []string{"empty"}},
		{name: "no jobs", mutate: func(s *contracts.Submission) { s.Jobs = nil }, reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"0 items", "must hold 1 to 1000"}},
		{name: "empty jobs", mutate: func(s *contracts.Submission) { s.Jobs = []contracts.SubmitJob{} }, reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"0 items"}},
		{name: "MaxBatch jobs", mutate: func(s *contracts.Submission) { s.Jobs = manyJobs(contracts.MaxBatch) }},
		{name: "MaxBatch+1 jobs", mutate: func(s *contracts.Submission) { s.Jobs = manyJobs(contracts.MaxBatch + 1) }, reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"1001 items", "must hold 1 to 1000"}},
		{name: "jobId 128", mutate: func(s *contracts.Submission) { s.Jobs[1].JobID = strings.Repeat("j", 128) }},
		{name: "jobId 129", mutate: func(s *contracts.Submission) { s.Jobs[1].JobID = strings.Repeat("j", 129) }, reason: contracts.ReasonInvalidField, field: "jobs[1].jobId", parts: []string{"129 characters", "{1,128}"}},
		{name: "jobId missing", mutate: func(s *contracts.Submission) { s.Jobs[2].JobID = "" }, reason: contracts.ReasonInvalidField, field: "jobs[2].jobId", parts: []string{"empty"}},
		{name: "jobId with colon", mutate: func(s *contracts.Submission) { s.Jobs[0].JobID = "a:b" }, reason: contracts.ReasonInvalidField, field: "jobs[0].jobId", parts: []string{"contains ':'"}},
		{name: "type 64", mutate: func(s *contracts.Submission) { s.Jobs[0].Type = strings.Repeat("t", 64) }},
		{name: "type 65", mutate: func(s *contracts.Submission) { s.Jobs[0].Type = strings.Repeat("t", 65) }, reason: contracts.ReasonInvalidField, field: "jobs[0].type", parts: []string{"65 characters", "{1,64}"}},
		{name: "type missing", mutate: func(s *contracts.Submission) { s.Jobs[2].Type = "" }, reason: contracts.ReasonInvalidField, field: "jobs[2].type", parts: []string{"empty"}},
		{name: "no destination is its type", mutate: func(s *contracts.Submission) { s.Jobs[0].Destination = "" }},
		{name: "destination host", mutate: func(s *contracts.Submission) { s.Jobs[0].Destination = "api.partner.example" }},
		{name: "destination 128", mutate: func(s *contracts.Submission) { s.Jobs[0].Destination = strings.Repeat("d", 128) }},
		{name: "destination 129", mutate: func(s *contracts.Submission) { s.Jobs[1].Destination = strings.Repeat("d", 129) }, reason: contracts.ReasonInvalidField, field: "jobs[1].destination", parts: []string{"129 characters", "{1,128}"}},
		{name: "destination with colon", mutate: func(s *contracts.Submission) { s.Jobs[2].Destination = "host:443" }, reason: contracts.ReasonInvalidField, field: "jobs[2].destination", parts: []string{"contains ':'", "[A-Za-z0-9_.-]"}},
		{name: "first invalid job is named", mutate: func(s *contracts.Submission) { s.Jobs[1].Type, s.Jobs[2].JobID = "a b", "" }, reason: contracts.ReasonInvalidField, field: "jobs[1].type", parts: []string{"contains ' '"}},
		{name: "duplicate job id", mutate: func(s *contracts.Submission) { s.Jobs[2].JobID = "j1" }, reason: contracts.ReasonInvalidField, field: "jobs[2].jobId", parts: []string{"duplicate of jobs[0].jobId", "distinct within a message"}},
		{name: "duplicate job id, other type", mutate: func(s *contracts.Submission) { s.Jobs[2].JobID = "j2" }, reason: contracts.ReasonInvalidField, field: "jobs[2].jobId", parts: []string{"duplicate of jobs[1].jobId"}},
		{name: "bad priority", mutate: func(s *contracts.Submission) { s.Group.Priority = "urgent" }, reason: contracts.ReasonInvalidField, field: "group.priority", parts: []string{`"urgent"`, "high, normal, low"}},
		{name: "empty priority is normal", mutate: func(s *contracts.Submission) { s.Group.Priority = "" }},
		{name: "basePriority max", mutate: func(s *contracts.Submission) { s.Group.BasePriority = contracts.MaxBasePriority }},
		{name: "basePriority min", mutate: func(s *contracts.Submission) { s.Group.BasePriority = contracts.MinBasePriority }},
		{name: "basePriority max+1", mutate: func(s *contracts.Submission) { s.Group.BasePriority = contracts.MaxBasePriority + 1 }, reason: contracts.ReasonInvalidField, field: "group.basePriority", parts: []string{"1000000000001 out of range", "[-1000000000000, 1000000000000]"}},
		{name: "basePriority min-1", mutate: func(s *contracts.Submission) { s.Group.BasePriority = contracts.MinBasePriority - 1 }, reason: contracts.ReasonInvalidField, field: "group.basePriority", parts: []string{"-1000000000001 out of range"}},
		{name: "maxInFlight 0 is unlimited", mutate: func(s *contracts.Submission) { s.Group.MaxInFlight = 0 }},
		{name: "maxInFlight max", mutate: func(s *contracts.Submission) { s.Group.MaxInFlight = contracts.MaxInFlight }},
		{name: "maxInFlight max+1", mutate: func(s *contracts.Submission) { s.Group.MaxInFlight = contracts.MaxInFlight + 1 }, reason: contracts.ReasonInvalidField, field: "group.maxInFlight", parts: []string{"1000001 out of range", "[0, 1000000]"}},
		{name: "maxInFlight negative", mutate: func(s *contracts.Submission) { s.Group.MaxInFlight = -1 }, reason: contracts.ReasonInvalidField, field: "group.maxInFlight", parts: []string{"-1 out of range"}},
		{name: "payload at default limit", mutate: func(s *contracts.Submission) { s.Jobs[1].Payload = payloadOfSize(defLimit) }},
		{name: "payload one above default limit", mutate: func(s *contracts.Submission) { s.Jobs[1].Payload = payloadOfSize(defLimit + 1) }, reason: contracts.ReasonTooLarge, field: "jobs[1].payload", parts: []string{"262145 bytes", "limit 262144"}},
		{name: "payload at custom limit", lim: contracts.Limits{MaxPayloadBytes: 30}, mutate: func(s *contracts.Submission) { s.Jobs[2].Payload = payloadOfSize(30) }},
		{name: "payload above custom limit", lim: contracts.Limits{MaxPayloadBytes: 30}, mutate: func(s *contracts.Submission) { s.Jobs[2].Payload = payloadOfSize(31) }, reason: contracts.ReasonTooLarge, field: "jobs[2].payload", parts: []string{"31 bytes", "limit 30"}},
		{name: "negative limit means default", lim: contracts.Limits{MaxPayloadBytes: -1}, mutate: func(s *contracts.Submission) { s.Jobs[0].Payload = payloadOfSize(defLimit) }},
		// Whitespace does not count: the compact form [1,2,3,4,5] is 11 bytes.
		{name: "payload size is compact size", lim: contracts.Limits{MaxPayloadBytes: 22}, mutate: func(s *contracts.Submission) {
			s.Jobs[0].Payload = json.RawMessage(` [ 1 , 2 , 3 , 4 , 5 ] `)
		}},
		// encoding/json re-encodes "<" as \u003c: 3 bytes become 8, over the limit of 7.
		{name: "payload size counts HTML escaping", lim: contracts.Limits{MaxPayloadBytes: 7}, mutate: func(s *contracts.Submission) {
			s.Jobs = s.Jobs[1:2]
			s.Jobs[0].Payload = json.RawMessage(`"<"`)
		}, reason: contracts.ReasonTooLarge, field: "jobs[0].payload", parts: []string{"8 bytes", "limit 7"}},
		{name: "payload not JSON", mutate: func(s *contracts.Submission) { s.Jobs[1].Payload = json.RawMessage(`{"a":`) }, reason: contracts.ReasonInvalidField, field: "jobs[1].payload", parts: []string{"not valid JSON"}},
		{name: "jobs with total", mutate: func(s *contracts.Submission) { s.Total = i64(1) }, reason: contracts.ReasonInvalidField, field: "total", parts: []string{"set on kind jobs", "allowed only for kind seal"}},
		{name: "jobs with total 0", mutate: func(s *contracts.Submission) { s.Total = i64(0) }, reason: contracts.ReasonInvalidField, field: "total"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validJobs()
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

// TestOtherKindsValidate covers seal, cancel, pause and resume, and that each refuses the fields of
// other kinds.
func TestOtherKindsValidate(t *testing.T) {
	t.Parallel()
	of := func(k contracts.Kind, mutate func(*contracts.Submission)) contracts.Submission {
		s := contracts.Submission{V: contracts.Version, Kind: k, Tenant: "acme", GroupID: "g"}
		if k == contracts.KindSeal {
			s.Total = i64(3)
		}
		if mutate != nil {
			mutate(&s)
		}
		return s
	}
	withJobs := func(s *contracts.Submission) { s.Jobs = manyJobs(1) }
	withEmptyJobs := func(s *contracts.Submission) { s.Jobs = []contracts.SubmitJob{} }
	withGroup := func(s *contracts.Submission) { s.Group = &contracts.GroupSettings{} }
	withTotal := func(s *contracts.Submission) { s.Total = i64(0) }
	tests := []struct {
		name   string
		s      contracts.Submission
		reason string
		field  string
		parts  []string
	}{
		{name: "seal", s: of(contracts.KindSeal, nil)},
		{name: "seal 0", s: of(contracts.KindSeal, withTotal)},
		{name: "seal max", s: of(contracts.KindSeal, func(s *contracts.Submission) { s.Total = i64(contracts.MaxTotal) })},
		{name: "seal without total", s: of(contracts.KindSeal, func(s *contracts.Submission) { s.Total = nil }), reason: contracts.ReasonInvalidField, field: "total", parts: []string{"missing", "required for kind seal"}},
		{name: "seal negative", s: of(contracts.KindSeal, func(s *contracts.Submission) { s.Total = i64(-1) }), reason: contracts.ReasonInvalidField, field: "total", parts: []string{"-1 out of range", "[0, 1000000000]"}},
		{name: "seal max+1", s: of(contracts.KindSeal, func(s *contracts.Submission) { s.Total = i64(contracts.MaxTotal + 1) }), reason: contracts.ReasonInvalidField, field: "total", parts: []string{"1000000001 out of range"}},
		{name: "seal bad group", s: of(contracts.KindSeal, func(s *contracts.Submission) { s.GroupID = "a:b" }), reason: contracts.ReasonInvalidField, field: "groupId", parts: []string{"contains ':'"}},
		{name: "seal bad tenant", s: of(contracts.KindSeal, func(s *contracts.Submission) { s.Tenant = "a>" }), reason: contracts.ReasonInvalidField, field: "tenant", parts: []string{"contains '>'"}},
		{name: "seal with jobs", s: of(contracts.KindSeal, withJobs), reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"set on kind seal", "allowed only for kind jobs"}},
		{name: "seal with empty jobs", s: of(contracts.KindSeal, withEmptyJobs), reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"set on kind seal"}},
		{name: "seal with group", s: of(contracts.KindSeal, withGroup), reason: contracts.ReasonInvalidField, field: "group", parts: []string{"set on kind seal", "allowed only for kind jobs"}},
		{name: "cancel", s: of(contracts.KindCancel, nil)},
		{name: "cancel with total", s: of(contracts.KindCancel, withTotal), reason: contracts.ReasonInvalidField, field: "total", parts: []string{"set on kind cancel", "allowed only for kind seal"}},
		{name: "cancel with jobs", s: of(contracts.KindCancel, withJobs), reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"set on kind cancel"}},
		{name: "cancel with group", s: of(contracts.KindCancel, withGroup), reason: contracts.ReasonInvalidField, field: "group"},
		{name: "cancel without group", s: of(contracts.KindCancel, func(s *contracts.Submission) { s.GroupID = "" }), reason: contracts.ReasonInvalidField, field: "groupId", parts: []string{"empty"}},
		{name: "cancel without tenant", s: of(contracts.KindCancel, func(s *contracts.Submission) { s.Tenant = "" }), reason: contracts.ReasonInvalidField, field: "tenant", parts: []string{"empty"}},
		{name: "pause", s: of(contracts.KindPause, nil)},
		{name: "pause with total", s: of(contracts.KindPause, withTotal), reason: contracts.ReasonInvalidField, field: "total", parts: []string{"set on kind pause"}},
		{name: "pause with jobs", s: of(contracts.KindPause, withEmptyJobs), reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"set on kind pause"}},
		{name: "pause with group", s: of(contracts.KindPause, withGroup), reason: contracts.ReasonInvalidField, field: "group", parts: []string{"set on kind pause"}},
		{name: "pause v1", s: of(contracts.KindPause, func(s *contracts.Submission) { s.V = 1 }), reason: contracts.ReasonBadVersion, field: "v"},
		{name: "resume", s: of(contracts.KindResume, nil)},
		{name: "resume with total", s: of(contracts.KindResume, withTotal), reason: contracts.ReasonInvalidField, field: "total", parts: []string{"set on kind resume"}},
		{name: "resume with jobs", s: of(contracts.KindResume, withJobs), reason: contracts.ReasonInvalidField, field: "jobs"},
		{name: "resume with group", s: of(contracts.KindResume, withGroup), reason: contracts.ReasonInvalidField, field: "group"},
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

func TestSubmissionSettingsAndRef(t *testing.T) {
	t.Parallel()
	s := validJobs()
	if got := s.Settings(); !reflect.DeepEqual(got, *s.Group) {
		t.Errorf("Settings = %+v, want %+v", got, *s.Group)
	}
	s.Group = nil
	if got := s.Settings(); !reflect.DeepEqual(got, contracts.GroupSettings{}) {
		t.Errorf("Settings without group = %+v, want the defaults", got)
	}
	if got := s.Ref(); got != acme {
		t.Errorf("Ref = %v, want %v", got, acme)
	}
}

// validReady returns a valid ready batch: three jobs of one type from two tenants and groups.
func validReady() contracts.ReadyBatch {
	return contracts.ReadyBatch{V: contracts.Version, Jobs: []contracts.ReadyJob{
		{Tenant: "acme", GroupID: "g1", JobID: "j1", Type: "email", Payload: json.RawMessage(`[1]`), Attempt: 1},
		{Tenant: "acme", GroupID: "g2", JobID: "j1", Type: "email", Attempt: 3},
		{Tenant: "umbrella", GroupID: "g1", JobID: "j1", Type: "email", Payload: json.RawMessage(`{"a":"b"}`), Attempt: 1},
	}}
}

func manyReady(n int) []contracts.ReadyJob {
	jobs := make([]contracts.ReadyJob, n)
	for i := range jobs {
		jobs[i] = contracts.ReadyJob{Tenant: "acme", GroupID: "g1", JobID: "j" + strconv.Itoa(i), Type: "t", Attempt: 1}
	}
	return jobs
}

func TestReadyBatchValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*contracts.ReadyBatch)
		lim    contracts.Limits
		reason string
		field  string
		parts  []string
	}{
		{name: "valid", mutate: func(*contracts.ReadyBatch) {}},
		{name: "one job, nil payload", mutate: func(b *contracts.ReadyBatch) { b.Jobs = b.Jobs[1:2] }},
		{name: "v 1", mutate: func(b *contracts.ReadyBatch) { b.V = 1 }, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"got 1", "must be 2"}},
		{name: "no jobs", mutate: func(b *contracts.ReadyBatch) { b.Jobs = nil }, reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"0 items", "must hold 1 to 1000"}},
		{name: "MaxBatch jobs", mutate: func(b *contracts.ReadyBatch) { b.Jobs = manyReady(contracts.MaxBatch) }},
		{name: "MaxBatch+1 jobs", mutate: func(b *contracts.ReadyBatch) { b.Jobs = manyReady(contracts.MaxBatch + 1) }, reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"1001 items"}},
		{name: "tenant missing", mutate: func(b *contracts.ReadyBatch) { b.Jobs[1].Tenant = "" }, reason: contracts.ReasonInvalidField, field: "jobs[1].tenant", parts: []string{"empty"}},
		{name: "groupId 129", mutate: func(b *contracts.ReadyBatch) { b.Jobs[2].GroupID = strings.Repeat("g", 129) }, reason: contracts.ReasonInvalidField, field: "jobs[2].groupId", parts: []string{"{1,128}"}},
		{name: "jobId 128", mutate: func(b *contracts.ReadyBatch) { b.Jobs[0].JobID = strings.Repeat("j", 128) }},
		{name: "jobId 129", mutate: func(b *contracts.ReadyBatch) { b.Jobs[0].JobID = strings.Repeat("j", 129) }, reason: contracts.ReasonInvalidField, field: "jobs[0].jobId", parts: []string{"{1,128}"}},
		{name: "type 65", mutate: func(b *contracts.ReadyBatch) { b.Jobs[1].Type = strings.Repeat("t", 65) }, reason: contracts.ReasonInvalidField, field: "jobs[1].type", parts: []string{"{1,64}"}},
		{name: "attempt 0", mutate: func(b *contracts.ReadyBatch) { b.Jobs[2].Attempt = 0 }, reason: contracts.ReasonInvalidField, field: "jobs[2].attempt", parts: []string{"0 out of range", "must be >= 1"}},
		{name: "payload at limit", lim: contracts.Limits{MaxPayloadBytes: 100}, mutate: func(b *contracts.ReadyBatch) { b.Jobs[1].Payload = payloadOfSize(100) }},
		{name: "payload above limit", lim: contracts.Limits{MaxPayloadBytes: 100}, mutate: func(b *contracts.ReadyBatch) { b.Jobs[1].Payload = payloadOfSize(101) }, reason: contracts.ReasonTooLarge, field: "jobs[1].payload", parts: []string{"101 bytes", "limit 100"}},
		{name: "second type", mutate: func(b *contracts.ReadyBatch) { b.Jobs[2].Type = "sms" }, reason: contracts.ReasonInvalidField, field: "jobs[2].type", parts: []string{`"sms" differs from jobs[0]`, "one type"}},
		{name: "first job of another type", mutate: func(b *contracts.ReadyBatch) { b.Jobs[0].Type = "sms" }, reason: contracts.ReasonInvalidField, field: "jobs[1].type", parts: []string{`"email" differs from jobs[0]`}},
		// The same job twice (two attempts, or a re-publish) is not the batch's business.
		{name: "same job twice", mutate: func(b *contracts.ReadyBatch) { b.Jobs[1] = b.Jobs[0] }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := validReady()
			tt.mutate(&b)
			err := b.Validate(tt.lim)
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

// validResults returns a valid result batch of group acme/g1, the tokens filled in.
func validResults() contracts.ResultBatch {
	return contracts.ResultBatch{V: contracts.Version, Results: []contracts.JobResult{
		{Tenant: "acme", GroupID: "g1", JobID: "j1", Attempt: 1, Status: contracts.ResultSuccess, DurationMs: 12},
		{Tenant: "acme", GroupID: "g1", JobID: "j2", Attempt: 2, Status: contracts.ResultFailed, Error: "boom", DurationMs: 0},
		{Tenant: "acme", GroupID: "g1", JobID: "j3", Attempt: 1, Status: contracts.ResultSuccess, DurationMs: 3},
	}}
}

func manyResults(n int) []contracts.JobResult {
	rs := make([]contracts.JobResult, n)
	for i := range rs {
		rs[i] = contracts.JobResult{Tenant: "acme", GroupID: "g1", JobID: "j" + strconv.Itoa(i), Attempt: 1, Status: contracts.ResultSuccess}
	}
	return rs
}

func TestResultBatchValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(*contracts.ResultBatch)
		reason string
		field  string
		parts  []string
	}{
		{name: "valid", mutate: func(*contracts.ResultBatch) {}},
		{name: "v 0", mutate: func(b *contracts.ResultBatch) { b.V = 0 }, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"must be 2"}},
		{name: "no results", mutate: func(b *contracts.ResultBatch) { b.Results = nil }, reason: contracts.ReasonInvalidField, field: "results", parts: []string{"0 items", "must hold 1 to 1000"}},
		{name: "MaxBatch results", mutate: func(b *contracts.ResultBatch) { b.Results = manyResults(contracts.MaxBatch) }},
		{name: "MaxBatch+1 results", mutate: func(b *contracts.ResultBatch) { b.Results = manyResults(contracts.MaxBatch + 1) }, reason: contracts.ReasonInvalidField, field: "results", parts: []string{"1001 items"}},
		{name: "tenant missing", mutate: func(b *contracts.ResultBatch) { b.Results[2].Tenant = "" }, reason: contracts.ReasonInvalidField, field: "results[2].tenant", parts: []string{"empty"}},
		{name: "bad group", mutate: func(b *contracts.ResultBatch) { b.Results[0].GroupID = "g>" }, reason: contracts.ReasonInvalidField, field: "results[0].groupId", parts: []string{"contains '>'"}},
		{name: "bad job", mutate: func(b *contracts.ResultBatch) { b.Results[1].JobID = "" }, reason: contracts.ReasonInvalidField, field: "results[1].jobId", parts: []string{"empty"}},
		{name: "attempt 0", mutate: func(b *contracts.ResultBatch) { b.Results[2].Attempt = 0 }, reason: contracts.ReasonInvalidField, field: "results[2].attempt", parts: []string{"must be >= 1"}},
		{name: "status lower case", mutate: func(b *contracts.ResultBatch) { b.Results[1].Status = "success" }, reason: contracts.ReasonInvalidField, field: "results[1].status", parts: []string{`"success"`, "SUCCESS, FAILED"}},
		{name: "status missing", mutate: func(b *contracts.ResultBatch) { b.Results[0].Status = "" }, reason: contracts.ReasonInvalidField, field: "results[0].status"},
		{name: "negative duration", mutate: func(b *contracts.ResultBatch) { b.Results[1].DurationMs = -1 }, reason: contracts.ReasonInvalidField, field: "results[1].durationMs", parts: []string{"-1 out of range", "must be >= 0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := validResults()
			tt.mutate(&b)
			err := b.Validate()
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			wantInvalid(t, err, tt.reason, tt.field, tt.parts...)
		})
	}
	// An item on its own names its fields without the index.
	r := validResults().Results[0]
	r.Attempt = -1
	wantInvalid(t, r.Validate(), contracts.ReasonInvalidField, "attempt", "must be >= 1")
}

func TestGroupEventValidate(t *testing.T) {
	t.Parallel()
	valid := contracts.GroupEvent{V: contracts.Version, Tenant: "acme", GroupID: "g", State: contracts.StateRunning, Jobs: 3, Succeeded: 1}
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid event: %v", err)
	}
	paused := valid
	paused.State = contracts.StatePaused
	if err := paused.Validate(); err != nil {
		t.Fatalf("PAUSED event: %v", err)
	}
	for _, tt := range []struct {
		field  string
		mutate func(*contracts.GroupEvent)
	}{
		{"state", func(e *contracts.GroupEvent) { e.State = "DONE" }},
		{"state", func(e *contracts.GroupEvent) { e.State = "" }},
		{"tenant", func(e *contracts.GroupEvent) { e.Tenant = "" }},
		{"tenant", func(e *contracts.GroupEvent) { e.Tenant = "a b" }},
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
	e.V = 1
	wantInvalid(t, e.Validate(), contracts.ReasonBadVersion, "v", "got 1", "must be 2")
	if got := valid.Ref(); got != contracts.Group("acme", "g") {
		t.Errorf("Ref = %v", got)
	}
}

func TestGroupStates(t *testing.T) {
	t.Parallel()
	for s, want := range map[contracts.GroupState][2]bool{ // valid, terminal
		contracts.StateCreated: {true, false}, contracts.StateRunning: {true, false}, contracts.StateAggregating: {true, false},
		contracts.StatePaused: {true, false}, contracts.StateCompleted: {true, true}, contracts.StateCancelled: {true, true},
		"": {false, false}, "FAILED": {false, false}, "paused": {false, false},
	} {
		if got := [2]bool{s.Valid(), s.Terminal()}; got != want {
			t.Errorf("%q: Valid, Terminal = %v, want %v", s, got, want)
		}
	}
}

func TestGroupEventFinal(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		e    contracts.GroupEvent
		want bool
	}{
		{contracts.GroupEvent{State: contracts.StateCompleted, Total: 2, Jobs: 2, Succeeded: 2}, true},
		{contracts.GroupEvent{State: contracts.StateCancelled, Jobs: 5, Succeeded: 1, Failed: 1, Cancelled: 3}, true},
		{contracts.GroupEvent{State: contracts.StateCancelled, Jobs: 5, Succeeded: 1, Cancelled: 3}, false},
		{contracts.GroupEvent{State: contracts.StateRunning, Jobs: 1, Succeeded: 1}, false},
		{contracts.GroupEvent{State: contracts.StatePaused}, false},
	} {
		if got := tt.e.Final(); got != tt.want {
			t.Errorf("%+v.Final() = %v, want %v", tt.e, got, tt.want)
		}
	}
}

func TestKindsAndGroupRef(t *testing.T) {
	t.Parallel()
	if got := fmt.Sprint(contracts.Kinds); got != "[jobs seal cancel pause resume schedule]" {
		t.Errorf("Kinds = %s", got)
	}
	for _, k := range contracts.Kinds {
		if !k.Valid() {
			t.Errorf("%q.Valid() = false", k)
		}
	}
	for _, k := range []contracts.Kind{"", "job", "JOBS", "cancel "} {
		if k.Valid() {
			t.Errorf("%q.Valid() = true", k)
		}
	}
	g := contracts.Group("acme", "g1")
	if g.Tenant != "acme" || g.ID != "g1" || g.String() != "acme/g1" || g.Validate() != nil {
		t.Errorf("Group = %+v %q %v", g, g.String(), g.Validate())
	}
	wantInvalid(t, contracts.Group("", "g1").Validate(), contracts.ReasonInvalidField, "tenant", "empty")
	wantInvalid(t, contracts.Group("acme", "g.1").Validate(), contracts.ReasonInvalidField, "groupId", "contains '.'")
	if contracts.Group("acme", "g1") == contracts.Group("umbrella", "g1") {
		t.Error("the same groupId of two tenants is one group")
	}
}

func TestNilReceivers(t *testing.T) {
	t.Parallel()
	for name, err := range map[string]error{
		"Submission":  (*contracts.Submission)(nil).Validate(contracts.Limits{}),
		"ReadyBatch":  (*contracts.ReadyBatch)(nil).Validate(contracts.Limits{}),
		"ResultBatch": (*contracts.ResultBatch)(nil).Validate(),
		"JobResult":   (*contracts.JobResult)(nil).Validate(),
		"GroupEvent":  (*contracts.GroupEvent)(nil).Validate(),
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
	// The same, produced by the code rather than built by hand.
	err := contracts.ValidateID("jobId", "a.b")
	if got, want := err.Error(), "contracts: jobId: contains '.' (must match ^[A-Za-z0-9_-]{1,128}$)"; got != want {
		t.Errorf("ValidateID error = %q, want %q", got, want)
	}
	s := validJobs()
	s.Jobs[1].Payload = payloadOfSize(300000)
	if got, want := s.Validate(contracts.Limits{}).Error(), "contracts: jobs[1].payload: 300000 bytes (limit 262144)"; got != want {
		t.Errorf("payload error = %q, want %q", got, want)
	}
	s = validJobs()
	s.Jobs[2].Type = "a.b"
	if got, want := s.Validate(contracts.Limits{}).Error(), "contracts: jobs[2].type: contains '.' (must match ^[A-Za-z0-9_-]{1,64}$)"; got != want {
		t.Errorf("type error = %q, want %q", got, want)
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
