package gateway

import (
	"errors"
	"log/slog"
	"strconv"
	"strings"

	"google.golang.org/grpc/codes"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
	"github.com/toolfleet/toolfleet/sdk/tool/contract"
)

// levelOf logs caller mistakes at info and infrastructure trouble at warn; a
// call over a rate limit at debug (a caller over its rate would flood the
// logs; toolfleet_gateway_limit_decisions_total counts them).
func levelOf(ce *CallError) slog.Level {
	if ce.Code == codes.ResourceExhausted && errors.Is(ce, ErrRateLimited) {
		return slog.LevelDebug
	}
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

// loggableToolID bounds a caller's tool id for logs: an id over the cap is cut
// there and marked with its length, so a 1 MiB id does not become a 1 MiB line.
func loggableToolID(id string) string {
	if len(id) <= contract.MaxToolRefLen {
		return id
	}
	return strings.ToValidUTF8(id[:contract.MaxToolRefLen], "") + "…(" + strconv.Itoa(len(id)) + " bytes)"
}
