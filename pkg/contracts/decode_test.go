package contracts_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

const subjG1 = "bulkaction.submit.g1"

func TestDecodeSubmissionReasons(t *testing.T) {
	t.Parallel()
	job := `{"v":1,"kind":"job","groupId":"g1","jobId":"j1","type":"email","payload":%s}`
	tests := []struct {
		name    string
		subject string
		body    string
		lim     contracts.Limits
		reason  string
		field   string
		parts   []string
	}{
		{name: "empty body", body: ``, reason: contracts.ReasonBadJSON, parts: []string{"empty body"}},
		{name: "whitespace body", body: " \n\t", reason: contracts.ReasonBadJSON},
		{name: "not JSON", body: `hello`, reason: contracts.ReasonBadJSON, parts: []string{"not JSON"}},
		{name: "truncated", body: `{"v":1,"kind":"job"`, reason: contracts.ReasonBadJSON, parts: []string{"not JSON"}},
		{name: "trailing data", body: `{"v":1} {}`, reason: contracts.ReasonBadJSON},
		{name: "JSON array", body: `[{"v":1}]`, reason: contracts.ReasonBadJSON, parts: []string{"not a JSON object"}},
		{name: "JSON null", body: `null`, reason: contracts.ReasonBadJSON, parts: []string{"not a JSON object"}},
		{name: "JSON string", body: `"{}"`, reason: contracts.ReasonBadJSON},
		{name: "no v", body: `{"kind":"cancel","groupId":"g1"}`, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"got 0", "must be 1"}},
		{name: "v 2", body: `{"v":2,"kind":"cancel","groupId":"g1"}`, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"got 2"}},
		{name: "v string", body: `{"v":"1","kind":"cancel","groupId":"g1"}`, reason: contracts.ReasonBadVersion, field: "v", parts: []string{"JSON string"}},
		{name: "v fraction", body: `{"v":1.5,"kind":"cancel","groupId":"g1"}`, reason: contracts.ReasonBadVersion, field: "v"},
		{name: "v checked before other type errors", body: `{"v":2,"kind":"job","groupId":5}`, reason: contracts.ReasonBadVersion, field: "v"},
		{name: "no kind", body: `{"v":1,"groupId":"g1"}`, reason: contracts.ReasonUnknownKind, field: "kind", parts: []string{"missing"}},
		{name: "unknown kind", body: `{"v":1,"kind":"pause","groupId":"g1"}`, reason: contracts.ReasonUnknownKind, field: "kind", parts: []string{`"pause"`}},
		{name: "kind number", body: `{"v":1,"kind":1,"groupId":"g1"}`, reason: contracts.ReasonUnknownKind, field: "kind"},
		{name: "groupId number", body: `{"v":1,"kind":"cancel","groupId":1}`, reason: contracts.ReasonInvalidField, field: "groupId", parts: []string{"JSON number", "must be a JSON string"}},
		{name: "total string", body: `{"v":1,"kind":"seal","groupId":"g1","total":"3"}`, reason: contracts.ReasonInvalidField, field: "total", parts: []string{"JSON string", "integer"}},
		{name: "total overflows", body: `{"v":1,"kind":"seal","groupId":"g1","total":99999999999999999999}`, reason: contracts.ReasonInvalidField, field: "total"},
		{name: "total missing", body: `{"v":1,"kind":"seal","groupId":"g1"}`, reason: contracts.ReasonInvalidField, field: "total", parts: []string{"required for kind seal"}},
		{name: "total null", body: `{"v":1,"kind":"seal","groupId":"g1","total":null}`, reason: contracts.ReasonInvalidField, field: "total"},
		{name: "jobId with dot", body: `{"v":1,"kind":"job","groupId":"g1","jobId":"a.b","type":"t"}`, reason: contracts.ReasonInvalidField, field: "jobId", parts: []string{"contains '.'", "{1,128}"}},
		{name: "basePriority fraction", body: `{"v":1,"kind":"job","groupId":"g1","jobId":"j","type":"t","basePriority":0.5}`, reason: contracts.ReasonInvalidField, field: "basePriority"},
		{name: "priority unknown", body: `{"v":1,"kind":"job","groupId":"g1","jobId":"j","type":"t","priority":"top"}`, reason: contracts.ReasonInvalidField, field: "priority"},
		{name: "payload at limit", body: strings.Replace(job, "%s", `"12345678"`, 1), lim: contracts.Limits{MaxPayloadBytes: 10}},
		{name: "payload above limit", body: strings.Replace(job, "%s", `"123456789"`, 1), lim: contracts.Limits{MaxPayloadBytes: 10}, reason: contracts.ReasonTooLarge, field: "payload", parts: []string{"11 bytes", "limit 10"}},
		{name: "payload at default limit", body: strings.Replace(job, "%s", string(payloadOfSize(contracts.DefaultMaxPayloadBytes)), 1)},
		{name: "payload above default limit", body: strings.Replace(job, "%s", string(payloadOfSize(contracts.DefaultMaxPayloadBytes+1)), 1), reason: contracts.ReasonTooLarge, field: "payload", parts: []string{"262145 bytes", "limit 262144"}},
		{name: "payload whitespace not counted", body: strings.Replace(job, "%s", `[ 1 ,  2 ]`, 1), lim: contracts.Limits{MaxPayloadBytes: 5}},
		{name: "other group's subject", subject: "bulkaction.submit.g2", body: `{"v":1,"kind":"cancel","groupId":"g1"}`, reason: contracts.ReasonSubjectMismatch, field: "groupId", parts: []string{`"g1" differs from subject token "g2"`}},
		{name: "wildcard subject", subject: "bulkaction.submit.*", body: `{"v":1,"kind":"cancel","groupId":"g1"}`, reason: contracts.ReasonSubjectMismatch, field: "groupId"},
		{name: "result subject", subject: "bulkaction.result.g1", body: `{"v":1,"kind":"cancel","groupId":"g1"}`, reason: contracts.ReasonSubjectMismatch, parts: []string{"not a submit subject"}},
		{name: "subject without prefix", subject: "submit.g1", body: `{"v":1,"kind":"cancel","groupId":"g1"}`, reason: contracts.ReasonSubjectMismatch},
		{name: "empty subject", subject: "-", body: `{"v":1,"kind":"cancel","groupId":"g1"}`, reason: contracts.ReasonSubjectMismatch},
		{name: "extra token after group", subject: "bulkaction.submit.g1.x", body: `{"v":1,"kind":"cancel","groupId":"g1"}`, reason: contracts.ReasonSubjectMismatch},
		{name: "custom prefix", subject: "acme.bulk.submit.g1", body: `{"v":1,"kind":"cancel","groupId":"g1"}`},
		{name: "unknown fields ignored", body: `{"v":1,"kind":"cancel","groupId":"g1","tenant":{"x":[1,2]},"note":"hi"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			subject := tt.subject
			switch subject {
			case "":
				subject = subjG1
			case "-":
				subject = ""
			}
			s, err := contracts.DecodeSubmission(subject, []byte(tt.body), tt.lim)
			if tt.reason == "" {
				if err != nil {
					t.Fatalf("DecodeSubmission = %v, want nil", err)
				}
				if s == nil || s.GroupID != "g1" {
					t.Fatalf("decoded %+v", s)
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
		{`0`, `0`},
		{`"é"`, `"é"`},
	}
	for _, tt := range tests {
		body := `{"v":1,"kind":"job","groupId":"g1","jobId":"j","type":"t"`
		if tt.payload != "" {
			body += `,"payload":` + tt.payload
		}
		body += "}"
		s, err := contracts.DecodeSubmission(subjG1, []byte(body), contracts.Limits{})
		if err != nil {
			t.Fatalf("payload %s: %v", tt.payload, err)
		}
		if tt.want == "" {
			if s.Payload != nil {
				t.Errorf("payload %s: decoded %q, want nil", tt.payload, s.Payload)
			}
			continue
		}
		if string(s.Payload) != tt.want {
			t.Errorf("payload %s: decoded %s, want %s", tt.payload, s.Payload, tt.want)
		}
		// The normalized form is a fixed point of encoding/json.
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"payload":`+tt.want) {
			t.Errorf("re-encoded %s does not carry payload %s unchanged", b, tt.want)
		}
	}
}

