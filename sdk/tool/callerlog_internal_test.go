package tool

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	toolfleetv1 "github.com/toolfleet/toolfleet/gen/toolfleet/v1"
)

// TestCallerLog: a call's caller log keeps the lines with their attributes
// and levels, writes them to the worker's log with the call id, and stops
// at its bounds, counting what it drops.
func TestCallerLog(t *testing.T) {
	t.Parallel()
	var workerLog bytes.Buffer
	c := &callerLog{worker: slog.NewTextHandler(&workerLog, nil), callID: "call-7"}
	ctx := context.WithValue(t.Context(), callerLogKey{}, c)

	log := CallerLogger(ctx)
	log.Info("fetched", "rows", 3)
	log.With("table", "t1").WithGroup("q").Warn("slow", "ms", 900)
	log.Debug("details")
	log.Error(strings.Repeat("é", maxCallerLogLine)) // cut at a rune boundary
	for range MaxCallerLogLines {
		log.Info("filler")
	}

	md := c.trailer()
	var logs toolfleetv1.ToolLogs
	if err := proto.Unmarshal([]byte(md.Get(LogTrailer)[0]), &logs); err != nil {
		t.Fatal(err)
	}
	lines := logs.GetLines()
	if len(lines) != MaxCallerLogLines || logs.GetDropped() != 4 {
		t.Fatalf("%d lines, %d dropped; want %d and 4", len(lines), logs.GetDropped(), MaxCallerLogLines)
	}
	want := []struct {
		level toolfleetv1.ToolLogLevel
		msg   string
	}{
		{toolfleetv1.ToolLogLevel_TOOL_LOG_LEVEL_INFO, "fetched rows=3"},
		{toolfleetv1.ToolLogLevel_TOOL_LOG_LEVEL_WARNING, "slow table=t1 q.ms=900"},
		{toolfleetv1.ToolLogLevel_TOOL_LOG_LEVEL_DEBUG, "details"},
	}
	for i, w := range want {
		if lines[i].GetLevel() != w.level || lines[i].GetMessage() != w.msg || lines[i].GetTime() == nil {
			t.Errorf("line %d: %v %q, want %v %q", i, lines[i].GetLevel(), lines[i].GetMessage(), w.level, w.msg)
		}
	}
	if m := lines[3].GetMessage(); len(m) > maxCallerLogLine+len("…") || !strings.HasSuffix(m, "…") || !strings.HasPrefix(m, "éé") {
		t.Errorf("a long line is %d bytes: %.20q…", len(m), m)
	}
	if s := workerLog.String(); !strings.Contains(s, "call_id=call-7") || !strings.Contains(s, "msg=fetched") || !strings.Contains(s, "q.ms=900") {
		t.Errorf("the worker's log: %s", s)
	}

	// Outside a call: the default logger, nothing collected.
	if CallerLogger(t.Context()) != slog.Default() {
		t.Error("CallerLogger outside a call is not slog.Default")
	}
	if (&callerLog{}).trailer() != nil {
		t.Error("a call that logged nothing sends a trailer")
	}
}

// TestMCPNames: kinds of input and log levels carry MCP's names; unknown
// values get none (capabilities) or "info" (levels).
func TestMCPNames(t *testing.T) {
	t.Parallel()
	for c, want := range map[toolfleetv1.ClientCapability]string{
		toolfleetv1.ClientCapability_CLIENT_CAPABILITY_ELICITATION: "elicitation",
		toolfleetv1.ClientCapability_CLIENT_CAPABILITY_SAMPLING:    "sampling",
		toolfleetv1.ClientCapability_CLIENT_CAPABILITY_ROOTS:       "roots",
		toolfleetv1.ClientCapability_CLIENT_CAPABILITY_UNSPECIFIED: "",
		toolfleetv1.ClientCapability(99):                           "",
	} {
		if got := CapabilityName(c); got != want {
			t.Errorf("CapabilityName(%v) = %q, want %q", c, got, want)
		}
	}
	for l, want := range map[toolfleetv1.ToolLogLevel]string{
		toolfleetv1.ToolLogLevel_TOOL_LOG_LEVEL_DEBUG:       "debug",
		toolfleetv1.ToolLogLevel_TOOL_LOG_LEVEL_NOTICE:      "notice",
		toolfleetv1.ToolLogLevel_TOOL_LOG_LEVEL_WARNING:     "warning",
		toolfleetv1.ToolLogLevel_TOOL_LOG_LEVEL_ERROR:       "error",
		toolfleetv1.ToolLogLevel_TOOL_LOG_LEVEL_UNSPECIFIED: "info",
		toolfleetv1.ToolLogLevel(42):                        "info",
	} {
		if got := LogLevelName(l); got != want {
			t.Errorf("LogLevelName(%v) = %q, want %q", l, got, want)
		}
	}
}
