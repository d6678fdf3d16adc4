package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/client"
	"github.com/toolfleet/toolfleet/services/gateway/internal/codename"
)

// MetaRetryAfterMs carries, on an isError result of a call refused for lack of
// capacity or rate (RESOURCE_EXHAUSTED), how long to wait before trying again
// when the gateway said so.
const MetaRetryAfterMs = "toolfleet/retryAfterMs"

// failure maps an error of Backend.CallTool (a refusal before the tool ran)
// to MCP. The caller's own mistakes never come back as -32603:
//
//   - validation error: an isError result listing the field messages, so a
//     model can correct its arguments;
//   - approval required (FAILED_PRECONDITION; see [Server] for input_required):
//     an isError result saying how to get an approval;
//   - out of capacity or rate (RESOURCE_EXHAUSTED): an isError result saying
//     when to try again;
//   - unknown tool or version, malformed reference, call_id reused with other
//     input (ALREADY_EXISTS), permission denied, unauthenticated: JSON-RPC
//     -32602 invalid params, data.code naming the gRPC code;
//   - the gateway's own failures (unavailable, deadline, internal): -32603.
func failure(ctx context.Context, toolID string, err error) (*sdk.CallToolResult, error) {
	if ctx.Err() != nil {
		return nil, ctx.Err() // cancelled by the client: no answer is expected
	}
	st, ok := status.FromError(err)
	if !ok {
		return nil, rpcError(ctx, toolID, err)
	}
	for _, d := range st.Details() {
		if ve, ok := d.(*toolfleetv1.ValidationError); ok {
			return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: validationText(toolID, ve)}},
				Meta: sdk.Meta{MetaToolID: toolID, "toolfleet/parameterErrors": ve.GetParameterErrors()}}, nil
		}
	}
	msg := messageOf(st)
	meta := sdk.Meta{MetaToolID: toolID, "toolfleet/code": codeName(st.Code())}
	switch st.Code() {
	case codes.FailedPrecondition:
		return errorResult(meta, fmt.Sprintf("%s was not run: %s", toolID, msg)), nil
	case codes.ResourceExhausted:
		text := fmt.Sprintf("%s was not run: %s", toolID, msg)
		if ms := retryAfterMs(st); ms > 0 {
			meta[MetaRetryAfterMs] = ms
			text += fmt.Sprintf(" Try again in %.1fs.", float64(ms)/1000)
		} else {
			text += " Try again later."
		}
		return errorResult(meta, text), nil
	}
	return nil, rpcError(ctx, toolID, err)
}

// rpcError renders an error as a JSON-RPC error: -32602 for the caller's
// mistakes (see [failure]), -32603 for the gateway's own failures, with
// data {"code": "<gRPC code name>"}. Text that is not a gateway status (a Go
// error) is not shown.
func rpcError(ctx context.Context, toolID string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	st, ok := status.FromError(err)
	if !ok {
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the gateway failed to handle the request"}
	}
	code := int64(jsonrpc.CodeInternalError)
	if clientCode(st.Code()) {
		code = jsonrpc.CodeInvalidParams
	}
	data, _ := json.Marshal(map[string]string{"code": codeName(st.Code())})
	msg := fmt.Sprintf("%s: %s", st.Code(), messageOf(st))
	if toolID != "" && !strings.Contains(msg, toolID) && st.Code() != codes.NotFound {
		msg += " (" + toolID + ")"
	}
	return &jsonrpc.Error{Code: code, Message: msg, Data: data}
}

// clientCode reports the codes of requests the caller must change.
func clientCode(c codes.Code) bool {
	switch c {
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.Unauthenticated, codes.OutOfRange, codes.FailedPrecondition, codes.ResourceExhausted:
		return true
	}
	return false
}

// messageOf is the caller-facing message of a gateway status.
func messageOf(st *status.Status) string {
	msg := st.Message()
	for _, d := range st.Details() {
		if se, ok := d.(*toolfleetv1.ServerError); ok && se.GetMessage() != "" {
			msg = se.GetMessage()
		}
	}
	return msg
}

// retryAfterMs is the RetryInfo delay of a status, in milliseconds (0 when none).
func retryAfterMs(st *status.Status) int64 {
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration().Milliseconds()
		}
	}
	return 0
}

func errorResult(meta sdk.Meta, text string) *sdk.CallToolResult {
	return &sdk.CallToolResult{IsError: true, Meta: meta, Content: []sdk.Content{&sdk.TextContent{Text: text}}}
}

// codeName is the canonical name of a gRPC code ("ALREADY_EXISTS"), or its
// Go name for a code gRPC does not define.
func codeName(c codes.Code) string {
	if n := codename.Of(c); n != "" {
		return n
	}
	return c.String()
}

// validationText lists the field messages, one per line, sorted by field,
// each said once.
func validationText(toolID string, ve *toolfleetv1.ValidationError) string {
	return toolID + ": " + (&client.ValidationError{Message: ve.GetMessage(), ParameterErrors: ve.GetParameterErrors()}).Text()
}
