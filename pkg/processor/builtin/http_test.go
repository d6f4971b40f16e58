package builtin_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
)

// seen is a request as the test server received it.
type seen struct {
	Method string
	Path   string
	Host   string
	Header http.Header
	Body   string
}

// testServer is a real HTTP server that records every request and answers with the status and
// Retry-After given in the query (?status=429&retryAfter=3); 200 by default. ?redirect=<location>
// answers 302 Found to that location instead, and ?loop=1 redirects to the same URL again.
type testServer struct {
	*httptest.Server
	reqs chan seen
}

func newTestServer(t *testing.T) *testServer {
	t.Helper()
	s := &testServer{reqs: make(chan seen, 64)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select {
		case s.reqs <- seen{Method: r.Method, Path: r.URL.Path, Host: r.Host, Header: r.Header.Clone(), Body: string(body)}:
		default: // full: noRequest fails anyway, and a redirect loop must not hang the test
		}
		q := r.URL.Query()
		if loc := q.Get("redirect"); loc != "" {
			http.Redirect(w, r, loc, http.StatusFound)
			return
		}
		if q.Get("loop") != "" {
			http.Redirect(w, r, r.URL.RequestURI(), http.StatusFound)
			return
		}
		if ra := q.Get("retryAfter"); ra != "" {
			w.Header().Set("Retry-After", ra)
		}
		status := http.StatusOK
		if s := q.Get("status"); s != "" {
			status, _ = strconv.Atoi(s)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "reply "+strconv.Itoa(status))
	}))
	t.Cleanup(s.Close)
	return s
}

// host is the server's "127.0.0.1:port", the entry of Options.AllowedHosts that allows it.
func (s *testServer) host() string { return strings.TrimPrefix(s.URL, "http://") }

// allow returns Options that allow s's host.
func (s *testServer) allow() builtin.Options {
	return builtin.Options{AllowedHosts: []string{s.host()}}
}

// next returns the request the server received, failing if there was none.
func (s *testServer) next(t *testing.T) seen {
	t.Helper()
	select {
	case r := <-s.reqs:
		return r
	default:
		t.Fatal("the server received no request")
		return seen{}
	}
}

// noRequest fails if the server received a request.
func (s *testServer) noRequest(t *testing.T) {
	t.Helper()
	select {
	case r := <-s.reqs:
		t.Fatalf("the server received %s %s, want no request", r.Method, r.Path)
	default:
	}
}

