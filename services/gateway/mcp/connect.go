package mcp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/status"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// MetaConnectionRequired carries, on the isError result of a call refused
// because its tool acts with the caller's account at a provider the caller
// has not connected, {"provider", "scopes", "url"}: open url to connect, then
// call again.
const MetaConnectionRequired = "toolfleet/connectionRequired"

// connectionRequired turns a call refused for a missing connection
// (ConnectionRequired detail) into MCP's answer: for a client that declared
// URL elicitation (elicitation.url), the JSON-RPC error -32042
// (URLElicitationRequired) carrying one url-mode elicitation, which such a
// client shows its user and then retries; for any other client an isError
// result whose text and _meta give the URL. ok is false for other errors.
func connectionRequired(req *sdk.CallToolRequest, toolID string, err error) (res *sdk.CallToolResult, rpcErr error, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus {
		return nil, nil, false
	}
	var need *toolfleetv1.ConnectionRequired
	for _, d := range st.Details() {
		if c, is := d.(*toolfleetv1.ConnectionRequired); is {
			need = c
		}
	}
	if need == nil {
		return nil, nil, false
	}
	message := fmt.Sprintf("%s acts with your %s account, which is not connected (%s). Open the link to connect it, then try again.",
		toolID, need.GetProvider(), need.GetReason())
	if declaresURLElicitation(req) {
		// The elicitation id names this connect (the URL is single use).
		sum := sha256.Sum256([]byte(need.GetAuthorizationUrl()))
		data, _ := json.Marshal(map[string]any{"elicitations": []map[string]any{{
			"mode": "url", "elicitationId": hex.EncodeToString(sum[:16]), "url": need.GetAuthorizationUrl(), "message": message,
		}}})
		return nil, &jsonrpc.Error{Code: sdk.CodeURLElicitationRequired, Message: message, Data: data}, true
	}
	scopes := need.GetScopes()
	if scopes == nil {
		scopes = []string{}
	}
	return errorResult(sdk.Meta{MetaToolID: toolID, "toolfleet/code": "FAILED_PRECONDITION",
		MetaConnectionRequired: map[string]any{"provider": need.GetProvider(), "scopes": scopes, "url": need.GetAuthorizationUrl()}},
		message+" Connect at "+need.GetAuthorizationUrl()+" (or run: toolfleet connections connect "+need.GetProvider()+")."), nil, true
}

// declaresURLElicitation reports whether the client of req can be sent a URL
// elicitation: its capabilities (the request's _meta at 2026-07-28, else the
// session's) list elicitation.url (MCP 2025-11-25 and later).
func declaresURLElicitation(req *sdk.CallToolRequest) bool {
	if m, ok := req.Params.Meta["io.modelcontextprotocol/clientCapabilities"].(map[string]any); ok {
		e, _ := m["elicitation"].(map[string]any)
		_, url := e["url"]
		return url
	}
	caps := req.ClientCapabilities()
	return caps != nil && caps.Elicitation != nil && caps.Elicitation.URL != nil
}
