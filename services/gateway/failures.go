package gateway

import (
	"net/http"
	"strings"
	"sync"
	"time"
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

// A page of GET …/failures is kept, encoded, and served again to every
// reader of the same page (group, cursor and limit) while its group's
// failed count is unchanged ([redisq.Queue.FailuresVersion], one round trip
// instead of the page's script, the kept count and the existence check),
// for at most failuresPageAge: a tenant polling its failures in a loop, or
// a dashboard left open, then costs Redis and the gateway little more than
// the answer's bytes. failuresCacheBytes bounds the pages kept.
const (
	failuresPageAge    = 2 * time.Second
	failuresCacheBytes = 32 << 20
)

type failuresPageKey struct {
	ref    contracts.GroupRef
	cursor string
	limit  int
}

type failuresPage struct {
	version int64
	at      time.Time
	body    []byte
}

// failuresCache holds the kept pages of GET …/failures.
type failuresCache struct {
	mu    sync.Mutex
	pages map[failuresPageKey]failuresPage
	bytes int
}

// get is the page kept for k if it was read at version and is younger
// than failuresPageAge at now.
func (c *failuresCache) get(k failuresPageKey, version int64, now time.Time) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.pages[k]
	if !ok || p.version != version || now.Sub(p.at) >= failuresPageAge || now.Before(p.at) {
		return nil, false
	}
	return p.body, true
}

// put keeps body as k's page at version, read at now. To stay within
// failuresCacheBytes it first drops the pages too old to be served, then
// any others.
func (c *failuresCache) put(k failuresPageKey, version int64, now time.Time, body []byte) {
	if len(body) > failuresCacheBytes/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pages == nil {
		c.pages = map[failuresPageKey]failuresPage{}
	}
	if old, ok := c.pages[k]; ok {
		c.bytes -= len(old.body)
		delete(c.pages, k)
	}
	if c.bytes+len(body) > failuresCacheBytes {
		for pk, p := range c.pages {
			if now.Sub(p.at) >= failuresPageAge || now.Before(p.at) {
				c.bytes -= len(p.body)
				delete(c.pages, pk)
			}
		}
		for pk, p := range c.pages {
			if c.bytes+len(body) <= failuresCacheBytes {
				break
			}
			c.bytes -= len(p.body)
			delete(c.pages, pk)
		}
	}
	c.pages[k] = failuresPage{version: version, at: now, body: body}
	c.bytes += len(body)
}
