package gateway

import (
	"context"
	"net/http"

	"google.golang.org/grpc/codes"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/services/gateway/mcp"
)

// This file serves the MCP surface (package mcp, docs/mcp.md) at /mcp: one
// line in Handler calls mcpHandler. MCP tasks are Config.MCPTasks (package
// mcp/orchestration, over the orchestrator's services), given by cmd/.

// mcpHandler serves MCP over streamable HTTP on this gateway, stateless (any
// replica answers any request). With auth on, a request without a valid
// bearer token is answered 401 (with the RFC 9728 resource_metadata) before
// MCP sees it; tools/list then shows what the token may call, and each
// tools/call runs the full pipeline with the request's token.
func (g *Gateway) mcpHandler() http.Handler {
	h := mcp.New(mcpBackend{g}, mcp.Options{Name: "toolfleet-gateway", Logger: g.log, MaxRequestBytes: g.cfg.MaxRequestBytes,
		MaxInputValues: g.cfg.MaxInputValues, Tasks: g.cfg.MCPTasks}).Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The MCP spec requires Origin checks on every request (DNS rebinding);
		// browserSafe has already refused cross-origin POSTs and foreign Hosts.
		if !originAllowed(r, g.cfg.AllowedOrigins) {
			http.Error(w, "Forbidden: this origin may not use /mcp", http.StatusForbidden)
			return
		}
		if _, ce := g.auth.Authenticate(r.Context(), r.Header.Get("Authorization")); ce != nil {
			w.Header().Set("WWW-Authenticate", g.bearerChallenge(r, "/mcp"))
			http.Error(w, ce.Error(), http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// mcpBackend is the gateway in process, as package mcp sees it.
type mcpBackend struct{ g *Gateway }

// ListTools lists every tool: package mcp keeps one list for all callers and
// filters it per caller with CanCall.
func (b mcpBackend) ListTools(_ context.Context, req *toolfleetv1.ListToolsRequest) (*toolfleetv1.ListToolsResponse, error) {
	return b.g.ListTools(req)
}

// CanCall is what the MCP request's caller may list ([Principal.MayList]).
func (b mcpBackend) CanCall(ctx context.Context) (func(toolID string) bool, error) {
	creds := credentialsOf(mcp.Header(ctx))
	creds.Authorization = mcp.Authorization(ctx)
	p, err := b.g.auth.Principal(ctx, creds)
	if err != nil {
		return nil, authError(err)
	}
	snap := b.g.reg.Current()
	return func(id string) bool {
		rt, re := snap.Resolve(id)
		return re == nil && p.MayList(rt.Def())
	}, nil
}

// NotLoaded answers for a tool name MCP's list lacks: served when the
// registry resolves it by now, or the registry's retryable Unavailable while
// it may only not be loaded yet (the gateway is starting, or a worker naming
// its toolkit is joining); see registry.Snapshot.Resolve.
func (b mcpBackend) NotLoaded(_ context.Context, name string) (bool, error) {
	_, ce := resolve(b.g.reg.Current(), name)
	switch {
	case ce == nil:
		return true, nil
	case ce.Code == codes.Unavailable:
		return false, ce
	}
	return false, nil
}

// MayApprove reports whether the MCP request's caller (for a delegated call,
// the delegate) holds tools:approve, as Principal.Approve requires.
func (b mcpBackend) MayApprove(ctx context.Context) bool {
	creds := credentialsOf(mcp.Header(ctx))
	creds.Authorization = mcp.Authorization(ctx)
	p, err := b.g.auth.Principal(ctx, creds)
	return err == nil && p.Transport().Has(ScopeApprove)
}

// CallTool runs the call as the MCP request's caller. An approval without an
// approver (given through MCP input_required) names the caller's subject.
func (b mcpBackend) CallTool(ctx context.Context, req *toolfleetv1.CallToolRequest) (*toolfleetv1.CallToolResponse, error) {
	creds := credentialsOf(mcp.Header(ctx))
	creds.Authorization = mcp.Authorization(ctx)
	p, err := b.g.auth.Principal(ctx, creds)
	if err != nil {
		ce := authError(err)
		ce.CallID = req.GetCallId()
		b.g.metrics.count(b.g.metrics.tool(unresolved), KindServer)
		return nil, ce
	}
	if a := req.GetApproval(); a != nil && a.GetApprover() == "" {
		a.Approver = p.Transport().ID()
	}
	return b.g.Call(ctx, p, req)
}
