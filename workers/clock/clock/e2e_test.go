package clock_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clockv1 "github.com/toolfleet/toolfleet/gen/tools/clock/v1"
	"github.com/toolfleet/toolfleet/sdk/tool"
	"github.com/toolfleet/toolfleet/sdk/tool/tooltest"
	"github.com/toolfleet/toolfleet/workers/clock/clock"
)

// serve runs the Clock toolkit in a real worker on loopback until the test ends.
func serve(t *testing.T) clockv1.ClockServiceClient {
	t.Helper()
	conn := tooltest.Serve(t, tool.Config{Name: "clock"}, func(w *tool.Worker) {
		clockv1.RegisterClockServiceServer(w, clock.New())
	})
	return clockv1.NewClockServiceClient(conn)
}

func TestWorkerEndToEnd(t *testing.T) {
	t.Parallel()
	client := serve(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	now, err := client.Now(ctx, &clockv1.NowRequest{TimeZone: "Asia/Tokyo"})
	if err != nil {
		t.Fatalf("Now: %v", err)
	}
	if got := now.GetTime(); got.GetTimeZone() != "Asia/Tokyo" || got.GetUtcOffset() != "+09:00" {
		t.Errorf("Now = %v, want Asia/Tokyo at +09:00", got)
	}

	conv, err := client.Convert(ctx, &clockv1.ConvertRequest{Time: "2026-03-01T09:30", FromTimeZone: "America/New_York", ToTimeZone: "Europe/Paris"})
	if err != nil {
		t.Fatalf("Convert: %v", err)
	}
	if got := conv.GetTo().GetLocalTime(); got != "2026-03-01T15:30:00+01:00" {
		t.Errorf("Convert to = %s, want 2026-03-01T15:30:00+01:00", got)
	}

	// An unknown zone is an execution error with a ToolError detail on the wire.
	_, err = client.Now(ctx, &clockv1.NowRequest{TimeZone: "Mars/Olympus_Mons"})
	if te, ok := tool.AsToolError(err); !ok || !strings.Contains(te.GetMessage(), `such as "Europe/Paris"`) {
		t.Errorf("Now(Mars/Olympus_Mons) err = %v, want an execution error naming a valid zone", err)
	}

	// A malformed zone never reaches the tool: the worker's validation rejects it.
	_, err = client.Now(ctx, &clockv1.NowRequest{TimeZone: "../../etc/passwd"})
	if ve, ok := tool.AsValidationError(err); !ok || ve.GetParameterErrors()["timeZone"] == "" {
		t.Errorf("Now(../../etc/passwd) err = %v, want a validation error on timeZone", err)
	}
}
