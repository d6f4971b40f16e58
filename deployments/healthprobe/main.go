// Command healthprobe is the container healthcheck of the bulkaction image. The image is
// distroless (no shell, no curl), so Docker's HEALTHCHECK and compose healthchecks run this
// instead: it GETs /healthz on the address of BULKACTION_HTTP_ADDR (default :8080) and exits 0
// on 200, 1 otherwise. An argument names another path, e.g. /readyz.
//
// It is a module of its own with no dependencies, built by the Dockerfile next to the binary.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// timeout bounds the whole probe; Docker's own timeout is 3 s in the image.
const timeout = 2 * time.Second

func main() {
	path := "/healthz"
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	if err := probe(os.Getenv("BULKACTION_HTTP_ADDR"), path); err != nil {
		fmt.Fprintln(os.Stderr, "healthprobe:", err)
		os.Exit(1)
	}
}

// probe GETs path on the listen address addr ("" = ":8080"; a missing or wildcard host means
// the loopback address) and returns nil on 200.
func probe(addr, path string) error {
	url, err := probeURL(addr, path)
	if err != nil {
		return err
	}
	c := &http.Client{Timeout: timeout}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}

// probeURL turns a listen address into the URL to probe.
func probeURL(addr, path string) (string, error) {
	if addr == "" {
		addr = ":8080"
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("BULKACTION_HTTP_ADDR=%q: %w", addr, err)
	}
	switch host {
	case "", "0.0.0.0", "::":
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + path, nil
}
