package builtin

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Address ranges the "http" processor does not connect to unless Options.AllowedHosts lists the
// address or a range holding it: whatever a host name says, the address it resolves to at dial time
// decides. [addressKind] names the range of an address.
var (
	cgnat    = netip.MustParsePrefix("100.64.0.0/10") // RFC 6598 shared address space
	thisNet  = netip.MustParsePrefix("0.0.0.0/8")     // "this network"; 0.0.0.0 reaches the local host
	nat64    = netip.MustParsePrefix("64:ff9b::/96")  // RFC 6052: an IPv4 address behind a NAT64 gateway
	ula      = netip.MustParsePrefix("fc00::/7")      // RFC 4193 unique local addresses
	v4Bcast  = netip.MustParseAddr("255.255.255.255") // limited broadcast
	metadata = netip.MustParseAddr("169.254.169.254") // cloud instance metadata
)

// addressKind names the restricted range ip belongs to ("loopback", "link-local", ...), or
// returns "" for an ordinary (public) address. An IPv4 address mapped into IPv6 or behind the
// NAT64 prefix is judged as that IPv4 address.
func addressKind(ip netip.Addr) string {
	ip = ip.Unmap()
	if nat64.Contains(ip) {
		b := ip.As16()
		if k := addressKind(netip.AddrFrom4([4]byte(b[12:]))); k != "" {
			return k
		}
	}
	switch {
	case ip == metadata:
		return "link-local (cloud metadata)"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsUnspecified(), thisNet.Contains(ip):
		return "unspecified"
	case ip.IsMulticast(), ip == v4Bcast:
		return "multicast or broadcast"
	case ip.IsPrivate(), ula.Contains(ip):
		return "private"
	case cgnat.Contains(ip):
		return "shared (CGNAT)"
	}
	return ""
}

// anyHostRefuses reports whether Options.AllowAnyHost still refuses an address of kind k when the
// list does not name it: link-local addresses (the cloud metadata address among them). Loopback and
// private addresses are allowed, so that `bulkaction dev` can call endpoints on the developer's
// machine and network.
func anyHostRefuses(ip netip.Addr) bool {
	ip = ip.Unmap()
	if nat64.Contains(ip) {
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte(b[12:]))
	}
	return ip.IsLinkLocalUnicast()
}

// checkAddr returns a *HostError when the processor may not connect to ip:port, which host
// ("name:port" as dialled) resolved to: ip is in a restricted range (see [addressKind]) and no
// IP or range entry of the list holds it (with a matching port, when the entry has one).
func (l hostList) checkAddr(host string, ip netip.Addr, port string) error {
	kind := addressKind(ip)
	if kind == "" || (l.any && !anyHostRefuses(ip)) {
		return nil
	}
	ip = ip.Unmap()
	for _, p := range l.patterns {
		if p.port != "" && p.port != port {
			continue
		}
		if (p.ip.IsValid() && p.ip.Unmap() == ip) || (p.prefix.IsValid() && p.prefix.Contains(ip)) {
			return nil
		}
	}
	return &HostError{Host: host, Address: netip.AddrPortFrom(ip, portNumber(port)).String(), AddressKind: kind}
}

func portNumber(port string) uint16 {
	n, _ := strconv.ParseUint(port, 10, 16)
	return uint16(n)
}

// transport returns the transport of the processor's own client: http.DefaultTransport's settings,
// without a proxy (the address check must see the endpoint's own address), and a dialer that
// checks every address it connects to, for the job's URL and for each redirect, after DNS
// resolution: a name that resolves, or is re-pointed, to a restricted address is refused before
// the connection is made.
func (l hostList) transport() *http.Transport { return l.transportVia(nil) }

// transportVia is transport with a rewrite of each dialled "host:port" before it is resolved
// (nil: none); tests use it to make a name resolve to another address on each dial. The address
// actually dialled is checked either way.
func (l hostList) transportVia(rewrite func(addr string) string) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		d := net.Dialer{
			Timeout:   30 * time.Second,
			KeepAlive: 30 * time.Second,
			// Control runs for each address the name resolved to, just before connecting.
			Control: func(_, address string, _ syscall.RawConn) error {
				ap, err := netip.ParseAddrPort(address)
				if err != nil {
					return fmt.Errorf("builtin: http: unexpected dial address %q: %w", address, err)
				}
				return l.checkAddr(addr, ap.Addr(), strconv.Itoa(int(ap.Port())))
			},
		}
		target := addr
		if rewrite != nil {
			target = rewrite(addr)
		}
		return d.DialContext(ctx, network, target)
	}
	return tr
}

// credentialHeader reports whether a payload may not set the header named c (canonical form)
// because it carries credentials for someone other than the endpoint: Cookie, and every Proxy-*
// header (Proxy-Authorization, ...).
func credentialHeader(c string) bool {
	return c == "Cookie" || strings.HasPrefix(c, "Proxy-")
}
