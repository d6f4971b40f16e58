package gateway

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// jobSeeds are job lines of every form the fast path takes or leaves to
// the slow one.
var jobSeeds = []string{
	`{"jobId":"a","type":"t","payload":{"to":"x@y.z"}}`,
	`{"jobId":"a","type":"t"}`,
	`{"jobId":"a","type":"http","destination":"api.example.com","payload":{}}`,
	`{"destination":"x","destination":"y","jobId":"a","type":"t"}`,
	` { "type" : "t" , "jobId" : "a" , "payload" : [1, 2.5e3, {"a": null}] } `,
	`{"payload":"x","jobId":"a","type":"t"}`,
	`{"jobId":"a","type":"t","payload":null}`,
	`{"jobId":"a","type":"t","payload":tru}`,
	`{"jobId":"a","type":"t","payload":1}{}`,
	`{"jobId":"a\u0062","type":"t"}`,
	`{"jobId":"a","jobid":"b","type":"t"}`,
	`{"JobID":"a","type":"t"}`,
	`{"type":"x","type":"y","jobId":"a"}`,
	`{"jobId":"a","type":"t","payload":1,"payload":2}`,
	`{"jobId":"a","type":"t","paylod":1}`,
	"{\"jobId\":\"a\xff\",\"type\":\"t\"}",
	"{\"jobId\":\"a\",\"type\":\"t\",\"payload\":{\"to\":\"\xff\xfe\"}}",
	"{\"jobId\":\"a\",\"type\":\"t\",\"payload\":{\"k\xc3\":1}}",
	"{\"jobId\":\"a\",\"type\":\"t\",\"payload\":\"caf\xc3\xa9\"}",
	`{"jobId":null,"type":"t"}`,
	`{}`, `[]`, `"x"`, `{"jobId":"a",}`, `{"jobId":"a","type":"t"`, ``,
}

// TestDecodeJobStrict: a job line with a field spelt in another case, a
// field given twice or invalid UTF-8 anywhere is refused, with the field
// named, on the fast path's forms and the slow path's alike.
func TestDecodeJobStrict(t *testing.T) {
	cases := []struct{ line, field, problem string }{
		{`{"jobId":"a","jobid":"b","type":"t"}`, "jobid", "case-sensitive"},
		{`{"JobID":"a","type":"t"}`, "JobID", `did you mean "jobId"`},
		{`{"type":"x","type":"y","jobId":"a"}`, "type", "twice"},
		{`{"jobId":"a","type":"t","payload":1,"payload":2}`, "payload", "twice"},
		{`{"jobId":"a\u0062","type":"t","jobId":"c"}`, "jobId", "twice"},
		{`{"jobId":"a","type":"t","paylod":1}`, "paylod", "unknown field"},
		{"{\"jobId\":\"a\xff\",\"type\":\"t\"}", "jobId", "0xff at byte 11"},
		{"{\"jobId\":\"a\",\"type\":\"t\",\"payload\":{\"to\":\"\xff\xfe\"}}", "payload.to", "0xff"},
		{"{\"jobId\":\"a\",\"type\":\"t\",\"payload\":{\"list\":[1,\"\xfe\"]}}", "payload.list[1]", "0xfe"},
		{"{\"jobId\":\"a\",\"type\":\"t\",\"payload\":{\"k\xc3\":1}}", "payload", "0xc3"},
		{"{\"jobId\":\"\\u0061\",\"type\":\"t\",\"payload\":\"\xed\xa0\x80\"}", "payload", "0xed"},
	}
	for _, c := range cases {
		var j contracts.SubmitJob
		err := decodeJob([]byte(c.line), &j)
		var ve *contracts.ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%q: decoded as %+v, err %v; want a refusal of %s", c.line, j, err, c.field)
			continue
		}
		if ve.Field != c.field || !strings.Contains(ve.Error(), c.problem) {
			t.Errorf("%q: %v (field %q), want field %q and %q", c.line, err, ve.Field, c.field, c.problem)
		}
	}
	// Valid UTF-8 beyond ASCII is taken, on both paths.
	for _, line := range []string{"{\"jobId\":\"a\",\"type\":\"t\",\"payload\":\"caf\xc3\xa9 \xf0\x9f\x98\x80\"}",
		"{\"jobId\":\"\\u0061\",\"type\":\"t\",\"payload\":{\"caf\xc3\xa9\":1}}"} {
		var j contracts.SubmitJob
		if err := decodeJob([]byte(line), &j); err != nil || j.JobID != "a" {
			t.Errorf("%q: %+v %v", line, j, err)
		}
	}
}

// FuzzDecodeJob: the fast path agrees exactly with the slow one. Whatever
// the fast path takes, the slow path takes too, as the same job; whatever
// it leaves, decodeJob answers as the slow path does. A job decodeJob
// takes is valid UTF-8 with each field spelt exactly, once.
func FuzzDecodeJob(f *testing.F) {
	for _, s := range jobSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var slow contracts.SubmitJob
		slowErr := decodeJobSlow(data, &slow)
		var got contracts.SubmitJob
		err := decodeJob(data, &got)
		if fast, ok := parseJobFast(data); ok {
			if slowErr != nil {
				t.Fatalf("%q: the fast path takes %+v, the slow path refuses it: %v", data, fast, slowErr)
			}
			if fast.JobID != slow.JobID || fast.Type != slow.Type || !bytes.Equal(fast.Payload, slow.Payload) {
				t.Fatalf("%q: fast path %+v, slow path %+v", data, fast, slow)
			}
		}
		if (err == nil) != (slowErr == nil) || err != nil && err.Error() != slowErr.Error() {
			t.Fatalf("%q: decodeJob %v, slow path %v", data, err, slowErr)
		}
		if err != nil {
			return
		}
		if got.JobID != slow.JobID || got.Type != slow.Type || !bytes.Equal(got.Payload, slow.Payload) {
			t.Fatalf("%q: decodeJob %+v, slow path %+v", data, got, slow)
		}
		if !utf8.Valid(data) {
			t.Fatalf("%q: invalid UTF-8 taken as %+v", data, got)
		}
		if contracts.CheckObject(data, jobFields...) != nil {
			t.Fatalf("%q: taken as %+v: %v", data, got, contracts.CheckObject(data, jobFields...))
		}
	})
}

// TestDecodeJobKeepsDestination: a job's destination is decoded, on the
// fast path's forms and the slow path's alike, and refused when given twice.
func TestDecodeJobKeepsDestination(t *testing.T) {
	for _, line := range []string{
		`{"jobId":"a","type":"http","destination":"api.example.com","payload":{"url":"https://x.example"}}`,
		`{"destination" : "api.example.com", "type":"http","jobId":"a\u0020"}`,
	} {
		var j contracts.SubmitJob
		if err := decodeJob([]byte(line), &j); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if j.Destination != "api.example.com" || j.Type != "http" {
			t.Errorf("%s: decoded as %+v", line, j)
		}
	}
	if _, ok := parseJobFast([]byte(`{"jobId":"a","type":"http","destination":"api.example.com"}`)); !ok {
		t.Error("the fast path leaves a plain destination to the slow one")
	}
	var j contracts.SubmitJob
	err := decodeJob([]byte(`{"jobId":"a","type":"t","destination":"x","destination":"y"}`), &j)
	var ve *contracts.ValidationError
	if !errors.As(err, &ve) || ve.Field != "destination" {
		t.Errorf("a destination given twice: %+v, err %v", j, err)
	}
}
