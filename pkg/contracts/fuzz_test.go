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

func FuzzDecodeSubmission(f *testing.F) {
	seeds := []string{
		`{"v":1,"kind":"job","groupId":"g1","jobId":"j1","type":"email","payload":{"to":"a@b.c"},"priority":"high","basePriority":-5}`,
		`{"v":1,"kind":"job","groupId":"g1","jobId":"j1","type":"email"}`,
		`{"v":1,"kind":"job","groupId":"g1","jobId":"j1","type":"t","payload":" <&> \u2028 "}`,
		`{"v":1,"kind":"job","groupId":"g1","jobId":"j1","type":"t","payload":null,"priority":""}`,
		`{"v":1,"kind":"job","groupId":"g1","jobId":"j1","type":"t","payload":[ 1 , 2.5e3 , {"a" : null} ]}`,
		`{"v":1,"kind":"job","groupId":"g1","jobId":"j1","type":"t","payload":"` + strings.Repeat("x", 80) + `"}`,
		`{"v":1,"kind":"seal","groupId":"g1","total":10}`,
		`{"v":1,"kind":"seal","groupId":"g1","total":-1}`,
		`{"v":1,"kind":"cancel","groupId":"g1"}`,
		`{"v":1,"kind":"cancel","groupId":"g1","total":null,"payload":null}`,
		`{"V":1,"KIND":"cancel","GroupID":"g1","extra":{"deep":[1,2,3]}}`,
		`{"v":2,"kind":"cancel","groupId":"g1"}`,
		`{"v":"1","kind":"cancel","groupId":"g1"}`,
		`{"v":1,"kind":"nope","groupId":"g1"}`,
		`{"v":1,"kind":"job","groupId":"g.1","jobId":"j","type":"t"}`,
		`{"v":1,"kind":"job","groupId":"g1","jobId":"j","type":"t","basePriority":1e3}`,
		`{"v":1,"kind":"cancel","groupId":"g2"}`,
		`[]`, `null`, `"x"`, ``, `{`, `{}`, "\xff\xfe", `{"v":1,"v":2}`,
	}
	for _, s := range seeds {
		f.Add("bulkaction.submit.g1", []byte(s))
	}
	f.Add("acme.submit.g1", []byte(`{"v":1,"kind":"cancel","groupId":"g1"}`))
	f.Add("bulkaction.result.g1", []byte(`{"v":1,"kind":"cancel","groupId":"g1"}`))
	f.Fuzz(func(t *testing.T, subject string, data []byte) {
		s, err := contracts.DecodeSubmission(subject, data, fuzzLimits)
		if err != nil {
			checkRejected(t, s, err)
			return
		}
		if err := s.Validate(fuzzLimits); err != nil {
			t.Fatalf("decoded %+v does not re-validate: %v", s, err)
		}
		if tok := subject[strings.LastIndexByte(subject, '.')+1:]; tok != s.GroupID {
			t.Fatalf("accepted groupId %q on subject %q", s.GroupID, subject)
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
	})
}

func FuzzDecodeReadyJob(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"groupId":"g","jobId":"j","type":"t","payload":{"a":[1,"<b>"]},"attempt":1}`,
		`{"v":1,"groupId":"g","jobId":"j","type":"t","attempt":7}`,
		`{"v":1,"groupId":"g","jobId":"j","type":"t","payload":null,"attempt":2}`,
		`{"v":1,"groupId":"g","jobId":"j","type":"t","payload":"` + strings.Repeat("y", 70) + `","attempt":1}`,
		`{"v":1,"groupId":"g","jobId":"j","type":"t","attempt":0}`,
		`{"v":1,"groupId":"g","jobId":"j","type":"t:x","attempt":1}`,
		`{"v":0}`, `[]`, `{`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := contracts.DecodeReadyJob(data, fuzzLimits)
		if err != nil {
			checkRejected(t, r, err)
			if contracts.Reason(err) == contracts.ReasonUnknownKind || contracts.Reason(err) == contracts.ReasonSubjectMismatch {
				t.Fatalf("ready job rejected with reason %q", contracts.Reason(err))
			}
			return
		}
		if err := r.Validate(fuzzLimits); err != nil {
			t.Fatalf("decoded %+v does not re-validate: %v", r, err)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", r, err)
		}
		r2, err := contracts.DecodeReadyJob(b, fuzzLimits)
		if err != nil {
			t.Fatalf("re-encoded %s is rejected: %v", b, err)
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip differs:\n first %+v\nsecond %+v", r, r2)
		}
	})
}

func FuzzDecodeJobResult(f *testing.F) {
	for _, s := range []string{
		`{"v":1,"groupId":"g","jobId":"j","attempt":1,"status":"SUCCESS","durationMs":3}`,
		`{"v":1,"groupId":"g","jobId":"j","attempt":2,"status":"FAILED","error":"x <y> \ud800 \u2028","durationMs":0}`,
		"{\"v\":1,\"groupId\":\"g\",\"jobId\":\"j\",\"attempt\":2,\"status\":\"FAILED\",\"error\":\"\xff\"}",
		`{"v":1,"groupId":"g","jobId":"j","attempt":1,"status":"DONE"}`,
		`{"v":1,"groupId":"g","jobId":"j","attempt":-1,"status":"SUCCESS"}`,
		`{"v":1,"groupId":"g","jobId":"j","attempt":1,"status":"SUCCESS","durationMs":-1}`,
		`{"v":3}`, `{}`, `1`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := contracts.DecodeJobResult(data)
		if err != nil {
			checkRejected(t, r, err)
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("decoded %+v does not re-validate: %v", r, err)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", r, err)
		}
		r2, err := contracts.DecodeJobResult(b)
		if err != nil {
			t.Fatalf("re-encoded %s is rejected: %v", b, err)
		}
		if *r != *r2 {
			t.Fatalf("round trip differs:\n first %+v\nsecond %+v", r, r2)
		}
	})
}

// FuzzValidateID checks the hand-written ID and type checks against the documented patterns.
func FuzzValidateID(f *testing.F) {
	for _, s := range []string{"a", "A-z_9", "", ".", "a:b", "é", "\xff", strings.Repeat("x", 128), strings.Repeat("x", 129)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := contracts.ValidateID("groupId", s) == nil, idRE.MatchString(s); got != want {
			t.Fatalf("ValidateID(%q) ok=%v, IDPattern says %v", s, got, want)
		}
		if got, want := contracts.ValidateType(s) == nil, typeRE.MatchString(s); got != want {
			t.Fatalf("ValidateType(%q) ok=%v, TypePattern says %v", s, got, want)
		}
	})
}
