// Package loopback answers one question the fleet asks in many places: does
// this address stay on this machine? Auth may be off, cookies may lack Secure,
// and development pages may answer only when it does.
package loopback

import (
	"net"
	"strings"
)

// Host reports whether s — a host name, an IP, or either with a port
// ("127.0.0.1:8080", "[::1]:3000", "localhost") — names loopback only:
// "localhost" (any case) or a loopback IP. An empty host (":8080", every
// interface) is not loopback.
func Host(s string) bool {
	if h, _, err := net.SplitHostPort(s); err == nil {
		s = h
	}
	s = strings.Trim(s, "[]")
	if strings.EqualFold(s, "localhost") {
		return true
	}
	ip := net.ParseIP(s)
	return ip != nil && ip.IsLoopback()
}

// Listen reports whether a listen address ("host:port") binds loopback
// only; an address without a port is not a listen address.
func Listen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && Host(host)
}
