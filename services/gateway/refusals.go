package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/nats-io/nats.go"

	"github.com/bulkaction/bulkaction/pkg/api"
	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
	"github.com/bulkaction/bulkaction/pkg/status"
)

// A 202 means JetStream stored the messages; the pipeline may still refuse
// one (docs/api.md, "What 202 means"). The fetcher records each refusal in
// the group the message names (redisq.Queue.RecordRefusal); the gateway
// shows them in the group's full view and in the 404 of a group they kept
// from being created, and publishes a retry of a refused message under a
// new id (redisq.RetryMsgID), since JetStream would drop it as a duplicate
// within the duplicate window.

// refusalsOf reads what the pipeline refused of g's submissions, nil when
// nothing.
func (g *Gateway) refusalsOf(ctx context.Context, ref contracts.GroupRef) (*api.Refusals, error) {
	r, err := g.q.GroupRefusals(ctx, ref)
	if err != nil {
		return nil, err
	}
	return status.RefusalsView(r), nil
}

// groupNotFound answers 404 for a group that does not exist; when the
// pipeline refused submissions that would have created it, the problem
// says so and carries them (refused).
func (g *Gateway) groupNotFound(w http.ResponseWriter, r *http.Request, ref contracts.GroupRef) {
	rf, err := g.refusalsOf(r.Context(), ref)
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	if rf == nil {
		writeProblem(w, r, http.StatusNotFound, slugNotFound, "no such group")
		return
	}
	p := Problem{Type: ProblemTypePrefix + slugNotFound, Title: titles[slugNotFound], Status: http.StatusNotFound,
		Detail: fmt.Sprintf("no such group: the pipeline refused %s of its submissions (%s), the last %s: %s; submit them again",
			plural(rf.Messages, "message"), plural(rf.Jobs, "job"), rf.LastReason, rf.LastError),
		Instance: r.URL.Path, Refused: rf}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusNotFound)
	_ = json.NewEncoder(w).Encode(p)
}

// retryIDs returns what renames the messages of a submission to a group: a
// message whose id the pipeline refused is published under a new one
// (redisq.RetryMsgID), so that a retry after a refusal is stored rather than
// dropped as a duplicate; nil when the group has refused nothing (refused
// are its refused message ids, redisq.SubmitCheck).
func retryIDs(refused map[string]struct{}) func(*nats.Msg) {
	if len(refused) == 0 {
		return nil
	}
	return func(m *nats.Msg) {
		if id := m.Header.Get(nats.MsgIdHdr); id != "" {
			m.Header.Set(nats.MsgIdHdr, redisq.RetryMsgID(refused, id))
		}
	}
}

// plural is "1 job", "3 jobs".
func plural(n int64, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
