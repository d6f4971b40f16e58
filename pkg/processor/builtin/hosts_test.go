package builtin_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
)

// namedClient returns a client that dials each host name in routes to the address of its server,
// whatever the URL's port, so that tests can call real servers by made-up names
// ("api.example.test"). Other hosts (IP addresses) are dialled as they are.
func namedClient(t *testing.T, routes map[string]*testServer) *http.Client {
	t.Helper()
	var d net.Dialer
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if s, ok := routes[strings.ToLower(host)]; ok {
			addr = s.Listener.Addr().String()
		}
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// wantHostError checks that err is a permanent *HostError naming host, whose message names
// every string in mention.
func wantHostError(t *testing.T, err error, host string, mention ...string) *builtin.HostError {
	t.Helper()
	var he *builtin.HostError
	if !errors.As(err, &he) {
		t.Fatalf("%v (%T), want a *HostError", err, err)
	}
	if he.Host != host {
		t.Fatalf("HostError.Host = %q, want %q (%v)", he.Host, host, err)
	}
	if o, _ := processor.Classify(err); o != processor.OutcomeFailed {
		t.Fatalf("outcome %v (%v), want failed (permanent)", o, err)
	}
	for _, m := range append([]string{host}, mention...) {
		if !strings.Contains(err.Error(), m) {
			t.Fatalf("error %q does not mention %q", err, m)
		}
	}
	return he
}

// allowedHostsSetting is what errors about the allow-list must name.
const allowedHostsSetting = "BULKACTION_HTTP_ALLOWED_HOSTS"

func urlJob(t *testing.T, u string) *processor.Job {
	return job(payload(t, map[string]any{"url": u}))
}

// TestHTTPAllowedHost: a listed host is called, by name (case-insensitively) or by IP address,
// with or without a port in the entry; a port in the entry restricts the port.
func TestHTTPAllowedHost(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	client := namedClient(t, map[string]*testServer{"api.example.test": srv})
	for _, tt := range []struct {
		name, entry, url string
	}{
		{"ip and port", srv.host(), srv.URL + "/x"},
		{"ip without port", "127.0.0.1", srv.URL + "/x"},
		{"name", "api.example.test", "http://api.example.test/x"},
		{"name, other case", "API.Example.test", "http://api.EXAMPLE.test:8080/x"},
		{"name with the default port", "api.example.test:80", "http://api.example.test/x"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := builtin.HTTP(builtin.Options{HTTPClient: client, AllowedHosts: []string{"other.test", tt.entry}})
			if err := p.Process(context.Background(), urlJob(t, tt.url)); err != nil {
				t.Fatal(err)
			}
			if r := srv.next(t); r.Path != "/x" {
				t.Fatalf("path %q", r.Path)
			}
		})
	}
	// The entry's port is the only one allowed.
	p := builtin.HTTP(builtin.Options{HTTPClient: client, AllowedHosts: []string{"api.example.test:80"}})
	wantHostError(t, p.Process(context.Background(), urlJob(t, "http://api.example.test:8080/x")), "api.example.test:8080")
	srv.noRequest(t)
}

// TestHTTPUnlistedHostRefused: a host that is not listed is refused before any request is made:
// the second server never sees one.
func TestHTTPUnlistedHostRefused(t *testing.T) {
	t.Parallel()
	allowed, other := newTestServer(t), newTestServer(t)
	client := namedClient(t, map[string]*testServer{"allowed.example.test": allowed, "other.example.test": other})
	p := builtin.HTTP(builtin.Options{HTTPClient: client, AllowedHosts: []string{"allowed.example.test", allowed.host()}})

	for _, tt := range []struct{ url, host string }{
		{"http://other.example.test/x", "other.example.test"},
		{"http://OTHER.example.test:9000/x", "OTHER.example.test:9000"},
		{"http://allowed.example.test.other.example.test/x", "allowed.example.test.other.example.test"},
		{other.URL + "/x", other.host()}, // same IP address, another port
		{"http://allowed.example.test@other.example.test/x", "other.example.test"},
	} {
		err := p.Process(context.Background(), urlJob(t, tt.url))
		he := wantHostError(t, err, tt.host, allowedHostsSetting)
		if he.RedirectFrom != "" || he.EmptyList {
			t.Fatalf("%+v, want a refused URL of a non-empty list", he)
		}
	}
	other.noRequest(t)
	allowed.noRequest(t)

	if err := p.Process(context.Background(), urlJob(t, "http://allowed.example.test/ok")); err != nil {
		t.Fatalf("listed host: %v", err)
	}
	allowed.next(t)
}

