package builtin

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// Outbound holds the "http" processor's outbound rules (Options.AllowedHosts and
// Options.AllowAnyHost, the addresses a host may resolve to, the redirect policy) for other
// senders of requests to URLs that users give, such as completion callbacks, so that they go
// where an "http" job may go and nowhere else. Create it with [NewOutbound]. The zero value
// refuses every URL.
type Outbound struct {
	hosts hostList
}

// NewOutbound returns the outbound rules of opts (only AllowedHosts and AllowAnyHost count). An
// invalid entry of AllowedHosts is an error naming it.
func NewOutbound(opts Options) (*Outbound, error) {
	l := parseHostList(Options{AllowedHosts: opts.AllowedHosts, AllowAnyHost: opts.AllowAnyHost})
	if l.err != nil {
		return nil, l.err
	}
	return &Outbound{hosts: l}, nil
}

// CheckURL returns an error when a request to u would be refused before it is sent: a scheme
// other than http or https, no host, user information, a host that AllowedHosts does not list
// (a [*HostError]), or a host that is an IP address in a restricted range (loopback, private,
// link-local, ...) that no IP or range entry holds (a [*HostError] naming the address), as is
// "localhost" (and names under it, which resolve to loopback addresses). A host name is not
// resolved here: the address it resolves to is checked when [Outbound.Client]
// connects.
func (o *Outbound) CheckURL(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme %q: must be http or https", u.Scheme)
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("missing host")
	}
	if u.User != nil {
		return fmt.Errorf("must not carry user information")
	}
	if err := o.hosts.check(u); err != nil {
		return err
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
		return o.hosts.checkAddr(u.Host, ip, effectivePort(u))
	}
	if h := strings.TrimSuffix(asciiLower(u.Hostname()), "."); h == "localhost" || strings.HasSuffix(h, ".localhost") {
		// RFC 6761: such names resolve to a loopback address
		return o.hosts.checkAddr(u.Host, netip.MustParseAddr("127.0.0.1"), effectivePort(u))
	}
	return nil
}

// Client returns an HTTP client that follows the rules: every address it dials, for the URL and
// for each redirect, is checked after DNS resolution; it follows redirects only to the request's
// scheme, host and port, at most 5 times; no proxy. timeout bounds each request (0 =
// [DefaultHTTPTimeout]).
func (o *Outbound) Client(timeout time.Duration) *http.Client {
	if timeout <= 0 {
		timeout = DefaultHTTPTimeout
	}
	return &http.Client{Transport: o.hosts.transport(), CheckRedirect: checkRedirect(nil), Timeout: timeout}
}