func payload(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func job(p json.RawMessage) *processor.Job {
	return &processor.Job{Tenant: "acme", GroupID: "grp-1", JobID: "job_7", Type: "http", Payload: p, Attempt: 2}
}

func TestHTTPStatuses(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	tests := []struct {
		name       string
		query      string
		opts       builtin.Options
		want       processor.Outcome
		after      time.Duration
		afterRange [2]time.Duration // instead of after, when set
	}{
		{name: "200", query: "status=200", want: processor.OutcomeSuccess},
		{name: "201", query: "status=201", want: processor.OutcomeSuccess},
		{name: "204", query: "status=204", want: processor.OutcomeSuccess},
		{name: "429 without Retry-After", query: "status=429", want: processor.OutcomeRateLimited, after: time.Second},
		{name: "429 without Retry-After, DefaultRetryAfter", query: "status=429", opts: builtin.Options{DefaultRetryAfter: 4 * time.Second}, want: processor.OutcomeRateLimited, after: 4 * time.Second},
		{name: "429 seconds", query: "status=429&retryAfter=7", want: processor.OutcomeRateLimited, after: 7 * time.Second},
		{name: "429 zero seconds", query: "status=429&retryAfter=0", want: processor.OutcomeRateLimited, after: 0},
		{name: "429 huge seconds", query: "status=429&retryAfter=99999999999999999999", want: processor.OutcomeRateLimited, after: 24 * time.Hour},
		{name: "429 unparsable", query: "status=429&retryAfter=soon", want: processor.OutcomeRateLimited, after: time.Second},
		{
			name: "429 HTTP-date", query: "status=429&retryAfter=" + url.QueryEscape(time.Now().Add(time.Hour).UTC().Format(http.TimeFormat)),
			want: processor.OutcomeRateLimited, afterRange: [2]time.Duration{58 * time.Minute, time.Hour},
		},
		{
			name: "429 HTTP-date in the past", query: "status=429&retryAfter=" + url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)),
			want: processor.OutcomeRateLimited, after: 0,
		},
		{name: "503 with Retry-After", query: "status=503&retryAfter=3", want: processor.OutcomeRateLimited, after: 3 * time.Second},
		{name: "503", query: "status=503", want: processor.OutcomeRetry},
		{name: "500", query: "status=500", want: processor.OutcomeRetry},
		{name: "502", query: "status=502", want: processor.OutcomeRetry},
		{name: "408", query: "status=408", want: processor.OutcomeRetry},
		{name: "400", query: "status=400", want: processor.OutcomeFailed},
		{name: "401", query: "status=401", want: processor.OutcomeFailed},
		{name: "404", query: "status=404", want: processor.OutcomeFailed},
		{name: "422", query: "status=422", want: processor.OutcomeFailed},
		{name: "304", query: "status=304", want: processor.OutcomeFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			opts.AllowedHosts = []string{srv.host()}
			p := builtin.HTTP(opts)
			err := p.Process(context.Background(), job(payload(t, map[string]any{"url": srv.URL + "/hook?" + tt.query})))
			srv.next(t)
			got, after := processor.Classify(err)
			if got != tt.want {
				t.Fatalf("outcome %v (%v), want %v", got, err, tt.want)
			}
			if tt.afterRange != [2]time.Duration{} {
				if after < tt.afterRange[0] || after > tt.afterRange[1] {
					t.Fatalf("retry after %v, want within %v", after, tt.afterRange)
				}
			} else if after != tt.after {
				t.Fatalf("retry after %v, want %v", after, tt.after)
			}
			if got == processor.OutcomeSuccess {
				return
			}
			var se *builtin.HTTPStatusError
			if !errors.As(err, &se) {
				t.Fatalf("%v (%T) does not carry an *HTTPStatusError", err, err)
			}
			wantCode, _ := strconv.Atoi(strings.TrimPrefix(strings.Split(tt.query, "&")[0], "status="))
			if se.StatusCode != wantCode || se.Method != "POST" || !strings.HasPrefix(se.URL, srv.URL+"/hook") {
				t.Fatalf("HTTPStatusError = %+v", se)
			}
			if wantCode != 304 && se.Body != "reply "+strconv.Itoa(wantCode) {
				t.Fatalf("HTTPStatusError.Body = %q", se.Body)
			}
		})
	}
}

