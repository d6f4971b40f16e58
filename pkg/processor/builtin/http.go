package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"

	"github.com/bulkaction/bulkaction/pkg/processor"
)

// Headers the "http" processor sets on every request; a payload that sets one of them fails
// permanently (see [HTTP]).
const (
	// HeaderTenant carries the tenant of the job's group.
	HeaderTenant = "X-Bulkaction-Tenant"
	// HeaderGroup carries the job's group id.
	HeaderGroup = "X-Bulkaction-Group"
	// HeaderJob carries the job id.
	HeaderJob = "X-Bulkaction-Job"
	// HeaderAttempt carries the 1-based attempt number.
	HeaderAttempt = "X-Bulkaction-Attempt"
	// HeaderIdempotencyKey carries "<tenant>:<groupId>:<jobId>", the same for every attempt of a job.
	HeaderIdempotencyKey = "Idempotency-Key"
)

const (
	// maxRetryAfter bounds a Retry-After delay: 24 hours.
	maxRetryAfter = 24 * time.Hour
	// errBodyBytes is how much of an error response's body an HTTPStatusError keeps.
	errBodyBytes = 512
	// drainBytes is how much of a response body is read so the connection can be reused.
	drainBytes = 64 << 10
)

// protectedHeaders are the headers, in canonical form, that a payload may not set: those the
// processor sets itself, Host (the request goes to the URL's host, which AllowedHosts checked), and
// the framing and hop-by-hop headers, which belong to the client.
var protectedHeaders = map[string]bool{
	HeaderTenant: true, HeaderGroup: true, HeaderJob: true, HeaderAttempt: true, HeaderIdempotencyKey: true,
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Keep-Alive": true, "Proxy-Connection": true, "Te": true, "Trailer": true, "Upgrade": true,
}

// HTTPStatusError reports a response outside 2xx from the endpoint of an "http" job. The processor
// returns it as is (retryable) for 408 and 5xx, inside [processor.RateLimited] for 429 (and 503 with
// a Retry-After header), and marked [processor.Permanent] for the rest. Find it with errors.As.
//
// The zero value describes a response with no status.
type HTTPStatusError struct {
	// Method is the request method, e.g. "POST".
	Method string
	// URL is the request URL with any password redacted.
	URL string
	// StatusCode is the response status code, e.g. 503.
	StatusCode int
	// Body is the start of the response body (at most 512 bytes), for the error message.
	Body string
}

