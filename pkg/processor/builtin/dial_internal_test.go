package builtin

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/bulkaction/bulkaction/pkg/processor"
)

func TestAddressKind(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]string{
		"127.0.0.1": "loopback", "127.8.9.10": "loopback", "::1": "loopback", "::ffff:127.0.0.1": "loopback",
		"169.254.169.254": "link-local (cloud metadata)", "169.254.1.1": "link-local", "fe80::1": "link-local",
		"10.1.2.3": "private", "172.16.0.1": "private", "172.31.255.255": "private", "192.168.1.1": "private",
		"fd00::1": "private", "fc00::1": "private", "::ffff:10.0.0.1": "private",
		"100.64.0.1": "shared (CGNAT)", "100.127.255.254": "shared (CGNAT)",
		"0.0.0.0": "unspecified", "0.1.2.3": "unspecified", "::": "unspecified",
		"224.0.0.1": "multicast or broadcast", "ff02::1": "multicast or broadcast", "255.255.255.255": "multicast or broadcast",
		"64:ff9b::a9fe:a9fe": "link-local (cloud metadata)", "64:ff9b::7f00:1": "loopback",
		"8.8.8.8": "", "172.32.0.1": "", "100.128.0.1": "", "2001:4860:4860::8888": "", "64:ff9b::808:808": "",
	} {
		if got := addressKind(netip.MustParseAddr(addr)); got != want {
			t.Errorf("addressKind(%s) = %q, want %q", addr, got, want)
		}
	}
}

// TestHTTPRedirectRebindingRefused: each connection is checked at dial time, a redirect's too: a
// name that resolves to a listed address for the first request and to another loopback address for
// the redirect's (a DNS rebinding) fails the job at the redirect, which is never sent.
func TestHTTPRedirectRebindingRefused(t *testing.T) {
	t.Parallel()
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.Path)
		w.Header().Set("Connection", "close") // the redirect needs a new connection
		http.Redirect(w, r, "/second", http.StatusFound)
	}))
	defer srv.Close()
	_, port, _ := strings.Cut(strings.TrimPrefix(srv.URL, "http://"), ":")

	h := HTTP(Options{AllowedHosts: []string{"rebind.test", "127.0.0.1"}}).(*httpProcessor)
	var dials atomic.Int32
	h.client.Transport = h.hosts.transportVia(func(addr string) string {
		if dials.Add(1) == 1 {
			return "127.0.0.1:" + port
		}
		return "127.0.0.2:" + port
	})
	err := h.Process(context.Background(), &processor.Job{Tenant: "t", GroupID: "g", JobID: "j", Attempt: 1,
		Payload: []byte(`{"url":"http://rebind.test:` + port + `/first","method":"GET"}`)})
	var he *HostError
	if !errors.As(err, &he) || he.Address != "127.0.0.2:"+port || he.AddressKind != "loopback" || he.Host != "rebind.test:"+port {
		t.Fatalf("%v, want a *HostError refusing 127.0.0.2:%s", err, port)
	}
	if o, _ := processor.Classify(err); o != processor.OutcomeFailed {
		t.Fatalf("outcome %v, want failed", o)
	}
	if len(paths) != 1 || paths[0] != "/first" {
		t.Fatalf("server saw %v, want only /first", paths)
	}
}
