package fetcher_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/bulkaction/bulkaction/internal/natsutil"
	"github.com/bulkaction/bulkaction/internal/pipelinetest"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// holdReady fills READY with n messages of type "t" that are not jobs, so
// that a fetcher with Ready.Capacity n admits nothing of that type until a
// Reader drains them: every group submitted meanwhile is backlogged when
// admission starts.
func holdReady(t *testing.T, e *pipelinetest.Env, n int) {
	t.Helper()
	hold := make([]*nats.Msg, n)
	for i := range hold {
		hold[i] = nats.NewMsg(e.Names.Ready("t"))
		hold[i].Data = []byte(`"hold"`)
	}
	for _, err := range natsutil.PublishAll(context.Background(), e.JS, hold) {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// publishRaw publishes body on subject through JetStream, with no message
// id, and waits for the acknowledgement.
func publishRaw(t *testing.T, e *pipelinetest.Env, subject, body string) {
	t.Helper()
	m := nats.NewMsg(subject)
	m.Data = []byte(body)
	if _, err := e.JS.PublishMsg(context.Background(), m); err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
}

// waitSubmitDrained waits until the fetcher has settled every submission
// published so far, and so applied it to Redis or dead-lettered it. It
// waits on SUBMIT's ack floor ([pipelinetest.Env.WaitSubmitSettled]), not
// on the consumer's pending count, which can read 0 just after a publish,
// before the fetcher has seen the message.
func waitSubmitDrained(t *testing.T, e *pipelinetest.Env) {
	t.Helper()
	e.WaitSubmitSettled(t)
}

// deadLetter is a dead letter and the subject it was published on.
type deadLetter struct {
	contracts.DeadLetter
	On string
}

// deadLetters returns every message of the DLQ stream, in order.
func deadLetters(t *testing.T, e *pipelinetest.Env) []deadLetter {
	t.Helper()
	var out []deadLetter
	for _, raw := range e.StoredMsgs(t, e.Names.StreamDLQ()) {
		var dl contracts.DeadLetter
		if err := json.Unmarshal(raw.Data, &dl); err != nil {
			t.Fatalf("DLQ message %d: %v", raw.Sequence, err)
		}
		out = append(out, deadLetter{DeadLetter: dl, On: raw.Subject})
	}
	return out
}

// eventsOf returns the events of group g on the EVENTS stream, in order.
func eventsOf(t *testing.T, e *pipelinetest.Env, g contracts.GroupRef) []*contracts.GroupEvent {
	t.Helper()
	return groupEvents(t, e)[g]
}

// notices returns the notices among evs.
func notices(evs []*contracts.GroupEvent) []*contracts.GroupEvent {
	var out []*contracts.GroupEvent
	for _, ev := range evs {
		if ev.Notice != "" {
			out = append(out, ev)
		}
	}
	return out
}

// states returns the states of the events of evs that are not notices.
func states(evs []*contracts.GroupEvent) []contracts.GroupState {
	var out []contracts.GroupState
	for _, ev := range evs {
		if ev.Notice == "" {
			out = append(out, ev.State)
		}
	}
	return out
}

// describe renders events for failure messages.
func describe(evs []*contracts.GroupEvent) string {
	var b strings.Builder
	for i, ev := range evs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s(jobs %d", ev.State, ev.Jobs)
		if ev.Notice != "" {
			fmt.Fprintf(&b, " notice %q", ev.Notice)
		}
		b.WriteString(")")
	}
	return "[" + b.String() + "]"
}

// readyByGroup counts the valid ready jobs of msgs per group.
func readyByGroup(msgs []pipelinetest.Msg) map[contracts.GroupRef]int {
	out := map[contracts.GroupRef]int{}
	for _, m := range msgs {
		out[m.Job.Ref()]++
	}
	return out
}

// tenantPayload is the payload of job i of group g: it names the tenant so
// that a job handed to the wrong tenant is seen.
func tenantPayload(g contracts.GroupRef, i int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"tenant":%q,"g":%q,"i":%d}`, g.Tenant, g.ID, i))
}