// TestSubmissionWireFormat pins the JSON field names of docs/ARCHITECTURE.md §3.
func TestSubmissionWireFormat(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    contracts.Submission
		want string
	}{
		{validJob(), `{"v":1,"kind":"job","groupId":"g1","jobId":"j1","type":"email","payload":{"to":"a@example.com"},"priority":"high","basePriority":5}`},
		{contracts.Submission{V: 1, Kind: contracts.KindJob, GroupID: "g", JobID: "j", Type: "t"}, `{"v":1,"kind":"job","groupId":"g","jobId":"j","type":"t"}`},
		{contracts.Submission{V: 1, Kind: contracts.KindSeal, GroupID: "g", Total: i64(0)}, `{"v":1,"kind":"seal","groupId":"g","total":0}`},
		{contracts.Submission{V: 1, Kind: contracts.KindCancel, GroupID: "g"}, `{"v":1,"kind":"cancel","groupId":"g"}`},
	}
	for _, tt := range tests {
		b, err := json.Marshal(tt.s)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != tt.want {
			t.Errorf("Marshal = %s\nwant      %s", b, tt.want)
		}
	}
}

func TestOtherWireFormats(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		v    any
		want string
	}{
		{contracts.ReadyJob{V: 1, GroupID: "g", JobID: "j", Type: "t", Payload: json.RawMessage(`{"a":1}`), Attempt: 2},
			`{"v":1,"groupId":"g","jobId":"j","type":"t","payload":{"a":1},"attempt":2}`},
		{contracts.JobResult{V: 1, GroupID: "g", JobID: "j", Attempt: 1, Status: contracts.ResultSuccess, DurationMs: 7},
			`{"v":1,"groupId":"g","jobId":"j","attempt":1,"status":"SUCCESS","durationMs":7}`},
		{contracts.JobResult{V: 1, GroupID: "g", JobID: "j", Attempt: 3, Status: contracts.ResultFailed, Error: "boom", DurationMs: 0},
			`{"v":1,"groupId":"g","jobId":"j","attempt":3,"status":"FAILED","error":"boom","durationMs":0}`},
		{contracts.GroupEvent{V: 1, GroupID: "g", State: contracts.StateCompleted, Total: 3, Jobs: 3, Succeeded: 2, Failed: 1, At: at},
			`{"v":1,"groupId":"g","state":"COMPLETED","total":3,"jobs":3,"succeeded":2,"failed":1,"cancelled":0,"at":"2025-03-01T12:00:00Z"}`},
		{contracts.DeadLetter{V: 1, Reason: "bad_json", Error: "e", Subject: "s", Raw: "x"},
			`{"v":1,"reason":"bad_json","error":"e","subject":"s","raw":"x"}`},
		{contracts.DeadLetter{V: 1, Reason: "bad_version", Error: "e", Subject: "s", Message: json.RawMessage(`{"v":2}`)},
			`{"v":1,"reason":"bad_version","error":"e","subject":"s","message":{"v":2}}`},
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
	for _, s := range []contracts.Submission{
		validJob(),
		{V: 1, Kind: contracts.KindJob, GroupID: "g1", JobID: "j", Type: "t", BasePriority: contracts.MinBasePriority, Priority: contracts.PriorityLow},
		{V: 1, Kind: contracts.KindSeal, GroupID: "g1", Total: i64(contracts.MaxTotal)},
		{V: 1, Kind: contracts.KindSeal, GroupID: "g1", Total: i64(0)},
		{V: 1, Kind: contracts.KindCancel, GroupID: "g1"},
	} {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := contracts.DecodeSubmission(contracts.Names{}.Submit(s.GroupID), b, contracts.Limits{})
		if err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		if !reflect.DeepEqual(*got, s) {
			t.Errorf("round trip of %s:\n got %+v\nwant %+v", b, *got, s)
		}
	}
}

