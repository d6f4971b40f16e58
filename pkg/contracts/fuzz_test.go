package contracts_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

var knownReasons = map[string]bool{
	contracts.ReasonBadJSON: true, contracts.ReasonBadVersion: true, contracts.ReasonUnknownKind: true,
	contracts.ReasonInvalidField: true, contracts.ReasonTooLarge: true, contracts.ReasonSubjectMismatch: true,
}

// fuzzLimits keeps the payload limit small so that the fuzzer reaches too_large.
var fuzzLimits = contracts.Limits{MaxPayloadBytes: 64}

// checkRejected asserts the shape of a rejection: no value, a *ValidationError matching ErrInvalid,
// a known reason.
func checkRejected(t *testing.T, got any, err error) {
	t.Helper()
	if !reflect.ValueOf(got).IsNil() {
		t.Fatalf("returned %+v together with error %v", got, err)
	}
	var ve *contracts.ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, contracts.ErrInvalid) {
		t.Fatalf("error %v (%T) is not a *ValidationError", err, err)
	}
	if !knownReasons[contracts.Reason(err)] {
		t.Fatalf("unknown reason %q for %v", contracts.Reason(err), err)
	}
	if !strings.HasPrefix(err.Error(), "contracts: ") {
		t.Fatalf("error text %q", err.Error())
	}
}

// subjectGroup returns the last two tokens of subject, the group a decoder must take from it.
func subjectGroup(subject string) contracts.GroupRef {
	toks := strings.Split(subject, ".")
	if len(toks) < 2 {
		return contracts.GroupRef{}
	}
	return contracts.Group(toks[len(toks)-2], toks[len(toks)-1])
}

func FuzzDecodeSubmission(f *testing.F) {
	seeds := []string{
		`{"v":2,"kind":"jobs","jobs":[{"jobId":"j1","type":"email","payload":{"to":"a@b.c"}},{"jobId":"j2","type":"sms"}],"group":{"priority":"high","basePriority":-5,"maxInFlight":3}}`,
		`{"v":2,"kind":"jobs","jobs":[{"jobId":"j1","type":"email"}]}`,
		`{"v":2,"kind":"jobs","tenant":"acme","groupId":"g1","jobs":[{"jobId":"j1","type":"t","payload":" <&> \u2028 "}]}`,
		`{"v":2,"kind":"jobs","jobs":[{"jobId":"j1","type":"t","payload":null}],"group":{"priority":""}}`,
		`{"v":2,"kind":"jobs","jobs":[{"jobId":"j1","type":"t","payload":[ 1 , 2.5e3 , {"a" : null} ]}],"group":{}}`,
		`{"v":2,"kind":"jobs","jobs":[{"jobId":"j1","type":"t","payload":"` + strings.Repeat("x", 80) + `"}]}`,
		`{"v":2,"kind":"jobs","jobs":[{"jobId":"j1","type":"t"},{"jobId":"j1","type":"t"}]}`,
		`{"v":2,"kind":"jobs","jobs":[{"jobId":"j1","type":"t"},{"jobId":"j2","type":5}]}`,
		`{"v":2,"kind":"jobs","jobs":[]}`,
		`{"v":2,"kind":"seal","total":10}`,
		`{"v":2,"kind":"seal","total":-1}`,
		`{"v":2,"kind":"seal","total":1,"jobs":null,"group":null}`,
		`{"v":2,"kind":"cancel"}`,
		`{"v":2,"kind":"cancel","tenant":"acme","groupId":"g1"}`,
		`{"v":2,"kind":"cancel","tenant":"other"}`,
		`{"v":2,"kind":"pause"}`,
		`{"v":2,"kind":"resume","total":null}`,
		`{"V":2,"KIND":"cancel","GroupID":"g1","extra":{"deep":[1,2,3]}}`,
		`{"v":1,"kind":"job","groupId":"g1","jobId":"j1","type":"t"}`,
		`{"v":"2","kind":"cancel"}`,
		`{"v":2,"kind":"nope"}`,
		`{"v":2,"kind":"jobs","jobs":[{"jobId":"j","type":"t"}],"group":{"basePriority":1e3}}`,
		`[]`, `null`, `"x"`, ``, `{`, `{}`, "\xff\xfe", `{"v":1,"v":2}`,
	}
	for _, s := range seeds {
		f.Add("bulkaction.submit.acme.g1", []byte(s))
	}
	f.Add("acme.submit.acme.g1", []byte(`{"v":2,"kind":"cancel"}`))
	f.Add("bulkaction.submit.g1", []byte(`{"v":2,"kind":"cancel"}`))
	f.Add("bulkaction.submit.acme.*", []byte(`{"v":2,"kind":"cancel"}`))
	f.Add("bulkaction.result.acme.g1", []byte(`{"v":2,"kind":"cancel"}`))
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		s, err := contracts.DecodeSubmission(subject, data, fuzzLimits)
		if err != nil {
			checkRejected(t, s, err)
			return
		}
		if err := s.Validate(fuzzLimits); err != nil {
			t.Fatalf("decoded %+v does not re-validate: %v", s, err)
		}
		if g := subjectGroup(subject); s.Ref() != g {
			t.Fatalf("accepted group %v on subject %q", s.Ref(), subject)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", s, err)
		}
		s2, err := contracts.DecodeSubmission(subject, b, fuzzLimits)
		if err != nil {
			t.Fatalf("re-encoded %s is rejected: %v", b, err)
		}
		if !reflect.DeepEqual(s, s2) {
			t.Fatalf("round trip differs:\n first %+v\nsecond %+v\n  wire %s", s, s2, b)
		}
		if s.MsgID() == "" && s.Kind != contracts.KindPause && s.Kind != contracts.KindResume {
			t.Fatalf("no Msg-Id for %+v", s)
		}
	})
}

