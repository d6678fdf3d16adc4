package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// A tool asking its caller for input (MCP multi-round-trip requests).
//
// A tool whose contract declares client_input kinds needs the matching client
// capabilities: a 2026-07-28 client that did not declare one gets -32021
// MissingRequiredClientCapability (HTTP 400) with
// data.requiredCapabilities naming them; an older client on the stateless
// /mcp (which cannot be asked anything) an isError result. The client's
// declared capabilities go to the gateway as CallToolRequest.client_input
// (only for a client that can answer: 2026-07-28, or a stateful session,
// where the SDK asks the client itself and calls the tool again).
//
// The gateway's input_required becomes an InputRequiredResult; the answers of
// the next round go back as CallToolRequest.input_responses with the
// requestState echoed. The approval question (approval.go) composes: it is
// asked first, and an approval given in the MCP client is carried in the
// requestState of the tool's own questions ("approved." prefix), so that the
// client need not approve again in every round (the gateway checks the
// caller's tools:approve scope in every round regardless).

// metaClientInput marks, until the tool is added, the kinds of input a tool
// needs (ToolRequirements.client_input, as MCP capability names); never sent.
const metaClientInput = "toolfleet/clientInput"

// capabilityKinds maps MCP client capability names to kinds of input.
var capabilityKinds = map[string]toolfleetv1.ClientCapability{
	"elicitation": toolfleetv1.ClientCapability_CLIENT_CAPABILITY_ELICITATION,
	"sampling":    toolfleetv1.ClientCapability_CLIENT_CAPABILITY_SAMPLING,
	"roots":       toolfleetv1.ClientCapability_CLIENT_CAPABILITY_ROOTS,
}

// declaredCapabilities returns the client capabilities of req among
// elicitation, sampling and roots: from the request's _meta as sent when
// there (2026-07-28), else from the SDK's view of them.
func declaredCapabilities(req *sdk.CallToolRequest) []string {
	var out []string
	if m, ok := req.Params.Meta["io.modelcontextprotocol/clientCapabilities"].(map[string]any); ok {
		for name := range capabilityKinds {
			if v, ok := m[name]; ok && v != nil {
				out = append(out, name)
			}
		}
		slices.Sort(out)
		return out
	}
	caps := req.ClientCapabilities()
	if caps == nil {
		return nil
	}
	if caps.Elicitation != nil {
		out = append(out, "elicitation")
	}
	if caps.RootsV2 != nil || caps.Roots.ListChanged {
		out = append(out, "roots")
	}
	if caps.Sampling != nil {
		out = append(out, "sampling")
	}
	return out
}

// canAnswer reports whether the client of req can be asked anything: it
// speaks 2026-07-28 (input_required) or holds a stateful session.
func canAnswer(ctx context.Context, req *sdk.CallToolRequest) bool {
	if req.ProtocolVersion() >= "2026-07-28" {
		return true
	}
	stateless, _ := ctx.Value(statelessKey{}).(bool)
	return !stateless
}

// clientInput is CallToolRequest.client_input for req.
func clientInput(ctx context.Context, req *sdk.CallToolRequest) []toolfleetv1.ClientCapability {
	if !canAnswer(ctx, req) {
		return nil
	}
	var out []toolfleetv1.ClientCapability
	for _, name := range declaredCapabilities(req) {
		out = append(out, capabilityKinds[name])
	}
	return out
}

