package apiclient

import (
	"context"
	"net/http"

	"github.com/bulkaction/bulkaction/pkg/api"
)

// RetryCallback makes the group's failed completion callback delivery
// pending again, due at once, with a new retry budget, and returns it. A
// delivery that has not failed is a 409 [Problem], a group without one a
// 404.
func (c *Client) RetryCallback(ctx context.Context, groupID string, opts ...CallOption) (*api.Callback, error) {
	var out api.Callback
	r := request{method: http.MethodPost, path: groupPath(groupID, "callback/retry"), opts: options(opts)}
	if _, err := c.send(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CallbackSecret says whether the tenant has a callback signing secret,
// since when, and until when a rotated one still signs; never the secret.
func (c *Client) CallbackSecret(ctx context.Context, opts ...CallOption) (*api.CallbackSecret, error) {
	var out api.CallbackSecret
	if _, err := c.send(ctx, request{method: http.MethodGet, path: "/v1/callback-secret", opts: options(opts)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RotateCallbackSecret makes a new callback signing secret for the tenant
// and returns it, in Secret: the only time it is shown. The one it replaces
// keeps signing for the gateway's grace period. It is sent once (each call
// rotates).
func (c *Client) RotateCallbackSecret(ctx context.Context, opts ...CallOption) (*api.CallbackSecret, error) {
	var out api.CallbackSecret
	r := request{method: http.MethodPost, path: "/v1/callback-secret", opts: options(opts), noRetry: true}
	if _, err := c.send(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