// TestHTTPWildcardHosts: "*.domain" allows every subdomain at any depth, and nothing else: not the
// domain itself, not look-alikes, and never an IP address.
func TestHTTPWildcardHosts(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	names := []string{
		"a.example.test", "a.b.example.test", "example.test", "badexample.test", "a.example.test.evil.test",
		"a.ports.test", "example.test.", "a.example.test.",
	}
	routes := map[string]*testServer{}
	for _, n := range names {
		routes[n] = srv
	}
	p := builtin.HTTP(builtin.Options{
		HTTPClient:   namedClient(t, routes),
		AllowedHosts: []string{"*.example.test", "*.ports.test:8443", "*.0.0.1"},
	})
	for _, tt := range []struct {
		url  string
		want bool
	}{
		{"http://a.example.test/", true},
		{"http://a.b.example.test/", true},
		{"http://A.Example.TEST:8080/", true},
		{"http://a.ports.test:8443/", true},
		{"http://example.test/", false},
		{"http://badexample.test/", false},
		{"http://a.example.test.evil.test/", false},
		{"http://a.example.test./", false}, // a trailing dot counts
		{"http://a.ports.test/", false},    // port 80, the entry says 8443
		{srv.URL + "/", false},             // 127.0.0.1: a wildcard never matches an IP address
	} {
		err := p.Process(context.Background(), urlJob(t, tt.url))
		if tt.want {
			if err != nil {
				t.Fatalf("%s: %v, want allowed", tt.url, err)
			}
			srv.next(t)
			continue
		}
		var he *builtin.HostError
		if !errors.As(err, &he) {
			t.Fatalf("%s: %v, want a *HostError", tt.url, err)
		}
		srv.noRequest(t)
	}
}

// TestHTTPEmptyAllowListRefuses: no list (or only blank entries) refuses every URL, the DefaultURL's
// too, and a DefaultURL's host is not allowed implicitly.
func TestHTTPEmptyAllowListRefuses(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	for _, opts := range []builtin.Options{
		{DefaultURL: srv.URL + "/default"},
		{DefaultURL: srv.URL + "/default", AllowedHosts: []string{"", "  "}},
	} {
		for _, pl := range []string{`{}`, `{"url":"` + srv.URL + `/x"}`} {
			he := wantHostError(t, builtin.HTTP(opts).Process(context.Background(), job([]byte(pl))), srv.host(),
				allowedHostsSetting, "empty")
			if !he.EmptyList {
				t.Fatalf("%+v: EmptyList false", he)
			}
		}
	}
	opts := builtin.Options{DefaultURL: srv.URL + "/default", AllowedHosts: []string{"other.test"}}
	wantHostError(t, builtin.HTTP(opts).Process(context.Background(), job([]byte(`{}`))), srv.host())
	if err := opts.Validate(); err == nil || !strings.Contains(err.Error(), "DefaultURL") {
		t.Fatalf("Validate() = %v, want an error about DefaultURL's host", err)
	}
	srv.noRequest(t)
}

