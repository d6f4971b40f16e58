package builtin

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// allowedHostsSetting is the setting of the stock worker that fills Options.AllowedHosts; errors
// about the allow-list name it, so that an operator knows what to change.
const allowedHostsSetting = "BULKACTION_HTTP_ALLOWED_HOSTS"

// maxRedirects is how many redirects one "http" job follows at most.
const maxRedirects = 5

// HostError reports a request the "http" processor refused because of where it would go: a URL
// whose host is not in [Options.AllowedHosts], a redirect to another scheme, host or port than
// the request's, or a host that resolved to a restricted address (loopback, link-local, private,
// ...; see [HTTP]) that the list does not name. No request is sent to Host. The processor returns it marked
// [processor.Permanent]. Find it with errors.As.
//
// The zero value describes a refused URL with an empty host.
type HostError struct {
	// Host is the refused URL's host, with its port when the URL has one ("api.example.com",
	// "10.0.0.7:8080").
	Host string
	// RedirectFrom is the URL (password redacted) whose response redirected to Host; empty when
	// Host is the job's own URL.
	RedirectFrom string
	// EmptyList reports that the allow-list is empty, so that every host is refused.
	EmptyList bool
	// Address is the refused address Host resolved to when it was dialled ("127.0.0.1:8080",
	// "[fe80::1]:80"); empty when the host itself was refused.
	Address string
	// AddressKind names Address's range: "loopback", "link-local", "link-local (cloud metadata)",
	// "private", "shared (CGNAT)", "unspecified" or "multicast or broadcast".
	AddressKind string
}

// Error returns `builtin: http: host "<Host>" is not in BULKACTION_HTTP_ALLOWED_HOSTS …`, for a
// redirect `builtin: http: redirect from <RedirectFrom> to host "<Host>" refused: …`, and for a
// restricted address `builtin: http: host "<Host>" resolved to <Address>, a <AddressKind> address, …`.
func (e *HostError) Error() string {
	if e.Address != "" {
		return fmt.Sprintf("builtin: http: host %q resolved to %s, a %s address, which %s does not list: add the address or its range (CIDR) to allow it",
			e.Host, e.Address, e.AddressKind, allowedHostsSetting)
	}
	if e.RedirectFrom != "" {
		return fmt.Sprintf("builtin: http: redirect from %s to host %q refused: the http processor follows redirects only to the same scheme, host and port", e.RedirectFrom, e.Host)
	}
	msg := fmt.Sprintf("builtin: http: host %q is not in %s (Options.AllowedHosts)", e.Host, allowedHostsSetting)
	if e.EmptyList {
		msg += ", which is empty: every host is refused"
	}
	return msg
}

// errTooManyRedirects ends a chain of more than maxRedirects redirects.
var errTooManyRedirects = fmt.Errorf("stopped after %d redirects", maxRedirects)

// hostPattern is one parsed entry of Options.AllowedHosts.
type hostPattern struct {
	name     string       // lower-case host name; for a wildcard the suffix with its dot (".example.com")
	wildcard bool         // "*.example.com": any subdomain of example.com, not example.com itself
	ip       netip.Addr   // valid when the entry is an IP literal
	prefix   netip.Prefix // valid when the entry is a range ("10.0.0.0/8", "fd00::/8")
	port     string       // "" = any port
}

// hostList is a parsed Options.AllowedHosts.
type hostList struct {
	any      bool // Options.AllowAnyHost
	patterns []hostPattern
	err      error // the first invalid entry
}

func parseHostList(opts Options) hostList {
	l := hostList{any: opts.AllowAnyHost}
	for _, entry := range opts.AllowedHosts {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue // "a.example.com,,b.example.com" or a trailing comma
		}
		p, err := parseHostPattern(entry)
		if err != nil {
			if l.err == nil {
				l.err = fmt.Errorf("builtin: Options.AllowedHosts (%s): entry %q: %w", allowedHostsSetting, entry, err)
			}
			continue
		}
		l.patterns = append(l.patterns, p)
	}
	return l
}

