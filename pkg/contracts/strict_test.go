package contracts_test

import (
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// TestCheckObject: keys spelt in another case, given twice or unknown, and
// invalid UTF-8 anywhere, are named; what encoding/json reads the same way
// is taken.
func TestCheckObject(t *testing.T) {
	fields := []string{"jobId", "type", "payload"}
	cases := []struct{ data, field, problem string }{
		{`{"jobId":"a","jobid":"b"}`, "jobid", `did you mean "jobId"`},
		{`{"type":"x","type":"y"}`, "type", "twice"},
		{`{"typ\u0065":"x","type":"y"}`, "type", "twice"},
		{`{"kind":"x"}`, "kind", "unknown field"},
		{"{\"jobId\":\"a\xff\"}", "jobId", "0xff at byte 11"},
		{"{\"payload\":{\"a\":[1,{\"b\":\"\xc3\"}]}}", "payload.a[1].b", "0xc3"},
		{"{\"payload\":{\"k\xfe\":1}}", "payload", "0xfe"},
		{"\"\xff\"", "", "0xff"},
	}
	for _, c := range cases {
		err := contracts.CheckObject([]byte(c.data), fields...)
		ve, ok := err.(*contracts.ValidationError)
		if !ok || ve.Field != c.field || !strings.Contains(err.Error(), c.problem) || ve.Reason != contracts.ReasonInvalidField {
			t.Errorf("%q: %v, want field %q and %q", c.data, err, c.field, c.problem)
		}
	}
	for _, data := range []string{`{"jobId":"a","type":"t","payload":{"Type":1,"type":2}}`, " { } ", `[1]`, `{"jobId":`,
		"{\"payload\":\"caf\xc3\xa9\"}"} {
		if err := contracts.CheckObject([]byte(data), fields...); err != nil {
			t.Errorf("%q: %v", data, err)
		}
	}
}

// TestDecodeSubmissionRefusesInvalidUTF8: a jobs message whose payload
// holds invalid UTF-8 is refused (invalid_field, naming the job and the
// string), as the gateway refuses it, instead of being stored and served
// back as bytes JSON readers reject.
func TestDecodeSubmissionRefusesInvalidUTF8(t *testing.T) {
	body := "{\"v\":2,\"kind\":\"jobs\",\"jobs\":[{\"jobId\":\"a\",\"type\":\"t\"},{\"jobId\":\"b\",\"type\":\"t\",\"payload\":{\"to\":\"\xff\xfe\"}}]}"
	_, err := contracts.DecodeSubmission("bulkaction.submit.acme.g1", []byte(body), contracts.Limits{})
	ve, ok := err.(*contracts.ValidationError)
	if !ok || ve.Reason != contracts.ReasonInvalidField || ve.Field != "jobs[1].payload.to" {
		t.Fatalf("decoded with %v, want invalid_field on jobs[1].payload.to", err)
	}
	j := contracts.SubmitJob{JobID: "a", Type: "t", Payload: []byte("\"\xed\xa0\x80\"")}
	if err := j.Validate(contracts.Limits{}); err == nil {
		t.Errorf("Validate took an encoded surrogate")
	}
	if err := j.Canonicalize(contracts.Limits{}); err == nil {
		t.Errorf("Canonicalize took an encoded surrogate")
	}
}