// TestHTTPAllowAnyHost: AllowAnyHost lifts the allow-list, but not the redirect rule.
func TestHTTPAllowAnyHost(t *testing.T) {
	t.Parallel()
	srv, other := newTestServer(t), newTestServer(t)
	for _, opts := range []builtin.Options{{AllowAnyHost: true}, {AllowAnyHost: true, AllowedHosts: []string{"other.test"}}} {
		if err := builtin.HTTP(opts).Process(context.Background(), urlJob(t, srv.URL+"/x")); err != nil {
			t.Fatalf("%+v: %v", opts, err)
		}
		srv.next(t)
	}
	err := builtin.HTTP(builtin.Options{AllowAnyHost: true}).Process(context.Background(), urlJob(t, srv.URL+"/x?redirect="+other.URL+"/y"))
	wantHostError(t, err, other.host(), "redirect")
	srv.next(t)
	other.noRequest(t)
}

// TestHTTPRedirects: a redirect is followed only to the same scheme, host and port, and at most 5
// times; a redirect elsewhere, even to another allowed host, fails the job permanently and is not
// followed.
func TestHTTPRedirects(t *testing.T) {
	t.Parallel()
	a, b := newTestServer(t), newTestServer(t)
	client := namedClient(t, map[string]*testServer{"a.example.test": a, "b.example.test": b})
	p := builtin.HTTP(builtin.Options{HTTPClient: client, AllowedHosts: []string{"*.example.test", a.host(), b.host()}})
	ctx := context.Background()

	t.Run("same host", func(t *testing.T) {
		if err := p.Process(ctx, urlJob(t, "http://a.example.test/start?redirect=/final")); err != nil {
			t.Fatal(err)
		}
		if r := a.next(t); r.Path != "/start" {
			t.Fatalf("first request %s", r.Path)
		}
		if r := a.next(t); r.Path != "/final" || r.Header.Get(builtin.HeaderJob) != "job_7" {
			t.Fatalf("redirected request %s %v", r.Path, r.Header)
		}
	})
	for _, tt := range []struct{ name, location, host string }{
		{"other host", "http://b.example.test/x", "b.example.test"},
		{"other port", "http://a.example.test:8080/x", "a.example.test:8080"},
		{"other scheme", "https://a.example.test/x", "a.example.test"},
		{"other server by address", b.URL + "/x", b.host()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := p.Process(ctx, urlJob(t, "http://a.example.test/start?redirect="+tt.location))
			he := wantHostError(t, err, tt.host, "redirect")
			if !strings.HasPrefix(he.RedirectFrom, "http://a.example.test/start") {
				t.Fatalf("RedirectFrom = %q", he.RedirectFrom)
			}
			a.next(t)
			a.noRequest(t)
			b.noRequest(t)
		})
	}
	t.Run("too many", func(t *testing.T) {
		err := p.Process(ctx, urlJob(t, "http://a.example.test/loop?loop=1"))
		if o, _ := processor.Classify(err); o != processor.OutcomeFailed || !strings.Contains(err.Error(), "redirects") {
			t.Fatalf("%v (%v), want a permanent failure about redirects", o, err)
		}
		for range 6 { // the request and 5 redirects
			a.next(t)
		}
		a.noRequest(t)
	})
	t.Run("the caller's client is not modified and is asked after", func(t *testing.T) {
		asked := 0
		own := &http.Client{Transport: client.Transport, CheckRedirect: func(*http.Request, []*http.Request) error {
			asked++
			return http.ErrUseLastResponse
		}}
		plain := &http.Client{Transport: client.Transport}
		builtin.HTTP(builtin.Options{HTTPClient: plain})
		check := reflect.ValueOf(own.CheckRedirect).Pointer()
		p := builtin.HTTP(builtin.Options{HTTPClient: own, AllowedHosts: []string{"a.example.test"}})
		if plain.CheckRedirect != nil || reflect.ValueOf(own.CheckRedirect).Pointer() != check || asked != 0 {
			t.Fatal("HTTP changed the caller's client")
		}
		err := p.Process(ctx, urlJob(t, "http://a.example.test/start?redirect=/final"))
		var se *builtin.HTTPStatusError
		if !errors.As(err, &se) || se.StatusCode != http.StatusFound || asked != 1 {
			t.Fatalf("%v, asked %d times; want the unfollowed 302 after asking once", err, asked)
		}
		a.next(t)
		err = p.Process(ctx, urlJob(t, "http://a.example.test/start?redirect=http://b.example.test/"))
		wantHostError(t, err, "b.example.test")
		if asked != 1 {
			t.Fatalf("the caller's CheckRedirect was asked about a refused redirect")
		}
		a.next(t)
		b.noRequest(t)
	})
}

