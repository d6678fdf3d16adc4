package gateway

import (
	"log/slog"

	"google.golang.org/grpc/codes"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// levelOf logs caller mistakes at info and infrastructure trouble at warn.
func levelOf(ce *CallError) slog.Level {
	switch ce.Code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Internal, codes.Unimplemented, codes.ResourceExhausted:
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

func logAttrs(req *toolfleetv1.CallToolRequest, callID string, ce *CallError) []slog.Attr {
	attrs := []slog.Attr{slog.String("tool_id", loggableToolID(req.GetToolId())), slog.String("call_id", callID),
		slog.String("code", ce.Code.String()), slog.String("message", ce.Error())}
	if ce.Server.GetDeveloperMessage() != "" {
		attrs = append(attrs, slog.String("developer_message", ce.Server.GetDeveloperMessage()))
	}
	if ce.ErrorID != "" {
		attrs = append(attrs, slog.String("error_id", ce.ErrorID), slog.String("error", ce.detail))
	}
	return attrs
}
