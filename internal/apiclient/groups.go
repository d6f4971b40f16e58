package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// Group reads one group's full view. An unknown group (or one of another
// tenant) is a 404 *Problem ([IsNotFound]).
func (c *Client) Group(ctx context.Context, groupID string, opts ...CallOption) (*Group, error) {
	var g Group
	if _, err := c.send(ctx, request{method: http.MethodGet, path: groupPath(groupID, ""), opts: options(opts)}, &g); err != nil {
		return nil, err
	}
	return &g, nil
}

// ListOptions select and page the groups of [Client.ListGroups]. The zero
// value lists the newest 50 groups of the key's tenant (of every tenant for
// an admin key) in their summary view.
type ListOptions struct {
	// States keeps only groups in one of these states (none = all).
	States []contracts.GroupState
	// Limit is the most groups of the page (0 = the gateway's 50).
	Limit int
	// Cursor continues where an earlier page's Next left off.
	Cursor string
	// Full asks for every group's full view (status and links).
	Full bool
}

// ListGroups reads a page of groups, newest first. With States the page
// may hold fewer than Limit groups while Next is set.
func (c *Client) ListGroups(ctx context.Context, o ListOptions, opts ...CallOption) (*GroupList, error) {
	q := url.Values{}
	if len(o.States) > 0 {
		s := make([]string, len(o.States))
		for i, st := range o.States {
			s[i] = string(st)
		}
		q.Set("state", strings.Join(s, ","))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if o.Full {
		q.Set("view", "full")
	}
	var l GroupList
	if _, err := c.send(ctx, request{method: http.MethodGet, path: "/v1/groups", query: q, opts: options(opts)}, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// control posts to a group's seal, cancel, pause or resume.
func (c *Client) control(ctx context.Context, groupID, verb string, q url.Values, opts []CallOption) (*ControlResult, error) {
	var out ControlResult
	r := request{method: http.MethodPost, path: groupPath(groupID, verb), query: q, opts: options(opts)}
	if _, err := c.send(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Seal declares the group's number of jobs: it completes once that many
// are done.
func (c *Client) Seal(ctx context.Context, groupID string, total int64, opts ...CallOption) (*ControlResult, error) {
	return c.control(ctx, groupID, "seal", url.Values{"total": {strconv.FormatInt(total, 10)}}, opts)
}

// Cancel asks for the group to end early; its effect shows in its state
// and events. A group that does not exist yet is created cancelled.
func (c *Client) Cancel(ctx context.Context, groupID string, opts ...CallOption) (*ControlResult, error) {
	return c.control(ctx, groupID, "cancel", nil, opts)
}

// Pause stops admitting the group's jobs until it is resumed.
func (c *Client) Pause(ctx context.Context, groupID string, opts ...CallOption) (*ControlResult, error) {
	return c.control(ctx, groupID, "pause", nil, opts)
}

// Resume admits a paused group's jobs again.
func (c *Client) Resume(ctx context.Context, groupID string, opts ...CallOption) (*ControlResult, error) {
	return c.control(ctx, groupID, "resume", nil, opts)
}

// Failures reads a page of the group's failed jobs, newest first (limit 0
// = the gateway's 100).
func (c *Client) Failures(ctx context.Context, groupID, cursor string, limit int, opts ...CallOption) (*FailureList, error) {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out FailureList
	if _, err := c.send(ctx, request{method: http.MethodGet, path: groupPath(groupID, "failures"), query: q, opts: options(opts)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RetryFailed submits the group's failed jobs as a new sealed group,
// newGroupID ("" = the gateway picks <id>-retry-<n>).
func (c *Client) RetryFailed(ctx context.Context, groupID, newGroupID string, opts ...CallOption) (*RetryResult, error) {
	r := request{method: http.MethodPost, path: groupPath(groupID, "retry-failed"), opts: options(opts)}
	if newGroupID != "" {
		body, err := json.Marshal(map[string]string{"groupId": newGroupID})
		if err != nil {
			return nil, err
		}
		r.body = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		r.contentType = "application/json"
	}
	var out RetryResult
	if _, err := c.send(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Schedule moves the start (notBefore) of a group that has not started;
// its effect shows in the group's status and events.
func (c *Client) Schedule(ctx context.Context, groupID string, notBefore time.Time, opts ...CallOption) (*ControlResult, error) {
	body, err := json.Marshal(map[string]string{"notBefore": notBefore.Format(time.RFC3339Nano)})
	if err != nil {
		return nil, err
	}
	var out ControlResult
	r := request{method: http.MethodPost, path: groupPath(groupID, "schedule"), contentType: "application/json", opts: options(opts),
		body: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }}
	if _, err := c.send(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
