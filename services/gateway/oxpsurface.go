package gateway

import (
	"context"
	"net/http"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/services/gateway/oxp"
)

// This file serves the OXP HTTP JSON surface (package oxp): one line in
// Handler registers it with oxpBackend.

// OXPSchema is the $schema of OXP 1.0 bodies.
//
// Deprecated: use oxp.Schema; kept for source compatibility.
const OXPSchema = oxp.Schema

// oxpBackend is the gateway in process, as package oxp sees it.
type oxpBackend struct{ g *Gateway }

func (b oxpBackend) ToolCount() int { return len(b.g.reg.Current().Defs()) }

// Serving is grpc.health.v1's answer for the whole gateway, so GET /health
// and a readiness probe never disagree.
func (b oxpBackend) Serving() bool { return b.g.Serving() }

// ListTools needs any authenticated caller and lists what it may call, as on
// every surface.
func (b oxpBackend) ListTools(ctx context.Context, h http.Header, req *toolfleetv1.ListToolsRequest) (*toolfleetv1.ListToolsResponse, error) {
	return discoverFor(ctx, b.g, credentialsOf(h), req, b.g.ListToolsFor)
}

// CallTool authenticates the call (with delegation headers) and runs it.
func (b oxpBackend) CallTool(ctx context.Context, h http.Header, req *toolfleetv1.CallToolRequest) (*toolfleetv1.CallToolResponse, error) {
	return b.g.authenticated(ctx, credentialsOf(h), req)
}

// OpenResult authenticates the caller (with delegation headers) and opens its
// result behind a handle.
func (b oxpBackend) OpenResult(ctx context.Context, h http.Header, id string) (*oxp.Result, error) {
	obj, ce := b.g.openResult(ctx, credentialsOf(h), id)
	if ce != nil {
		return nil, ce
	}
	return &oxp.Result{Body: obj, ContentType: obj.ContentType, Size: obj.Size}, nil
}

// Failure renders a pipeline error (anything not a CallError becomes a sealed
// Internal error).
func (b oxpBackend) Failure(err error) *toolfleetv1.CallFailure { return asCallError(err).Failure() }