func FuzzDecodeReadyBatch(f *testing.F) {
	for _, s := range []string{
		`{"v":2,"jobs":[{"tenant":"acme","groupId":"g","jobId":"j","type":"t","payload":{"a":[1,"<b>"]},"attempt":1}]}`,
		`{"v":2,"jobs":[{"tenant":"acme","groupId":"g","jobId":"j","type":"t","attempt":7},{"tenant":"b","groupId":"g","jobId":"j","type":"t","attempt":1}]}`,
		`{"v":2,"jobs":[{"tenant":"acme","groupId":"g","jobId":"j","type":"t","payload":null,"attempt":2}]}`,
		`{"v":2,"jobs":[{"tenant":"acme","groupId":"g","jobId":"j","type":"t","payload":"` + strings.Repeat("y", 70) + `","attempt":1}]}`,
		`{"v":2,"jobs":[{"tenant":"acme","groupId":"g","jobId":"j","type":"t","attempt":0}]}`,
		`{"v":2,"jobs":[{"tenant":"acme","groupId":"g","jobId":"j","type":"t","attempt":1},{"tenant":"acme","groupId":"g","jobId":"k","type":"u","attempt":1}]}`,
		`{"v":2,"jobs":[{"tenant":"acme","groupId":"g","jobId":"j","type":"t:x","attempt":1}]}`,
		`{"v":1,"groupId":"g","jobId":"j","type":"t","attempt":1}`,
		`{"v":2,"jobs":[]}`, `{"v":0}`, `[]`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := contracts.DecodeReadyBatch(data, fuzzLimits)
		if err != nil {
			checkRejected(t, b, err)
			if r := contracts.Reason(err); r == contracts.ReasonUnknownKind || r == contracts.ReasonSubjectMismatch {
				t.Fatalf("ready batch rejected with reason %q", r)
			}
			return
		}
		if err := b.Validate(fuzzLimits); err != nil {
			t.Fatalf("decoded %+v does not re-validate: %v", b, err)
		}
		enc, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", b, err)
		}
		b2, err := contracts.DecodeReadyBatch(enc, fuzzLimits)
		if err != nil {
			t.Fatalf("re-encoded %s is rejected: %v", enc, err)
		}
		if !reflect.DeepEqual(b, b2) {
			t.Fatalf("round trip differs:\n first %+v\nsecond %+v", b, b2)
		}
	})
}

