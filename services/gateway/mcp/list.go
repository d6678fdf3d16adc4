package mcp

import (
	"context"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Scoped is implemented by a [Backend] whose callers may call different
// tools (the gateway with auth on). CanCall returns what the caller of ctx
// (its [Authorization] and [Header]) may call, by tool id; tools/list shows
// only those. An error refuses the listing.
//
// A backend that does not implement it lists everything it returns from
// ListTools (the stdio bridge: the remote gateway already filters by the
// bridge's token).
type Scoped interface {
	CanCall(ctx context.Context) (func(toolID string) bool, error)
}

// scopedList filters tools/list results down to the tools the caller may call.
// Pages keep the SDK's cursor (ordered by name), so a page may hold fewer
// tools than the page size.
func (s *Server) scopedList(next sdk.MethodHandler) sdk.MethodHandler {
	return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
		sc, ok := s.backend.(Scoped)
		if method != "tools/list" || !ok {
			return next(ctx, method, req)
		}
		res, err := next(ctx, method, req)
		lr, isList := res.(*sdk.ListToolsResult)
		if err != nil || !isList {
			return res, err
		}
		may, err := sc.CanCall(withRequest(ctx, req))
		if err != nil {
			return nil, rpcError(ctx, "", err)
		}
		kept := make([]*sdk.Tool, 0, len(lr.Tools))
		for _, t := range lr.Tools {
			if id, _ := t.Meta[MetaToolID].(string); may(id) || id == RunAgentID || id == RunProgramID {
				kept = append(kept, t)
			}
		}
		out := *lr
		out.Tools = kept
		return &out, nil
	}
}

// cacheable sets the cache hints of list and discover results (2026-07-28):
// ttlMs from Options.ListTTL; cacheScope "private" when the request carried
// an Authorization header (the list depends on the token's scopes), else
// "public".
func (s *Server) cacheable(_ context.Context, req sdk.Request, c *sdk.Cacheable) {
	c.TTLMs = int(s.opts.ListTTL.Milliseconds())
	c.CacheScope = "public"
	if e := req.GetExtra(); e != nil && e.Header != nil && e.Header.Get("Authorization") != "" {
		c.CacheScope = "private"
	}
}

// withRequest carries the HTTP request's Authorization and headers of req into
// ctx for the backend (none over stdio).
func withRequest(ctx context.Context, req sdk.Request) context.Context {
	if e := req.GetExtra(); e != nil && e.Header != nil {
		ctx = WithAuthorization(ctx, e.Header.Get("Authorization"))
		ctx = WithHeader(ctx, e.Header)
	}
	return ctx
}
