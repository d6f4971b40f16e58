package apiclient

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// SubmitOptions are a submission's group settings and seal. The zero value
// sends jobs only: no settings (a new group gets the defaults) and no seal.
type SubmitOptions struct {
	// Priority is the group's level ("" = not sent: normal for a new group).
	Priority contracts.Priority
	// BasePriority, when set, is the group's fair-queue offset.
	BasePriority *int64
	// MaxInFlight, when set, bounds the group's jobs in flight (0 = none).
	MaxInFlight *int64
	// Total, when set, seals the group at that many jobs once the
	// submission is stored.
	Total *int64
	// CallbackURL is the completion callback of a new group ("" = none).
	CallbackURL string
	// NotBefore is a new group's start-at time (RFC 3339, "" = none).
	NotBefore string
	// Windows are a new group's sending windows (none = its tenant's
	// default ones, if any).
	Windows []contracts.Window
}

func (o SubmitOptions) query() url.Values {
	q := url.Values{}
	if o.Priority != "" {
		q.Set("priority", string(o.Priority))
	}
	if o.BasePriority != nil {
		q.Set("basePriority", strconv.FormatInt(*o.BasePriority, 10))
	}
	if o.MaxInFlight != nil {
		q.Set("maxInFlight", strconv.FormatInt(*o.MaxInFlight, 10))
	}
	if o.Total != nil {
		q.Set("total", strconv.FormatInt(*o.Total, 10))
	}
	if o.CallbackURL != "" {
		q.Set("callbackUrl", o.CallbackURL)
	}
	if o.NotBefore != "" {
		q.Set("notBefore", o.NotBefore)
	}
	for _, w := range o.Windows {
		q.Add("window", w.String())
	}
	return q
}

// Submit sends jobs to a group as an NDJSON stream (encoded while it is
// sent, chunked). The gateway checks every job before it stores any: a bad
// job is a 400 *Problem naming its line, and nothing is stored. A job id
// the group already has is accepted and run once, so a submission can be
// repeated; a failed attempt is retried with the same Idempotency-Key.
func (c *Client) Submit(ctx context.Context, groupID string, jobs []Job, o SubmitOptions, opts ...CallOption) (*SubmitResult, error) {
	r := request{method: http.MethodPost, path: groupPath(groupID, "jobs"), query: o.query(),
		contentType: "application/x-ndjson", opts: options(opts)}
	r.body = func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() {
			bw := bufio.NewWriterSize(pw, 64<<10)
			enc := json.NewEncoder(bw)
			enc.SetEscapeHTML(false)
			for _, j := range jobs {
				if err := enc.Encode(j); err != nil {
					pw.CloseWithError(err)
					return
				}
			}
			pw.CloseWithError(bw.Flush())
		}()
		return pr, nil
	}
	var out SubmitResult
	if _, err := c.send(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SubmitNDJSON sends body, NDJSON jobs ({"jobId","type","payload"} a
// line), as it is read. The body is read once, so a failed request is not
// retried.
func (c *Client) SubmitNDJSON(ctx context.Context, groupID string, body io.Reader, o SubmitOptions, opts ...CallOption) (*SubmitResult, error) {
	r := request{method: http.MethodPost, path: groupPath(groupID, "jobs"), query: o.query(),
		contentType: "application/x-ndjson", opts: options(opts), noRetry: true}
	r.body = func() (io.ReadCloser, error) { return io.NopCloser(body), nil }
	var out SubmitResult
	if _, err := c.send(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
