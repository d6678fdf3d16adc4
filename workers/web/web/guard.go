package web

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
)

// Policy decides which addresses the worker may connect to. The zero value allows
// only public unicast addresses: loopback, private (RFC 1918, ULA), link-local,
// CGNAT, multicast, unspecified, reserved and cloud-metadata addresses are refused.
//
// The check runs on the address actually dialled, after DNS resolution, for every
// connection, so it also covers redirects and DNS rebinding.
type Policy struct {
	// AllowPrivate allows every non-public address except cloud-metadata endpoints
	// (a local deployment fetching intranet pages).
	AllowPrivate bool
	// AllowCIDRs allows these networks whatever their kind, metadata endpoints
	// included when listed explicitly (e.g. 10.20.0.0/16 or 127.0.0.1/32).
	AllowCIDRs []netip.Prefix
	// AllowHosts are host names (or host:port) whose connections are not checked,
	// e.g. "wiki.internal" or "localhost:8080". Matched case-insensitively against
	// the URL's host, before resolution.
	AllowHosts []string
}

// BlockedError is the reason a connection was refused by the Policy.
type BlockedError struct {
	Addr   netip.Addr
	Reason string // e.g. "loopback", "private", "cloud metadata"
}

func (e *BlockedError) Error() string {
	return fmt.Sprintf("address %s is %s and not allowed", e.Addr, e.Reason)
}

// ErrBlocked matches every *BlockedError with errors.Is.
var ErrBlocked = errors.New("web: address not allowed")

// Is makes errors.Is(err, ErrBlocked) true for a BlockedError.
func (e *BlockedError) Is(target error) bool { return target == ErrBlocked }

// Well-known special-purpose networks (IANA registries) that net/netip has no
// predicate for.
var (
	metadataAddrs = []netip.Addr{
		netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack…
		netip.MustParseAddr("169.254.170.2"),   // AWS ECS task metadata
		netip.MustParseAddr("fd00:ec2::254"),   // AWS IMDS over IPv6
		netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
	}
	specialPrefixes = []struct {
		prefix netip.Prefix
		reason string
	}{
		{netip.MustParsePrefix("0.0.0.0/8"), "unspecified (\"this network\")"},
		{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT (shared)"},
		{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
		{netip.MustParsePrefix("192.0.2.0/24"), "documentation"},
		{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
		{netip.MustParsePrefix("198.51.100.0/24"), "documentation"},
		{netip.MustParsePrefix("203.0.113.0/24"), "documentation"},
		{netip.MustParsePrefix("240.0.0.0/4"), "reserved"}, // includes 255.255.255.255
		{netip.MustParsePrefix("::/96"), "IPv4-compatible (deprecated)"},
		{netip.MustParsePrefix("100::/64"), "discard-only"},
		{netip.MustParsePrefix("2001::/23"), "IETF protocol assignments (e.g. Teredo)"},
		{netip.MustParsePrefix("2001:db8::/32"), "documentation"},
		{netip.MustParsePrefix("fec0::/10"), "site-local"},
		{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64"},
	}
	// IPv6 ranges that embed an IPv4 address; the embedded one is checked too, so
	// that e.g. 64:ff9b::7f00:1 does not reach 127.0.0.1 through a NAT64 gateway.
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// Check returns a *BlockedError when the policy forbids connecting to addr.
func (p *Policy) Check(addr netip.Addr) error {
	addr = addr.Unmap()
	for _, pfx := range p.AllowCIDRs {
		if pfx.Contains(addr) {
			return nil
		}
	}
	reason := classify(addr)
	if reason == "" {
		return nil
	}
	if p.AllowPrivate && reason != reasonMetadata {
		return nil
	}
	return &BlockedError{Addr: addr, Reason: reason}
}

const reasonMetadata = "a cloud metadata endpoint"

// classify names the kind of a non-public address, or returns "" for a public one.
func classify(addr netip.Addr) string {
	for _, m := range metadataAddrs {
		if addr == m {
			return reasonMetadata
		}
	}
	switch {
	case !addr.IsValid():
		return "invalid"
	case addr.IsUnspecified():
		return "unspecified"
	case addr.IsLoopback():
		return "loopback"
	case addr.IsPrivate():
		return "private"
	case addr.IsLinkLocalUnicast():
		return "link-local"
	case addr.IsMulticast():
		return "multicast"
	case addr.Zone() != "":
		return "scoped"
	}
	for _, sp := range specialPrefixes {
		if sp.prefix.Contains(addr) {
			return sp.reason
		}
	}
	if embedded, ok := embeddedIPv4(addr); ok {
		if reason := classify(embedded); reason != "" {
			return reason + " (embedded in " + addr.String() + ")"
		}
	}
	return ""
}

// embeddedIPv4 extracts the IPv4 address carried by a NAT64 or 6to4 address.
func embeddedIPv4(addr netip.Addr) (netip.Addr, bool) {
	b := addr.As16()
	switch {
	case nat64.Contains(addr):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(addr):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}

// hostAllowed reports whether connections to hostport ("host:port" as the HTTP
// transport dials it) skip the address check.
func (p *Policy) hostAllowed(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	for _, h := range p.AllowHosts {
		if strings.EqualFold(h, host) || strings.EqualFold(h, hostport) {
			return true
		}
	}
	return false
}

// control is a net.Dialer.Control function: it runs after DNS resolution, just
// before connecting, with the literal address being dialled.
func (p *Policy) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("web: unexpected dial address %q: %w", address, err)
	}
	return p.Check(ap.Addr())
}
