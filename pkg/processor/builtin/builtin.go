package builtin

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"time"

	"github.com/bulkaction/bulkaction/pkg/processor"
)

// The job types [Register] registers.
const (
	// TypeNoop is the job type of [Noop].
	TypeNoop = "noop"
	// TypeSleep is the job type of [Sleep].
	TypeSleep = "sleep"
	// TypeHTTP is the job type of [HTTP].
	TypeHTTP = "http"
)

// Defaults of [Options].
const (
	// DefaultRetryAfter is the delay before the next attempt when an endpoint answers 429 without a
	// usable Retry-After header, and when a "sleep" payload injects a rate limit without retryAfterMs.
	DefaultRetryAfter = time.Second
	// DefaultHTTPTimeout bounds a request of the "http" processor whose job's context has no
	// deadline, when Options.HTTPClient is nil. A deadline of the context (the stock worker's
	// BULKACTION_JOB_TIMEOUT_MS) bounds it instead, longer or shorter.
	DefaultHTTPTimeout = 10 * time.Second
)

// Options configure the built-in processors. The zero value is ready to use: every field has a
// default. Note that the default of the "http" processor is to refuse every URL: list the hosts
// it may call in AllowedHosts.
type Options struct {
	// HTTPClient sends the requests of the "http" processor. A client with its own Transport dials
	// as that transport says: the addresses it connects to are not checked (see AllowedHosts). Nil
	// means a client with a transport like http.DefaultTransport, without a proxy, whose dialer
	// checks every address, and no timeout of its own: the job's context bounds every request, and
	// [DefaultHTTPTimeout] (10 s) a request whose context has no deadline. A client's own Timeout
	// bounds its requests as well as the context does.
	HTTPClient *http.Client
	// DefaultURL is the endpoint of "http" jobs whose payload has no "url". Empty means such jobs
	// fail permanently. It must be an absolute http or https URL (see [Options.Validate]). Its
	// host is not allowed implicitly: list it in AllowedHosts too.
	DefaultURL string
	// AllowedHosts lists the hosts the "http" processor may call; a job whose URL has another
	// host fails permanently with a [*HostError], and no request is sent. The stock worker fills
	// it from BULKACTION_HTTP_ALLOWED_HOSTS. Each entry is one of:
	//
	//   - a host name, "api.example.com": that host only, not its subdomains;
	//   - a wildcard, "*.example.com": every subdomain of example.com at any depth
	//     ("a.example.com", "a.b.example.com"), but not example.com itself;
	//   - an IP address, "10.0.0.7", "::1" or "[::1]": that address only. A URL whose host is an
	//     IP address matches only an entry of the same address or range, never a name or a
	//     wildcard;
	//   - an address range in CIDR notation, "10.0.0.0/8" or "fd00::/8" ("[fd00::/8]:8080" with a
	//     port): every address in it.
	//
	// Any of them may end in ":port" ("api.example.com:8443", "[::1]:8080"): then only that port
	// is allowed, the scheme's default port counting for a URL without one; without a port every
	// port is. Names match the URL's host case-insensitively and literally: no DNS lookup is made,
	// a trailing dot counts, and international names must be written in their xn-- form.
	//
	// The address a name resolves to is checked too, when the processor's own transport (no
	// HTTPClient, or one without a Transport) connects, for the job's URL and for every redirect: a
	// loopback, link-local (169.254.0.0/16 with the cloud metadata address, fe80::/10), private
	// (RFC 1918, fc00::/7), shared (CGNAT, 100.64.0.0/10), unspecified or multicast address is
	// refused with a [*HostError] naming it, unless an IP or range entry holds it (with a matching
	// port, if the entry has one). So "*.example.com" allows a subdomain that resolves to a public
	// address, and "localhost" needs "127.0.0.1" (and "::1") listed too. Blank entries are ignored; an invalid entry makes every "http" job fail permanently (see
	// [Options.Validate]).
	//
	// Empty (and AllowAnyHost false) means every URL is refused.
	AllowedHosts []string
	// AllowAnyHost lets the "http" processor call any host, ignoring AllowedHosts, and any address,
	// loopback and private ones included, except link-local ones (169.254.0.0/16 with the cloud
	// metadata address, fe80::/10), which AllowedHosts must still list. It turns the processor into
	// an open proxy for whoever can submit jobs: use it for development and tests only (`bulkaction
	// dev` sets it unless BULKACTION_HTTP_ALLOWED_HOSTS is set). It does not lift the redirect and
	// header rules of [HTTP].
	AllowAnyHost bool
	// DefaultRetryAfter is the delay before the next attempt after a 429 without a usable
	// Retry-After header, and after a rate limit injected by "sleep" without "retryAfterMs". Zero
	// or negative means [DefaultRetryAfter] (1 s).
	DefaultRetryAfter time.Duration
	// Rand returns a uniformly distributed float64 in [0, 1); "sleep" draws its jitter and its
	// failures from it. It must be safe for concurrent use. Nil means math/rand/v2's Float64.
	Rand func() float64
}

// Validate reports a configuration error: an invalid entry in AllowedHosts, a DefaultURL that is
// set but is not an absolute http or https URL, or a DefaultURL whose host AllowedHosts does not
// allow. Call it at start-up; a processor built from invalid Options fails the affected jobs
// permanently instead.
func (o Options) Validate() error {
	hosts := parseHostList(o)
	if hosts.err != nil {
		return hosts.err
	}
	if o.DefaultURL == "" {
		return nil
	}
	u, err := parseURL(o.DefaultURL)
	if err != nil {
		return fmt.Errorf("builtin: Options.DefaultURL: %w", err)
	}
	if err := hosts.check(u); err != nil {
		return fmt.Errorf("builtin: Options.DefaultURL: host %q is not in Options.AllowedHosts (%s): list it there too", u.Host, allowedHostsSetting)
	}
	return nil
}

func (o Options) retryAfter() time.Duration {
	if o.DefaultRetryAfter <= 0 {
		return DefaultRetryAfter
	}
	return o.DefaultRetryAfter
}

func (o Options) rand() func() float64 {
	if o.Rand == nil {
		return rand.Float64
	}
	return o.Rand
}

// parseURL parses an absolute http or https URL.
func parseURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%q: scheme must be http or https", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%q: missing host", s)
	}
	return u, nil
}

// Register registers [Noop], [Sleep] and [HTTP] on m as [TypeNoop], [TypeSleep] and [TypeHTTP].
// Like [processor.Mux.Handle], it panics if one of the types is already registered.
func Register(m *processor.Mux, opts Options) {
	m.Handle(TypeNoop, Noop())
	m.Handle(TypeSleep, Sleep(opts))
	m.Handle(TypeHTTP, HTTP(opts))
}

// ErrInjected is wrapped by every failure the "sleep" processor injects on purpose, so that tests
// and dashboards can tell injected failures from real ones.
var ErrInjected = errors.New("builtin: injected failure")

// Noop returns the "noop" processor: it ignores the payload and returns nil at once.
func Noop() processor.Processor {
	return processor.ProcessorFunc(func(context.Context, *processor.Job) error { return nil })
}
