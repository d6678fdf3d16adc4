package mcp

import (
	"context"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/client"
)

// ClientBackend backs a server with a remote gateway through sdk/client (the
// client's own token and retry policy apply; execution errors marked can_retry
// are retried with the same call_id before the MCP client sees them).
func ClientBackend(c *client.Client) Backend { return clientBackend{c} }

type clientBackend struct{ c *client.Client }

func (b clientBackend) ListTools(ctx context.Context, req *toolfleetv1.ListToolsRequest) (*toolfleetv1.ListToolsResponse, error) {
	return b.c.ListTools(ctx, req)
}

// ApproverStdio names the approver of a call approved through MCP on the
// stdio bridge when the answer named none (the bridge does not know its
// token's subject; the gateway records it with the call as the caller).
const ApproverStdio = "mcp-stdio-user"

func (b clientBackend) CallTool(ctx context.Context, req *toolfleetv1.CallToolRequest) (*toolfleetv1.CallToolResponse, error) {
	if a := req.GetApproval(); a != nil && a.GetApprover() == "" {
		a.Approver = ApproverStdio
	}
	res, err := b.c.CallTool(ctx, req)
	if err != nil {
		return nil, err // *client.ServerError / *client.ValidationError carry their gRPC status
	}
	return res.Response(), nil
}