// checkCapabilities refuses a call of a tool needing the capabilities
// required when the client did not declare them: a JSON-RPC error -32021 at
// 2026-07-28, an isError result before.
func checkCapabilities(ctx context.Context, req *sdk.CallToolRequest, toolID string, required []string) (*sdk.CallToolResult, error) {
	if len(required) == 0 {
		return nil, nil
	}
	declared := declaredCapabilities(req)
	var missing []string
	for _, r := range required {
		if !slices.Contains(declared, r) || !canAnswer(ctx, req) {
			missing = append(missing, r)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	if req.ProtocolVersion() < "2026-07-28" {
		why := "this client did not declare the capability"
		if !canAnswer(ctx, req) {
			why = "a client at " + req.ProtocolVersion() + " on the stateless /mcp cannot be asked in the middle of a call (use 2026-07-28, or the stdio bridge)"
		}
		return errorResult(sdk.Meta{MetaToolID: toolID, "toolfleet/code": "FAILED_PRECONDITION"},
			fmt.Sprintf("%s was not run: it asks its caller for input (%s); %s.", toolID, strings.Join(missing, ", "), why)), nil
	}
	data, _ := json.Marshal(map[string]any{"requiredCapabilities": requiredCapabilities(missing)})
	return nil, &jsonrpc.Error{Code: sdk.CodeMissingRequiredClientCapabilities, Data: data,
		Message: fmt.Sprintf("%s asks its caller for input (%s): declare the client capabilities %s to call it", toolID, strings.Join(missing, ", "), strings.Join(missing, ", "))}
}

// requiredCapabilities is a ClientCapabilities object naming caps ({"sampling": {}}).
func requiredCapabilities(caps []string) map[string]any {
	out := make(map[string]any, len(caps))
	for _, c := range caps {
		out[c] = map[string]any{}
	}
	return out
}

// approvedPrefix starts a requestState carrying an approval given in the MCP
// client across the rounds of a tool's own questions.
const approvedPrefix = "approved."

// carriedApproval splits a requestState into an approval carried from an
// earlier round (ok false when none) and the gateway's request_state.
func carriedApproval(state string) (approver string, rest string, ok bool) {
	s, found := strings.CutPrefix(state, approvedPrefix)
	if !found {
		return "", state, false
	}
	name, rest, found := strings.Cut(s, ".")
	if !found {
		return "", state, false
	}
	b, err := base64.RawURLEncoding.DecodeString(name)
	if err != nil || len(b) > maxApprover || !utf8.Valid(b) {
		return "", state, false
	}
	return string(b), rest, true
}

// carryApproval prefixes a request_state with an approval given this round.
func carryApproval(approver, state string) string {
	return approvedPrefix + base64.RawURLEncoding.EncodeToString([]byte(approver)) + "." + state
}

// inputResponses converts the client's answers to the tool's questions (all
// but the approval answer) for the gateway.
func inputResponses(p *sdk.CallToolParamsRaw) (map[string]*structpb.Struct, error) {
	if len(p.InputResponses) == 0 {
		return nil, nil
	}
	out := make(map[string]*structpb.Struct, len(p.InputResponses))
	for k, v := range p.InputResponses {
		if k == ApprovalInput {
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("inputResponses[%q]: %v", k, err)}
		}
		s := &structpb.Struct{}
		if err := protojson.Unmarshal(b, s); err != nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("inputResponses[%q] must be an object: %v", k, err)}
		}
		out[k] = s
	}
	return out, nil
}

// inputRequired renders the gateway's input_required as an MCP
// InputRequiredResult. A request the SDK cannot represent is the tool's bug:
// an isError result.
func inputRequired(toolID string, ir *toolfleetv1.InputRequired, approver string, approved bool) *sdk.CallToolResult {
	reqs := make(sdk.InputRequestMap, len(ir.GetRequests()))
	for k, r := range ir.GetRequests() {
		params, err := protojson.Marshal(r.GetParams())
		if err != nil {
			return errorResult(sdk.Meta{MetaToolID: toolID}, fmt.Sprintf("%s asked its caller for input that cannot be encoded (a bug of the tool)", toolID))
		}
		var v sdk.InputRequest
		switch r.GetMethod() {
		case "elicitation/create":
			v = &sdk.ElicitParams{}
		case "sampling/createMessage":
			v = &sdk.CreateMessageParams{}
		case "roots/list":
			v = &sdk.ListRootsParams{}
		default:
			return errorResult(sdk.Meta{MetaToolID: toolID}, fmt.Sprintf("%s asked its caller for input with the unknown method %q (a bug of the tool)", toolID, r.GetMethod()))
		}
		if err := json.Unmarshal(params, v); err != nil {
			return errorResult(sdk.Meta{MetaToolID: toolID}, fmt.Sprintf("%s asked its caller for %s with malformed params (a bug of the tool): %v", toolID, r.GetMethod(), err))
		}
		reqs[k] = v
	}
	state := ir.GetRequestState()
	if approved {
		state = carryApproval(approver, state)
	}
	return &sdk.CallToolResult{Meta: sdk.Meta{MetaToolID: toolID}, InputRequests: reqs, RequestState: state}
}