func TestHTTPRequest(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	p := builtin.HTTP(srv.allow())
	pl := payload(t, map[string]any{
		"url":    srv.URL + "/orders/42",
		"method": "put",
		"headers": map[string]string{
			"Authorization": "Bearer t0k",
			"X-Custom":      "v",
		},
		"amount": 10,
	})
	if err := p.Process(context.Background(), job(pl)); err != nil {
		t.Fatal(err)
	}
	r := srv.next(t)
	if r.Method != http.MethodPut || r.Path != "/orders/42" || r.Host != srv.host() {
		t.Errorf("request line = %s %s host %s", r.Method, r.Path, r.Host)
	}
	for name, want := range map[string]string{
		"X-Bulkaction-Tenant":  "acme",
		"X-Bulkaction-Group":   "grp-1",
		"X-Bulkaction-Job":     "job_7",
		"X-Bulkaction-Attempt": "2",
		"Idempotency-Key":      "acme:grp-1:job_7",
		"Authorization":        "Bearer t0k",
		"X-Custom":             "v",
		"Content-Type":         "application/json",
	} {
		if got := r.Header.Values(name); len(got) != 1 || got[0] != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
	// No body field: the whole payload is the body.
	if r.Body != string(pl) {
		t.Errorf("body = %s, want the whole payload %s", r.Body, pl)
	}
}

func TestHTTPBody(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	p := builtin.HTTP(builtin.Options{DefaultURL: srv.URL + "/default", AllowedHosts: []string{srv.host()}})
	tests := []struct {
		name, payload, method, path, body, contentType string
	}{
		{"explicit body", `{"url":"` + srv.URL + `/x","body":{"a":[1,2]}}`, "POST", "/x", `{"a":[1,2]}`, "application/json"},
		{"string body", `{"url":"` + srv.URL + `/x","body":"hi"}`, "POST", "/x", `"hi"`, "application/json"},
		{"null body", `{"url":"` + srv.URL + `/x","body":null}`, "POST", "/x", "", ""},
		{"default url, whole payload", `{"userId":9}`, "POST", "/default", `{"userId":9}`, "application/json"},
		{"default url, array payload", `[1,2,3]`, "POST", "/default", `[1,2,3]`, "application/json"},
		{"default url, empty payload", ``, "POST", "/default", "", ""},
		{"GET sends no default body", `{"method":"GET","q":1}`, "GET", "/default", "", ""},
		{"GET with explicit body", `{"method":"GET","body":{"q":1}}`, "GET", "/default", `{"q":1}`, "application/json"},
		{"DELETE sends the payload", `{"method":"DELETE"}`, "DELETE", "/default", `{"method":"DELETE"}`, "application/json"},
		{"content type override", `{"headers":{"Content-Type":"application/vnd.x+json"},"body":{}}`, "POST", "/default", `{}`, "application/vnd.x+json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := p.Process(context.Background(), job(json.RawMessage(tt.payload))); err != nil {
				t.Fatal(err)
			}
			r := srv.next(t)
			if r.Method != tt.method || r.Path != tt.path || r.Body != tt.body || r.Header.Get("Content-Type") != tt.contentType {
				t.Fatalf("got %s %s body %q content-type %q; want %s %s body %q content-type %q",
					r.Method, r.Path, r.Body, r.Header.Get("Content-Type"), tt.method, tt.path, tt.body, tt.contentType)
			}
			if r.Header.Get("Idempotency-Key") != "acme:grp-1:job_7" {
				t.Fatalf("Idempotency-Key = %q", r.Header.Get("Idempotency-Key"))
			}
		})
	}
}

// blockingServer answers nothing until the request's context ends or the test finishes.
func blockingServer(t *testing.T) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs before srv.Close
	return srv
}

func TestHTTPTimeouts(t *testing.T) {
	t.Parallel()
	srv := blockingServer(t)
	pl := payload(t, map[string]any{"url": srv.URL})
	allowed := []string{strings.TrimPrefix(srv.URL, "http://")}

	t.Run("client timeout", func(t *testing.T) {
		client := *srv.Client()
		client.Timeout = 50 * time.Millisecond
		err := builtin.HTTP(builtin.Options{HTTPClient: &client, AllowedHosts: allowed}).Process(context.Background(), job(pl))
		var ne interface{ Timeout() bool }
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("%v, want a timeout error", err)
		}
		if o, _ := processor.Classify(err); o != processor.OutcomeRetry {
			t.Fatalf("outcome %v, want retry", o)
		}
	})
	t.Run("job deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		err := builtin.HTTP(builtin.Options{AllowedHosts: allowed}).Process(ctx, job(pl))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%v, want context.DeadlineExceeded", err)
		}
		if o, _ := processor.Classify(err); o != processor.OutcomeRetry {
			t.Fatalf("outcome %v, want retry", o)
		}
	})
}

// A job whose timeout is longer than DefaultHTTPTimeout may wait that long for its endpoint: the
// job's deadline bounds the request, not a fixed client timeout.
func TestHTTPFollowsJobDeadline(t *testing.T) {
	t.Parallel()
	answerAfter := builtin.DefaultHTTPTimeout + 500*time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(answerAfter):
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(srv.Close)
	opts := builtin.Options{AllowedHosts: []string{strings.TrimPrefix(srv.URL, "http://")}}
	pl := payload(t, map[string]any{"url": srv.URL})

	ctx, cancel := context.WithTimeout(context.Background(), answerAfter+10*time.Second)
	defer cancel()
	start := time.Now()
	if err := builtin.HTTP(opts).Process(ctx, job(pl)); err != nil {
		t.Fatalf("with a job deadline of %s, an answer after %s: %v (after %s)",
			answerAfter+10*time.Second, answerAfter, err, time.Since(start).Round(time.Millisecond))
	}
}

