package gateway

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/toolfleet/toolfleet/internal/loopback"
	"github.com/toolfleet/toolfleet/services/gateway/oxp"
)

// Browser safety (docs/gateway.md "Browser safety"). A web page the developer
// opens can send requests to a gateway on loopback: a "simple" cross-origin
// POST (text/plain, no preflight) reaches the handler, and a DNS-rebound name
// makes the page same-origin with the gateway. Three checks close that:
//
//   - every state-changing request (POST, PUT, …) that a browser marks as
//     cross-origin (Sec-Fetch-Site, else Origin vs Host) is refused with 403
//     (http.CrossOriginProtection), unless its origin is in Config.AllowedOrigins;
//   - on a loopback listener the Host header must be a loopback name, so a
//     rebound name (evil.example → 127.0.0.1) is refused on every request;
//   - /tools/call accepts only a JSON body, and /mcp checks Origin on every
//     request (MCP spec, "Security Warning" of the streamable HTTP transport).
//
// Non-browser clients (SDKs, curl, grpc-go) send neither Origin nor
// Sec-Fetch-Site and pass unchanged.

// newCrossOrigin builds the cross-origin check, trusting cfg.AllowedOrigins.
func (g *Gateway) newCrossOrigin() (*http.CrossOriginProtection, error) {
	cop := http.NewCrossOriginProtection()
	for _, o := range g.cfg.AllowedOrigins {
		if err := cop.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("gateway: allowed origin %q: %w", o, err)
		}
	}
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.log.Warn("refused a cross-origin request", "method", r.Method, "path", r.URL.Path, "origin", r.Header.Get("Origin"))
		oxp.WriteJSON(w, http.StatusForbidden, map[string]any{"$schema": oxp.Schema, "code": "PERMISSION_DENIED",
			"message": "cross-origin requests that change state are refused; call the gateway from a server, or add the page's origin to the gateway's allowed origins"})
	}))
	return cop, nil
}

// browserSafe wraps the HTTP surfaces with the Host and cross-origin checks.
func (g *Gateway) browserSafe(next http.Handler) http.Handler {
	protected := g.cop.Handler(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hostAllowed(r) {
			oxp.WriteJSON(w, http.StatusForbidden, map[string]any{"$schema": oxp.Schema, "code": "PERMISSION_DENIED",
				"message": "a gateway listening on loopback answers only requests addressed to a loopback host (localhost, 127.0.0.1, [::1])"})
			return
		}
		protected.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether r may be served: on a loopback listener its Host
// must be a loopback name (DNS-rebinding defence); other listeners accept any Host.
func hostAllowed(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || local == nil || !loopback.Listen(local.String()) {
		return true
	}
	return loopback.Host(r.Host)
}

// originAllowed reports whether a request's Origin may use /mcp: no Origin
// (not a browser), an origin in allowed, or the gateway's own origin (its Host,
// which hostAllowed has vetted on loopback).
func originAllowed(r *http.Request, allowed []string) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	for _, a := range allowed {
		if strings.EqualFold(origin, a) {
			return true
		}
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return strings.EqualFold(u.Host, r.Host) && loopback.Host(u.Host) == loopback.Host(r.Host)
}