// Error returns "builtin: http: <Method> <URL>: <StatusCode> <status text>[: <Body>]".
func (e *HTTPStatusError) Error() string {
	msg := fmt.Sprintf("builtin: http: %s %s: %d %s", e.Method, e.URL, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// httpPayload is the payload of an "http" job. Other fields are allowed: they belong to the body.
type httpPayload struct {
	URL     string            `json:"url"`
	Method  string            `json:"method"`
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"` // nil when absent, "null" when null
}

// HTTP returns the "http" processor, which makes one HTTP request per job. Its payload is a JSON
// object, every field optional:
//
//	{"url":"https://…", "method":"POST", "headers":{"Name":"value"}, "body":<any JSON>}
//
// The fields mean:
//
//   - url: an absolute http or https URL; absent or empty means Options.DefaultURL (the job fails
//     permanently when both are empty). A payload that is not a JSON object uses DefaultURL too.
//   - method: default "POST"; case-insensitive.
//   - headers: extra request headers. A payload may not set (in any case) the headers the
//     processor sets itself (X-Bulkaction-Group, X-Bulkaction-Job, X-Bulkaction-Attempt,
//     Idempotency-Key), Host, Cookie, any Proxy-* header (Proxy-Authorization, ...), or the
//     framing and hop-by-hop headers (Content-Length, Transfer-Encoding, Connection, Keep-Alive,
//     TE, Trailer, Upgrade): such a job fails permanently with a [*PayloadError] naming the
//     header.
//   - body: sent as the JSON request body. Absent means the whole payload is the body, except for
//     GET and HEAD, which then send none; null means no body. Content-Type is application/json
//     when there is a body, unless headers set it.
//
// Every request carries X-Bulkaction-Group, X-Bulkaction-Job, X-Bulkaction-Attempt and
// Idempotency-Key ("<groupId>:<jobId>"), and the trace context of ctx in the format of the global
// OpenTelemetry propagator.
//
// The processor is not an open proxy. The URL's host must be in Options.AllowedHosts (see there for
// the syntax), unless Options.AllowAnyHost is set; otherwise the job fails permanently with a
// [*HostError] and no request is sent. An empty list refuses every URL, the DefaultURL's too. The
// address the host resolves to is checked as each connection is made (see Options.AllowedHosts):
// a loopback, link-local, private, CGNAT, unspecified or multicast address the list does not name
// fails the job permanently with a [*HostError] naming it, before the connection is made.
// Redirects are followed only to the same scheme, host and port as the job's URL, at most 5 times:
// a redirect elsewhere, even to another allowed host or from http to https, is not followed, and
// the job fails permanently with a [*HostError] naming the target (and too many redirects fail it
// permanently too). These rules also hold with Options.AllowAnyHost, and with an
// Options.HTTPClient, whose own CheckRedirect (if any) is asked after them; the processor uses a
// copy of that client and does not modify it.
//
// The job's context bounds every request: under the stock worker a request may take as long as
// the job's timeout (BULKACTION_JOB_TIMEOUT_MS). Without Options.HTTPClient, a context without a
// deadline gets [DefaultHTTPTimeout] (10 s); an Options.HTTPClient's own Timeout applies as well.
//
// The response decides the outcome: 2xx succeeds; 429 is [processor.RateLimited] with the delay of
// its Retry-After header (delta-seconds or HTTP-date; a past date means the worker's own backoff;
// absent or unparsable means Options.DefaultRetryAfter, 1 s by default; capped at 24 h); 503 with a
// Retry-After header is handled like 429; 408, other 5xx, network errors and timeouts (of
// Options.HTTPClient or ctx) are retryable; allowed redirects are followed, and every other status
// (other 4xx, unfollowed 3xx) fails permanently. Non-2xx statuses are reported as a
// [*HTTPStatusError]. An invalid payload fails permanently with a [*PayloadError] naming the field.
func HTTP(opts Options) processor.Processor {
	h := &httpProcessor{
		hosts:      parseHostList(opts),
		retryAfter: opts.retryAfter(),
		now:        time.Now,
	}
	// A copy: the redirect policy must not change the caller's client. The
	// default client has no timeout of its own: the job's deadline bounds
	// each request (DefaultHTTPTimeout when the context has none).
	var client http.Client
	if opts.HTTPClient != nil {
		client = *opts.HTTPClient
	} else {
		h.ownTimeout = DefaultHTTPTimeout
	}
	client.CheckRedirect = checkRedirect(client.CheckRedirect)
	if client.Transport == nil {
		client.Transport = h.hosts.transport() // checks each address it dials
	}
	h.client = &client
	if opts.DefaultURL != "" {
		h.defaultURL, h.defaultURLErr = parseURL(opts.DefaultURL)
	}
	return h
}

type httpProcessor struct {
	client        *http.Client
	hosts         hostList
	defaultURL    *url.URL
	defaultURLErr error
	retryAfter    time.Duration
	now           func() time.Time
	// ownTimeout bounds a request whose context has no deadline (0 = the
	// client's own timeout, if any).
	ownTimeout time.Duration
}

// request is a validated "http" job.
type request struct {
	url     *url.URL
	method  string
	headers map[string]string
	body    []byte // nil: no body
}

func (h *httpProcessor) parse(payload []byte) (*request, error) {
	var p httpPayload
	body := payload
	if isObject(payload) {
		if err := decodeObject(TypeHTTP, payload, &p, false); err != nil {
			return nil, err
		}
		if p.Body != nil {
			body = p.Body
		}
	}
	if bytes.Equal(bytes.TrimSpace(body), []byte("null")) || len(bytes.TrimSpace(body)) == 0 {
		body = nil
	}

	r := &request{method: strings.ToUpper(p.Method), headers: p.Headers, body: body}
	if r.method == "" {
		r.method = http.MethodPost
	}
	if !validToken(r.method) {
		return nil, invalid(TypeHTTP, "method", "%q is not a valid HTTP method", p.Method)
	}
	if p.Body == nil && (r.method == http.MethodGet || r.method == http.MethodHead) {
		r.body = nil
	}
	for name, value := range p.Headers {
		if !validToken(name) {
			return nil, invalid(TypeHTTP, "headers", "%q is not a valid header name", name)
		}
		if c := http.CanonicalHeaderKey(name); protectedHeaders[c] || credentialHeader(c) {
			return nil, invalid(TypeHTTP, "headers."+name, "header %s cannot be set by a payload", http.CanonicalHeaderKey(name))
		}
		if !validHeaderValue(value) {
			return nil, invalid(TypeHTTP, "headers."+name, "value contains a control character")
		}
	}

	switch {
	case p.URL != "":
		u, err := parseURL(p.URL)
		if err != nil {
			return nil, invalid(TypeHTTP, "url", "%v", err)
		}
		r.url = u
	case h.defaultURLErr != nil:
		return nil, processor.Permanent(fmt.Errorf("builtin: http: no url in the payload, and Options.DefaultURL is invalid: %w", h.defaultURLErr))
	case h.defaultURL != nil:
		r.url = h.defaultURL
	default:
		return nil, invalid(TypeHTTP, "url", "missing, and no default URL is configured")
	}
	return r, nil
}

func (h *httpProcessor) Process(ctx context.Context, job *processor.Job) error {
	if h.hosts.err != nil {
		return processor.Permanent(h.hosts.err)
	}
	r, err := h.parse(job.Payload)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok && h.ownTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.ownTimeout)
		defer cancel()
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, r.url.String(), body)
	if err != nil {
		return processor.Permanent(fmt.Errorf("builtin: http: %w", err))
	}
	// Checked on the request that is sent, not on the payload's text.
	if err := h.hosts.check(req.URL); err != nil {
		return processor.Permanent(err)
	}
	if r.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", "bulkaction-worker")
	for name, value := range r.headers {
		req.Header.Set(name, value) // parse refused the protected headers
	}
	req.Header.Set(HeaderTenant, job.Tenant)
	req.Header.Set(HeaderGroup, job.GroupID)
	req.Header.Set(HeaderJob, job.JobID)
	req.Header.Set(HeaderAttempt, strconv.Itoa(job.Attempt))
	req.Header.Set(HeaderIdempotencyKey, job.IdempotencyKey())
	otel.GetTextMapPropagator().Inject(ctx, propagation.HeaderCarrier(req.Header))

	resp, err := h.client.Do(req)
	if err != nil {
		// A refused redirect: permanent. The client closed the redirect's body.
		var he *HostError
		if errors.As(err, &he) {
			return processor.Permanent(he)
		}
		if errors.Is(err, errTooManyRedirects) {
			return processor.Permanent(fmt.Errorf("builtin: http: %s %s: %w", r.method, r.url.Redacted(), errTooManyRedirects))
		}
		// Network errors, client timeouts and the job's deadline: retryable.
		return fmt.Errorf("builtin: http: %w", err)
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainBytes))
		_ = resp.Body.Close()
	}()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}

	head, _ := io.ReadAll(io.LimitReader(resp.Body, errBodyBytes))
	serr := &HTTPStatusError{
		Method:     r.method,
		URL:        r.url.Redacted(),
		StatusCode: resp.StatusCode,
		Body:       strings.TrimSpace(strings.ToValidUTF8(string(head), string(utf8.RuneError))),
	}
	retryAfter, hasRetryAfter := parseRetryAfter(resp.Header.Get("Retry-After"), h.now())
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		if !hasRetryAfter {
			retryAfter = h.retryAfter
		}
		return processor.RateLimited(retryAfter, serr)
	case resp.StatusCode == http.StatusServiceUnavailable && hasRetryAfter:
		return processor.RateLimited(retryAfter, serr)
	case resp.StatusCode >= 500, resp.StatusCode == http.StatusRequestTimeout:
		return serr
	default:
		return processor.Permanent(serr)
	}
}

// parseRetryAfter parses a Retry-After header value, delta-seconds or an HTTP-date, relative to now.
// A date in the past gives 0; the result is capped at maxRetryAfter. ok is false when v is empty or
// not in either format.
func parseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
		if secs > uint64(maxRetryAfter/time.Second) {
			return maxRetryAfter, true
		}
		return time.Duration(secs) * time.Second, true
	} else if errors.Is(err, strconv.ErrRange) {
		return maxRetryAfter, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(t.Sub(now), 0), maxRetryAfter), true
}

// validToken reports whether s is an RFC 9110 token (a valid method or header name).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether s has no control characters other than horizontal tab.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
