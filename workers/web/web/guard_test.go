package web

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestPolicyCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr       string
		wantReason string // "" = allowed by the zero policy
		private    bool   // allowed with AllowPrivate
	}{
		{addr: "8.8.8.8"},
		{addr: "93.184.215.14"},
		{addr: "2606:4700:4700::1111"},
		{addr: "127.0.0.1", wantReason: "loopback", private: true},
		{addr: "127.8.9.10", wantReason: "loopback", private: true},
		{addr: "::1", wantReason: "loopback", private: true},
		{addr: "::ffff:127.0.0.1", wantReason: "loopback", private: true},
		{addr: "10.1.2.3", wantReason: "private", private: true},
		{addr: "172.16.0.1", wantReason: "private", private: true},
		{addr: "192.168.1.1", wantReason: "private", private: true},
		{addr: "fd12:3456::1", wantReason: "private", private: true},
		{addr: "169.254.1.1", wantReason: "link-local", private: true},
		{addr: "fe80::1", wantReason: "link-local", private: true},
		{addr: "100.64.0.1", wantReason: "carrier-grade NAT", private: true},
		{addr: "224.0.0.1", wantReason: "multicast", private: true},
		{addr: "ff02::1", wantReason: "multicast", private: true},
		{addr: "0.0.0.0", wantReason: "unspecified", private: true},
		{addr: "::", wantReason: "unspecified", private: true},
		{addr: "0.1.2.3", wantReason: "unspecified", private: true},
		{addr: "255.255.255.255", wantReason: "reserved", private: true},
		{addr: "198.18.0.5", wantReason: "benchmarking", private: true},
		{addr: "64:ff9b::7f00:1", wantReason: "loopback (embedded in 64:ff9b::7f00:1)", private: true},
		{addr: "2002:c0a8:101::1", wantReason: "private (embedded in 2002:c0a8:101::1)", private: true},
		{addr: "::7f00:1", wantReason: "IPv4-compatible", private: true},
		{addr: "169.254.169.254", wantReason: "a cloud metadata endpoint"},
		{addr: "fd00:ec2::254", wantReason: "a cloud metadata endpoint"},
		{addr: "::ffff:169.254.169.254", wantReason: "a cloud metadata endpoint"},
	}
	zero, private := &Policy{}, &Policy{AllowPrivate: true}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			t.Parallel()
			addr := netip.MustParseAddr(tt.addr)
			err := zero.Check(addr)
			if tt.wantReason == "" {
				if err != nil {
					t.Fatalf("Check(%s) = %v, want allowed", addr, err)
				}
				return
			}
			var be *BlockedError
			if !errors.As(err, &be) || !errors.Is(err, ErrBlocked) || !strings.HasPrefix(be.Reason, tt.wantReason) {
				t.Fatalf("Check(%s) = %v, want blocked as %q", addr, err, tt.wantReason)
			}
			if err := private.Check(addr); (err == nil) != tt.private {
				t.Errorf("with AllowPrivate: Check(%s) = %v, want allowed: %v", addr, err, tt.private)
			}
		})
	}
}

func TestPolicyAllowCIDRs(t *testing.T) {
	t.Parallel()
	p := &Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("169.254.169.254/32")}}
	for addr, allowed := range map[string]bool{
		"10.20.3.4":       true,
		"10.21.0.1":       false,
		"169.254.169.254": true, // listed explicitly
		"169.254.169.253": false,
		"127.0.0.1":       false,
		"1.1.1.1":         true,
	} {
		if err := p.Check(netip.MustParseAddr(addr)); (err == nil) != allowed {
			t.Errorf("Check(%s) = %v, want allowed: %v", addr, err, allowed)
		}
	}
}

func TestPolicyHostAllowed(t *testing.T) {
	t.Parallel()
	p := &Policy{AllowHosts: []string{"Wiki.Internal", "localhost:8080"}}
	for hostport, allowed := range map[string]bool{
		"wiki.internal:443":  true,
		"WIKI.internal:80":   true,
		"localhost:8080":     true,
		"localhost:8081":     false,
		"wiki.internal.evil": false,
		"evil.com:443":       false,
	} {
		if got := p.hostAllowed(hostport); got != allowed {
			t.Errorf("hostAllowed(%s) = %v, want %v", hostport, got, allowed)
		}
	}
}