func FuzzDecodeResultBatch(f *testing.F) {
	for _, s := range []string{
		`{"v":2,"results":[{"jobId":"j","attempt":1,"status":"SUCCESS","durationMs":3}]}`,
		`{"v":2,"results":[{"tenant":"acme","groupId":"g1","jobId":"j","attempt":2,"status":"FAILED","error":"x <y> \ud800 \u2028","durationMs":0},{"jobId":"k","attempt":1,"status":"SUCCESS"}]}`,
		"{\"v\":2,\"results\":[{\"jobId\":\"j\",\"attempt\":2,\"status\":\"FAILED\",\"error\":\"\xff\"}]}",
		`{"v":2,"results":[{"jobId":"j","attempt":1,"status":"DONE"}]}`,
		`{"v":2,"results":[{"jobId":"j","attempt":-1,"status":"SUCCESS"}]}`,
		`{"v":2,"results":[{"jobId":"j","attempt":1,"status":"SUCCESS","durationMs":-1}]}`,
		`{"v":2,"results":[{"tenant":"other","jobId":"j","attempt":1,"status":"SUCCESS"}]}`,
		`{"v":1,"groupId":"g","jobId":"j","attempt":1,"status":"SUCCESS"}`,
		`{"v":3}`, `{}`, `1`, ``,
	} {
		f.Add("bulkaction.result.acme.g1", []byte(s))
	}
	f.Add("bulkaction.result.g1", []byte(`{"v":2,"results":[{"jobId":"j","attempt":1,"status":"SUCCESS"}]}`))
	f.Add("bulkaction.submit.acme.g1", []byte(`{"v":2,"results":[{"jobId":"j","attempt":1,"status":"SUCCESS"}]}`))
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		b, err := contracts.DecodeResultBatch(subject, data)
		if err != nil {
			checkRejected(t, b, err)
			if r := contracts.Reason(err); r == contracts.ReasonUnknownKind || r == contracts.ReasonTooLarge {
				t.Fatalf("result batch rejected with reason %q", r)
			}
			return
		}
		if err := b.Validate(); err != nil {
			t.Fatalf("decoded %+v does not re-validate: %v", b, err)
		}
		g := subjectGroup(subject)
		for i, r := range b.Results {
			if r.Ref() != g {
				t.Fatalf("results[%d] of group %v accepted on subject %q", i, r.Ref(), subject)
			}
		}
		enc, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", b, err)
		}
		b2, err := contracts.DecodeResultBatch(subject, enc)
		if err != nil {
			t.Fatalf("re-encoded %s is rejected: %v", enc, err)
		}
		if !reflect.DeepEqual(b, b2) {
			t.Fatalf("round trip differs:\n first %+v\nsecond %+v", b, b2)
		}
	})
}

func FuzzDecodeGroupEvent(f *testing.F) {
	for _, s := range []string{
		`{"v":2,"tenant":"acme","groupId":"g","state":"RUNNING","total":0,"jobs":3,"succeeded":1,"failed":0,"cancelled":0,"at":"2025-03-01T12:00:00Z"}`,
		`{"v":2,"tenant":"acme","groupId":"g","state":"PAUSED","at":"2025-03-01T12:00:00.123456789+05:30"}`,
		`{"v":2,"tenant":"acme","groupId":"g","state":"CANCELLED","jobs":4,"cancelled":4,"at":"0000-01-01T00:00:00-01:00"}`,
		`{"v":2,"tenant":"acme","groupId":"g","state":"DONE"}`,
		`{"v":2,"tenant":"acme","groupId":"g","state":"RUNNING","at":"yesterday"}`,
		`{"v":2,"tenant":"acme","groupId":"g","state":"RUNNING","jobs":-1}`,
		`{"at":5,"v":2}`,
		`{"v":1,"groupId":"g","state":"RUNNING"}`,
		`[]`, ``, `{`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := contracts.DecodeGroupEvent(data)
		if err != nil {
			checkRejected(t, e, err)
			if r := contracts.Reason(err); r != contracts.ReasonBadJSON && r != contracts.ReasonBadVersion && r != contracts.ReasonInvalidField {
				t.Fatalf("event rejected with reason %q", r)
			}
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("decoded %+v does not re-validate: %v", e, err)
		}
		enc, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", e, err)
		}
		e2, err := contracts.DecodeGroupEvent(enc)
		if err != nil {
			t.Fatalf("re-encoded %s is rejected: %v", enc, err)
		}
		if !e.At.Equal(e2.At) {
			t.Fatalf("at differs: %v, %v", e.At, e2.At)
		}
		a, b := *e, *e2
		a.At, b.At = a.At.UTC(), b.At.UTC()
		if a != b {
			t.Fatalf("round trip differs:\n first %+v\nsecond %+v", e, e2)
		}
	})
}

// FuzzValidateID checks the hand-written token checks against the documented patterns.
func FuzzValidateID(f *testing.F) {
	for _, s := range []string{"a", "A-z_9", "", ".", "a:b", "é", "\xff", strings.Repeat("x", 64), strings.Repeat("x", 65), strings.Repeat("x", 128), strings.Repeat("x", 129)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := contracts.ValidateID("groupId", s) == nil, idRE.MatchString(s); got != want {
			t.Fatalf("ValidateID(%q) ok=%v, IDPattern says %v", s, got, want)
		}
		if got, want := contracts.ValidateTenant(s) == nil, tenantRE.MatchString(s); got != want {
			t.Fatalf("ValidateTenant(%q) ok=%v, TenantPattern says %v", s, got, want)
		}
		if got, want := contracts.ValidateType(s) == nil, typeRE.MatchString(s); got != want {
			t.Fatalf("ValidateType(%q) ok=%v, TypePattern says %v", s, got, want)
		}
	})
}
