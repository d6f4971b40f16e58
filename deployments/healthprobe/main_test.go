package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestProbeURL(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"", "http://127.0.0.1:8080/healthz"},
		{":9000", "http://127.0.0.1:9000/healthz"},
		{"0.0.0.0:9000", "http://127.0.0.1:9000/healthz"},
		{"[::]:9000", "http://127.0.0.1:9000/healthz"},
		{"10.1.2.3:8080", "http://10.1.2.3:8080/healthz"},
	} {
		got, err := probeURL(tc.addr, "/healthz")
		if err != nil || got != tc.want {
			t.Errorf("probeURL(%q) = %q, %v; want %q", tc.addr, got, err, tc.want)
		}
	}
	if _, err := probeURL("8080", "/healthz"); err == nil {
		t.Error("probeURL(\"8080\") accepted an address without a port separator")
	}
}

func TestProbe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	if err := probe(":"+port, "/healthz"); err != nil {
		t.Fatalf("healthy server: %v", err)
	}
	if err := probe(":"+port, "/readyz"); err == nil {
		t.Fatal("503 was taken for healthy")
	}
	srv.Close()
	if err := probe(":"+port, "/healthz"); err == nil {
		t.Fatal("a closed port was taken for healthy")
	}
}
