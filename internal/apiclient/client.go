package apiclient

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Defaults of the [Config] fields.
const (
	// DefaultRequestTimeout bounds a request other than an event stream.
	DefaultRequestTimeout = 2 * time.Minute
	// DefaultRetries is how many times a failed request is sent again.
	DefaultRetries = 3
	// DefaultRetryWait is the wait before the first retry; it doubles
	// with each retry, and a Retry-After answer sets it.
	DefaultRetryWait = 500 * time.Millisecond
	// DefaultIdleTimeout is how long an event stream may send nothing,
	// not even a keep-alive comment, before it is taken for dead and
	// reopened.
	DefaultIdleTimeout = time.Minute
)

// maxRetryWait caps the wait between retries.
const maxRetryWait = 10 * time.Second

// ErrConfig is wrapped by [New]'s errors.
var ErrConfig = errors.New("apiclient: bad config")

// Config configures a [Client]. BaseURL and Key are required; every other
// zero field means its default.
type Config struct {
	// BaseURL is the gateway's address, e.g. "http://127.0.0.1:8090"; a
	// path ends in "/v1" or not.
	BaseURL string
	// Key is the API key, sent as "Authorization: Bearer <key>". It is
	// never part of an error or a log line.
	Key string
	// HTTPClient sends the requests (nil = a client of its own). Its
	// Timeout must be 0 for event streams to last.
	HTTPClient *http.Client
	// RequestTimeout bounds each attempt of a request other than an event
	// stream (0 = DefaultRequestTimeout).
	RequestTimeout time.Duration
	// Retries is how many times a request that failed with a broken
	// connection, 502, 503, 504 or an Idempotency-Key in progress is sent
	// again (0 = DefaultRetries, negative = never). A 429 (over the
	// tenant's quota) is returned at once: it lifts only as jobs finish.
	Retries int
	// RetryWait is the wait before the first retry (0 = DefaultRetryWait).
	RetryWait time.Duration
	// IdleTimeout is how long an event stream may be silent before it is
	// reopened (0 = DefaultIdleTimeout); the gateway's keep-alive comments
	// (BULKACTION_GATEWAY_SSE_HEARTBEAT) must come more often.
	IdleTimeout time.Duration
	// UserAgent is sent with every request ("" = "bulkaction-apiclient").
	UserAgent string
}

func (c *Config) validate() error {
	if c.BaseURL == "" {
		return fmt.Errorf("%w: no API address (BaseURL)", ErrConfig)
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%w: API address %q: want http(s)://host[:port]", ErrConfig, c.BaseURL)
	}
	if strings.TrimSpace(c.Key) == "" {
		return fmt.Errorf("%w: no API key", ErrConfig)
	}
	if strings.ContainsAny(c.Key, " \t\r\n") {
		return fmt.Errorf("%w: the API key contains white space", ErrConfig)
	}
	return nil
}

// Client is a client of the HTTP API; safe for concurrent use.
type Client struct {
	cfg  Config
	base string // scheme://host[/path] without a trailing slash or /v1
	hc   *http.Client
}

// New returns a client for cfg.
func New(cfg Config) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.Retries == 0 {
		cfg.Retries = DefaultRetries
	}
	if cfg.RetryWait == 0 {
		cfg.RetryWait = DefaultRetryWait
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "bulkaction-apiclient"
	}
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	base := strings.TrimSuffix(strings.TrimSuffix(cfg.BaseURL, "/"), "/v1")
	return &Client{cfg: cfg, base: base, hc: hc}, nil
}

// BaseURL is the gateway's address the client talks to.
func (c *Client) BaseURL() string { return c.base }

// CallOption sets something of one call.
type CallOption func(*callOptions)

type callOptions struct {
	tenant string
	idem   string
	create bool
}

// WithTenant names the tenant of the call: required with an admin key,
// and with a tenant's key either omitted or that tenant.
func WithTenant(tenant string) CallOption { return func(o *callOptions) { o.tenant = tenant } }

// WithIdempotencyKey sends key as the POST's Idempotency-Key instead of a
// random one: the same request with the same key is done once, its answer
// kept by the gateway (BULKACTION_GATEWAY_IDEMPOTENCY_TTL).
func WithIdempotencyKey(key string) CallOption { return func(o *callOptions) { o.idem = key } }

