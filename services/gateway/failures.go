package gateway

import (
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/bulkaction/bulkaction/pkg/contracts"
	"github.com/bulkaction/bulkaction/pkg/redisq"
)

// FailurePayloadHead is the most bytes of a payload that GET …/failures
// lists: a longer payload is listed by its size and first bytes
// (payloadTruncated, payloadBytes, payloadHead), and read whole with GET
// …/failures/{jobId}. With the error text (at most 1 KiB) it bounds an
// entry of the listing, and so a page of at most redisq.MaxFailuresPage
// entries.
const FailurePayloadHead = 1024

// failureView is the listing's or the single read's view of a failure.
func failureView(f redisq.Failure) FailureView {
	v := FailureView{JobID: f.JobID, Type: f.Type, Attempts: f.Attempts, Error: f.Error,
		FinishedAt: f.FinishedAt.UTC(), Payload: f.Payload, PayloadBytes: f.PayloadBytes}
	if f.Truncated {
		v.Payload, v.PayloadTruncated, v.PayloadHead = nil, true, textHead(f.Payload)
	}
	return v
}

// textHead is the first bytes of a payload as text: a character cut at the
// end is dropped, and any invalid byte is replaced.
func textHead(b []byte) string {
	for n := 1; n < utf8.UTFMax && n <= len(b); n++ {
		if utf8.RuneStart(b[len(b)-n]) {
			if !utf8.FullRune(b[len(b)-n:]) {
				b = b[:len(b)-n]
			}
			break
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// getFailure: GET …/failures/{jobId}, one failed job of the group whole,
// its payload included.
func (g *Gateway) getFailure(w http.ResponseWriter, r *http.Request) {
	ref, ok := groupRef(w, r)
	if !ok {
		return
	}
	jobID := r.PathValue("jobId")
	if err := contracts.ValidateID("jobId", jobID); err != nil {
		writeProblem(w, r, http.StatusBadRequest, slugInvalidParam, "bad jobId", fieldError(err))
		return
	}
	f, found, err := g.q.Failure(r.Context(), ref, jobID)
	if err != nil {
		g.unavailable(w, r, err)
		return
	}
	if !found {
		writeProblem(w, r, http.StatusNotFound, slugNotFound,
			"no such failure: job "+jobID+" is not among the failures group "+ref.ID+" keeps")
		return
	}
	writeJSON(w, http.StatusOK, failureView(*f))
}