func TestReadyJobDecode(t *testing.T) {
	t.Parallel()
	want := contracts.ReadyJob{V: 1, GroupID: "g", JobID: "j", Type: "t", Payload: json.RawMessage(`{"k":[true,null]}`), Attempt: 4}
	b, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := contracts.DecodeReadyJob(b, contracts.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("round trip: got %+v, want %+v", *got, want)
	}
	// A nil payload survives as nil (absent on the wire).
	want.Payload = nil
	b, _ = json.Marshal(want)
	if got, err = contracts.DecodeReadyJob(b, contracts.Limits{}); err != nil || got.Payload != nil {
		t.Fatalf("nil payload round trip: %+v, %v (wire %s)", got, err, b)
	}

	for _, tt := range []struct {
		body   string
		lim    contracts.Limits
		reason string
		field  string
	}{
		{`nope`, contracts.Limits{}, contracts.ReasonBadJSON, ""},
		{`[]`, contracts.Limits{}, contracts.ReasonBadJSON, ""},
		{`{"v":0,"groupId":"g","jobId":"j","type":"t","attempt":1}`, contracts.Limits{}, contracts.ReasonBadVersion, "v"},
		{`{"v":[1],"groupId":"g","jobId":"j","type":"t","attempt":1}`, contracts.Limits{}, contracts.ReasonBadVersion, "v"},
		{`{"v":1,"groupId":"g","jobId":"j","type":"t.x","attempt":1}`, contracts.Limits{}, contracts.ReasonInvalidField, "type"},
		{`{"v":1,"groupId":"g","jobId":"j","type":"t","attempt":"1"}`, contracts.Limits{}, contracts.ReasonInvalidField, "attempt"},
		{`{"v":1,"groupId":"g","jobId":"j","type":"t","attempt":0}`, contracts.Limits{}, contracts.ReasonInvalidField, "attempt"},
		{`{"v":1,"groupId":"g","jobId":"j","type":"t","attempt":1,"payload":"123"}`, contracts.Limits{MaxPayloadBytes: 4}, contracts.ReasonTooLarge, "payload"},
	} {
		r, err := contracts.DecodeReadyJob([]byte(tt.body), tt.lim)
		if r != nil {
			t.Errorf("%s: returned %+v with an error", tt.body, r)
		}
		wantInvalid(t, err, tt.reason, tt.field)
	}
	if _, err := contracts.DecodeReadyJob([]byte(`{"v":1,"groupId":"g","jobId":"j","type":"t","attempt":1,"payload":"12"}`), contracts.Limits{MaxPayloadBytes: 4}); err != nil {
		t.Errorf("payload exactly at the limit: %v", err)
	}
}

