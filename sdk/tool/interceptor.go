package tool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"buf.build/go/protovalidate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// observeInterceptor logs each call, maps bare context and Go errors to proper gRPC
// statuses and feeds the metrics hook. It is the outermost interceptor, so it sees
// the status the caller receives.
func observeInterceptor(log *slog.Logger, hook MetricsHook) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		call := CallInfo{FullMethod: info.FullMethod, CallID: CallID(ctx), TraceParent: TraceParent(ctx)}
		start := time.Now()
		var resp any
		var err error
		if ctxErr := ctx.Err(); ctxErr != nil {
			err = ctxErr // do not start work the caller has given up on
		} else {
			resp, err = handler(ctx, req)
		}
		err = toStatusError(ctx, err)
		d := time.Since(start)
		attrs := []any{"method", call.FullMethod, "call_id", call.CallID, "duration_ms", float64(d.Microseconds()) / 1000}
		if tid := traceIDOf(call.TraceParent); tid != "" {
			attrs = append(attrs, "trace_id", tid)
		}
		switch te, isTool := AsToolError(err); {
		case err == nil:
			log.DebugContext(ctx, "tool call succeeded", attrs...)
		case isTool:
			log.InfoContext(ctx, "tool call failed", append(attrs, "error", te.GetMessage(), "developer_message", te.GetDeveloperMessage())...)
		case status.Code(err) == codes.InvalidArgument: // routine: a model got the input wrong
			log.InfoContext(ctx, "tool call rejected", append(attrs, "code", "InvalidArgument", "error", err)...)
		default:
			log.WarnContext(ctx, "tool call rejected", append(attrs, "code", status.Code(err).String(), "error", err)...)
		}
		if hook != nil {
			hook(ctx, call, d, err)
		}
		return resp, err
	}
}

// toStatusError gives every error a deliberate gRPC status: statuses and execution
// errors pass through, context errors keep their own codes, and any other error is
// an execution error whose text goes to developers only (it may hold internals).
func toStatusError(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := AsToolError(err); ok {
		return err
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "the tool did not finish before the deadline")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "the call was canceled")
	}
	return NewError("the tool failed with an internal error", WithDeveloperMessage(err.Error()))
}

// recoverInterceptor turns a panic in a tool into an execution error for that call.
func recoverInterceptor(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		return callRecovering(ctx, log, req, info, handler)
	}
}

// callRecovering calls handler and turns a panic in it into an execution
// error, logged with its stack.
func callRecovering(ctx context.Context, log *slog.Logger, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			log.ErrorContext(ctx, "tool panicked", "method", info.FullMethod, "call_id", CallID(ctx),
				"panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			resp, err = nil, NewError("the tool failed with an internal error",
				WithDeveloperMessage(fmt.Sprintf("panic: %v", r)))
		}
	}()
	return handler(ctx, req)
}

func recoverStreamInterceptor(log *slog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		defer func() {
			if r := recover(); r != nil {
				log.Error("stream handler panicked", "method", info.FullMethod, "panic", fmt.Sprint(r))
				err = status.Error(codes.Internal, "internal error")
			}
		}()
		return handler(srv, ss)
	}
}

// validateInterceptor runs protovalidate on the decoded request before the tool.
func validateInterceptor(v protovalidate.Validator) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if msg, ok := req.(proto.Message); ok {
			ve, err := validateMessage(v, msg)
			if err != nil {
				return nil, status.Errorf(codes.Internal, "validate input: %v", err)
			}
			if ve != nil {
				return nil, ValidationStatus(ve)
			}
		}
		return handler(ctx, req)
	}
}