// parseHostPattern parses "host", "host:port", "*.domain", "*.domain:port", an IPv4 literal with an
// optional port, an IPv6 literal ("::1", "[::1]" or "[::1]:8080"), or an address range in CIDR
// notation ("10.0.0.0/8", "10.0.0.0/8:8080", "fd00::/8", "[fd00::/8]:8080").
func parseHostPattern(entry string) (hostPattern, error) {
	if strings.Contains(entry, "@") || strings.Contains(entry, "://") {
		return hostPattern{}, errors.New("must be a host name with an optional port, not a URL")
	}
	host, port, hasPort, bracketed := entry, "", false, false
	switch colons := strings.Count(entry, ":"); {
	case strings.HasPrefix(entry, "["):
		end := strings.IndexByte(entry, ']')
		if end < 0 {
			return hostPattern{}, errors.New("missing ']'")
		}
		host, bracketed = entry[1:end], true
		if rest := entry[end+1:]; rest != "" {
			if port, hasPort = strings.CutPrefix(rest, ":"); !hasPort {
				return hostPattern{}, fmt.Errorf("unexpected %q after ']'", rest)
			}
		}
	case colons == 1:
		host, port, hasPort = strings.Cut(entry, ":")
	}
	// More than one colon without brackets: a bare IPv6 literal, which has no port.
	var p hostPattern
	if hasPort {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return hostPattern{}, fmt.Errorf("port %q: must be a number from 1 to 65535", port)
		}
		p.port = port
	}
	if strings.Contains(host, "/") {
		prefix, err := netip.ParsePrefix(host)
		if err != nil {
			return hostPattern{}, errors.New("must be a host name with an optional port, not a URL, or an address range such as 10.0.0.0/8")
		}
		if bracketed && !prefix.Addr().Is6() {
			return hostPattern{}, errors.New("only an IPv6 range takes brackets")
		}
		p.prefix = prefix.Masked()
		return p, nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if bracketed && !ip.Is6() {
			return hostPattern{}, errors.New("only an IPv6 address takes brackets")
		}
		p.ip = ip
		return p, nil
	}
	if bracketed {
		return hostPattern{}, fmt.Errorf("%q is not an IPv6 address", host)
	}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		p.wildcard = true
		host = rest
		if _, err := netip.ParseAddr(host); err == nil {
			return hostPattern{}, errors.New("a wildcard cannot match IP addresses: list each address")
		}
	}
	if err := checkHostName(host); err != nil {
		return hostPattern{}, err
	}
	p.name = asciiLower(host)
	if p.wildcard {
		p.name = "." + p.name
	}
	return p, nil
}

// checkHostName accepts ASCII host names: letters, digits, '-', '_' and dots between non-empty
// labels, with an optional trailing dot. A '*' is only allowed as the whole first label, which
// the caller has removed.
func checkHostName(h string) error {
	if h == "" {
		return errors.New("missing host name")
	}
	labels := strings.Split(strings.TrimSuffix(h, "."), ".")
	for _, label := range labels {
		if label == "" {
			return fmt.Errorf("%q: empty label", h)
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			switch {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
			case c == '*':
				return fmt.Errorf("%q: a wildcard is only allowed as a leading \"*.\"", h)
			default:
				return fmt.Errorf("%q: invalid character %q (write international names in their xn-- form)", h, c)
			}
		}
	}
	return nil
}

// check returns a *HostError when u's host is not allowed.
func (l hostList) check(u *url.URL) error {
	if l.any {
		return nil
	}
	hostname, port := u.Hostname(), effectivePort(u)
	ip, ipErr := netip.ParseAddr(hostname)
	name := asciiLower(hostname)
	for _, p := range l.patterns {
		if p.port != "" && p.port != port {
			continue
		}
		switch {
		case ipErr == nil:
			// An IP literal matches only the same address listed literally.
			if (p.ip.IsValid() && p.ip == ip) || (p.prefix.IsValid() && p.prefix.Contains(ip)) {
				return nil
			}
		case p.ip.IsValid(), p.prefix.IsValid():
		case p.wildcard:
			if len(name) > len(p.name) && strings.HasSuffix(name, p.name) {
				return nil
			}
		case name == p.name:
			return nil
		}
	}
	return &HostError{Host: u.Host, EmptyList: len(l.patterns) == 0}
}

// effectivePort is u's port, or the default port of its scheme.
func effectivePort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "https":
		return "443"
	case "http":
		return "80"
	}
	return ""
}

// asciiLower lower-cases ASCII letters only: a non-ASCII host name never matches an ASCII
// pattern through Unicode case folding.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + ('a' - 'A')
		}
	}
	return string(b)
}

// sameOrigin reports whether a and b have the same scheme, host (case-insensitive) and port
// (default ports included).
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && asciiLower(a.Hostname()) == asciiLower(b.Hostname()) &&
		effectivePort(a) == effectivePort(b)
}

// checkRedirect is the client's CheckRedirect: it follows a redirect only to the scheme, host and
// port of the job's request, at most maxRedirects times, and then asks next (the CheckRedirect of
// Options.HTTPClient), if any.
func checkRedirect(next func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		first := via[0]
		if !sameOrigin(req.URL, first.URL) {
			return &HostError{Host: req.URL.Host, RedirectFrom: via[len(via)-1].URL.Redacted()}
		}
		if len(via) > maxRedirects {
			return errTooManyRedirects
		}
		if next != nil {
			return next(req, via)
		}
		return nil
	}
}
