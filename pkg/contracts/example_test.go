package contracts_test

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// A producer builds a jobs submission, validates it as a whole and publishes it on its group's
// subject with a stable Nats-Msg-Id, so that a retry is deduplicated.
func ExampleSubmission() {
	g := contracts.Group("acme", "promo-42")
	s := contracts.Submission{
		V:      contracts.Version,
		Kind:   contracts.KindJobs,
		Tenant: g.Tenant, GroupID: g.ID, // for Validate; the subject carries them on the wire
		Jobs: []contracts.SubmitJob{
			{JobID: "user-7", Type: "email", Payload: json.RawMessage(`{"template":"spring"}`)},
			{JobID: "user-8", Type: "email", Payload: json.RawMessage(`{"template":"spring"}`)},
		},
		Group: &contracts.GroupSettings{Priority: contracts.PriorityHigh, MaxInFlight: 50},
	}
	if err := s.Validate(contracts.Limits{}); err != nil {
		fmt.Println("invalid:", err)
		return
	}
	s.Tenant, s.GroupID = "", "" // optional in the body
	body, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	fmt.Println(contracts.Names{}.Submit(g))
	fmt.Println(string(body))
	fmt.Println("Nats-Msg-Id:", contracts.JobsMsgID(g, s.Jobs))

	// A seal once every job has been submitted.
	total := int64(2)
	seal := contracts.Submission{V: contracts.Version, Kind: contracts.KindSeal, Total: &total}
	body, _ = json.Marshal(seal)
	fmt.Println(string(body), contracts.SealMsgID(g, total))
	// Output:
	// bulkaction.submit.acme.promo-42
	// {"v":2,"kind":"jobs","jobs":[{"jobId":"user-7","type":"email","payload":{"template":"spring"}},{"jobId":"user-8","type":"email","payload":{"template":"spring"}}],"group":{"priority":"high","maxInFlight":50}}
	// Nats-Msg-Id: acme:promo-42:jobs:2:3c6f5a0bbc8284c1eccaf16709068c35
	// {"v":2,"kind":"seal","total":2} acme:promo-42:seal:2
}

func ExampleDecodeSubmission() {
	body := []byte(`{"v":2,"kind":"jobs","jobs":[
		{"jobId":"user-7","type":"email","payload":{ "template" : "spring" }},
		{"jobId":"user-8","type":"email.send"}]}`)

	// One invalid job rejects the whole message, naming the job.
	_, err := contracts.DecodeSubmission("bulkaction.submit.acme.promo-42", body, contracts.Limits{})
	fmt.Println(contracts.Reason(err), err)

	body = []byte(`{"v":2,"kind":"jobs","jobs":[{"jobId":"user-7","type":"email","payload":{ "template" : "spring" }}]}`)
	s, err := contracts.DecodeSubmission("bulkaction.submit.acme.promo-42", body, contracts.Limits{})
	if err != nil {
		fmt.Println("rejected:", contracts.Reason(err), err)
		return
	}
	// The subject names the group.
	fmt.Println(s.Kind, s.Ref(), s.Jobs[0].JobID, s.Jobs[0].Type, s.Settings().Priority.OrDefault())
	fmt.Println(string(s.Jobs[0].Payload))
	fmt.Println("Nats-Msg-Id:", s.MsgID())

	// A body that names another group than its subject is rejected.
	_, err = contracts.DecodeSubmission("bulkaction.submit.acme.promo-42", []byte(`{"v":2,"kind":"cancel","tenant":"umbrella"}`), contracts.Limits{})
	fmt.Println(contracts.Reason(err))
	// Output:
	// invalid_field contracts: jobs[1].type: contains '.' (must match ^[A-Za-z0-9_-]{1,64}$)
	// jobs acme/promo-42 user-7 email normal
	// {"template":"spring"}
	// Nats-Msg-Id: acme:promo-42:user-7
	// subject_mismatch
}

func ExampleDecodeResultBatch() {
	subject := "bulkaction.result.acme.promo-42"
	body := []byte(`{"v":2,"results":[
		{"jobId":"user-7","attempt":1,"status":"SUCCESS","durationMs":120},
		{"jobId":"user-8","attempt":3,"status":"FAILED","error":"mailbox full","durationMs":40}]}`)

	b, err := contracts.DecodeResultBatch(subject, body)
	if err != nil {
		fmt.Println("rejected:", contracts.Reason(err), err)
		return
	}
	for _, r := range b.Results {
		fmt.Println(r.Ref(), r.JobID, r.Attempt, r.Status, r.Error, r.DurationMs)
	}

	_, err = contracts.DecodeResultBatch(subject, []byte(`{"v":2,"results":[{"jobId":"user-9","attempt":1,"status":"DONE"}]}`))
	fmt.Println(err)
	// Output:
	// acme/promo-42 user-7 1 SUCCESS  120
	// acme/promo-42 user-8 3 FAILED mailbox full 40
	// contracts: results[0].status: unknown status "DONE" (must be one of SUCCESS, FAILED)
}

