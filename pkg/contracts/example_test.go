package contracts_test

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

func ExampleDecodeSubmission() {
	body := []byte(`{"v":1,"kind":"job","groupId":"promo-42","jobId":"user-7","type":"email",
		"payload":{ "template" : "spring" },"priority":"high"}`)

	s, err := contracts.DecodeSubmission("bulkaction.submit.promo-42", body, contracts.Limits{})
	if err != nil {
		fmt.Println("rejected:", contracts.Reason(err), err)
		return
	}
	fmt.Println(s.Kind, s.GroupID, s.JobID, s.Type, s.Priority)
	fmt.Println(string(s.Payload))
	fmt.Println("Nats-Msg-Id:", s.MsgID())

	// The same body published on another group's subject is rejected.
	_, err = contracts.DecodeSubmission("bulkaction.submit.promo-43", body, contracts.Limits{})
	fmt.Println(contracts.Reason(err))
	// Output:
	// job promo-42 user-7 email high
	// {"template":"spring"}
	// Nats-Msg-Id: promo-42:user-7
	// subject_mismatch
}

func ExampleValidationError() {
	err := contracts.ValidateID("jobId", "user.7")
	fmt.Println(err)

	s := contracts.Submission{V: 1, Kind: contracts.KindJob, GroupID: "g", JobID: "j", Type: "t",
		Payload: json.RawMessage(`"` + strings.Repeat("x", 10) + `"`)}
	err = s.Validate(contracts.Limits{MaxPayloadBytes: 8})
	fmt.Println(err)
	fmt.Println(contracts.Reason(err))
	// Output:
	// contracts: jobId: contains '.' (must match ^[A-Za-z0-9_-]{1,128}$)
	// contracts: payload: 12 bytes (limit 8)
	// too_large
}

func ExampleNames() {
	var n contracts.Names // the zero value uses the prefix "bulkaction"
	fmt.Println(n.Submit("promo-42"), n.StreamSubmit())
	fmt.Println(n.Ready("email"), n.StreamReady())
	fmt.Println(n.Result("promo-42"), n.Events("promo-42"), n.DLQ(contracts.ReasonBadJSON))

	gid, ok := n.GroupFromSubject("bulkaction.result.promo-42")
	fmt.Println(gid, ok)

	custom := contracts.Names{Prefix: "acme.bulk"}
	fmt.Println(custom.SubmitAll(), custom.StreamEvents())
	// Output:
	// bulkaction.submit.promo-42 BULKACTION_SUBMIT
	// bulkaction.ready.email BULKACTION_READY
	// bulkaction.result.promo-42 bulkaction.events.promo-42 bulkaction.dlq.bad_json
	// promo-42 true
	// acme.bulk.submit.> ACME_BULK_EVENTS
}

func ExampleSubmitMsgID() {
	fmt.Println(contracts.SubmitMsgID("promo-42", "user-7"))
	fmt.Println(contracts.SealMsgID("promo-42", 1000))
	fmt.Println(contracts.CancelMsgID("promo-42"))
	fmt.Println(contracts.ReadyMsgID("promo-42", "user-7", 2))
	fmt.Println(contracts.ResultMsgID("promo-42", "user-7", 2))
	// Output:
	// promo-42:user-7
	// promo-42:seal:1000
	// promo-42:cancel:all
	// promo-42:user-7:2
	// promo-42:user-7:2:result
}