func TestJobResultDecode(t *testing.T) {
	t.Parallel()
	for _, want := range []contracts.JobResult{
		{V: 1, GroupID: "g", JobID: "j", Attempt: 1, Status: contracts.ResultSuccess, DurationMs: 15},
		{V: 1, GroupID: "g", JobID: "j", Attempt: 3, Status: contracts.ResultFailed, Error: "smtp: 550 <user> & co", DurationMs: 0},
	} {
		b, err := json.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		got, err := contracts.DecodeJobResult(b)
		if err != nil {
			t.Fatal(err)
		}
		if *got != want {
			t.Errorf("round trip: got %+v, want %+v", *got, want)
		}
	}
	for _, tt := range []struct {
		body   string
		reason string
		field  string
	}{
		{`{`, contracts.ReasonBadJSON, ""},
		{`{"v":2,"groupId":"g","jobId":"j","attempt":1,"status":"SUCCESS"}`, contracts.ReasonBadVersion, "v"},
		{`{"v":1,"groupId":"g","jobId":"j","attempt":1,"status":"OK"}`, contracts.ReasonInvalidField, "status"},
		{`{"v":1,"groupId":"g","jobId":"j","attempt":1,"status":"SUCCESS","durationMs":-5}`, contracts.ReasonInvalidField, "durationMs"},
		{`{"v":1,"groupId":"g","jobId":"j","attempt":1,"status":"SUCCESS","error":7}`, contracts.ReasonInvalidField, "error"},
	} {
		r, err := contracts.DecodeJobResult([]byte(tt.body))
		if r != nil {
			t.Errorf("%s: returned %+v with an error", tt.body, r)
		}
		wantInvalid(t, err, tt.reason, tt.field)
	}
}

