package api_test

import (
	"encoding/json"
	"fmt"

	"github.com/bulkaction/bulkaction/pkg/api"
)

// A 400 answer of POST /v1/groups/{groupId}/jobs names the line, the field
// and the limit of the first bad job.
func ExampleProblem() {
	body := `{"type":"urn:bulkaction:problem:invalid-job","title":"Invalid job","status":400,
	 "detail":"line 3: contracts: type: empty","instance":"/v1/groups/promo/jobs",
	 "errors":[{"line":3,"index":1,"field":"type","detail":"empty","limit":"must match ^[A-Za-z0-9_-]{1,64}$"}]}`
	var p api.Problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		panic(err)
	}
	fmt.Println(p.Slug())
	fmt.Println(p.Error())
	// Output:
	// invalid-job
	// 400 Invalid job: line 3: contracts: type: empty
	//   line 3: field type: empty (must match ^[A-Za-z0-9_-]{1,64}$)
}

// A group's view: the counts add up.
func ExampleGroup() {
	body := `{"tenant":"acme","groupId":"promo","state":"RUNNING","priority":"normal","basePriority":0,
	 "maxInFlight":0,"total":1000,"jobs":1000,"queued":600,"inFlight":40,"backingOff":10,"done":350,
	 "succeeded":345,"failed":5,"cancelled":0,"createdAt":null,"startedAt":null,"finishedAt":null}`
	var g api.Group
	if err := json.Unmarshal([]byte(body), &g); err != nil {
		panic(err)
	}
	fmt.Println(g.Queued+g.InFlight+g.BackingOff+g.Done+g.Cancelled == g.Jobs, g.Ended())
	// Output: true false
}