// Without a deadline in the job's context, DefaultHTTPTimeout bounds the request.
func TestHTTPDefaultTimeoutWithoutDeadline(t *testing.T) {
	t.Parallel()
	srv := blockingServer(t)
	opts := builtin.Options{AllowedHosts: []string{strings.TrimPrefix(srv.URL, "http://")}}
	pl := payload(t, map[string]any{"url": srv.URL})
	start := time.Now()
	err := builtin.HTTP(opts).Process(context.Background(), job(pl))
	took := time.Since(start)
	if err == nil || took < builtin.DefaultHTTPTimeout || took > builtin.DefaultHTTPTimeout+5*time.Second {
		t.Fatalf("%v after %s, want a timeout after %s", err, took, builtin.DefaultHTTPTimeout)
	}
	if o, _ := processor.Classify(err); o != processor.OutcomeRetry {
		t.Fatalf("outcome %v, want retry", o)
	}
}

func TestHTTPNetworkError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	u := srv.URL
	srv.Close() // nothing listens on u any more
	opts := builtin.Options{AllowedHosts: []string{strings.TrimPrefix(u, "http://")}}
	err := builtin.HTTP(opts).Process(context.Background(), job(payload(t, map[string]any{"url": u})))
	if err == nil {
		t.Fatal("request to a closed server succeeded")
	}
	if o, _ := processor.Classify(err); o != processor.OutcomeRetry {
		t.Fatalf("outcome %v (%v), want retry", o, err)
	}
}

func TestHTTPInvalidPayload(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	tests := []struct {
		name, payload string
		opts          builtin.Options
		field         string
	}{
		{"no url, no default", `{"a":1}`, builtin.Options{}, "url"},
		{"url wrong type", `{"url":5}`, builtin.Options{}, "url"},
		{"url scheme", `{"url":"ftp://example.test/x"}`, builtin.Options{}, "url"},
		{"url relative", `{"url":"/x"}`, builtin.Options{}, "url"},
		{"url unparsable", `{"url":"http://[::1"}`, builtin.Options{}, "url"},
		{"method", `{"url":"` + srv.URL + `","method":"PO ST"}`, builtin.Options{}, "method"},
		{"header name", `{"url":"` + srv.URL + `","headers":{"Bad Name":"x"}}`, builtin.Options{}, "headers"},
		{"header value", `{"url":"` + srv.URL + `","headers":{"X-A":"a\r\nX-B: b"}}`, builtin.Options{}, "headers.X-A"},
		{"header value type", `{"url":"` + srv.URL + `","headers":{"X-A":1}}`, builtin.Options{}, "headers"},
		{"headers type", `{"url":"` + srv.URL + `","headers":["X-A"]}`, builtin.Options{}, "headers"},
		{"malformed", `{"url":`, builtin.Options{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := tt.opts
			opts.AllowedHosts = []string{srv.host()}
			err := builtin.HTTP(opts).Process(context.Background(), job(json.RawMessage(tt.payload)))
			var pe *builtin.PayloadError
			if !errors.As(err, &pe) {
				t.Fatalf("%v, want a *PayloadError", err)
			}
			if pe.Field != tt.field || pe.Type != "http" {
				t.Fatalf("%v names field %q, want %q", err, pe.Field, tt.field)
			}
			if o, _ := processor.Classify(err); o != processor.OutcomeFailed {
				t.Fatalf("outcome %v, want failed", o)
			}
			srv.noRequest(t)
		})
	}

	err := builtin.HTTP(builtin.Options{DefaultURL: "ftp://example.test"}).Process(context.Background(), job(json.RawMessage(`{}`)))
	if o, _ := processor.Classify(err); o != processor.OutcomeFailed || !strings.Contains(err.Error(), "DefaultURL") {
		t.Fatalf("invalid DefaultURL: %v (%v), want a permanent error naming DefaultURL", o, err)
	}
}

func TestHTTPTraceContext(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
		SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
		TraceFlags: trace.FlagsSampled,
	})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	if err := builtin.HTTP(srv.allow()).Process(ctx, job(payload(t, map[string]any{"url": srv.URL}))); err != nil {
		t.Fatal(err)
	}
	if got, want := srv.next(t).Header.Get("Traceparent"), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; got != want {
		t.Fatalf("traceparent = %q, want %q", got, want)
	}
}