func TestGroupEventDecode(t *testing.T) {
	t.Parallel()
	want := contracts.GroupEvent{V: 1, GroupID: "g", State: contracts.StateCancelled, Total: 10, Jobs: 7,
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
	for _, tt := range []struct {
		body   string
		reason string
		field  string
	}{
		{`[]`, contracts.ReasonBadJSON, ""},
		{`{"v":9,"groupId":"g","state":"RUNNING"}`, contracts.ReasonBadVersion, "v"},
		{`{"v":1,"groupId":"g","state":"PAUSED"}`, contracts.ReasonInvalidField, "state"},
		{`{"v":1,"groupId":"g","state":"RUNNING","at":"yesterday"}`, contracts.ReasonInvalidField, "at"},
		{`{"at":5,"v":1,"groupId":"g","state":"RUNNING"}`, contracts.ReasonInvalidField, "at"},
		{`{"v":1,"groupId":"g","state":"RUNNING","jobs":-1}`, contracts.ReasonInvalidField, "jobs"},
	} {
		e, err := contracts.DecodeGroupEvent([]byte(tt.body))
		if e != nil {
			t.Errorf("%s: returned %+v with an error", tt.body, e)
		}
		wantInvalid(t, err, tt.reason, tt.field)
	}
}

func TestNewDeadLetter(t *testing.T) {
	t.Parallel()
	body := []byte(`{"v":2,"kind":"job"}`)
	_, err := contracts.DecodeSubmission(subjG1, body, contracts.Limits{})
	d := contracts.NewDeadLetter(subjG1, body, err)
	if d.V != contracts.Version || d.Reason != contracts.ReasonBadVersion || d.Subject != subjG1 || d.Error != err.Error() {
		t.Errorf("dead letter %+v", d)
	}
	if string(d.Message) != string(body) || d.Raw != "" {
		t.Errorf("JSON body: Message %s Raw %q", d.Message, d.Raw)
	}
	if got := (contracts.Names{}).DLQ(d.Reason); got != "bulkaction.dlq.bad_version" {
		t.Errorf("DLQ subject = %q", got)
	}
	// The message is copied, not aliased.
	body[2] = 'X'
	if string(d.Message) != `{"v":2,"kind":"job"}` {
		t.Errorf("Message aliases the input: %s", d.Message)
	}

	raw := []byte("not json \xff")
	_, err = contracts.DecodeSubmission(subjG1, raw, contracts.Limits{})
	d = contracts.NewDeadLetter(subjG1, raw, err)
	if d.Reason != contracts.ReasonBadJSON || d.Message != nil || d.Raw != string(raw) {
		t.Errorf("non-JSON dead letter %+v", d)
	}

	// A dead letter survives its own round trip.
	d = contracts.NewDeadLetter(subjG1, []byte(`{"a":[1,2]}`), err)
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
	cause := &contracts.ValidationError{Reason: contracts.ReasonBadJSON, Field: "body", Problem: "not JSON"}
	for name, body := range map[string][]byte{
		"control characters": bytes.Repeat([]byte{0x01}, 200_000),
		"html characters":    bytes.Repeat([]byte("<&>"), 70_000),
		"json":               []byte(`{"a":"` + strings.Repeat("x", 300_000) + `"}`),
		"broken utf-8":       bytes.Repeat([]byte{0xe2, 0x82}, 100_000),
	} {
		const limit = 64 << 10
		d := contracts.NewDeadLetter("bulkaction.submit.g", body, cause)
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
}