// TestHTTPProtectedHeaders: a payload cannot set Host, the headers the processor sets itself, or
// the framing and hop-by-hop headers, in any case; the job fails before any request.
func TestHTTPProtectedHeaders(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	p := builtin.HTTP(srv.allow())
	for _, name := range []string{
		"Host", "host", "HOST", "Content-Length", "transfer-encoding", "Connection", "Upgrade", "TE",
		"Idempotency-Key", "x-bulkaction-job", "X-Bulkaction-Group", "X-Bulkaction-Attempt", "X-Bulkaction-Tenant",
	} {
		t.Run(name, func(t *testing.T) {
			pl := payload(t, map[string]any{"url": srv.URL, "headers": map[string]string{"X-Fine": "1", name: "evil.test"}})
			err := p.Process(context.Background(), job(pl))
			var pe *builtin.PayloadError
			if !errors.As(err, &pe) || pe.Field != "headers."+name {
				t.Fatalf("%v, want a *PayloadError on headers.%s", err, name)
			}
			if !strings.Contains(err.Error(), http.CanonicalHeaderKey(name)) {
				t.Fatalf("%q does not name the header", err)
			}
			if o, _ := processor.Classify(err); o != processor.OutcomeFailed {
				t.Fatalf("outcome %v, want failed", o)
			}
			srv.noRequest(t)
		})
	}
}

// TestOptionsValidateAllowedHosts: the entry syntax; an invalid entry is reported by Validate and
// fails every "http" job permanently, without a request.
func TestOptionsValidateAllowedHosts(t *testing.T) {
	t.Parallel()
	for _, entry := range []string{
		"api.example.com", "API.example.com", "*.example.com", "api.example.com:8443", "*.example.com:443",
		"10.0.0.7", "10.0.0.7:80", "::1", "[::1]", "[::1]:8080", " a.test ", "", "xn--bcher-kva.example",
		"under_score.test", "trailing.dot.",
	} {
		if err := (builtin.Options{AllowedHosts: []string{entry}}).Validate(); err != nil {
			t.Errorf("Validate(%q) = %v, want ok", entry, err)
		}
	}
	srv := newTestServer(t)
	for _, entry := range []string{
		"http://a.test", "a.test/x", "user@a.test", "*", "*.", "a.*.test", "foo*.test", "*.*.test",
		"a.test:0", "a.test:70000", "a.test:x", "a.test:", "a.test:080", "[10.0.0.7]", "[::1", "[::1]x",
		"a..test", ".a.test", "*.10.0.0.7", "bücher.example", "a test",
	} {
		opts := builtin.Options{AllowedHosts: []string{srv.host(), entry}}
		err := opts.Validate()
		if err == nil || !strings.Contains(err.Error(), allowedHostsSetting) || !strings.Contains(err.Error(), entry) {
			t.Errorf("Validate(%q) = %v, want an error naming the entry and %s", entry, err, allowedHostsSetting)
			continue
		}
		err = builtin.HTTP(opts).Process(context.Background(), urlJob(t, srv.URL))
		if o, _ := processor.Classify(err); o != processor.OutcomeFailed || !strings.Contains(err.Error(), entry) {
			t.Errorf("invalid entry %q: job outcome %v (%v), want a permanent failure naming it", entry, o, err)
		}
		srv.noRequest(t)
	}
}
