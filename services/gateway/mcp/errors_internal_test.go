package mcp

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

type protoMessage = protoadapt.MessageV1

// TestFailureForms: every gRPC code a call can be refused with has its MCP
// form; only the gateway's own failures are -32603. (The gateway has no rate
// limiter yet: RESOURCE_EXHAUSTED with RetryInfo is built here as a rate
// limiter would send it.)
func TestFailureForms(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code     codes.Code
		details  []protoMessage
		isError  string // substring of the isError text, or "" for a JSON-RPC error
		rpcCode  int64
		retryMs  int64
		dataCode string
	}{
		{code: codes.InvalidArgument, rpcCode: jsonrpc.CodeInvalidParams, dataCode: "INVALID_ARGUMENT"},
		{code: codes.NotFound, rpcCode: jsonrpc.CodeInvalidParams, dataCode: "NOT_FOUND"},
		{code: codes.AlreadyExists, rpcCode: jsonrpc.CodeInvalidParams, dataCode: "ALREADY_EXISTS"},
		{code: codes.PermissionDenied, rpcCode: jsonrpc.CodeInvalidParams, dataCode: "PERMISSION_DENIED"},
		{code: codes.Unauthenticated, rpcCode: jsonrpc.CodeInvalidParams, dataCode: "UNAUTHENTICATED"},
		{code: codes.FailedPrecondition, isError: "was not run"},
		{code: codes.ResourceExhausted, isError: "Try again later"},
		{code: codes.ResourceExhausted, details: []protoMessage{&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)}},
			isError: "Try again in 1.5s", retryMs: 1500},
		{code: codes.Unavailable, rpcCode: jsonrpc.CodeInternalError, dataCode: "UNAVAILABLE"},
		{code: codes.DeadlineExceeded, rpcCode: jsonrpc.CodeInternalError, dataCode: "DEADLINE_EXCEEDED"},
		{code: codes.Internal, rpcCode: jsonrpc.CodeInternalError, dataCode: "INTERNAL"},
	}
	for _, tt := range tests {
		st := status.New(tt.code, "refused")
		st, err := st.WithDetails(append([]protoMessage{&toolfleetv1.ServerError{Message: "the message"}}, tt.details...)...)
		if err != nil {
			t.Fatal(err)
		}
		res, err := failure(context.Background(), "Calculator.Add@1.0.0", st.Err())
		if tt.isError != "" {
			if err != nil || res == nil || !res.IsError || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, tt.isError) {
				t.Errorf("%v: %+v %v, want isError saying %q", tt.code, res, err, tt.isError)
				continue
			}
			if got, _ := res.Meta[MetaRetryAfterMs].(int64); got != tt.retryMs {
				t.Errorf("%v: retryAfterMs %v, want %d", tt.code, res.Meta[MetaRetryAfterMs], tt.retryMs)
			}
			continue
		}
		var je *jsonrpc.Error
		if !errors.As(err, &je) || je.Code != tt.rpcCode || !strings.Contains(string(je.Data), tt.dataCode) || !strings.Contains(je.Message, "the message") {
			t.Errorf("%v: %v, want JSON-RPC %d with data.code %s and the gateway's message", tt.code, err, tt.rpcCode, tt.dataCode)
		}
	}
	// A Go error that is no gateway status is not shown.
	_, err := failure(context.Background(), "x", errors.New("dial tcp 10.0.0.7:9000: secret detail"))
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != jsonrpc.CodeInternalError || strings.Contains(je.Message, "10.0.0.7") {
		t.Fatalf("a plain error: %v, want -32603 without its text", err)
	}
}
