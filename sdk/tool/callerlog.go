package tool

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// LogTrailer is the binary trailer in which a worker sends the lines a call
// logged for its caller: a toolfleetv1.ToolLogs. Any language can set it.
const LogTrailer = "toolfleet-log-bin"

// Bounds of one call's caller log, in the worker and again in the gateway
// (which does not trust a worker to keep them): lines, and message bytes.
const (
	MaxCallerLogLines = 100
	MaxCallerLogBytes = 64 << 10
	// maxCallerLogLine bounds one message; a longer one is cut.
	maxCallerLogLine = 4 << 10
)

// CallerLogger returns a logger for what the caller of the current call
// should see: each record goes to the worker's own log (with the call id) and
// to the caller, who gets the call's lines with its result
// (CallToolResponse.logs; on MCP, notifications/message before the result).
// Write for the caller — a model or a person may read it — never secrets or
// internals. Lines past MaxCallerLogLines or MaxCallerLogBytes are counted,
// not sent. Outside a call (ctx not from a worker), it logs to slog.Default
// only.
//
// Workers are unary gRPC: the lines reach the caller when the call ends, not
// as they are written.
func CallerLogger(ctx context.Context) *slog.Logger {
	c, _ := ctx.Value(callerLogKey{}).(*callerLog)
	if c == nil {
		return slog.Default()
	}
	return slog.New(&callerLogHandler{log: c})
}

type callerLogKey struct{}

// callerLog collects one call's lines.
type callerLog struct {
	worker slog.Handler // the worker's own log
	callID string

	mu      sync.Mutex
	lines   []*toolfleetv1.ToolLog
	bytes   int
	dropped uint32
}

func (c *callerLog) add(level slog.Level, msg string, at time.Time) {
	if len(msg) > maxCallerLogLine {
		msg = strings.ToValidUTF8(msg[:maxCallerLogLine], "") + "…"
	} else if !utf8.ValidString(msg) {
		msg = strings.ToValidUTF8(msg, "\uFFFD")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.lines) >= MaxCallerLogLines || c.bytes+len(msg) > MaxCallerLogBytes {
		c.dropped++
		return
	}
	c.bytes += len(msg)
	c.lines = append(c.lines, &toolfleetv1.ToolLog{Level: ToolLogLevel(level), Message: msg, Time: timestamppb.New(at)})
}

// logs is what the call logged for its caller so far, nil when nothing.
func (c *callerLog) logs() *toolfleetv1.ToolLogs {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.lines) == 0 && c.dropped == 0 {
		return nil
	}
	return &toolfleetv1.ToolLogs{Lines: slices.Clone(c.lines), Dropped: c.dropped}
}

// trailer is the call's LogTrailer, nil when nothing was logged.
func (c *callerLog) trailer() metadata.MD {
	l := c.logs()
	if l == nil {
		return nil
	}
	b, err := proto.Marshal(l)
	if err != nil {
		return nil
	}
	return metadata.Pairs(LogTrailer, string(b))
}

// ToolLogLevel maps a slog level to the caller's levels (MCP's names).
func ToolLogLevel(l slog.Level) toolfleetv1.ToolLogLevel {
	switch {
	case l < slog.LevelInfo:
		return toolfleetv1.ToolLogLevel_TOOL_LOG_LEVEL_DEBUG
	case l < slog.LevelWarn:
		return toolfleetv1.ToolLogLevel_TOOL_LOG_LEVEL_INFO
	case l < slog.LevelError:
		return toolfleetv1.ToolLogLevel_TOOL_LOG_LEVEL_WARNING
	}
	return toolfleetv1.ToolLogLevel_TOOL_LOG_LEVEL_ERROR
}

// LogLevelName is a caller log level as MCP logging names it ("debug",
// "info", "notice", "warning", "error"); "info" for an unknown level.
func LogLevelName(l toolfleetv1.ToolLogLevel) string {
	if _, known := toolfleetv1.ToolLogLevel_name[int32(l)]; !known || l == toolfleetv1.ToolLogLevel_TOOL_LOG_LEVEL_UNSPECIFIED {
		return "info"
	}
	return strings.ToLower(strings.TrimPrefix(l.String(), "TOOL_LOG_LEVEL_"))
}

// callerLogHandler writes to the worker's handler and to the call's lines.
// Attributes are appended to the caller's message as key=value.
type callerLogHandler struct {
	log    *callerLog
	attrs  []slog.Attr // from WithAttrs, already prefixed by their groups
	group  string      // prefix of later attributes ("g." per WithGroup)
	worker slog.Handler
}

func (h *callerLogHandler) workerHandler() slog.Handler {
	if h.worker != nil {
		return h.worker
	}
	return h.log.worker.WithAttrs([]slog.Attr{slog.String("call_id", h.log.callID), slog.Bool("to_caller", true)})
}

func (h *callerLogHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *callerLogHandler) Handle(ctx context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	write := func(a slog.Attr, prefix string) {
		if a.Equal(slog.Attr{}) {
			return
		}
		fmt.Fprintf(&b, " %s%s=%v", prefix, a.Key, a.Value.Resolve())
	}
	for _, a := range h.attrs {
		write(a, "")
	}
	r.Attrs(func(a slog.Attr) bool {
		write(a, h.group)
		return true
	})
	h.log.add(r.Level, b.String(), r.Time)
	if w := h.workerHandler(); w.Enabled(ctx, r.Level) {
		return w.Handle(ctx, r)
	}
	return nil
}

func (h *callerLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	n := *h
	n.attrs = slices.Clip(h.attrs) // appends copy: h keeps its own
	for _, a := range attrs {
		a.Key = h.group + a.Key
		n.attrs = append(n.attrs, a)
	}
	n.worker = h.workerHandler().WithAttrs(attrs)
	return &n
}

func (h *callerLogHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	n := *h
	n.group = h.group + name + "."
	n.worker = h.workerHandler().WithGroup(name)
	return &n
}

// callerLogInterceptor gives each call a caller log and sends its lines in
// the LogTrailer, whatever the call's outcome.
func callerLogInterceptor(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		c := &callerLog{worker: log.Handler(), callID: CallID(ctx)}
		resp, err := handler(context.WithValue(ctx, callerLogKey{}, c), req)
		if md := c.trailer(); md != nil {
			_ = grpc.SetTrailer(ctx, md) // fails only when the stream is gone
		}
		return resp, err
	}
}
