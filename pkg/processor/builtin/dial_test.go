package builtin_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/processor"
	"github.com/bulkaction/bulkaction/pkg/processor/builtin"
)

// localhostURL is srv's URL with the host name "localhost" instead of its address: a listed name
// that resolves to a loopback address, as a wildcard's subdomain someone else controls or a
// re-pointed (rebound) name would.
func localhostURL(srv *testServer) string {
	return strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
}

// wantAddressError checks that err is a permanent *HostError refusing the resolved address of a
// kind, and that its message names the address, its kind and the setting to change.
func wantAddressError(t *testing.T, err error, kind string) *builtin.HostError {
	t.Helper()
	var he *builtin.HostError
	if !errors.As(err, &he) {
		t.Fatalf("%v (%T), want a *HostError", err, err)
	}
	if he.Address == "" || he.AddressKind != kind {
		t.Fatalf("%+v (%v), want a refused %s address", he, err, kind)
	}
	if o, _ := processor.Classify(err); o != processor.OutcomeFailed {
		t.Fatalf("outcome %v (%v), want failed (permanent)", o, err)
	}
	for _, m := range []string{he.Address, kind, allowedHostsSetting} {
		if !strings.Contains(err.Error(), m) {
			t.Fatalf("error %q does not mention %q", err, m)
		}
	}
	return he
}

// TestHTTPResolvedAddressChecked: a listed name that resolves to a loopback address is refused
// when it is dialled, before any request is sent, unless the address or a range holding it is
// listed too (with the right port when the entry has one).
func TestHTTPResolvedAddressChecked(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	u := localhostURL(srv) + "/x"
	for _, entries := range [][]string{{"localhost"}, {"*.test", "localhost"}, {"localhost", "127.0.0.1:1"}, {"localhost", "10.0.0.0/8"}} {
		err := builtin.HTTP(builtin.Options{AllowedHosts: entries}).Process(context.Background(), urlJob(t, u))
		he := wantAddressError(t, err, "loopback")
		if !strings.HasPrefix(he.Host, "localhost:") {
			t.Fatalf("HostError.Host = %q, want the dialled name", he.Host)
		}
		srv.noRequest(t)
	}
	_, port, _ := strings.Cut(srv.host(), ":")
	for _, entries := range [][]string{
		{"localhost", "127.0.0.1", "::1"}, {"localhost", "127.0.0.0/8", "::1/128"}, {"localhost", srv.host(), "[::1]:" + port},
		{"localhost", "127.0.0.0/8:" + port, "[::1/128]:" + port},
	} {
		if err := builtin.HTTP(builtin.Options{AllowedHosts: entries}).Process(context.Background(), urlJob(t, u)); err != nil {
			t.Fatalf("%v: %v", entries, err)
		}
		srv.next(t)
	}
	// A range entry allows URLs whose host is an address in it, as an address entry does.
	if err := builtin.HTTP(builtin.Options{AllowedHosts: []string{"127.0.0.0/8"}}).Process(context.Background(), urlJob(t, srv.URL)); err != nil {
		t.Fatal(err)
	}
	srv.next(t)
}

// TestHTTPMetadataAddressRefused: the cloud metadata address is refused unless listed, even with
// AllowAnyHost (which lets `bulkaction dev` call loopback and private addresses); no connection is
// attempted.
func TestHTTPMetadataAddressRefused(t *testing.T) {
	t.Parallel()
	const u = "http://169.254.169.254/latest/meta-data/"
	for _, opts := range []builtin.Options{{AllowAnyHost: true}, {AllowAnyHost: true, AllowedHosts: []string{"10.0.0.0/8"}}} {
		wantAddressError(t, builtin.HTTP(opts).Process(context.Background(), urlJob(t, u)), "link-local (cloud metadata)")
	}
	// A range entry with a port allows that port only.
	err := builtin.HTTP(builtin.Options{AllowedHosts: []string{"169.254.0.0/16:81"}}).Process(context.Background(), urlJob(t, u))
	wantHostError(t, err, "169.254.169.254", allowedHostsSetting)
}

// TestHTTPCredentialHeadersRefused: a payload cannot set Cookie or any Proxy-* header: the job
// fails permanently with a *PayloadError naming the header, and no request is sent.
func TestHTTPCredentialHeadersRefused(t *testing.T) {
	t.Parallel()
	srv := newTestServer(t)
	for name, canonical := range map[string]string{
		"Cookie": "Cookie", "cookie": "Cookie", "Proxy-Authorization": "Proxy-Authorization",
		"proxy-authorization": "Proxy-Authorization", "Proxy-Foo": "Proxy-Foo", "Host": "Host",
	} {
		pl := payload(t, map[string]any{"url": srv.URL, "headers": map[string]string{name: "x"}})
		err := builtin.HTTP(srv.allow()).Process(context.Background(), job(pl))
		var pe *builtin.PayloadError
		if !errors.As(err, &pe) || pe.Field != "headers."+name || !strings.Contains(err.Error(), canonical) {
			t.Fatalf("header %s: %v, want a *PayloadError naming it", name, err)
		}
		if o, _ := processor.Classify(err); o != processor.OutcomeFailed {
			t.Fatalf("header %s: outcome %v, want failed (permanent)", name, o)
		}
		srv.noRequest(t)
	}
	// Other credentials are the endpoint's own business.
	pl := payload(t, map[string]any{"url": srv.URL, "headers": map[string]string{"Authorization": "Bearer x"}})
	if err := builtin.HTTP(srv.allow()).Process(context.Background(), job(pl)); err != nil {
		t.Fatal(err)
	}
	srv.next(t)
}
