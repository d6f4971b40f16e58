package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/bulkaction/bulkaction/pkg/api"
	"github.com/bulkaction/bulkaction/pkg/contracts"
)

// TenantWindows returns the tenant's default sending windows (GET
// /v1/windows).
func (c *Client) TenantWindows(ctx context.Context, opts ...CallOption) (*api.TenantWindows, error) {
	var out api.TenantWindows
	if _, err := c.send(ctx, request{method: http.MethodGet, path: "/v1/windows", opts: options(opts)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetTenantWindows replaces the tenant's default sending windows (PUT
// /v1/windows; none removes them) and returns them. A bad window is a 400
// [Problem] naming the field.
func (c *Client) SetTenantWindows(ctx context.Context, ws []contracts.Window, opts ...CallOption) (*api.TenantWindows, error) {
	if ws == nil {
		ws = []contracts.Window{}
	}
	body, err := json.Marshal(api.TenantWindows{Windows: ws})
	if err != nil {
		return nil, err
	}
	var out api.TenantWindows
	r := request{method: http.MethodPut, path: "/v1/windows", contentType: "application/json", opts: options(opts),
		body: func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }}
	if _, err := c.send(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
