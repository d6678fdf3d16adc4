package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// Approval as an MCP input request (multi-round-trip requests, 2026-07-28).
//
// A tools/call of a tool whose contract requires approval, made without
// _meta["toolfleet/approver"], is refused by the gateway (FAILED_PRECONDITION).
// The server then answers with an input_required result holding one form
// elicitation, [ApprovalInput], that an MCP client shows its human: approve
// (boolean, required) and approver (optional name). The client repeats the
// call with the answer in inputResponses and the requestState echoed; an
// accepted answer becomes the call's approval, which the gateway accepts only
// from a caller holding tools:approve. A declined answer, or an approval by a
// caller without the scope, is an isError result; the server never asks twice
// for one call.
//
// Clients at 2025-11-25 get the same question as an elicitation/create request
// over a stateful session (the stdio bridge). A client that declared no
// elicitation, or one at 2025-11-25 on the stateless /mcp (no
// server-to-client requests), gets an isError result with the gateway's
// message (how to approve: _meta["toolfleet/approver"] with tools:approve).

// Approving is implemented by a [Backend] that knows whether the caller of ctx
// may approve calls (the gateway: it holds tools:approve). A caller that may
// not is not asked: its human's answer could not be accepted.
type Approving interface {
	MayApprove(ctx context.Context) bool
}

// ApprovalInput is the key of the approval question in inputRequests and of
// its answer in inputResponses.
const ApprovalInput = "toolfleet/approval"

// maxApprover bounds an approver name given in an answer.
const maxApprover = 256

// approvalSchema is the form the client shows.
var approvalSchema = map[string]any{
	"type": "object",
	"properties": map[string]any{
		"approve":  map[string]any{"type": "boolean", "title": "Approve this call", "description": "true runs the call once, as shown"},
		"approver": map[string]any{"type": "string", "title": "Approver", "description": "who approves (default: the caller's identity)", "maxLength": maxApprover},
	},
	"required": []any{"approve"},
}

// approvalState binds an answer to the call it was asked for: the tool and
// its arguments (not a secret: who may approve is decided by the caller's
// scopes, not by this value).
func approvalState(toolID string, input *structpb.Struct) string {
	args, _ := json.Marshal(input.AsMap()) // map keys sorted: canonical
	h := sha256.New()
	h.Write([]byte(toolID))
	h.Write([]byte{0})
	h.Write(args)
	return "approval.v1." + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// approvalQuestion is the input_required result asking the client's human.
func approvalQuestion(toolID string, input *structpb.Struct, why string) *sdk.CallToolResult {
	args, _ := json.Marshal(input.AsMap())
	shown := string(args)
	if len(shown) > 2000 {
		shown = shown[:2000] + "…"
		for !utf8.ValidString(shown) {
			shown = shown[:len(shown)-4] + "…"
		}
	}
	msg := fmt.Sprintf("%s requires a human's approval before it runs.\nArguments: %s\n(%s)", toolID, shown, why)
	return &sdk.CallToolResult{
		Meta:          sdk.Meta{MetaToolID: toolID},
		InputRequests: sdk.InputRequestMap{ApprovalInput: &sdk.ElicitParams{Mode: "form", Message: msg, RequestedSchema: approvalSchema}},
		RequestState:  approvalState(toolID, input),
	}
}

// approvalAnswer reads the answer to the approval question from a retried
// call: answered is false when there is none; approval is nil when the human
// did not approve. A malformed or mismatched answer is an invalid-params error.
func approvalAnswer(p *sdk.CallToolParamsRaw, toolID string, input *structpb.Struct) (answered bool, approval *toolfleetv1.Approval, err error) {
	ir, ok := p.InputResponses[ApprovalInput]
	if !ok {
		return false, nil, nil
	}
	if p.RequestState != approvalState(toolID, input) {
		return true, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: "the approval answer is for another call: requestState does not match this tool and these arguments; call again without inputResponses"}
	}
	er, ok := ir.(*sdk.ElicitResult)
	if !ok {
		return true, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "inputResponses[\"" + ApprovalInput + "\"] must be an elicitation result"}
	}
	if er.Action != "accept" {
		return true, nil, nil
	}
	if yes, _ := er.Content["approve"].(bool); !yes {
		return true, nil, nil
	}
	name, _ := er.Content["approver"].(string)
	name = strings.TrimSpace(name)
	if len(name) > maxApprover || !utf8.ValidString(name) {
		return true, nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("approver: at most %d bytes of UTF-8", maxApprover)}
	}
	// An empty approver asks the backend to name the caller (see Backend).
	return true, &toolfleetv1.Approval{Approver: name}, nil
}

// canAsk reports whether the client can be asked for an approval: it declared
// elicitation, and speaks 2026-07-28 (input_required) or, before, holds a
// stateful session (stdio: the SDK sends elicitation/create).
func canAsk(ctx context.Context, req *sdk.CallToolRequest) bool {
	if !answerable(ctx, req) {
		return false
	}
	if req.ProtocolVersion() >= "2026-07-28" {
		return true
	}
	stateless, _ := ctx.Value(statelessKey{}).(bool)
	return !stateless
}

// answerable reports whether the client can answer an approval question.
func answerable(_ context.Context, req *sdk.CallToolRequest) bool {
	caps := req.ClientCapabilities()
	return caps != nil && caps.Elicitation != nil
}

// approvalRequired reports a gateway refusal for want of an approval (the only
// FAILED_PRECONDITION of a call).
func approvalRequired(err error) (msg string, ok bool) {
	st, isStatus := status.FromError(err)
	if !isStatus || st.Code() != codes.FailedPrecondition {
		return "", false
	}
	return messageOf(st), true
}

type statelessKey struct{}