// WithCreate lets a seal, pause or cancel create a group that does not
// exist yet (?create=true); without it the gateway answers 404 for one.
func WithCreate() CallOption { return func(o *callOptions) { o.create = true } }

func options(opts []CallOption) callOptions {
	var o callOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// request is one API call, possibly sent several times.
type request struct {
	method, path string
	query        url.Values
	// body returns a new body for each attempt (nil = none).
	body        func() (io.ReadCloser, error)
	contentType string
	opts        callOptions
	// stream: no timeout, the response body is the caller's.
	stream bool
	// noRetry: the body can be read only once.
	noRetry bool
	header  http.Header
}

// groupPath is /v1/groups/<id>[/<rest>].
func groupPath(groupID, rest string) string {
	p := "/v1/groups/" + url.PathEscape(groupID)
	if rest != "" {
		p += "/" + rest
	}
	return p
}

// NewIdempotencyKey returns a random Idempotency-Key.
func NewIdempotencyKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// send runs r, retrying as Config says, and decodes a 2xx JSON answer into
// out (when not nil). For a stream, the open response is returned.
func (c *Client) send(ctx context.Context, r request, out any) (*http.Response, error) {
	if r.method == http.MethodPost && r.opts.idem == "" {
		r.opts.idem = NewIdempotencyKey()
	}
	wait := c.cfg.RetryWait
	for attempt := 0; ; attempt++ {
		resp, cancel, err := c.once(ctx, r)
		retry := false
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			retry = true
		} else if resp.StatusCode >= 300 {
			p := readProblem(resp)
			cancel()
			err = p
			retry = retryable(p)
			if p.RetryAfter > 0 {
				wait = min(p.RetryAfter, maxRetryWait)
			}
		} else {
			if r.stream {
				resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
				return resp, nil
			}
			defer cancel()
			defer resp.Body.Close()
			if out == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				return resp, nil
			}
			if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
				return nil, fmt.Errorf("apiclient: %s %s: reading the answer: %w", r.method, r.path, err)
			}
			return resp, nil
		}
		if !retry || r.noRetry || attempt >= c.cfg.Retries {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, maxRetryWait)
	}
}

// retryable: the request may succeed when sent again.
func retryable(p *Problem) bool {
	switch p.Status {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	case http.StatusConflict:
		return p.Slug() == SlugIdemInProgress
	}
	return false
}

// once sends one attempt.
func (c *Client) once(ctx context.Context, r request) (*http.Response, context.CancelFunc, error) {
	var cancel context.CancelFunc
	if r.stream {
		ctx, cancel = context.WithCancel(ctx)
	} else {
		ctx, cancel = context.WithTimeout(ctx, c.cfg.RequestTimeout)
	}
	u := c.base + r.path
	q := url.Values{}
	for k, vs := range r.query {
		q[k] = vs
	}
	if r.opts.tenant != "" {
		q.Set("tenant", r.opts.tenant)
	}
	if r.opts.create {
		q.Set("create", "true")
	}
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var body io.ReadCloser
	if r.body != nil {
		b, err := r.body()
		if err != nil {
			cancel()
			return nil, nil, err
		}
		body = b
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		cancel()
		if body != nil {
			_ = body.Close()
		}
		return nil, nil, err
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.Key)
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	if r.opts.idem != "" {
		req.Header.Set("Idempotency-Key", r.opts.idem)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		cancel()
		// *url.Error names the URL, never the headers: the key stays out.
		return nil, nil, fmt.Errorf("apiclient: %s %s: %w", r.method, r.path, err)
	}
	return resp, cancel, nil
}

// cancelBody ends a stream's context when its body is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// readProblem reads an error answer.
func readProblem(resp *http.Response) *Problem {
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	p := &Problem{}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if mt != "application/problem+json" || json.Unmarshal(raw, p) != nil || p.Status == 0 {
		text := strings.TrimSpace(string(raw))
		if len(text) > 200 {
			text = text[:200] + "…"
		}
		p = &Problem{Title: http.StatusText(resp.StatusCode), Detail: text}
	}
	p.Status = resp.StatusCode
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		p.RetryAfter = time.Duration(s) * time.Second
	}
	return p
}