func ExampleValidationError() {
	err := contracts.ValidateID("jobId", "user.7")
	fmt.Println(err)

	s := contracts.Submission{V: contracts.Version, Kind: contracts.KindJobs, Tenant: "acme", GroupID: "g",
		Jobs: []contracts.SubmitJob{{JobID: "j", Type: "t", Payload: json.RawMessage(`"` + strings.Repeat("x", 10) + `"`)}}}
	err = s.Validate(contracts.Limits{MaxPayloadBytes: 8})
	fmt.Println(err)
	fmt.Println(contracts.Reason(err))
	// Output:
	// contracts: jobId: contains '.' (must match ^[A-Za-z0-9_-]{1,128}$)
	// contracts: jobs[0].payload: 12 bytes (limit 8)
	// too_large
}

// The subjects of one tenant: what its NATS user may publish to and subscribe to.
func ExampleNames() {
	var n contracts.Names // the zero value uses the prefix "bulkaction"
	g := contracts.Group("acme", "promo-42")
	fmt.Println(n.Submit(g), n.StreamSubmit())
	fmt.Println(n.SubmitTenant("acme"), n.EventsTenant("acme"))
	fmt.Println(n.Result(g), n.Events(g))
	fmt.Println(n.Ready("email"), n.StreamReady(), n.DLQ("acme", contracts.ReasonBadJSON))

	got, ok := n.GroupFromSubject("bulkaction.events.acme.promo-42")
	fmt.Println(got.Tenant, got.ID, ok)
	_, ok = n.GroupFromSubject("bulkaction.events.promo-42") // no tenant
	fmt.Println(ok)

	custom := contracts.Names{Prefix: "acme.bulk"}
	fmt.Println(custom.SubmitAll(), custom.StreamEvents())
	// Output:
	// bulkaction.submit.acme.promo-42 BULKACTION_SUBMIT
	// bulkaction.submit.acme.> bulkaction.events.acme.>
	// bulkaction.result.acme.promo-42 bulkaction.events.acme.promo-42
	// bulkaction.ready.email BULKACTION_READY bulkaction.dlq.acme.bad_json
	// acme promo-42 true
	// false
	// acme.bulk.submit.> ACME_BULK_EVENTS
}

func ExampleSubmitMsgID() {
	g := contracts.Group("acme", "promo-42")
	fmt.Println(contracts.SubmitMsgID(g, "user-7"))
	fmt.Println(contracts.SealMsgID(g, 1000))
	fmt.Println(contracts.CancelMsgID(g))
	fmt.Println(contracts.ReadyMsgID(g, "user-7", 2))
	fmt.Println(contracts.ResultMsgID(g, "user-7", 2))
	// Output:
	// acme:promo-42:user-7
	// acme:promo-42:seal:1000
	// acme:promo-42:cancel:all
	// acme:promo-42:user-7:2
	// acme:promo-42:user-7:2:result
}

func ExampleSchema() {
	var schema struct {
		ID   string                     `json:"$id"`
		Defs map[string]json.RawMessage `json:"$defs"`
	}
	if err := json.Unmarshal(contracts.Schema(), &schema); err != nil {
		panic(err)
	}
	fmt.Println(schema.ID == contracts.SchemaID, schema.ID)
	for _, def := range []string{"submission", "readyBatch", "resultBatch", "groupEvent", "deadLetter"} {
		_, ok := schema.Defs[def]
		fmt.Printf("%s#/$defs/%s %v\n", contracts.SchemaID, def, ok)
	}
	// Output:
	// true urn:bulkaction:contracts:v2
	// urn:bulkaction:contracts:v2#/$defs/submission true
	// urn:bulkaction:contracts:v2#/$defs/readyBatch true
	// urn:bulkaction:contracts:v2#/$defs/resultBatch true
	// urn:bulkaction:contracts:v2#/$defs/groupEvent true
	// urn:bulkaction:contracts:v2#/$defs/deadLetter true
}
