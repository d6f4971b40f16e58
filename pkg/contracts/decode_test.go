package contracts_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// The default subjects of the decode tables: group acme/g1.
const (
	subjSubmit = "bulkaction.submit.acme.g1"
	subjResult = "bulkaction.result.acme.g1"
)

// decodeCase is a body and how a Decode function judges it. The tables of this file are also the
// corpus of the schema agreement test (schema_test.go), which is why a case says how the JSON
// Schema judges it when that differs.
type decodeCase struct {
	name    string
	subject string // "" = the table's default subject; "-" = the empty subject
	body    string
	lim     contracts.Limits
	reason  string // "" = accepted
	field   string
	parts   []string
	// except names the rule by which the JSON Schema judges the body otherwise than the decoder
	// does (one of the except… constants of schema_test.go); "" when they agree.
	except string
}

func (c decodeCase) subjectOr(def string) string {
	switch c.subject {
	case "":
		return def
	case "-":
		return ""
	}
	return c.subject
}

// jobsBody returns a jobs submission body of n valid jobs with distinct IDs.
func jobsBody(n int) string {
	var b strings.Builder
	b.WriteString(`{"v":2,"kind":"jobs","jobs":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"jobId":"j` + strconv.Itoa(i) + `","type":"t"}`)
	}
	b.WriteString(`]}`)
	return b.String()
}

// itemsBody returns {"v":2,"<array>":[item × n]}, item holding %d for the index.
func itemsBody(array, item string, n int) string {
	items := make([]string, n)
	for i := range items {
		items[i] = strings.ReplaceAll(item, "%d", strconv.Itoa(i))
	}
	return `{"v":2,"` + array + `":[` + strings.Join(items, ",") + `]}`
}

// job1 wraps one job with the given payload into a jobs submission.
func job1(payload string) string {
	return `{"v":2,"kind":"jobs","jobs":[{"jobId":"j1","type":"email","payload":` + payload + `}]}`
}

