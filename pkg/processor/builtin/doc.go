// Package builtin holds the processors the stock bulkaction worker registers: "noop", "sleep" and
// "http". [Register] adds all three to a [processor.Mux].
//
//   - "noop" ([Noop]) succeeds at once; it measures the pipeline itself.
//   - "sleep" ([Sleep]) waits for a while and then fails with configured probabilities; it simulates
//     work and failure for load tests and demos. Payload:
//     {"ms":N, "jitterMs":J, "failRate":F, "rateLimitRate":R, "retryAfterMs":M, "permanentFailRate":P}.
//   - "http" ([HTTP]) calls an HTTP endpoint once per job and maps the status code to an outcome.
//     Payload: {"url":"...", "method":"POST", "headers":{...}, "body":...}.
//
// The "http" processor is not an open proxy for whoever can submit jobs:
//
//   - It calls only the hosts in [Options.AllowedHosts] (exact names, "*.example.com" for
//     subdomains, IP addresses listed literally, each with an optional ":port"); the stock worker
//     fills the list from BULKACTION_HTTP_ALLOWED_HOSTS. The list is empty by default, and an empty
//     list refuses every URL, [Options.DefaultURL]'s included: its host must be listed too. Only
//     [Options.AllowAnyHost], meant for development (`bulkaction dev`) and tests, lifts the list.
//   - It connects to a loopback, link-local (the cloud metadata address among them), private,
//     CGNAT, unspecified or multicast address only when the list names that address or a range
//     holding it ("10.0.0.0/8"); the address is checked when each connection is made, after DNS
//     resolution, for redirects too, so a listed name that resolves to such an address is refused.
//     AllowAnyHost allows these addresses too, except link-local ones.
//   - It follows a redirect only to the same scheme, host and port as the job's URL, at most 5
//     times; a redirect elsewhere, even to another allowed host, is not followed.
//   - A payload cannot set Host, Cookie, any Proxy-* header, the headers the processor sets itself,
//     or the framing and hop-by-hop headers (Content-Length, Transfer-Encoding, Connection, ...).
//
// Each of these refusals fails the job permanently ([*HostError] or [*PayloadError]) before any
// request reaches the refused host.
//
// Every processor here is idempotent as far as the pipeline is concerned; the "http" processor sends
// an Idempotency-Key header ("<groupId>:<jobId>") so that the endpoint can be too, since a job can be
// delivered more than once.
package builtin
