package gateway

import (
	"context"
	"net/http"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/services/gateway/mcp"
)

// This file mounts the MCP surface (package mcp, docs/mcp.md) at /mcp: one
// hunk in Handler calls mcpHandler.

// mcpHandler serves MCP over streamable HTTP on this gateway. With auth on, a
// request without a valid bearer token is answered 401 before MCP sees it;
// each tools/call then runs the full pipeline with the request's token
// (scopes are checked per tool, as on every surface).
func (g *Gateway) mcpHandler() http.Handler {
	h := mcp.New(mcpBackend{g}, mcp.Options{Name: "toolfleet-gateway", Logger: g.log, MaxRequestBytes: g.cfg.MaxRequestBytes, MaxInputValues: g.cfg.MaxInputValues}).Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The MCP spec requires Origin checks on every request (DNS rebinding);
		// browserSafe has already refused cross-origin POSTs and foreign Hosts.
		if !originAllowed(r, g.cfg.AllowedOrigins) {
			http.Error(w, "Forbidden: this origin may not use /mcp", http.StatusForbidden)
			return
		}
		if _, ce := g.auth.Authenticate(r.Context(), r.Header.Get("Authorization")); ce != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="toolfleet"`)
			http.Error(w, ce.Error(), http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// mcpBackend is the gateway in process, as package mcp sees it.
type mcpBackend struct{ g *Gateway }

func (b mcpBackend) ListTools(_ context.Context, req *toolfleetv1.ListToolsRequest) (*toolfleetv1.ListToolsResponse, error) {
	return b.g.ListTools(req)
}

func (b mcpBackend) CallTool(ctx context.Context, req *toolfleetv1.CallToolRequest) (*toolfleetv1.CallToolResponse, error) {
	creds := credentialsOf(mcp.Header(ctx))
	creds.Authorization = mcp.Authorization(ctx)
	return b.g.authenticated(ctx, creds, req)
}