var submissionCases = []decodeCase{
	// The body is not a JSON object.
	{name: "empty body", body: ``, reason: contracts.ReasonBadJSON, parts: []string{"empty body"}},
	{name: "whitespace body", body: " \n\t", reason: contracts.ReasonBadJSON},
	{name: "not JSON", body: `hello`, reason: contracts.ReasonBadJSON, parts: []string{"not JSON"}},
	{name: "truncated", body: `{"v":2,"kind":"cancel"`, reason: contracts.ReasonBadJSON, parts: []string{"not JSON"}},
	{name: "trailing data", body: `{"v":2,"kind":"cancel"} {}`, reason: contracts.ReasonBadJSON},
	{name: "JSON array", body: `[{"v":2,"kind":"cancel"}]`, reason: contracts.ReasonBadJSON, parts: []string{"not a JSON object"}},
	{name: "JSON null", body: `null`, reason: contracts.ReasonBadJSON, parts: []string{"not a JSON object"}},
	{name: "JSON string", body: `"{}"`, reason: contracts.ReasonBadJSON},
	{name: "JSON number", body: `2`, reason: contracts.ReasonBadJSON},
	// The version.
	{name: "v1 job", body: `{"v":1,"kind":"job","groupId":"g1","jobId":"j1","type":"email"}`, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"got 1", "must be 2"}},
	{name: "v1 seal", body: `{"v":1,"kind":"seal","groupId":"g1","total":3}`, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"got 1"}},
	{name: "no v", body: `{"kind":"cancel"}`, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"got 0", "must be 2"}},
	{name: "v null", body: `{"v":null,"kind":"cancel"}`, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"got 0"}},
	{name: "v 3", body: `{"v":3,"kind":"cancel"}`, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"got 3"}},
	{name: "v string", body: `{"v":"2","kind":"cancel"}`, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"JSON string"}},
	{name: "v fraction", body: `{"v":2.5,"kind":"cancel"}`, reason: contracts.ReasonBadVersion, field: "v"},
	{name: "v 2.0", body: `{"v":2.0,"kind":"cancel"}`, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"JSON number 2.0"}, except: exceptIntegral},
	{name: "v checked before other type errors", body: `{"v":1,"kind":"jobs","tenant":5}`, reason: contracts.ReasonBadVersion, field: "v"},
	// The kind.
	{name: "no kind", body: `{"v":2}`, reason: contracts.ReasonUnknownKind, field: "kind", parts: []string{"missing", "jobs, seal, cancel, pause, resume"}},
	{name: "v1 kind job", body: `{"v":2,"kind":"job","jobs":[{"jobId":"j","type":"t"}]}`, reason: contracts.ReasonUnknownKind, field: "kind", parts: []string{`"job"`}},
	{name: "kind upper case", body: `{"v":2,"kind":"PAUSE"}`, reason: contracts.ReasonUnknownKind, field: "kind", parts: []string{`"PAUSE"`}},
	{name: "kind number", body: `{"v":2,"kind":1}`, reason: contracts.ReasonUnknownKind, field: "kind", parts: []string{"JSON number"}},
	{name: "kind checked before type errors", body: `{"v":2,"kind":"nope","jobs":5}`, reason: contracts.ReasonUnknownKind, field: "kind"},
	// Fields of the wrong JSON type; an item's field is named with its index.
	{name: "tenant number", body: `{"v":2,"kind":"cancel","tenant":1}`, reason: contracts.ReasonInvalidField, field: "tenant", parts: []string{"JSON number", "must be a JSON string"}},
	{name: "groupId number", body: `{"v":2,"kind":"cancel","groupId":1}`, reason: contracts.ReasonInvalidField, field: "groupId", parts: []string{"JSON number", "must be a JSON string"}},
	{name: "jobs object", body: `{"v":2,"kind":"jobs","jobs":{}}`, reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"JSON object"}},
	{name: "jobs of numbers", body: `{"v":2,"kind":"jobs","jobs":[5]}`, reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"JSON number"}},
	{name: "jobs[1].type number", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"},{"jobId":"b","type":5}]}`, reason: contracts.ReasonInvalidField, field: "jobs[1].type", parts: []string{"JSON number", "must be a JSON string"}},
	{name: "jobs[2].jobId number", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"},{"jobId":"b","type":"t"},{"jobId":5,"type":"t"}]}`, reason: contracts.ReasonInvalidField, field: "jobs[2].jobId"},
	{name: "group array", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"}],"group":[]}`, reason: contracts.ReasonInvalidField, field: "group", parts: []string{"JSON array"}},
	{name: "group.maxInFlight string", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"}],"group":{"maxInFlight":"5"}}`, reason: contracts.ReasonInvalidField, field: "group.maxInFlight", parts: []string{"JSON string", "integer"}},
	{name: "group.basePriority fraction", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"}],"group":{"basePriority":0.5}}`, reason: contracts.ReasonInvalidField, field: "group.basePriority"},
	{name: "group.basePriority exponent", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"}],"group":{"basePriority":1e3}}`, reason: contracts.ReasonInvalidField, field: "group.basePriority", parts: []string{"1e3"}, except: exceptIntegral},
	{name: "group.priority number", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"}],"group":{"priority":1}}`, reason: contracts.ReasonInvalidField, field: "group.priority"},
	{name: "total string", body: `{"v":2,"kind":"seal","total":"3"}`, reason: contracts.ReasonInvalidField, field: "total", parts: []string{"JSON string", "integer"}},
	{name: "total overflows", body: `{"v":2,"kind":"seal","total":99999999999999999999}`, reason: contracts.ReasonInvalidField, field: "total"},
	{name: "total 3.0", body: `{"v":2,"kind":"seal","total":3.0}`, reason: contracts.ReasonInvalidField, field: "total", except: exceptIntegral},
	// Limits and required fields.
	{name: "seal", body: `{"v":2,"kind":"seal","total":3}`},
	{name: "seal 0", body: `{"v":2,"kind":"seal","total":0}`},
	{name: "seal max", body: `{"v":2,"kind":"seal","total":1000000000}`},
	{name: "seal max+1", body: `{"v":2,"kind":"seal","total":1000000001}`, reason: contracts.ReasonInvalidField, field: "total", parts: []string{"1000000001 out of range", "[0, 1000000000]"}},
	{name: "seal negative", body: `{"v":2,"kind":"seal","total":-1}`, reason: contracts.ReasonInvalidField, field: "total", parts: []string{"-1 out of range"}},
	{name: "total missing", body: `{"v":2,"kind":"seal"}`, reason: contracts.ReasonInvalidField, field: "total", parts: []string{"required for kind seal"}},
	{name: "total null", body: `{"v":2,"kind":"seal","total":null}`, reason: contracts.ReasonInvalidField, field: "total"},
	{name: "cancel", body: `{"v":2,"kind":"cancel"}`},
	{name: "pause", body: `{"v":2,"kind":"pause"}`},
	{name: "resume", body: `{"v":2,"kind":"resume"}`},
	{name: "one job", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"j1","type":"email","payload":{"to":"a@example.com"}}]}`},
	{name: "jobs of two types", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"j1","type":"email"},{"jobId":"j2","type":"sms","payload":null}]}`},
	{name: "jobs with settings", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"j1","type":"t"}],"group":{"priority":"low","basePriority":-1000000000000,"maxInFlight":1000000}}`},
	{name: "jobs with empty settings", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"j1","type":"t"}],"group":{}}`},
	{name: "jobs missing", body: `{"v":2,"kind":"jobs"}`, reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"0 items", "must hold 1 to 1000"}},
	{name: "jobs null", body: `{"v":2,"kind":"jobs","jobs":null}`, reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"0 items"}},
	{name: "jobs empty", body: `{"v":2,"kind":"jobs","jobs":[]}`, reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"0 items"}},
	{name: "MaxBatch jobs", body: jobsBody(contracts.MaxBatch)},
	{name: "MaxBatch+1 jobs", body: jobsBody(contracts.MaxBatch + 1), reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"1001 items", "must hold 1 to 1000"}},
	{name: "jobs[2].jobId with dot", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"},{"jobId":"b","type":"t"},{"jobId":"a.b","type":"t"}]}`, reason: contracts.ReasonInvalidField, field: "jobs[2].jobId", parts: []string{"contains '.'", "{1,128}"}},
	{name: "jobs[1].jobId missing", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"},{"type":"t"}]}`, reason: contracts.ReasonInvalidField, field: "jobs[1].jobId", parts: []string{"empty"}},
	{name: "jobs[0].type empty", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":""}]}`, reason: contracts.ReasonInvalidField, field: "jobs[0].type", parts: []string{"empty"}},
	{name: "jobs[0].type 65", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"` + strings.Repeat("t", 65) + `"}]}`, reason: contracts.ReasonInvalidField, field: "jobs[0].type", parts: []string{"65 characters"}},
	{name: "duplicate job ids", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"},{"jobId":"a","type":"u"}]}`, reason: contracts.ReasonInvalidField, field: "jobs[1].jobId", parts: []string{"duplicate of jobs[0].jobId"}, except: exceptDistinctIDs},
	{name: "group.maxInFlight max+1", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"}],"group":{"maxInFlight":1000001}}`, reason: contracts.ReasonInvalidField, field: "group.maxInFlight", parts: []string{"[0, 1000000]"}},
	{name: "group.maxInFlight negative", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"}],"group":{"maxInFlight":-1}}`, reason: contracts.ReasonInvalidField, field: "group.maxInFlight"},
	{name: "group.basePriority max", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"}],"group":{"basePriority":1000000000000}}`},
	{name: "group.basePriority min-1", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"}],"group":{"basePriority":-1000000000001}}`, reason: contracts.ReasonInvalidField, field: "group.basePriority", parts: []string{"out of range"}},
	{name: "group.priority unknown", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"}],"group":{"priority":"top"}}`, reason: contracts.ReasonInvalidField, field: "group.priority", parts: []string{`"top"`}},
	{name: "group.priority empty", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"}],"group":{"priority":""}}`, except: exceptNullAbsent},
	{name: "group null", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"}],"group":null}`, except: exceptNullAbsent},
	// Fields of another kind.
	{name: "seal with jobs", body: `{"v":2,"kind":"seal","total":1,"jobs":[{"jobId":"a","type":"t"}]}`, reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"set on kind seal", "allowed only for kind jobs"}},
	{name: "seal with empty jobs", body: `{"v":2,"kind":"seal","total":1,"jobs":[]}`, reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"set on kind seal"}},
	{name: "seal with jobs null", body: `{"v":2,"kind":"seal","total":1,"jobs":null}`, except: exceptNullAbsent},
	{name: "seal with group", body: `{"v":2,"kind":"seal","total":1,"group":{}}`, reason: contracts.ReasonInvalidField, field: "group", parts: []string{"set on kind seal"}},
	{name: "cancel with jobs", body: `{"v":2,"kind":"cancel","jobs":[{"jobId":"a","type":"t"}]}`, reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"set on kind cancel"}},
	{name: "cancel with total", body: `{"v":2,"kind":"cancel","total":0}`, reason: contracts.ReasonInvalidField, field: "total", parts: []string{"set on kind cancel", "allowed only for kind seal"}},
	{name: "pause with total", body: `{"v":2,"kind":"pause","total":3}`, reason: contracts.ReasonInvalidField, field: "total", parts: []string{"set on kind pause"}},
	{name: "pause with total null", body: `{"v":2,"kind":"pause","total":null}`, except: exceptNullAbsent},
	{name: "pause with group", body: `{"v":2,"kind":"pause","group":{"maxInFlight":1}}`, reason: contracts.ReasonInvalidField, field: "group", parts: []string{"set on kind pause"}},
	{name: "resume with group", body: `{"v":2,"kind":"resume","group":{}}`, reason: contracts.ReasonInvalidField, field: "group", parts: []string{"set on kind resume"}},
	{name: "resume with jobs", body: `{"v":2,"kind":"resume","jobs":[]}`, reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"set on kind resume"}},
	{name: "jobs with total", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"}],"total":1}`, reason: contracts.ReasonInvalidField, field: "total", parts: []string{"set on kind jobs"}},
	// Payloads: their size in compact form.
	{name: "payload at limit", body: job1(`"12345678"`), lim: contracts.Limits{MaxPayloadBytes: 10}},
	{name: "payload above limit", body: job1(`"123456789"`), lim: contracts.Limits{MaxPayloadBytes: 10}, reason: contracts.ReasonTooLarge, field: "jobs[0].payload", parts: []string{"11 bytes", "limit 10"}, except: exceptPayloadSize},
	{name: "second payload above limit", body: `{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t","payload":1},{"jobId":"b","type":"t","payload":"123456789"}]}`, lim: contracts.Limits{MaxPayloadBytes: 10}, reason: contracts.ReasonTooLarge, field: "jobs[1].payload", except: exceptPayloadSize},
	{name: "payload at default limit", body: job1(string(payloadOfSize(contracts.DefaultMaxPayloadBytes)))},
	{name: "payload above default limit", body: job1(string(payloadOfSize(contracts.DefaultMaxPayloadBytes + 1))), reason: contracts.ReasonTooLarge, field: "jobs[0].payload", parts: []string{"262145 bytes", "limit 262144"}, except: exceptPayloadSize},
	{name: "payload whitespace not counted", body: job1(`[ 1 ,  2 ]`), lim: contracts.Limits{MaxPayloadBytes: 5}},
	{name: "payload HTML escaping counted", body: job1(`"<"`), lim: contracts.Limits{MaxPayloadBytes: 7}, reason: contracts.ReasonTooLarge, field: "jobs[0].payload", parts: []string{"8 bytes"}, except: exceptPayloadSize},
	{name: "payload null", body: job1(`null`)},
	// The subject is authoritative.
	{name: "body names the subject's group", body: `{"v":2,"kind":"cancel","tenant":"acme","groupId":"g1"}`},
	{name: "body tenant differs", body: `{"v":2,"kind":"cancel","tenant":"umbrella"}`, reason: contracts.ReasonSubjectMismatch, field: "tenant", parts: []string{`"umbrella" differs from subject token "acme"`}, except: exceptSubject},
	{name: "body groupId differs", body: `{"v":2,"kind":"cancel","groupId":"g2"}`, reason: contracts.ReasonSubjectMismatch, field: "groupId", parts: []string{`"g2" differs from subject token "g1"`}, except: exceptSubject},
	{name: "body groupId of another tenant", subject: "bulkaction.submit.umbrella.g1", body: `{"v":2,"kind":"cancel","tenant":"acme","groupId":"g1"}`, reason: contracts.ReasonSubjectMismatch, field: "tenant", except: exceptSubject},
	{name: "body tenant invalid", body: `{"v":2,"kind":"cancel","tenant":"a.b"}`, reason: contracts.ReasonSubjectMismatch, field: "tenant"},
	{name: "body tenant empty", body: `{"v":2,"kind":"cancel","tenant":""}`, except: exceptNullAbsent},
	{name: "body groupId null", body: `{"v":2,"kind":"cancel","groupId":null}`, except: exceptNullAbsent},
	{name: "another tenant's subject", subject: "bulkaction.submit.umbrella.g1", body: `{"v":2,"kind":"cancel"}`},
	{name: "wildcard groupId", subject: "bulkaction.submit.acme.*", body: `{"v":2,"kind":"cancel"}`, reason: contracts.ReasonSubjectMismatch, parts: []string{"not a submit subject", "<prefix>.submit.<tenant>.<groupId>"}, except: exceptSubject},
	{name: "wildcard tenant", subject: "bulkaction.submit.*.g1", body: `{"v":2,"kind":"cancel"}`, reason: contracts.ReasonSubjectMismatch, except: exceptSubject},
	{name: "tenant wildcard subject", subject: "bulkaction.submit.acme.>", body: `{"v":2,"kind":"cancel"}`, reason: contracts.ReasonSubjectMismatch, except: exceptSubject},
	{name: "full wildcard subject", subject: "bulkaction.submit.>", body: `{"v":2,"kind":"cancel"}`, reason: contracts.ReasonSubjectMismatch, except: exceptSubject},
	{name: "extra token", subject: "bulkaction.submit.acme.g1.x", body: `{"v":2,"kind":"cancel"}`, reason: contracts.ReasonSubjectMismatch, except: exceptSubject},
	{name: "v1 subject without tenant", subject: "bulkaction.submit.g1", body: `{"v":2,"kind":"cancel"}`, reason: contracts.ReasonSubjectMismatch, except: exceptSubject},
	{name: "result subject", subject: "bulkaction.result.acme.g1", body: `{"v":2,"kind":"cancel"}`, reason: contracts.ReasonSubjectMismatch, parts: []string{"not a submit subject"}, except: exceptSubject},
	{name: "events subject", subject: "bulkaction.events.acme.g1", body: `{"v":2,"kind":"pause"}`, reason: contracts.ReasonSubjectMismatch, except: exceptSubject},
	{name: "ready subject", subject: "bulkaction.ready.email", body: `{"v":2,"kind":"cancel"}`, reason: contracts.ReasonSubjectMismatch, except: exceptSubject},
	{name: "subject without prefix", subject: "submit.acme.g1", body: `{"v":2,"kind":"cancel"}`, reason: contracts.ReasonSubjectMismatch, except: exceptSubject},
	{name: "empty subject", subject: "-", body: `{"v":2,"kind":"cancel"}`, reason: contracts.ReasonSubjectMismatch, except: exceptSubject},
	{name: "custom prefix", subject: "acme.bulk.submit.acme.g1", body: `{"v":2,"kind":"cancel"}`},
	{name: "subject checked before limits", subject: "bulkaction.submit.>", body: `{"v":2,"kind":"seal","total":-1}`, reason: contracts.ReasonSubjectMismatch},
	{name: "type errors checked before the subject", subject: "bulkaction.submit.>", body: `{"v":2,"kind":"cancel","tenant":5}`, reason: contracts.ReasonInvalidField, field: "tenant"},
	// encoding/json's ways.
	{name: "unknown fields ignored", body: `{"v":2,"kind":"cancel","note":"hi","extra":{"x":[1,2]}}`},
	{name: "invalid UTF-8 in an unknown field", body: "{\"v\":2,\"kind\":\"cancel\",\"note\":\"\xff\"}"},
	{name: "last duplicate key wins", body: `{"v":1,"kind":"cancel","v":2,"kind":"pause"}`},
	{name: "keys match case-insensitively", body: `{"V":2,"Kind":"cancel"}`, except: exceptCaseKeys},
}

func TestDecodeSubmissionReasons(t *testing.T) {
	t.Parallel()
	for _, tt := range submissionCases {
		t.Run(tt.name, func(t *testing.T) {
			subject := tt.subjectOr(subjSubmit)
			s, err := contracts.DecodeSubmission(subject, []byte(tt.body), tt.lim)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("DecodeSubmission = %v, want nil", err)
				}
				if want, _ := (contracts.Names{Prefix: prefixOf(subject)}).GroupFromSubject(subject); s.Ref() != want {
					t.Fatalf("decoded group %v on subject %q", s.Ref(), subject)
				}
				return
			}
			if s != nil {
				t.Errorf("returned a submission with error %v", err)
			}
			wantInvalid(t, err, tt.reason, tt.field, tt.parts...)
		})
	}
}

// prefixOf returns the prefix of a subject <prefix>.<kind>.<tenant>.<groupId>.
func prefixOf(subject string) string {
	toks := strings.Split(subject, ".")
	if len(toks) < 4 {
		return ""
	}
	return strings.Join(toks[:len(toks)-3], ".")
}

// TestDecodeSubmissionSubjectIsAuthoritative: the tenant and groupId come from the subject, so the
// same body means different groups on different subjects.
func TestDecodeSubmissionSubjectIsAuthoritative(t *testing.T) {
	t.Parallel()
	body := []byte(`{"v":2,"kind":"jobs","jobs":[{"jobId":"j1","type":"t"}]}`)
	for _, g := range []contracts.GroupRef{acme, contracts.Group("umbrella", "g1"), contracts.Group("acme", "g2")} {
		s, err := contracts.DecodeSubmission(contracts.Names{}.Submit(g), body, contracts.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Ref() != g || s.Tenant != g.Tenant || s.GroupID != g.ID {
			t.Errorf("on %s decoded group %v", contracts.Names{}.Submit(g), s.Ref())
		}
		if got, want := s.MsgID(), contracts.SubmitMsgID(g, "j1"); got != want {
			t.Errorf("MsgID = %q, want %q", got, want)
		}
	}
}

func TestDecodeSubmissionPauseResume(t *testing.T) {
	t.Parallel()
	for _, k := range []contracts.Kind{contracts.KindPause, contracts.KindResume} {
		s, err := contracts.DecodeSubmission(subjSubmit, []byte(`{"v":2,"kind":"`+string(k)+`","note":1}`), contracts.Limits{})
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		want := contracts.Submission{V: 2, Kind: k, Tenant: "acme", GroupID: "g1"}
		if !reflect.DeepEqual(*s, want) {
			t.Errorf("%s: decoded %+v, want %+v", k, *s, want)
		}
		if id := s.MsgID(); id != "" {
			t.Errorf("%s: MsgID = %q, want none", k, id)
		}
	}
}

func TestDecodeSubmissionNormalizesPayload(t *testing.T) {
	t.Parallel()
	tests := []struct {
		payload string // "" = field absent
		want    string // "" = nil payload
	}{
		{"", ""},
		{"null", ""},
		{" null ", ""},
		{`{ "a" : [ 1, 2 ], "b" : "x y" }`, `{"a":[1,2],"b":"x y"}`},
		{`"<a&b>"`, `"\u003ca\u0026b\u003e"`},
		{`"\u2028"`, `"\u2028"`},
		{`0`, `0`},
		{`1.50e+3`, `1.50e+3`},
		{`"é"`, `"é"`},
	}
	for _, tt := range tests {
		job := `{"jobId":"j","type":"t"`
		if tt.payload != "" {
			job += `,"payload":` + tt.payload
		}
		job += "}"
		// The payload is the second job's, to check that every job is normalized.
		body := `{"v":2,"kind":"jobs","jobs":[{"jobId":"i","type":"t","payload":[ 1 ]},` + job + `]}`
		s, err := contracts.DecodeSubmission(subjSubmit, []byte(body), contracts.Limits{})
		if err != nil {
			t.Fatalf("payload %s: %v", tt.payload, err)
		}
		if string(s.Jobs[0].Payload) != `[1]` {
			t.Errorf("first payload %s, want [1]", s.Jobs[0].Payload)
		}
		if p := s.Jobs[1].Payload; tt.want == "" && p != nil || tt.want != "" && string(p) != tt.want {
			t.Errorf("payload %s: decoded %q, want %q", tt.payload, p, tt.want)
		}
		// The normalized form is a fixed point: encoding and decoding again changes nothing.
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if tt.want != "" && !strings.Contains(string(b), `"payload":`+tt.want) {
			t.Errorf("re-encoded %s does not carry payload %s unchanged", b, tt.want)
		}
		s2, err := contracts.DecodeSubmission(subjSubmit, b, contracts.Limits{})
		if err != nil || !reflect.DeepEqual(s, s2) {
			t.Fatalf("second decode of %s: %+v, %v", b, s2, err)
		}
		if b2, _ := json.Marshal(s2); !bytes.Equal(b, b2) {
			t.Errorf("second encoding differs:\n%s\n%s", b, b2)
		}
	}
}

// TestWireFormats pins the JSON field names of every message (docs/ARCHITECTURE.md §3).
func TestWireFormats(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		v    any
		want string
	}{
		{contracts.Submission{V: 2, Kind: contracts.KindJobs,
			Jobs:  []contracts.SubmitJob{{JobID: "j1", Type: "email", Payload: json.RawMessage(`{"to":"a@example.com"}`)}, {JobID: "j2", Type: "sms"}},
			Group: &contracts.GroupSettings{Priority: contracts.PriorityHigh, BasePriority: -5, MaxInFlight: 10}},
			`{"v":2,"kind":"jobs","jobs":[{"jobId":"j1","type":"email","payload":{"to":"a@example.com"}},{"jobId":"j2","type":"sms"}],"group":{"priority":"high","basePriority":-5,"maxInFlight":10}}`},
		{contracts.Submission{V: 2, Kind: contracts.KindJobs, Tenant: "acme", GroupID: "g", Jobs: []contracts.SubmitJob{{JobID: "j", Type: "t"}}},
			`{"v":2,"kind":"jobs","tenant":"acme","groupId":"g","jobs":[{"jobId":"j","type":"t"}]}`},
		{contracts.Submission{V: 2, Kind: contracts.KindJobs, Jobs: []contracts.SubmitJob{{JobID: "j", Type: "t"}}, Group: &contracts.GroupSettings{}},
			`{"v":2,"kind":"jobs","jobs":[{"jobId":"j","type":"t"}],"group":{}}`},
		{contracts.Submission{V: 2, Kind: contracts.KindSeal, Total: i64(0)}, `{"v":2,"kind":"seal","total":0}`},
		{contracts.Submission{V: 2, Kind: contracts.KindCancel}, `{"v":2,"kind":"cancel"}`},
		{contracts.Submission{V: 2, Kind: contracts.KindPause}, `{"v":2,"kind":"pause"}`},
		{contracts.Submission{V: 2, Kind: contracts.KindResume, Tenant: "acme", GroupID: "g"}, `{"v":2,"kind":"resume","tenant":"acme","groupId":"g"}`},
		{contracts.ReadyBatch{V: 2, Jobs: []contracts.ReadyJob{
			{Tenant: "acme", GroupID: "g", JobID: "j", Type: "t", Payload: json.RawMessage(`{"a":1}`), Attempt: 2},
			{Tenant: "acme", GroupID: "h", JobID: "k", Type: "t", Attempt: 1}}},
			`{"v":2,"jobs":[{"tenant":"acme","groupId":"g","jobId":"j","type":"t","payload":{"a":1},"attempt":2},{"tenant":"acme","groupId":"h","jobId":"k","type":"t","attempt":1}]}`},
		{contracts.ResultBatch{V: 2, Results: []contracts.JobResult{
			{JobID: "j", Attempt: 1, Status: contracts.ResultSuccess, DurationMs: 7},
			{Tenant: "acme", GroupID: "g", JobID: "k", Attempt: 3, Status: contracts.ResultFailed, Error: "boom"}}},
			`{"v":2,"results":[{"jobId":"j","attempt":1,"status":"SUCCESS","durationMs":7},{"tenant":"acme","groupId":"g","jobId":"k","attempt":3,"status":"FAILED","error":"boom","durationMs":0}]}`},
		{contracts.GroupEvent{V: 2, Tenant: "acme", GroupID: "g", State: contracts.StateCompleted, Total: 3, Jobs: 3, Succeeded: 2, Failed: 1, At: at},
			`{"v":2,"tenant":"acme","groupId":"g","state":"COMPLETED","total":3,"jobs":3,"succeeded":2,"failed":1,"cancelled":0,"at":"2025-03-01T12:00:00Z"}`},
		{contracts.GroupEvent{V: 2, Tenant: "acme", GroupID: "g", State: contracts.StatePaused, Jobs: 5, Cancelled: 1, At: at},
			`{"v":2,"tenant":"acme","groupId":"g","state":"PAUSED","total":0,"jobs":5,"succeeded":0,"failed":0,"cancelled":1,"at":"2025-03-01T12:00:00Z"}`},
		{contracts.DeadLetter{V: 2, Reason: "bad_json", Error: "e", Subject: "s", Raw: "x"},
			`{"v":2,"reason":"bad_json","error":"e","subject":"s","raw":"x"}`},
		{contracts.DeadLetter{V: 2, Reason: "bad_version", Error: "e", Subject: "s", Message: json.RawMessage(`{"v":1}`)},
			`{"v":2,"reason":"bad_version","error":"e","subject":"s","message":{"v":1}}`},
		{contracts.DeadLetter{V: 2, Reason: "too_large", Error: "e", Subject: "s", Raw: "ab", Truncated: true, Size: 9},
			`{"v":2,"reason":"too_large","error":"e","subject":"s","raw":"ab","truncated":true,"size":9}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tt.want {
			t.Errorf("Marshal(%T) = %s\nwant %s", tt.v, b, tt.want)
		}
	}
}

func TestSubmissionRoundTrip(t *testing.T) {
	t.Parallel()
	jobs := validJobs()
	jobs.Jobs[0].Payload = json.RawMessage(`{"to":"a@example.com","n":[1,2.5,null]}`)
	for _, s := range []contracts.Submission{
		jobs,
		{V: 2, Kind: contracts.KindJobs, Tenant: "t", GroupID: "g", Jobs: manyJobs(contracts.MaxBatch),
			Group: &contracts.GroupSettings{BasePriority: contracts.MinBasePriority, Priority: contracts.PriorityLow, MaxInFlight: contracts.MaxInFlight}},
		{V: 2, Kind: contracts.KindSeal, Tenant: "t", GroupID: "g1", Total: i64(contracts.MaxTotal)},
		{V: 2, Kind: contracts.KindSeal, Tenant: "t", GroupID: "g1", Total: i64(0)},
		{V: 2, Kind: contracts.KindCancel, Tenant: "t", GroupID: "g1"},
		{V: 2, Kind: contracts.KindPause, Tenant: "t", GroupID: "g1"},
		{V: 2, Kind: contracts.KindResume, Tenant: "t", GroupID: "g1"},
	} {
		if err := s.Validate(contracts.Limits{}); err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := contracts.DecodeSubmission(contracts.Names{}.Submit(s.Ref()), b, contracts.Limits{})
		if err != nil {
			t.Fatalf("decode %.200s: %v", b, err)
		}
		if !reflect.DeepEqual(*got, s) {
			t.Errorf("round trip of %.200s:\n got %+v\nwant %+v", b, *got, s)
		}
	}
}

var readyCases = []decodeCase{
	{name: "valid", body: `{"v":2,"jobs":[{"tenant":"acme","groupId":"g1","jobId":"j1","type":"email","payload":{"a":1},"attempt":1},{"tenant":"umbrella","groupId":"g1","jobId":"j1","type":"email","attempt":2}]}`},
	{name: "null payload", body: `{"v":2,"jobs":[{"tenant":"acme","groupId":"g1","jobId":"j1","type":"email","payload":null,"attempt":1}]}`},
	{name: "MaxBatch jobs", body: itemsBody("jobs", `{"tenant":"acme","groupId":"g1","jobId":"j%d","type":"t","attempt":1}`, contracts.MaxBatch)},
	{name: "not JSON", body: `nope`, reason: contracts.ReasonBadJSON},
	{name: "array", body: `[]`, reason: contracts.ReasonBadJSON},
	{name: "v1 ready job", body: `{"v":1,"groupId":"g","jobId":"j","type":"t","attempt":1}`, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"got 1", "must be 2"}},
	{name: "v 0", body: `{"v":0,"jobs":[{"tenant":"acme","groupId":"g","jobId":"j","type":"t","attempt":1}]}`, reason: contracts.ReasonBadVersion, field: "v"},
	{name: "v array", body: `{"v":[2],"jobs":[]}`, reason: contracts.ReasonBadVersion, field: "v"},
	{name: "jobs missing", body: `{"v":2}`, reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"0 items", "must hold 1 to 1000"}},
	{name: "jobs empty", body: `{"v":2,"jobs":[]}`, reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"0 items"}},
	{name: "jobs object", body: `{"v":2,"jobs":{}}`, reason: contracts.ReasonInvalidField, field: "jobs"},
	{name: "MaxBatch+1 jobs", body: itemsBody("jobs", `{"tenant":"acme","groupId":"g1","jobId":"j%d","type":"t","attempt":1}`, contracts.MaxBatch+1), reason: contracts.ReasonInvalidField, field: "jobs", parts: []string{"1001 items"}},
	{name: "jobs[1].type with dot", body: `{"v":2,"jobs":[{"tenant":"a","groupId":"g","jobId":"j","type":"t","attempt":1},{"tenant":"a","groupId":"g","jobId":"k","type":"t.x","attempt":1}]}`, reason: contracts.ReasonInvalidField, field: "jobs[1].type", parts: []string{"contains '.'"}},
	{name: "jobs[0].attempt string", body: `{"v":2,"jobs":[{"tenant":"a","groupId":"g","jobId":"j","type":"t","attempt":"1"}]}`, reason: contracts.ReasonInvalidField, field: "jobs[0].attempt", parts: []string{"JSON string"}},
	{name: "jobs[1].attempt 0", body: `{"v":2,"jobs":[{"tenant":"a","groupId":"g","jobId":"j","type":"t","attempt":1},{"tenant":"a","groupId":"g","jobId":"k","type":"t","attempt":0}]}`, reason: contracts.ReasonInvalidField, field: "jobs[1].attempt", parts: []string{"must be >= 1"}},
	{name: "jobs[0].attempt missing", body: `{"v":2,"jobs":[{"tenant":"a","groupId":"g","jobId":"j","type":"t"}]}`, reason: contracts.ReasonInvalidField, field: "jobs[0].attempt"},
	{name: "jobs[0].attempt 1.0", body: `{"v":2,"jobs":[{"tenant":"a","groupId":"g","jobId":"j","type":"t","attempt":1.0}]}`, reason: contracts.ReasonInvalidField, field: "jobs[0].attempt", except: exceptIntegral},
	{name: "jobs[0].tenant missing", body: `{"v":2,"jobs":[{"groupId":"g","jobId":"j","type":"t","attempt":1}]}`, reason: contracts.ReasonInvalidField, field: "jobs[0].tenant", parts: []string{"empty"}},
	{name: "jobs[0].tenant null", body: `{"v":2,"jobs":[{"tenant":null,"groupId":"g","jobId":"j","type":"t","attempt":1}]}`, reason: contracts.ReasonInvalidField, field: "jobs[0].tenant"},
	{name: "jobs[0].groupId with space", body: `{"v":2,"jobs":[{"tenant":"a","groupId":"g 1","jobId":"j","type":"t","attempt":1}]}`, reason: contracts.ReasonInvalidField, field: "jobs[0].groupId"},
	{name: "payload above limit", body: `{"v":2,"jobs":[{"tenant":"a","groupId":"g","jobId":"j","type":"t","attempt":1,"payload":"123"}]}`, lim: contracts.Limits{MaxPayloadBytes: 4}, reason: contracts.ReasonTooLarge, field: "jobs[0].payload", except: exceptPayloadSize},
	{name: "payload at limit", body: `{"v":2,"jobs":[{"tenant":"a","groupId":"g","jobId":"j","type":"t","attempt":1,"payload":"12"}]}`, lim: contracts.Limits{MaxPayloadBytes: 4}},
	{name: "two types", body: `{"v":2,"jobs":[{"tenant":"a","groupId":"g","jobId":"j","type":"email","attempt":1},{"tenant":"a","groupId":"g","jobId":"k","type":"sms","attempt":1}]}`, reason: contracts.ReasonInvalidField, field: "jobs[1].type", parts: []string{`"sms" differs from jobs[0]`, "one type"}, except: exceptOneType},
	{name: "keys match case-insensitively", body: `{"V":2,"Jobs":[{"tenant":"a","groupId":"g","jobId":"j","type":"t","attempt":1}]}`, except: exceptCaseKeys},
}

func TestDecodeReadyBatch(t *testing.T) {
	t.Parallel()
	for _, tt := range readyCases {
		t.Run(tt.name, func(t *testing.T) {
			b, err := contracts.DecodeReadyBatch([]byte(tt.body), tt.lim)
			if tt.reason == "" {
				if err != nil || b == nil {
					t.Fatalf("DecodeReadyBatch = %v, want nil", err)
				}
				return
			}
			if b != nil {
				t.Errorf("returned %+v with an error", b)
			}
			wantInvalid(t, err, tt.reason, tt.field, tt.parts...)
		})
	}
}

func TestReadyBatchRoundTrip(t *testing.T) {
	t.Parallel()
	want := validReady()
	want.Jobs[0].Payload = json.RawMessage(`{"k":[true,null]}`)
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := contracts.DecodeReadyBatch(b, contracts.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("round trip: got %+v, want %+v", *got, want)
	}
	if got.Jobs[1].Payload != nil {
		t.Errorf("absent payload decoded as %q", got.Jobs[1].Payload)
	}
	// Payloads are normalized.
	got, err = contracts.DecodeReadyBatch([]byte(`{"v":2,"jobs":[{"tenant":"a","groupId":"g","jobId":"j","type":"t","attempt":1,"payload":{ "a" : "<" }}]}`), contracts.Limits{})
	if err != nil || string(got.Jobs[0].Payload) != `{"a":"\u003c"}` {
		t.Errorf("payload %s, %v", got.Jobs[0].Payload, err)
	}
}

var resultCases = []decodeCase{
	{name: "valid", body: `{"v":2,"results":[{"jobId":"j1","attempt":1,"status":"SUCCESS","durationMs":15},{"tenant":"acme","groupId":"g1","jobId":"j2","attempt":3,"status":"FAILED","error":"smtp: 550 <user> & co"}]}`},
	{name: "MaxBatch results", body: itemsBody("results", `{"jobId":"j%d","attempt":1,"status":"SUCCESS"}`, contracts.MaxBatch)},
	{name: "custom prefix", subject: "acme.bulk.result.acme.g1", body: `{"v":2,"results":[{"jobId":"j","attempt":1,"status":"FAILED"}]}`},
	{name: "truncated", body: `{`, reason: contracts.ReasonBadJSON},
	{name: "v1 result", body: `{"v":1,"groupId":"g","jobId":"j","attempt":1,"status":"SUCCESS"}`, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"got 1", "must be 2"}},
	{name: "results missing", body: `{"v":2}`, reason: contracts.ReasonInvalidField, field: "results", parts: []string{"0 items"}},
	{name: "results empty", body: `{"v":2,"results":[]}`, reason: contracts.ReasonInvalidField, field: "results", parts: []string{"0 items"}},
	{name: "MaxBatch+1 results", body: itemsBody("results", `{"jobId":"j%d","attempt":1,"status":"SUCCESS"}`, contracts.MaxBatch+1), reason: contracts.ReasonInvalidField, field: "results", parts: []string{"1001 items", "must hold 1 to 1000"}},
	{name: "results[0].status unknown", body: `{"v":2,"results":[{"jobId":"j","attempt":1,"status":"OK"}]}`, reason: contracts.ReasonInvalidField, field: "results[0].status", parts: []string{`"OK"`, "SUCCESS, FAILED"}},
	{name: "results[1].status missing", body: `{"v":2,"results":[{"jobId":"j","attempt":1,"status":"SUCCESS"},{"jobId":"k","attempt":1}]}`, reason: contracts.ReasonInvalidField, field: "results[1].status"},
	{name: "results[0].durationMs negative", body: `{"v":2,"results":[{"jobId":"j","attempt":1,"status":"SUCCESS","durationMs":-5}]}`, reason: contracts.ReasonInvalidField, field: "results[0].durationMs", parts: []string{"must be >= 0"}},
	{name: "results[0].durationMs 2e3", body: `{"v":2,"results":[{"jobId":"j","attempt":1,"status":"SUCCESS","durationMs":2e3}]}`, reason: contracts.ReasonInvalidField, field: "results[0].durationMs", except: exceptIntegral},
	{name: "results[1].error number", body: `{"v":2,"results":[{"jobId":"j","attempt":1,"status":"SUCCESS"},{"jobId":"k","attempt":1,"status":"FAILED","error":7}]}`, reason: contracts.ReasonInvalidField, field: "results[1].error", parts: []string{"JSON number"}},
	{name: "results[1].attempt string", body: `{"v":2,"results":[{"jobId":"j","attempt":1,"status":"SUCCESS"},{"jobId":"k","attempt":"1","status":"FAILED"}]}`, reason: contracts.ReasonInvalidField, field: "results[1].attempt"},
	{name: "results[0].attempt 0", body: `{"v":2,"results":[{"jobId":"j","attempt":0,"status":"SUCCESS"}]}`, reason: contracts.ReasonInvalidField, field: "results[0].attempt"},
	{name: "results[0].jobId missing", body: `{"v":2,"results":[{"attempt":1,"status":"SUCCESS"}]}`, reason: contracts.ReasonInvalidField, field: "results[0].jobId", parts: []string{"empty"}},
	{name: "results[0].error null", body: `{"v":2,"results":[{"jobId":"j","attempt":1,"status":"SUCCESS","error":null}]}`, except: exceptNullAbsent},
	{name: "results[1].tenant differs", body: `{"v":2,"results":[{"jobId":"j","attempt":1,"status":"SUCCESS"},{"tenant":"umbrella","jobId":"k","attempt":1,"status":"SUCCESS"}]}`, reason: contracts.ReasonSubjectMismatch, field: "results[1].tenant", parts: []string{`"umbrella" differs from subject token "acme"`}, except: exceptSubject},
	{name: "results[0].groupId differs", body: `{"v":2,"results":[{"groupId":"g2","jobId":"j","attempt":1,"status":"SUCCESS"}]}`, reason: contracts.ReasonSubjectMismatch, field: "results[0].groupId", except: exceptSubject},
	{name: "results[0].tenant invalid", body: `{"v":2,"results":[{"tenant":"a.b","jobId":"j","attempt":1,"status":"SUCCESS"}]}`, reason: contracts.ReasonSubjectMismatch, field: "results[0].tenant"},
	{name: "submit subject", subject: "bulkaction.submit.acme.g1", body: `{"v":2,"results":[{"jobId":"j","attempt":1,"status":"SUCCESS"}]}`, reason: contracts.ReasonSubjectMismatch, parts: []string{"not a result subject"}, except: exceptSubject},
	{name: "wildcard subject", subject: "bulkaction.result.acme.*", body: `{"v":2,"results":[{"jobId":"j","attempt":1,"status":"SUCCESS"}]}`, reason: contracts.ReasonSubjectMismatch, except: exceptSubject},
	{name: "v1 subject without tenant", subject: "bulkaction.result.g1", body: `{"v":2,"results":[{"jobId":"j","attempt":1,"status":"SUCCESS"}]}`, reason: contracts.ReasonSubjectMismatch, except: exceptSubject},
	{name: "extra token", subject: "bulkaction.result.acme.g1.x", body: `{"v":2,"results":[{"jobId":"j","attempt":1,"status":"SUCCESS"}]}`, reason: contracts.ReasonSubjectMismatch, except: exceptSubject},
}

func TestDecodeResultBatch(t *testing.T) {
	t.Parallel()
	for _, tt := range resultCases {
		t.Run(tt.name, func(t *testing.T) {
			b, err := contracts.DecodeResultBatch(tt.subjectOr(subjResult), []byte(tt.body))
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("DecodeResultBatch = %v, want nil", err)
				}
				for i, r := range b.Results {
					if r.Ref() != acme {
						t.Errorf("results[%d] of group %v, want the subject's", i, r.Ref())
					}
				}
				return
			}
			if b != nil {
				t.Errorf("returned %+v with an error", b)
			}
			wantInvalid(t, err, tt.reason, tt.field, tt.parts...)
		})
	}
}

func TestResultBatchRoundTrip(t *testing.T) {
	t.Parallel()
	want := validResults()
	want.Results[1].Error = "smtp: 550 <user> & co"
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := contracts.DecodeResultBatch(subjResult, b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("round trip: got %+v, want %+v", *got, want)
	}
	// Without the tokens in the body, the subject's fill them in.
	for i := range want.Results {
		want.Results[i].Tenant, want.Results[i].GroupID = "", ""
	}
	b, _ = json.Marshal(want)
	if got, err = contracts.DecodeResultBatch(subjResult, b); err != nil || !reflect.DeepEqual(*got, validResultsWithError()) {
		t.Errorf("decoded %+v, %v", got, err)
	}
}

func validResultsWithError() contracts.ResultBatch {
	b := validResults()
	b.Results[1].Error = "smtp: 550 <user> & co"
	return b
}

var eventCases = []decodeCase{
	{name: "valid", body: `{"v":2,"tenant":"acme","groupId":"g1","state":"RUNNING","total":0,"jobs":3,"succeeded":1,"failed":0,"cancelled":0,"at":"2025-03-01T12:00:00Z"}`},
	{name: "paused", body: `{"v":2,"tenant":"acme","groupId":"g1","state":"PAUSED","jobs":3,"at":"2025-03-01T12:00:00.123+01:00"}`},
	{name: "minimal", body: `{"v":2,"tenant":"acme","groupId":"g1","state":"CREATED"}`},
	{name: "array", body: `[]`, reason: contracts.ReasonBadJSON},
	{name: "v 9", body: `{"v":9,"tenant":"acme","groupId":"g","state":"RUNNING"}`, reason: contracts.ReasonBadVersion, field: "v"},
	{name: "v1 event", body: `{"v":1,"groupId":"g","state":"RUNNING"}`, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"got 1"}},
	{name: "state unknown", body: `{"v":2,"tenant":"acme","groupId":"g","state":"DONE"}`, reason: contracts.ReasonInvalidField, field: "state", parts: []string{`"DONE"`, "PAUSED"}},
	{name: "state missing", body: `{"v":2,"tenant":"acme","groupId":"g"}`, reason: contracts.ReasonInvalidField, field: "state"},
	{name: "tenant missing", body: `{"v":2,"groupId":"g","state":"RUNNING"}`, reason: contracts.ReasonInvalidField, field: "tenant", parts: []string{"empty"}},
	{name: "groupId with dot", body: `{"v":2,"tenant":"acme","groupId":"g.1","state":"RUNNING"}`, reason: contracts.ReasonInvalidField, field: "groupId"},
	{name: "at not a time", body: `{"v":2,"tenant":"acme","groupId":"g","state":"RUNNING","at":"yesterday"}`, reason: contracts.ReasonInvalidField, field: "at"},
	{name: "at number first", body: `{"at":5,"v":2,"tenant":"acme","groupId":"g","state":"RUNNING"}`, reason: contracts.ReasonInvalidField, field: "at"},
	{name: "at lower case", body: `{"v":2,"tenant":"acme","groupId":"g","state":"RUNNING","at":"2025-03-01t12:00:00z"}`, reason: contracts.ReasonInvalidField, field: "at"},
	{name: "at leap second", body: `{"v":2,"tenant":"acme","groupId":"g","state":"RUNNING","at":"2016-12-31T23:59:60Z"}`, reason: contracts.ReasonInvalidField, field: "at", except: exceptDateTime},
	{name: "at offset 24h", body: `{"v":2,"tenant":"acme","groupId":"g","state":"RUNNING","at":"2025-03-01T12:00:00+24:00"}`, reason: contracts.ReasonInvalidField, field: "at", parts: []string{"RFC 3339"}},
	{name: "at offset 23:59", body: `{"v":2,"tenant":"acme","groupId":"g","state":"RUNNING","at":"2025-03-01T12:00:00-23:59"}`},
	{name: "notice", body: `{"v":2,"tenant":"acme","groupId":"g","state":"RUNNING","notice":"settings differ: maxInFlight 5, not 10"}`},
	{name: "notice number", body: `{"v":2,"tenant":"acme","groupId":"g","state":"RUNNING","notice":5}`, reason: contracts.ReasonInvalidField, field: "notice"},
	{name: "at null", body: `{"v":2,"tenant":"acme","groupId":"g","state":"RUNNING","at":null}`, except: exceptNullAbsent},
	{name: "jobs negative", body: `{"v":2,"tenant":"acme","groupId":"g","state":"RUNNING","jobs":-1}`, reason: contracts.ReasonInvalidField, field: "jobs"},
	{name: "failed 1.0", body: `{"v":2,"tenant":"acme","groupId":"g","state":"RUNNING","failed":1.0}`, reason: contracts.ReasonInvalidField, field: "failed", except: exceptIntegral},
}

func TestDecodeGroupEvent(t *testing.T) {
	t.Parallel()
	for _, tt := range eventCases {
		t.Run(tt.name, func(t *testing.T) {
			e, err := contracts.DecodeGroupEvent([]byte(tt.body))
			if tt.reason == "" {
				if err != nil || e == nil {
					t.Fatalf("DecodeGroupEvent = %v, want nil", err)
				}
				return
			}
			if e != nil {
				t.Errorf("returned %+v with an error", e)
			}
			wantInvalid(t, err, tt.reason, tt.field, tt.parts...)
		})
	}
}

func TestGroupEventRoundTrip(t *testing.T) {
	t.Parallel()
	want := contracts.GroupEvent{V: 2, Tenant: "acme", GroupID: "g", State: contracts.StateCancelled, Total: 10, Jobs: 7,
		Succeeded: 3, Failed: 1, Cancelled: 3, At: time.Date(2025, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600))}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := contracts.DecodeGroupEvent(b)
	if err != nil {
		t.Fatal(err)
	}
	if !got.At.Equal(want.At) {
		t.Errorf("At = %v, want %v", got.At, want.At)
	}
	g, w := *got, want
	g.At, w.At = time.Time{}, time.Time{}
	if g != w {
		t.Errorf("round trip: got %+v, want %+v", g, w)
	}
}

func TestNewDeadLetter(t *testing.T) {
	t.Parallel()
	body := []byte(`{"v":1,"kind":"job"}`)
	_, err := contracts.DecodeSubmission(subjSubmit, body, contracts.Limits{})
	d := contracts.NewDeadLetter(subjSubmit, body, err)
	if d.V != contracts.Version || d.Reason != contracts.ReasonBadVersion || d.Subject != subjSubmit || d.Error != err.Error() {
		t.Errorf("dead letter %+v", d)
	}
	if string(d.Message) != string(body) || d.Raw != "" {
		t.Errorf("JSON body: Message %s Raw %q", d.Message, d.Raw)
	}
	if got := (contracts.Names{}).DLQOf(d.Subject, d.Reason); got != "bulkaction.dlq.acme.bad_version" {
		t.Errorf("DLQ subject = %q", got)
	}
	// The message is copied, not aliased.
	body[2] = 'X'
	if string(d.Message) != `{"v":1,"kind":"job"}` {
		t.Errorf("Message aliases the input: %s", d.Message)
	}

	raw := []byte("not json \xff")
	_, err = contracts.DecodeSubmission(subjSubmit, raw, contracts.Limits{})
	d = contracts.NewDeadLetter(subjSubmit, raw, err)
	if d.Reason != contracts.ReasonBadJSON || d.Message != nil || d.Raw != string(raw) {
		t.Errorf("non-JSON dead letter %+v", d)
	}

	// An item's error names it.
	bad := []byte(`{"v":2,"kind":"jobs","jobs":[{"jobId":"a","type":"t"},{"jobId":"b","type":"x y"}]}`)
	_, err = contracts.DecodeSubmission(subjSubmit, bad, contracts.Limits{})
	if d = contracts.NewDeadLetter(subjSubmit, bad, err); d.Reason != contracts.ReasonInvalidField || !strings.Contains(d.Error, "jobs[1].type: ") {
		t.Errorf("dead letter of an invalid job: %+v", d)
	}

	// A dead letter survives its own round trip.
	d = contracts.NewDeadLetter(subjSubmit, []byte(`{"a":[1,2]}`), err)
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var back contracts.DeadLetter
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, d) {
		t.Errorf("round trip: got %+v, want %+v", back, d)
	}

	if d := contracts.NewDeadLetter("s", nil, nil); d.Reason != "" || d.Error != "" {
		t.Errorf("nil error: %+v", d)
	}
}

// TestDeadLetterEncodeIsBounded: a body that grows six times when escaped
// (control characters), or a large JSON body, still gives a dead letter
// within the limit, marked truncated with the original size.
func TestDeadLetterEncodeIsBounded(t *testing.T) {
	t.Parallel()
	cause := &contracts.ValidationError{Reason: contracts.ReasonBadJSON, Field: "body", Problem: "not JSON"}
	for name, body := range map[string][]byte{
		"control characters": bytes.Repeat([]byte{0x01}, 200_000),
		"html characters":    bytes.Repeat([]byte("<&>"), 70_000),
		"json":               []byte(`{"a":"` + strings.Repeat("x", 300_000) + `"}`),
		"broken utf-8":       bytes.Repeat([]byte{0xe2, 0x82}, 100_000),
	} {
		const limit = 64 << 10
		d := contracts.NewDeadLetter(subjSubmit, body, cause)
		data, err := d.Encode(limit)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(data) > limit {
			t.Fatalf("%s: %d bytes, limit %d", name, len(data), limit)
		}
		if len(data) < limit*5/6-6 {
			t.Errorf("%s: %d bytes: the limit %d leaves too much unused", name, len(data), limit)
		}
		var got contracts.DeadLetter
		if err := json.Unmarshal(data, &got); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !got.Truncated || got.Size != len(body) || got.Message != nil || got.Raw == "" || got.Reason != contracts.ReasonBadJSON {
			t.Fatalf("%s: truncated %v size %d (want %d) raw %d bytes message %d bytes reason %q", name,
				got.Truncated, got.Size, len(body), len(got.Raw), len(got.Message), got.Reason)
		}
		if !strings.HasPrefix(string(body), got.Raw) && name != "broken utf-8" {
			t.Fatalf("%s: raw is not the start of the body", name)
		}
	}
	// A small one is carried whole.
	d := contracts.NewDeadLetter("s", []byte(`{"a":1}`), cause)
	data, err := d.Encode(64 << 10)
	if err != nil || strings.Contains(string(data), "truncated") || !strings.Contains(string(data), `"message":{"a":1}`) {
		t.Fatalf("%s, %v", data, err)
	}
	// A long error text is cut.
	d = contracts.NewDeadLetter("s", nil, errors.New(strings.Repeat("e", 5000)))
	if data, err = d.Encode(64 << 10); err != nil || len(data) > 2*contracts.MaxDeadLetterError {
		t.Fatalf("%d bytes, %v", len(data), err)
	}
	// A limit too small for even an empty body fails.
	if _, err := contracts.NewDeadLetter(subjSubmit, []byte("xxxx"), cause).Encode(20); err == nil {
		t.Error("Encode(20) succeeded")
	}
}
